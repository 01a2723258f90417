/**
 * Queues: per-queue limits, pause flag and usage counters on the queue's own row. Management
 * changes lock the application row first (lock order, and the event feed's ordering rule),
 * then the queue row.
 */
import { OrbitError, notFound, revisionConflict } from '../../errors.ts';
import { newId, type IdBytes } from '../../ids.ts';
import { canAccessQueue, type Principal } from '../../domain/principal.ts';
import { QUEUE_DEFAULTS } from '../../domain/limits.ts';
import { sqlToRfc3339 } from '../../time.ts';
import type { components } from '../../generated/openapi.ts';
import { auditInsert } from '../records/audit.ts';
import { eventInsert } from '../records/events.ts';
import { idempotentMutation, type ReceiptIdentity } from '../records/receipts.ts';
import { sql } from '../database/sql.ts';
import { isDuplicateKeyError, valueList, type Database, type Queryable, type Transaction } from '../database/database.ts';
import type { QueueRow } from '../database/schema.ts';
import { lockRows } from '../database/lock-order.ts';
import { applicationRowLock } from './application-resources.ts';
import { credentialsStillValid, noLongerValid } from '../tenancy/credentials.ts';
import { configureEffects, type ConfigureEffect } from '../../domain/configure-effects.ts';
import { startsInCurrentWindow, windowOfRow } from '../../domain/start-window.ts';
import { sqlToMillis } from '../../time.ts';

export type Queue = components['schemas']['Queue'];
export interface QueueLimits {
  max_unfinished_tasks: number;
  max_concurrency: number;
  rate_per_second: number;
  key_concurrency: number;
  paused: boolean;
}

/** A queue as this module reads it: every column but the start window. */
export type StoredQueue = Pick<
  QueueRow,
  | 'queue_id'
  | 'application_id'
  | 'namespace_id'
  | 'name'
  | 'revision'
  | 'max_unfinished_tasks'
  | 'unfinished_tasks'
  | 'max_concurrency'
  | 'active_attempts'
  | 'pending_starts'
  | 'rate_per_second'
  | 'key_concurrency'
  | 'paused'
  | 'created_at'
  | 'updated_at'
>;

/** The columns of StoredQueue (constant SQL text). */
const QUEUE_COLUMNS = sql.raw(`queue_id, application_id, namespace_id, name, revision, max_unfinished_tasks, unfinished_tasks,
  max_concurrency, active_attempts, pending_starts, rate_per_second, key_concurrency, paused, created_at, updated_at`);

export function toQueue(row: StoredQueue, namespace: string): Queue {
  return {
    queue: row.name,
    namespace,
    revision: row.revision,
    max_unfinished_tasks: row.max_unfinished_tasks,
    unfinished_tasks: row.unfinished_tasks,
    max_concurrency: row.max_concurrency,
    active_attempts: row.active_attempts,
    pending_starts: row.pending_starts,
    rate_per_second: row.rate_per_second,
    key_concurrency: row.key_concurrency,
    paused: row.paused === 1,
    created_at: sqlToRfc3339(row.created_at),
    updated_at: sqlToRfc3339(row.updated_at),
  };
}

function limitsOf(queue: Queue): Record<string, unknown> {
  return {
    revision: queue.revision,
    max_unfinished_tasks: queue.max_unfinished_tasks,
    max_concurrency: queue.max_concurrency,
    rate_per_second: queue.rate_per_second,
    key_concurrency: queue.key_concurrency,
    paused: queue.paused,
  };
}

/** A queue by name; with `lock`, its row is locked (queue level), which only a transaction can do. */
export async function queueFind(db: Queryable, namespaceId: IdBytes, name: string): Promise<StoredQueue | null>;
export async function queueFind(tx: Transaction, namespaceId: IdBytes, name: string, options: { lock: true }): Promise<StoredQueue | null>;
export async function queueFind(db: Queryable, namespaceId: IdBytes, name: string, options: { lock?: boolean } = {}): Promise<StoredQueue | null> {
  const [row] = await db.rows<StoredQueue>(
    sql`SELECT ${QUEUE_COLUMNS} FROM orbit_queues WHERE namespace_id = ${namespaceId} AND name = ${name}${options.lock ? sql` ${lockRows('queue')}` : sql``}`,
  );
  return row ?? null;
}

