/**
 * The usage counters against a recount: every application row's and queue row's
 * unfinished_tasks, active_attempts and pending_starts, and every keyed permit's holders, compared
 * with counts over orbit_tasks and orbit_attempts. `orbit-admin verify [--repair]` and the test
 * helper every integration test ends with (test/helpers/recount.ts) both use this module; the
 * recount is defined here and nowhere else:
 *
 *   unfinished_tasks  tasks in WAITING, LEASED, RUNNING or NEEDS_REVIEW
 *   active_attempts   attempts in RESERVED or RUNNING
 *   pending_starts    attempts in RESERVED
 *   holders           attempts in RESERVED or RUNNING in the permit's queue with its resource key
 *                     (the attempt's copy of the key); an active key without a permit row is a
 *                     difference too (stored 0: a claim would create the row with holders 0)
 *
 * counted by the task's / attempt's application_id for the application row and by its queue_id
 * for a queue row.
 *
 * Read consistency. Every writer changes a counter in the same transaction as the task, attempt
 * or permit rows it counts (admission, claims, starts, results, cancel/resolve, recovery; see
 * counters.ts and lock-order.ts), so every committed state of the database satisfies
 * "counter = recount". A verify must therefore read ONE committed state:
 *
 * - `countersVerify` reads everything in one consistent snapshot (REPEATABLE READ, `START
 *   TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY`): InnoDB's MVCC shows each transaction's
 *   changes all or not at all, to every statement of the snapshot. It takes no locks, so running
 *   beside live servers it neither blocks them nor reports differences that are only transactions
 *   in flight. (The pool's connections run at READ COMMITTED, where every statement gets a read
 *   view of its own: the counter rows read by one statement and the tasks counted by the next
 *   could straddle a commit, and that would be a false difference. Hence the explicit isolation.)
 *   Locking instead (the application row FOR UPDATE, then the recount) would be correct as well,
 *   but it stalls the application's admissions, claims and results for the whole recount, and for
 *   a check that changes nothing there is no reason to.
 *
 * - `countersRepair` writes, and the value it writes is absolute (`SET x = recount`): a snapshot
 *   would lose every change committed after it was taken. So a repair is one READ COMMITTED
 *   transaction per application that takes the lock order - application row FOR UPDATE, its queue
 *   rows in ascending queue_id, its permits in ascending (queue_id, resource_key) - and recounts
 *   under those locks. Every writer of an application's task, attempt and permit rows holds its
 *   application row first (lock-order.ts), so while the repair holds it nothing that the
 *   recount counts can commit; the latest committed rows (plain reads at READ COMMITTED) are
 *   stable. Admission's fast path writes its new task rows before it takes the application row:
 *   those rows are uncommitted, so neither counted nor in the counter yet, and its later
 *   `unfinished_tasks + n` applies on top of the repaired value. Task and attempt rows are read,
 *   not locked (nothing needs them locked, and locking every unfinished task would be heavy).
 */
