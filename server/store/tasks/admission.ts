/**
 * Task admission: the application's and the queue's `max_unfinished_tasks`, enforced in the
 * transaction that inserts the task.
 *
 * Fast path - the whole transaction in ONE round trip (docs/quotas-and-locking.md):
 *     START TRANSACTION;
 *     UPDATE application row SET unfinished = IF(unfinished + n <= max, unfinished + n, NULL);
 *     UPDATE each queue row  SET unfinished = IF(unfinished + k <= max, unfinished + k, NULL);  (ascending queue_id)
 *     INSERT tasks; INSERT receipts;
 *     COMMIT
 * In the lock order (lock-order.ts): the hot rows first, then the new rows. Sent in one round
 * trip, the application row is locked only while the server runs these statements and the
 * commit - never across a round trip to this process (its lock lasts until the commit either
 * way). A row without room is "guarded": setting the NOT NULL counter to NULL fails the
 * statement (ER_BAD_NULL_ERROR), the server runs nothing after it (no COMMIT), and the
 * transaction is rolled back: nothing was written. So does a receipt whose credential may no
 * longer act, or whose key is taken.
 * Careful path - after a guard or a duplicate receipt key: lock the application row, then the
 * queue rows (FOR UPDATE), look up the receipts, and decide item by item in order: replay,
 * APPLICATION_FULL (checked first, so it wins when both are full), QUEUE_FULL, or accept; then
 * insert and update by exact amounts.
 *
 * A refused submission writes nothing at all - no task, no counter change, no receipt - so the
 * same key can succeed later. A replay of an accepted submission returns its original receipt
 * even when the application or the queue is full now.
 */