/** The queue row, or 404 - also when the credential's queue scope does not include it. */
export async function queueGetVisible(db: Queryable, principal: Principal, name: string): Promise<StoredQueue> {
  const row = principal.queues === '*' || principal.queues.has(name) ? await queueFind(db, principal.namespaceId, name) : null;
  if (!row) throw notFound(`queue "${name}"`);
  return row;
}

/** Inserts a queue row (no audit, no receipt); used by createQueue and by `orbit-admin bootstrap`. */
export async function queueInsert(
  tx: Queryable,
  params: { applicationId: IdBytes; namespaceId: IdBytes; name: string; limits?: Partial<QueueLimits> },
): Promise<StoredQueue> {
  const limits = { ...QUEUE_DEFAULTS, ...params.limits };
  try {
    await tx.exec(sql`
      INSERT INTO orbit_queues
        (queue_id, application_id, namespace_id, name, revision, max_unfinished_tasks, max_concurrency, rate_per_second,
         key_concurrency, paused, created_at, updated_at)
      VALUES (${newId()}, ${params.applicationId}, ${params.namespaceId}, ${params.name}, 1, ${limits.max_unfinished_tasks},
              ${limits.max_concurrency}, ${limits.rate_per_second}, ${limits.key_concurrency}, ${limits.paused ? 1 : 0}, NOW(6), NOW(6))`);
  } catch (error) {
    if (isDuplicateKeyError(error)) throw new OrbitError('STATE_CONFLICT', `queue "${params.name}" already exists`, { details: { field: 'name' } });
    throw error;
  }
  const row = await queueFind(tx, params.namespaceId, params.name);
  if (!row) throw new OrbitError('INTERNAL', 'the new queue is missing');
  return row;
}

/**
 * A create of a queue the credential's scope does not name: the same answer (404, as for any
 * resource outside the scope) whether or not such a queue exists, but saying why - the caller
 * knows its own scope, and the fix is another credential.
 */
function outsideScope(principal: Principal, name: string): OrbitError {
  const scope = principal.queues === '*' ? [] : [...principal.queues].sort();
  return new OrbitError(
    'NOT_FOUND',
    `this credential's queue scope (${scope.join(', ') || 'no queues'}) does not include queue "${name}"; creating it needs a credential whose scope includes it, such as one from \`orbit-admin credential create --queue '*'\``,
    { details: { queue: name, scope } },
  );
}

export async function queueCreate(
  db: Database,
  params: { principal: Principal; requestId: string; receipt: ReceiptIdentity; name: string; reason: string; limits: Partial<QueueLimits> },
): Promise<{ queue: Queue; deduplicated: boolean }> {
  const { principal } = params;
  if (!canAccessQueue(principal, params.name)) throw outsideScope(principal, params.name);
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    await applicationRowLock(tx, principal.applicationId);
    const row = await queueInsert(tx, { applicationId: principal.applicationId, namespaceId: principal.namespaceId, name: params.name, limits: params.limits });
    const queue = toQueue(row, principal.namespace);
    await auditInsert(tx, {
      principal,
      action: 'queue.create',
      resourceType: 'queue',
      resource: queue.queue,
      reason: params.reason,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      before: null,
      after: limitsOf(queue),
    });
    await eventInsert(tx, {
      applicationId: principal.applicationId,
      namespaceId: principal.namespaceId,
      type: 'queue.created',
      subject: queue.queue,
      data: limitsOf(queue),
      queue: queue.queue,
    });
    return { response: queue, resourceId: row.queue_id };
  });
  return { queue: response, deduplicated };
}