import { idToHex, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { auditInsert } from '../records/audit.ts';
import { byIdAscending } from '../database/lock-order.ts';
import { placeholders, type Database, type Queryable, type Row } from '../database/database.ts';
import type { ResultSetHeader } from 'mysql2/promise';

const UNFINISHED = "'WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW'";
const ACTIVE = "'RESERVED', 'RUNNING'";

export const COUNTER_NAMES = ['unfinished_tasks', 'active_attempts', 'pending_starts'] as const;
export type CounterName = (typeof COUNTER_NAMES)[number];
/** Decimal strings (the columns are BIGINT UNSIGNED). */
export type Counters = Record<CounterName, string>;

export interface QueueCheck {
  queueId: IdBytes;
  /** `<namespace>/<queue>`: queue names are unique per namespace, namespace names per application. */
  label: string;
  stored: Counters;
  recount: Counters;
}

export interface PermitCheck {
  queueId: IdBytes;
  /** The queue's label. */
  queue: string;
  resourceKey: string;
  /** null: there is no permit row although attempts hold the key. */
  stored: string | null;
  recount: string;
}

export interface ApplicationCheck {
  applicationId: IdBytes;
  stored: Counters;
  recount: Counters;
  queues: QueueCheck[];
  permits: PermitCheck[];
}

export interface CounterDifference {
  level: 'application' | 'queue' | 'permit';
  applicationId: string;
  /** `application <id>`, `queue <id>/<namespace>/<queue>` or `permit <id>/<namespace>/<queue> key "<key>"`. */
  subject: string;
  counter: CounterName | 'holders';
  stored: string;
  recount: string;
  /** A permit difference where the permit row does not exist (stored reads 0). */
  missingRow: boolean;
  /** For the repair: which row. */
  queueId?: IdBytes;
  resourceKey?: string;
}

export interface VerifyReport {
  applications: number;
  queues: number;
  permits: number;
  checks: ApplicationCheck[];
  differences: CounterDifference[];
}

const ZERO: Counters = { unfinished_tasks: '0', active_attempts: '0', pending_starts: '0' };

/** Normalises a count from the driver (number, decimal string or null) to a decimal string. */
function count(value: unknown): string {
  return value === null || value === undefined ? '0' : BigInt(String(value)).toString();
}

function countersOf(row: Record<string, unknown>): Counters {
  return { unfinished_tasks: count(row.unfinished_tasks), active_attempts: count(row.active_attempts), pending_starts: count(row.pending_starts) };
}

const hex = idToHex;
const permitKey = (queueId: IdBytes, resourceKey: string) => `${hex(queueId)}/${resourceKey}`;

interface StoredQueue {
  queue_id: Buffer;
  application_id: Buffer;
  namespace: string | null;
  name: string;
}

/**
 * The stored rows and the recount, for one application or (null) for all. With `lock`, the rows
 * holding counters are locked in lock order (one application only); see the header for why the
 * plain reads that follow are then consistent.
 */
async function check(q: Queryable, applicationId: IdBytes | null, lock: boolean): Promise<ApplicationCheck[]> {
  if (lock && applicationId === null) throw new Error('a locking check covers one application');
  const forUpdate = lock ? ' FOR UPDATE' : '';
  const one = applicationId === null ? [] : [applicationId];
  // Unscoped: every application's rows at once, a scatter query on Vitess (shard-routing.ts).
  const scatter = applicationId === null ? ' /* scatter: verify-recount */' : '';

  // 1. Application rows.
  const applications = await q.rows<Row>(
    `SELECT${scatter} application_id, unfinished_tasks, active_attempts, pending_starts FROM orbit_application_resources
      ${applicationId === null ? '' : 'WHERE application_id = ?'} ORDER BY application_id${forUpdate}`,
    one,
  );
  if (applications.length === 0) return [];

  // 2. Queue rows: which ones and their names by a plain read, then their counters, locked by
  //    primary key in ascending order when locking (namespace rows are never locked).
  const labels = await q.rows<StoredQueue>(
    `SELECT${scatter} q.queue_id, q.application_id, n.name AS namespace, q.name
       FROM orbit_queues q LEFT JOIN orbit_namespaces n ON n.namespace_id = q.namespace_id
      ${applicationId === null ? '' : 'WHERE q.application_id = ?'}`,
    one,
  );
  const queueIds = labels.map((r) => r.queue_id).sort(byIdAscending);
  // Scoped reads name the application's queues; an unscoped check reads whole tables.
  const scoped = applicationId !== null;
  const inQueues = (column: string) => (scoped ? ` AND ${column} IN (${placeholders(queueIds.length)})` : '');
  const queueParams = scoped ? queueIds : [];
  const noQueues = scoped && queueIds.length === 0;
  const queueRows = noQueues
    ? []
    : await q.rows<Row>(
        `SELECT${scatter} queue_id, unfinished_tasks, active_attempts, pending_starts FROM orbit_queues
          WHERE TRUE${inQueues('queue_id')} ORDER BY queue_id${forUpdate}`,
        queueParams,
      );

  // 3. Permits, last in the lock order.
  const permitRows = noQueues
    ? []
    : await q.rows<{ queue_id: Buffer; resource_key: string; holders: unknown }>(
        `SELECT${scatter} queue_id, resource_key, holders FROM orbit_key_permits
          WHERE TRUE${inQueues('queue_id')} ORDER BY queue_id, resource_key${forUpdate}`,
        queueParams,
      );

  // 4. The recount: one round trip, counts grouped by owner (application or queue).
  const byApplication = applicationId === null ? '' : ' AND application_id = ?';
  const statements = [
    `SELECT${scatter} application_id AS owner, COUNT(*) AS n FROM orbit_tasks WHERE state IN (${UNFINISHED})${byApplication} GROUP BY application_id`,
    `SELECT${scatter} application_id AS owner, COUNT(*) AS active, SUM(state = 'RESERVED') AS pending FROM orbit_attempts
      WHERE state IN (${ACTIVE})${byApplication} GROUP BY application_id`,
  ];
  const params: unknown[] = [...one, ...one];
  if (!noQueues) {
    statements.push(
      `SELECT${scatter} queue_id AS owner, COUNT(*) AS n FROM orbit_tasks WHERE state IN (${UNFINISHED})${inQueues('queue_id')} GROUP BY queue_id`,
      `SELECT${scatter} queue_id AS owner, COUNT(*) AS active, SUM(state = 'RESERVED') AS pending FROM orbit_attempts
        WHERE state IN (${ACTIVE})${inQueues('queue_id')} GROUP BY queue_id`,
      `SELECT${scatter} queue_id, resource_key, COUNT(*) AS n FROM orbit_attempts
        WHERE state IN (${ACTIVE}) AND resource_key IS NOT NULL${inQueues('queue_id')} GROUP BY queue_id, resource_key`,
    );
    params.push(...queueParams, ...queueParams, ...queueParams);
  }
  const results = (await q.batch(statements.join(';\n'), params)) as Row[][];
  const [appTasks = [], appAttempts = [], queueTasks = [], queueAttempts = [], keyAttempts = []] = results;

  const recounts = (tasks: Row[], attempts: Row[]) => {
    const map = new Map<string, Counters>();
    const get = (owner: Buffer) => {
      const key = hex(owner);
      let counters = map.get(key);
      if (!counters) map.set(key, (counters = { ...ZERO }));
      return counters;
    };
    for (const r of tasks) get(r.owner as Buffer).unfinished_tasks = count(r.n);
    for (const r of attempts) Object.assign(get(r.owner as Buffer), { active_attempts: count(r.active), pending_starts: count(r.pending) });
    return map;
  };
  const appRecount = recounts(appTasks, appAttempts);
  const queueRecount = recounts(queueTasks, queueAttempts);
  const keyRecount = new Map<string, { queueId: Buffer; resourceKey: string; n: string }>();
  for (const r of keyAttempts) {
    keyRecount.set(permitKey(r.queue_id as Buffer, r.resource_key as string), { queueId: r.queue_id as Buffer, resourceKey: r.resource_key as string, n: count(r.n) });
  }

  // 5. Put together per application.
  const queueInfo = new Map(labels.map((r) => [hex(r.queue_id), r]));
  const checks = new Map<string, ApplicationCheck>();
  for (const row of applications) {
    const id = row.application_id as Buffer;
    checks.set(hex(id), { applicationId: id, stored: countersOf(row), recount: appRecount.get(hex(id)) ?? { ...ZERO }, queues: [], permits: [] });
  }
  const labelOf = (info: StoredQueue) => `${info.namespace ?? '?'}/${info.name}`;
  for (const row of queueRows) {
    const info = queueInfo.get(hex(row.queue_id as Buffer));
    const owner = info && checks.get(hex(info.application_id));
    if (!info || !owner) continue; // a queue created after the labels were read, or of an application without a resources row
    owner.queues.push({ queueId: info.queue_id, label: labelOf(info), stored: countersOf(row), recount: queueRecount.get(hex(info.queue_id)) ?? { ...ZERO } });
  }
  const permitOwner = (queueId: Buffer) => {
    const info = queueInfo.get(hex(queueId));
    const owner = info && checks.get(hex(info.application_id));
    return info && owner ? { info, owner } : null;
  };
  for (const row of permitRows) {
    const found = permitOwner(row.queue_id);
    if (!found) continue; // a permit of a queue that does not exist
    const key = permitKey(row.queue_id, row.resource_key);
    found.owner.permits.push({
      queueId: row.queue_id,
      queue: labelOf(found.info),
      resourceKey: row.resource_key,
      stored: count(row.holders),
      recount: keyRecount.get(key)?.n ?? '0',
    });
    keyRecount.delete(key);
  }
  // Active keys left over have no permit row.
  for (const held of keyRecount.values()) {
    const found = permitOwner(held.queueId);
    if (!found) continue;
    found.owner.permits.push({ queueId: held.queueId, queue: labelOf(found.info), resourceKey: held.resourceKey, stored: null, recount: held.n });
  }
  for (const c of checks.values()) {
    c.queues.sort((a, b) => byIdAscending(a.queueId, b.queueId));
    c.permits.sort((a, b) => byIdAscending(a.queueId, b.queueId) || (a.resourceKey < b.resourceKey ? -1 : a.resourceKey > b.resourceKey ? 1 : 0));
  }
  return [...checks.values()];
}

/** The differences of one application's check, application row first, then queues, then permits. */
export function differencesOf(c: ApplicationCheck): CounterDifference[] {
  const app = hex(c.applicationId);
  const out: CounterDifference[] = [];
  for (const counter of COUNTER_NAMES) {
    if (c.stored[counter] !== c.recount[counter]) {
      out.push({ level: 'application', applicationId: app, subject: `application ${app}`, counter, stored: c.stored[counter], recount: c.recount[counter], missingRow: false });
    }
  }
  for (const q of c.queues) {
    for (const counter of COUNTER_NAMES) {
      if (q.stored[counter] !== q.recount[counter]) {
        out.push({
          level: 'queue', applicationId: app, subject: `queue ${app}/${q.label}`, counter, stored: q.stored[counter], recount: q.recount[counter], missingRow: false, queueId: q.queueId,
        });
      }
    }
  }
  for (const p of c.permits) {
    if (p.stored !== p.recount) {
      out.push({
        level: 'permit',
        applicationId: app,
        subject: `permit ${app}/${p.queue} key ${JSON.stringify(p.resourceKey)}`,
        counter: 'holders',
        stored: p.stored ?? '0',
        recount: p.recount,
        missingRow: p.stored === null,
        queueId: p.queueId,
        resourceKey: p.resourceKey,
      });
    }
  }
  return out;
}

/** One greppable line: `queue <id>/<namespace>/<queue> active_attempts: stored 2, recount 1`. */
export function formatDifference(d: CounterDifference): string {
  return `${d.subject} ${d.counter}: stored ${d.stored}, recount ${d.recount}${d.missingRow ? ' (no permit row)' : ''}`;
}

/** A queryable inside one consistent snapshot on a dedicated connection, then COMMIT. */
async function inSnapshot<T>(db: Database, fn: (q: Queryable) => Promise<T>): Promise<T> {
  const conn = await db.pool.getConnection();
  const q: Queryable = {
    async rows<R>(sql: string, params: unknown[] = []) {
      return (await conn.query(sql, params))[0] as R[];
    },
    async exec(sql: string, params: unknown[] = []) {
      return (await conn.query(sql, params))[0] as ResultSetHeader;
    },
    async batch(sql: string, params: unknown[] = []) {
      return (await conn.query(sql, params))[0] as unknown as Array<Row[] | ResultSetHeader>;
    },
  };
  try {
    // For the next transaction only; the session stays at READ COMMITTED afterwards. WITH
    // CONSISTENT SNAPSHOT opens the read view now (at READ COMMITTED it would mean nothing).
    await conn.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
    await conn.query('START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY');
    const result = await fn(q);
    await conn.query('COMMIT');
    conn.release();
    return result;
  } catch (error) {
    try {
      await conn.query('ROLLBACK');
      conn.release();
    } catch {
      conn.destroy();
    }
    throw error;
  }
}

/** Compares every application's (or one application's) counters with a recount, from one consistent snapshot. */
export async function countersVerify(db: Database, options: { applicationId?: IdBytes } = {}): Promise<VerifyReport> {
  const checks = await inSnapshot(db, (q) => check(q, options.applicationId ?? null, false));
  return {
    checks,
    applications: checks.length,
    queues: checks.reduce((n, c) => n + c.queues.length, 0),
    permits: checks.reduce((n, c) => n + c.permits.length, 0),
    differences: checks.flatMap(differencesOf),
  };
}

/**
 * The credential id of audit records written by orbit-admin, which acts with database
 * credentials, not an Orbit credential. All zeros: never a real id (newId starts with the time).
 */
export const ADMIN_CREDENTIAL_ID = Buffer.alloc(16);

export const REPAIR_ACTION = 'application.counters.repaired';

/**
 * Sets one application's stored counters to the recount, in one transaction under the lock
 * order (see the header), with one audit record when anything changed. Returns what changed
 * (empty: nothing differed under the locks).
 *
 * The audit record's namespace: audit records live in the namespace of the credential that made
 * the change, and GET /v1/audit-events shows a credential its own namespace's records. A repair
 * has no credential and is about the whole application, so it goes to the application's OLDEST
 * namespace (created first; for an application made by `orbit-admin bootstrap`, the one made
 * with it) - deterministic, and where the application's operators look first. Its credential id
 * is ADMIN_CREDENTIAL_ID, its request id the run's (`requestId`, shared by every application one
 * run repairs), its idempotency key empty (no client key exists). An application without any
 * namespace (none made that way) gets the record under its own id as namespace id: kept, but no
 * credential sees it.
 */
export async function countersRepair(db: Database, applicationId: IdBytes, run: { requestId: string; reason: string }): Promise<CounterDifference[]> {
  return db.transaction(async (tx) => {
    const [c] = await check(tx, applicationId, true);
    if (!c) return [];
    const differences = differencesOf(c);
    if (differences.length === 0) return [];

    const statements: string[] = [];
    const params: unknown[] = [];
    const set = 'SET unfinished_tasks = ?, active_attempts = ?, pending_starts = ?';
    const values = (r: Counters) => COUNTER_NAMES.map((n) => r[n]);
    if (differences.some((d) => d.level === 'application')) {
      statements.push(`UPDATE orbit_application_resources ${set} WHERE application_id = ?`);
      params.push(...values(c.recount), applicationId);
    }
    const queues = c.queues.filter((q) => COUNTER_NAMES.some((n) => q.stored[n] !== q.recount[n]));
    for (const q of queues) {
      statements.push(`UPDATE orbit_queues ${set} WHERE queue_id = ?`);
      params.push(...values(q.recount), q.queueId);
    }
    const permits = c.permits.filter((p) => p.stored !== p.recount);
    for (const p of permits) {
      if (p.stored === null) {
        statements.push('INSERT INTO orbit_key_permits (queue_id, resource_key, application_id, holders, updated_at) VALUES (?, ?, ?, ?, NOW(6))');
        params.push(p.queueId, p.resourceKey, applicationId, p.recount);
      } else {
        statements.push('UPDATE orbit_key_permits SET holders = ?, updated_at = NOW(6) WHERE queue_id = ? AND resource_key = ?');
        params.push(p.recount, p.queueId, p.resourceKey);
      }
    }
    await tx.batch(statements.join(';\n'), params);

    const [namespace] = await tx.rows<{ namespace_id: Buffer; name: string }>(
      'SELECT namespace_id, name FROM orbit_namespaces WHERE application_id = ? ORDER BY created_at, namespace_id LIMIT 1',
      [applicationId],
    );
    const principal: Principal = {
      credentialId: ADMIN_CREDENTIAL_ID,
      applicationId,
      namespaceId: namespace?.namespace_id ?? applicationId,
      namespace: namespace?.name ?? '',
      actions: new Set(),
      queues: new Set(),
    };
    const side = (pick: 'stored' | 'recount') => ({
      ...(pick === 'stored' ? c.stored : c.recount),
      queues: queues.map((q) => ({ queue_id: hex(q.queueId), queue: q.label, ...q[pick] })),
      permits: permits.map((p) => ({ queue_id: hex(p.queueId), queue: p.queue, resource_key: p.resourceKey, holders: pick === 'stored' ? p.stored : p.recount })),
    });
    await auditInsert(tx, {
      principal,
      action: REPAIR_ACTION,
      resourceType: 'application_resources',
      resource: hex(applicationId),
      reason: run.reason,
      requestId: run.requestId,
      idempotencyKey: '',
      before: side('stored'),
      after: side('recount'),
    });
    return differences;
  });
}

/**
 * How many tasks disagree with their active attempts: a LEASED or RUNNING task has exactly one
 * RESERVED or RUNNING attempt, a task in any other state none. Not a counter, so not part of verify's
 * report (a repair could not decide which side is wrong); the test helper checks it as well.
 */
export async function tasksDisagreeingWithAttempts(db: Queryable): Promise<number> {
  const [row] = await db.rows<{ n: unknown }>(`
    SELECT /* scatter: verify-task-attempt-agreement */ COUNT(*) AS n FROM orbit_tasks t
     WHERE (SELECT COUNT(*) FROM orbit_attempts x WHERE x.task_id = t.task_id AND x.state IN (${ACTIVE}))
           <> (CASE WHEN t.state IN ('LEASED', 'RUNNING') THEN 1 ELSE 0 END)`);
  return Number(row?.n ?? 0);
}