import { OrbitError } from '../../errors.ts';
import { idToHex, newId, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { millisToSql } from '../../time.ts';
import type { Clock } from '../database/clock.ts';
import { sql, type SQL } from '../database/sql.ts';
import { unfinishedGuardedStatements, usageDeltaStatements, type QueueOwner } from '../quotas/usage-writes.ts';
import { namespaceRowsLock } from '../quotas/namespace-resources.ts';
import { isDuplicateKeyError, isGuardError, rowsStatement, type BatchStatement, type Database, type Queryable } from '../database/database.ts';
import { byIdAscending, lockRows } from '../database/lock-order.ts';
import type { IdempotencyReceiptRow, QueueRow, TaskRow } from '../database/schema.ts';
import { valueBytesBound } from '../database/packets.ts';
import { applicationRowLock } from '../quotas/application-resources.ts';
import { decideAdmissions, UnfinishedRoom, type Admission } from '../../domain/admission.ts';
import { receiptReplay, type ReceiptIdentity, type ReceiptRow } from '../records/receipts.ts';
import { CREDENTIAL_JOINS, CREDENTIAL_VALID, credentialsStillValid, noLongerValid } from '../tenancy/credentials.ts';
import type { Task } from './tasks.ts';
import { eventInsertStatement } from '../records/events.ts';
import { taskEvent, taskEventsEnabled } from '../records/task-events.ts';

export interface SubmitRequest {
  payload: Record<string, unknown>;
  /** The payload as stored (serialised once, where the request is read). */
  payloadJson: string;
  priority: number;
  resourceKey: string | null;
  maxAttempts: number;
  deadlineSeconds: number;
  delaySeconds: number;
  onUnknownOutcome: 'retry' | 'review';
}

export interface SubmitItem {
  principal: Principal;
  queueId: IdBytes;
  queueName: string;
  receipt: ReceiptIdentity;
  request: SubmitRequest;
}

export type SubmitOutcome = { ok: true; task: Task; deduplicated: boolean } | { ok: false; error: OrbitError };

/** What a receipt of submitTask stores: the task as accepted, without its payload (kept once, on the task row). */
type StoredTask = Omit<Task, 'payload'>;

interface Prepared {
  item: SubmitItem;
  taskId: IdBytes;
  payloadJson: string;
  snapshot: StoredTask;
  times: { created: string; available: string; deadline: string };
}

function prepare(item: SubmitItem, nowMs: number): Prepared {
  const taskId = newId(nowMs);
  const r = item.request;
  const created = nowMs;
  const available = created + r.delaySeconds * 1000;
  const deadline = created + r.deadlineSeconds * 1000;
  const snapshot: StoredTask = {
    task_id: idToHex(taskId),
    queue: item.queueName,
    namespace: item.principal.namespace,
    state: 'WAITING',
    priority: r.priority,
    ...(r.resourceKey === null ? {} : { resource_key: r.resourceKey }),
    attempts: 0,
    max_attempts: r.maxAttempts,
    on_unknown_outcome: r.onUnknownOutcome,
    cancel_requested: false,
    created_at: new Date(created).toISOString(),
    available_at: new Date(available).toISOString(),
    deadline_at: new Date(deadline).toISOString(),
  };
  return {
    item,
    taskId,
    payloadJson: r.payloadJson,
    snapshot,
    times: { created: millisToSql(created), available: millisToSql(available), deadline: millisToSql(deadline) },
  };
}

function withPayload(stored: StoredTask, payload: Record<string, unknown>): Task {
  return { ...stored, payload } as Task;
}

/**
 * Whether each submitter's credential may still act, read once per credential of the group into
 * a session variable that its receipts use: when the credential was revoked or expired, or its
 * namespace or application disabled, since the request was authenticated (possibly from the
 * per-process cache), the receipts' `application_id` comes out NULL and the INSERT fails like a
 * full quota does - so no write happens for a credential that may no longer act, without an
 * extra round trip. (Tried and replaced: an INSERT … SELECT per receipt joined with the identity
 * rows; with 1,000 receipts that one statement took 0.2-0.6 s, under the application row.)
 * Variable names are `@orbit_credential_ok_<n>`, n the credential's place in the group.
 */
function credentialChecks(prepared: Prepared[]): { statements: SQL[]; variableOf: Map<string, SQL> } {
  const variableOf = new Map<string, SQL>();
  const statements: SQL[] = [];
  for (const p of prepared) {
    const credential = p.item.receipt.credentialId;
    const key = idToHex(credential);
    if (variableOf.has(key)) continue;
    const variable = sql.raw(`@orbit_credential_ok_${variableOf.size}`);
    variableOf.set(key, variable);
    statements.push(
      sql`SET ${variable} = EXISTS(SELECT 1 FROM ${sql.raw(CREDENTIAL_JOINS)} WHERE c.credential_id = ${credential} AND ${sql.raw(CREDENTIAL_VALID)})`,
    );
  }
  return { statements, variableOf };
}

function receiptValues(p: Prepared, credentialOk: SQL): SQL {
  const id = p.item.receipt;
  return sql`(${id.namespaceId}, ${id.key}, IF(${credentialOk}, ${id.applicationId}, NULL), ${id.operation}, ${id.requestSha256}, ${p.taskId}, ${JSON.stringify(p.snapshot)}, ${p.times.created})`;
}

function taskValues(p: Prepared): SQL {
  const { principal, queueId, receipt, request: r } = p.item;
  return sql`(${p.taskId}, ${principal.applicationId}, ${principal.namespaceId}, ${queueId}, 'WAITING', ${r.priority}, ${r.resourceKey}, ${p.payloadJson},
    0, ${r.maxAttempts}, ${r.onUnknownOutcome}, 0, ${receipt.key}, ${p.times.created}, ${p.times.available}, ${p.times.deadline}, ${p.times.created})`;
}

/**
 * The task rows, then their receipts and `task.submitted` events (the lock order: tasks before
 * records). Each is one INSERT, or several of consecutive rows when the payloads would not fit
 * in one packet (packets.ts).
 */
function insertStatements(prepared: Prepared[]): BatchStatement[] {
  const checks = credentialChecks(prepared);
  const events = taskEventsEnabled()
    ? [
        eventInsertStatement(
          prepared.map((p) =>
            taskEvent(
              'task.submitted',
              { applicationId: p.item.principal.applicationId, namespaceId: p.item.principal.namespaceId, taskId: p.taskId, queue: p.item.queueName },
              { priority: p.item.request.priority },
            ),
          ),
        ),
      ]
    : [];
  return [
    rowsStatement(
      sql`INSERT INTO orbit_tasks
      (task_id, application_id, namespace_id, queue_id, state, priority, resource_key, payload, attempts, max_attempts,
       on_unknown_outcome, cancel_requested, idempotency_key, created_at, available_at, deadline_at, updated_at)
    VALUES `,
      prepared.map(taskValues),
    ),
    ...checks.statements,
    rowsStatement(
      sql`INSERT INTO orbit_idempotency_receipts
      (namespace_id, idempotency_key, application_id, operation, request_sha256, resource_id, response, created_at)
    VALUES `,
      prepared.map((p) => receiptValues(p, checks.variableOf.get(idToHex(p.item.receipt.credentialId)) as SQL)),
    ),
    ...events,
  ];
}

/** Tasks per queue, in lock order. */
function countByQueue(prepared: Prepared[]): QueueCount[] {
  const counts = new Map<string, QueueCount>();
  for (const p of prepared) {
    const key = p.item.queueId.toString('hex');
    const entry = counts.get(key) ?? { queueId: p.item.queueId, namespaceId: p.item.principal.namespaceId, count: 0 };
    entry.count += 1;
    counts.set(key, entry);
  }
  return [...counts.values()].sort((a, b) => byIdAscending(a.queueId, b.queueId));
}

// The details name the level and the limit, never usage: the application's figures belong to
// every namespace of it, and this caller may not hold application:resources:read.
// Room kept by other namespaces' floors is said so (`reserved_by_other_namespaces`), without
// naming them.
export const applicationFull = (byOthersFloors = false) =>
  byOthersFloors
    ? new OrbitError(
        'APPLICATION_FULL',
        "the application's max_unfinished_tasks is reached for this namespace: the room left is reserved by other namespaces' floors; retry later with the same idempotency key",
        { details: { level: 'application', limit: 'max_unfinished_tasks', reserved_by_other_namespaces: true } },
      )
    : new OrbitError('APPLICATION_FULL', "the application's max_unfinished_tasks is reached; retry later with the same idempotency key", {
        details: { level: 'application', limit: 'max_unfinished_tasks' },
      });
export const queueFull = (queue: string) =>
  new OrbitError('QUEUE_FULL', `queue "${queue}" has reached its max_unfinished_tasks; retry later with the same idempotency key`, {
    details: { level: 'queue', queue, limit: 'max_unfinished_tasks' },
  });

/** What the rows of one submission take besides its payload (task columns, receipt snapshot, event), at most. */
const SUBMISSION_ROW_BYTES = 4096;

/**
 * An upper bound of the bytes one submission adds to its admission transaction's statements:
 * the group commit of submissions is bounded by it (one packet's worth), so the admission
 * stays one round trip however large the payloads.
 */
export function submissionBytes(item: SubmitItem): number {
  return valueBytesBound(item.request.payloadJson) + SUBMISSION_ROW_BYTES;
}

type QueueCount = QueueOwner & { count: number };

/** All items belong to one application (the batcher groups them so). */
export async function taskSubmitBatch(
  db: Database,
  clock: Clock,
  items: SubmitItem[],
  options: {
    /** 'careful' skips the one-round-trip path (for the differential test). */
    path?: 'choose' | 'careful';
    /** Told which path decided the batch. */
    onPath?: (path: 'fast' | 'careful') => void;
  } = {},
): Promise<SubmitOutcome[]> {
  if (items.length === 0) return [];
  const applicationId = (items[0] as SubmitItem).principal.applicationId;
  const nowMs = clock.now();
  const prepared = items.map((item) => prepare(item, nowMs));
  const perQueue = countByQueue(prepared);
  if (options.path !== 'careful') {
    try {
      // Lock order: the application row, the queue rows, then the new tasks and their receipts -
      // all in one round trip with the COMMIT, so the hot rows are held for no round trip at all.
      const statements = [...unfinishedGuardedStatements(applicationId, prepared.length, perQueue), ...insertStatements(prepared)];
      await db.oneShot(statements);
      options.onPath?.('fast');
      return prepared.map((p) => ({ ok: true, task: withPayload(p.snapshot, p.item.request.payload), deduplicated: false }));
    } catch (error) {
      // No room somewhere, a credential that may no longer act, or a key already used: nothing
      // was written; decide item by item.
      if (!isGuardError(error) && !isDuplicateKeyError(error)) throw error;
    }
  }
  options.onPath?.('careful');
  // A receipt for one of these keys may commit between the careful path's read and its insert
  // (a writer that does not hold the application row): then it decides again, seeing it.
  for (let attempt = 0; ; attempt++) {
    try {
      return await careful(db, applicationId, prepared, perQueue);
    } catch (error) {
      if (attempt >= 2 || !isDuplicateKeyError(error)) throw error;
    }
  }
}

/** A receipt found by the careful path: what a replay needs, and which request and task it is for. */
type FoundReceipt = ReceiptRow & Pick<IdempotencyReceiptRow, 'namespace_id' | 'idempotency_key' | 'resource_id'>;

async function careful(db: Database, applicationId: IdBytes, prepared: Prepared[], perQueue: QueueCount[]): Promise<SubmitOutcome[]> {
  const replayedTaskIds: IdBytes[] = [];
  const outcomes = await db.transaction(async (tx) => {
    // Lock order: identity rows (shared), application row, then queue rows by ascending id.
    const valid = await credentialsStillValid(
      tx,
      prepared.map((p) => p.item.receipt.credentialId),
    );
    const app = await applicationRowLock(tx, applicationId);
    const namespaces = await namespaceRowsLock(
      tx,
      perQueue.map((q) => q.namespaceId),
    );
    const queueRows = await tx.rows<Pick<QueueRow, 'queue_id' | 'namespace_id' | 'unfinished_tasks' | 'max_unfinished_tasks'>>(sql`
      SELECT queue_id, namespace_id, unfinished_tasks, max_unfinished_tasks FROM orbit_queues
        WHERE queue_id IN (${sql.join(
          perQueue.map((q) => sql`${q.queueId}`),
          sql`, `,
        )}) ORDER BY queue_id ${lockRows('queue')}`);
    const receipts = await tx.rows<FoundReceipt>(sql`
      SELECT namespace_id, idempotency_key, operation, request_sha256, resource_id, response FROM orbit_idempotency_receipts
        WHERE (namespace_id, idempotency_key) IN (${sql.join(
          prepared.map((p) => sql`(${p.item.receipt.namespaceId}, ${p.item.receipt.key})`),
          sql`, `,
        )})`);
    const keyOf = (namespaceId: IdBytes, key: string) => `${idToHex(namespaceId)}/${key}`;
    const receiptOf = new Map(receipts.map((r) => [keyOf(r.namespace_id, r.idempotency_key), r]));
    const room = new UnfinishedRoom(
      app,
      namespaces,
      queueRows.map((q) => [idToHex(q.queue_id), q, idToHex(q.namespace_id)] as const),
    );
    // The decisions, in order (domain/admission.ts); the store answers and writes them.
    const decisions = decideAdmissions(
      prepared.map((p) => ({
        key: keyOf(p.item.receipt.namespaceId, p.item.receipt.key),
        queue: idToHex(p.item.queueId),
        credentialValid: valid.has(idToHex(p.item.receipt.credentialId)),
      })),
      (key) => receiptOf.get(key),
      room,
    );
    const accepted = prepared.filter((_, i) => decisions[i]?.kind === 'accept');
    const result: SubmitOutcome[] = prepared.map((p, i): SubmitOutcome => {
      const decision = decisions[i] as Admission<FoundReceipt>;
      try {
        switch (decision.kind) {
          case 'credential-no-longer-valid':
            return { ok: false, error: noLongerValid() };
          case 'replay': {
            const stored = receiptReplay<StoredTask>(decision.receipt, p.item.receipt);
            if (decision.receipt.resource_id) replayedTaskIds.push(decision.receipt.resource_id);
            return { ok: true, task: stored as Task, deduplicated: true };
          }
          case 'twin': {
            // The same key twice in one batch: the second is a replay of the first.
            const twin = prepared[decision.of] as Prepared;
            receiptReplay({ operation: twin.item.receipt.operation, request_sha256: twin.item.receipt.requestSha256, response: '{}' }, p.item.receipt);
            return { ok: true, task: withPayload(twin.snapshot, twin.item.request.payload), deduplicated: true };
          }
          case 'full':
            return { ok: false, error: decision.level === 'application' ? applicationFull(decision.byOthersFloors) : queueFull(p.item.queueName) };
          case 'accept':
            break;
        }
        return { ok: true, task: withPayload(p.snapshot, p.item.request.payload), deduplicated: false };
      } catch (error) {
        if (error instanceof OrbitError && error.code === 'IDEMPOTENCY_CONFLICT') return { ok: false, error };
        throw error;
      }
    });
    if (accepted.length > 0) {
      // Lock order: counters (rows locked above), then the new tasks and their receipts.
      const statements: BatchStatement[] = [
        ...usageDeltaStatements(
          applicationId,
          countByQueue(accepted).map((q) => ({ queueId: q.queueId, namespaceId: q.namespaceId, delta: { unfinished: q.count } })),
        ),
        ...insertStatements(accepted),
      ];
      await tx.batch(statements);
    }
    return result;
  });
  return attachReplayedPayloads(db, outcomes, replayedTaskIds);
}

/** Replayed receipts of submitTask carry no payload; it is read from the task row (it never changes). */
async function attachReplayedPayloads(db: Queryable, outcomes: SubmitOutcome[], taskIds: IdBytes[]): Promise<SubmitOutcome[]> {
  if (taskIds.length === 0) return outcomes;
  const rows = await db.rows<Pick<TaskRow, 'task_id' | 'payload'>>(
    sql`SELECT task_id, payload FROM orbit_tasks WHERE task_id IN (${sql.join(
      taskIds.map((id) => sql`${id}`),
      sql`, `,
    )})`,
  );
  const payloads = new Map(rows.map((r) => [idToHex(r.task_id), JSON.parse(r.payload) as Record<string, unknown>]));
  return outcomes.map((o) => {
    if (!o.ok || !o.deduplicated || o.task.payload !== undefined) return o;
    const payload = payloads.get(o.task.task_id);
    return payload === undefined ? o : { ...o, task: withPayload(o.task, payload) };
  });
}