export async function queueConfigure(
  db: Database,
  params: { principal: Principal; requestId: string; receipt: ReceiptIdentity; name: string; expectedRevision: string; reason: string; limits: QueueLimits },
): Promise<{ queue: Queue; deduplicated: boolean }> {
  const { principal } = params;
  if (!canAccessQueue(principal, params.name)) throw notFound(`queue "${params.name}"`);
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    await applicationRowLock(tx, principal.applicationId);
    const row = await queueFind(tx, principal.namespaceId, params.name, { lock: true });
    if (!row) throw notFound(`queue "${params.name}"`);
    if (row.revision !== params.expectedRevision) throw revisionConflict(params.expectedRevision, row.revision);
    const limits = params.limits;
    await tx.exec(sql`
      UPDATE orbit_queues
         SET max_unfinished_tasks = ${limits.max_unfinished_tasks}, max_concurrency = ${limits.max_concurrency},
             rate_per_second = ${limits.rate_per_second}, key_concurrency = ${limits.key_concurrency}, paused = ${limits.paused ? 1 : 0},
             revision = revision + 1, updated_at = NOW(6)
       WHERE queue_id = ${row.queue_id}`);
    const updated = await queueFind(tx, principal.namespaceId, params.name);
    if (!updated) throw new OrbitError('INTERNAL', 'the queue vanished');
    const before = toQueue(row, principal.namespace);
    const after = toQueue(updated, principal.namespace);
    await auditInsert(tx, {
      principal,
      action: 'queue.configure',
      resourceType: 'queue',
      resource: after.queue,
      reason: params.reason,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      before: limitsOf(before),
      after: limitsOf(after),
    });
    await eventInsert(tx, {
      applicationId: principal.applicationId,
      namespaceId: principal.namespaceId,
      type: 'queue.configured',
      subject: after.queue,
      data: limitsOf(after),
      queue: after.queue,
    });
    return { response: after, resourceId: row.queue_id };
  });
  return { queue: response, deduplicated };
}

export interface QueueConfigureDryRunParams {
  principal: Principal;
  name: string;
  expectedRevision: string;
  limits: QueueLimits;
}

/** What a dry run reads beside StoredQueue: the start window, and the database's time to judge it by. */
type DryRunRow = StoredQueue & Pick<QueueRow, 'window_started_at' | 'window_starts'> & { now: string };

/**
 * `dry_run: true` of configureQueue: the same checks as queueConfigure - the queue within the
 * credential's scope (404), the credential may still act (re-checked as a write does),
 * `expected_revision` is current - and the answer it would give (the new limits and pause flag,
 * the revision + 1, `updated_at` now), with what each limit would mean for the queue's usage
 * of right now. Nothing is written and no row is locked (plain reads, like GET); no receipt is
 * looked up or kept.
 */
export async function queueConfigureDryRun(db: Database, params: QueueConfigureDryRunParams): Promise<{ queue: Queue; effects: ConfigureEffect[] }> {
  const { principal } = params;
  if (!canAccessQueue(principal, params.name)) throw notFound(`queue "${params.name}"`);
  const row = await db.transaction(async (tx) => {
    if ((await credentialsStillValid(tx, [principal.credentialId])).size === 0) throw noLongerValid();
    const [found] = await tx.rows<DryRunRow>(
      sql`SELECT ${QUEUE_COLUMNS}, window_started_at, window_starts, NOW(6) AS now FROM orbit_queues WHERE namespace_id = ${principal.namespaceId} AND name = ${params.name}`,
    );
    return found;
  });
  if (!row) throw notFound(`queue "${params.name}"`);
  if (row.revision !== params.expectedRevision) throw revisionConflict(params.expectedRevision, row.revision);
  const limits = params.limits;
  const before = toQueue(row, principal.namespace);
  const queue = toQueue(
    {
      ...row,
      max_unfinished_tasks: limits.max_unfinished_tasks,
      max_concurrency: limits.max_concurrency,
      rate_per_second: limits.rate_per_second,
      key_concurrency: limits.key_concurrency,
      paused: limits.paused ? 1 : 0,
      revision: (BigInt(row.revision) + 1n).toString(),
      updated_at: row.now,
    },
    principal.namespace,
  );
  const effects = configureEffects('queue', before, limits, {
    unfinishedTasks: BigInt(row.unfinished_tasks),
    activeAttempts: BigInt(row.active_attempts),
    startsInWindow: BigInt(startsInCurrentWindow(windowOfRow(row), sqlToMillis(row.now))),
    pendingStarts: BigInt(row.pending_starts),
  });
  return { queue, effects };
}

/** Queues by name within the credential's scope; `after` is the last name of the previous page. */
export async function queueList(db: Queryable, params: { principal: Principal; after: string; limit: number }): Promise<{ queues: Queue[]; more: boolean }> {
  const { principal } = params;
  if (principal.queues !== '*' && principal.queues.size === 0) return { queues: [], more: false };
  const scope =
    principal.queues === '*'
      ? sql``
      : sql` AND name IN (${sql.join(
          [...principal.queues].map((name) => sql`${name}`),
          sql`, `,
        )})`;
  const rows = await db.rows<StoredQueue>(
    sql`SELECT ${QUEUE_COLUMNS} FROM orbit_queues WHERE namespace_id = ${principal.namespaceId} AND name > ${params.after}${scope} ORDER BY name LIMIT ${params.limit + 1}`,
  );
  return { more: rows.length > params.limit, queues: rows.slice(0, params.limit).map((row) => toQueue(row, principal.namespace)) };
}

/**
 * (namespace, name) → queue id, cached for the life of the process (one cache per app, made by
 * buildDeps): queues are never deleted or renamed, so a found id never goes stale. Misses are not
 * cached.
 */
export class QueueIdCache {
  private readonly ids = new Map<string, IdBytes>();

  async lookup(db: Queryable, namespaceId: IdBytes, name: string): Promise<IdBytes | null> {
    const cacheKey = `${namespaceId.toString('hex')}/${name}`;
    const cached = this.ids.get(cacheKey);
    if (cached) return cached;
    const [row] = await db.rows<Pick<QueueRow, 'queue_id'>>(sql`SELECT queue_id FROM orbit_queues WHERE namespace_id = ${namespaceId} AND name = ${name}`);
    if (!row) return null;
    if (this.ids.size > 100_000) this.ids.clear();
    this.ids.set(cacheKey, row.queue_id);
    return row.queue_id;
  }
}

/**
 * queue id → name, for the events that name a task's queue. Kept for the life of the process and
 * shared by everything in it: a queue is never renamed or deleted, so an entry never goes stale,
 * and ids are never reused. Misses are read (one plain read for all of them).
 */
const queueNames = new Map<string, string>();

export async function queueNamesOf(db: Queryable, ids: readonly IdBytes[]): Promise<Map<string, string>> {
  const missing = [...new Set(ids.map((id) => id.toString('hex')))].filter((hex) => !queueNames.has(hex));
  if (missing.length > 0) {
    const rows = await db.rows<Pick<QueueRow, 'queue_id' | 'name'>>(
      sql`SELECT queue_id, name FROM orbit_queues WHERE queue_id IN (${valueList(missing.map((hex) => Buffer.from(hex, 'hex')))})`,
    );
    if (queueNames.size > 100_000) queueNames.clear();
    for (const row of rows) queueNames.set(row.queue_id.toString('hex'), row.name);
  }
  return new Map(ids.map((id) => [id.toString('hex'), queueNames.get(id.toString('hex')) ?? '']));
}

/** The ids of every queue of the namespace the credential's scope includes (any number; a namespace has few queues). */
export async function queueIdsVisible(db: Queryable, principal: Principal): Promise<IdBytes[]> {
  if (principal.queues !== '*' && principal.queues.size === 0) return [];
  const scope = principal.queues === '*' ? sql`` : sql` AND name IN (${valueList([...principal.queues])})`;
  const rows = await db.rows<Pick<QueueRow, 'queue_id'>>(sql`SELECT queue_id FROM orbit_queues WHERE namespace_id = ${principal.namespaceId}${scope}`);
  return rows.map((r) => r.queue_id);
}
