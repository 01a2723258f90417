/**
 * The usage counters against a recount: every application row's and queue row's
 * unfinished_tasks, active_attempts and pending_starts, and every keyed permit's holders, compared
 * with counts over orbit_tasks and orbit_attempts, and the repair. `orbit-admin verify [--repair]`
 * (server/cli/verify-command.ts; the lines it prints: server/cli/verify-report.ts) and the test
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
 * usage-writes.ts and lock-order.ts), so every committed state of the database satisfies
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
import { ACTIVE_ATTEMPT_STATES, UNFINISHED_TASK_STATES } from '../../domain/task-transitions.ts';
import { auditInsert } from '../records/audit.ts';
import { byIdAscending, lockRows, type LockLevel } from '../database/lock-order.ts';
import { statementText, valueList, type Database, type Queryable, type Row, type Statement, type Transaction } from '../database/database.ts';
import type { ApplicationResourcesRow, AttemptRow, KeyPermitRow, NamespaceResourcesRow, NamespaceRow, QueueRow } from '../database/schema.ts';
import { idleOf } from '../../domain/floors.ts';
import { namespaceStartsInWindow } from '../../domain/start-window.ts';
import { sql, type SQL } from '../database/sql.ts';
import type { ResultSetHeader } from 'mysql2/promise';

const UNFINISHED = valueList(UNFINISHED_TASK_STATES);
const ACTIVE = valueList(ACTIVE_ATTEMPT_STATES);

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

export interface NamespaceCheck {
  namespaceId: IdBytes;
  /** The namespace's name (`?` when the namespace row is missing). */
  label: string;
  stored: Counters;
  recount: Counters;
}

/** The application row's figures of its namespaces' floors (domain/floors.ts). */
export const FLOOR_FIGURES = [
  'reserved_unfinished_tasks',
  'reserved_concurrency',
  'reserved_rate_per_second',
  'idle_reserved_unfinished_tasks',
  'idle_reserved_concurrency',
  'window_reserved_starts',
] as const;
export type FloorFigure = (typeof FLOOR_FIGURES)[number];
export type FloorFigures = Record<FloorFigure, string>;

export interface ApplicationCheck {
  applicationId: IdBytes;
  stored: Counters;
  recount: Counters;
  /** Stored on the application row, and what its namespace rows (with their usage recounted) make them. */
  floors: { stored: FloorFigures; recount: FloorFigures };
  namespaces: NamespaceCheck[];
  queues: QueueCheck[];
  permits: PermitCheck[];
}

export interface CounterDifference {
  level: 'application' | 'namespace' | 'queue' | 'permit';
  applicationId: string;
  /** `application <id>`, `queue <id>/<namespace>/<queue>` or `permit <id>/<namespace>/<queue> key "<key>"`. */
  subject: string;
  counter: CounterName | FloorFigure | 'holders';
  stored: string;
  recount: string;
  /** A permit difference where the permit row does not exist (stored reads 0). */
  missingRow: boolean;
  /** For the repair: which row. */
  namespaceId?: IdBytes;
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

function countersOf(row: Pick<ApplicationResourcesRow | QueueRow | NamespaceResourcesRow, CounterName>): Counters {
  return { unfinished_tasks: count(row.unfinished_tasks), active_attempts: count(row.active_attempts), pending_starts: count(row.pending_starts) };
}

type NamespaceCheckRow = Pick<
  NamespaceResourcesRow,
  | 'namespace_id'
  | 'application_id'
  | CounterName
  | 'reserved_unfinished_tasks'
  | 'reserved_concurrency'
  | 'reserved_rate_per_second'
  | 'window_started_at'
  | 'window_starts'
>;

const NO_FLOORS: FloorFigures = Object.fromEntries(FLOOR_FIGURES.map((f) => [f, '0'])) as FloorFigures;

function floorFiguresOf(row: Pick<ApplicationResourcesRow, FloorFigure>): FloorFigures {
  return Object.fromEntries(FLOOR_FIGURES.map((f) => [f, count(row[f])])) as FloorFigures;
}

const hex = idToHex;
const permitKey = (queueId: IdBytes, resourceKey: string) => `${hex(queueId)}/${resourceKey}`;

/** Which application a queue belongs to and its names (the namespace's is null when the namespace row is missing). */
type QueueLabel = Pick<QueueRow, 'queue_id' | 'application_id' | 'name'> & { namespace: NamespaceRow['name'] | null };
/** Recount rows, per owner (an application or queue id). COUNT and SUM come back as decimal strings. */
type TaskCount = { owner: IdBytes; n: string };
type AttemptCount = { owner: IdBytes; active: string; pending: string };
type KeyCount = Pick<AttemptRow, 'queue_id'> & { resource_key: NonNullable<AttemptRow['resource_key']>; n: string };

/**
 * The stored rows and the recount, for one application or (null) for all. With `lock`, the rows
 * holding counters are locked in lock order (one application only); see the header for why the
 * plain reads that follow are then consistent.
 */
async function check(q: Queryable, applicationId: IdBytes | null, lock: false): Promise<ApplicationCheck[]>;
async function check(tx: Transaction, applicationId: IdBytes, lock: true): Promise<ApplicationCheck[]>;
async function check(q: Queryable, applicationId: IdBytes | null, lock: boolean): Promise<ApplicationCheck[]> {
  if (lock && applicationId === null) throw new Error('a locking check covers one application');
  const forUpdate = (level: LockLevel) => (lock ? sql` ${lockRows(level)}` : sql``);
  // Unscoped: every application's rows at once, a scatter query on Vitess (shard-routing.ts).
  const scatter = applicationId === null ? sql` /* scatter: verify-recount */` : sql``;

  // 1. Application rows.
  const applications = await q.rows<Pick<ApplicationResourcesRow, 'application_id' | 'window_started_at' | CounterName | FloorFigure>>(
    sql`SELECT${scatter} application_id, unfinished_tasks, active_attempts, pending_starts, window_started_at, ${sql.raw(FLOOR_FIGURES.join(', '))}
      FROM orbit_application_resources
      ${applicationId === null ? sql`` : sql`WHERE application_id = ${applicationId}`} ORDER BY application_id${forUpdate('application')}`,
  );
  if (applications.length === 0) return [];

  // 1b. Namespace rows (their usage and floors), with their names by a plain read.
  const namespaceRows = await q.rows<NamespaceCheckRow>(
    sql`SELECT${scatter} namespace_id, application_id, unfinished_tasks, active_attempts, pending_starts,
              reserved_unfinished_tasks, reserved_concurrency, reserved_rate_per_second, window_started_at, window_starts
         FROM orbit_namespace_resources
      ${applicationId === null ? sql`` : sql`WHERE application_id = ${applicationId}`} ORDER BY namespace_id${forUpdate('namespace')}`,
  );
  const namespaceNames = new Map(
    (
      await q.rows<Pick<NamespaceRow, 'namespace_id' | 'name'>>(
        sql`SELECT${scatter} namespace_id, name FROM orbit_namespaces ${applicationId === null ? sql`` : sql`WHERE application_id = ${applicationId}`}`,
      )
    ).map((n) => [hex(n.namespace_id), n.name]),
  );

  // 2. Queue rows: which ones and their names by a plain read, then their counters, locked by
  //    primary key in ascending order when locking (the identity rows of namespaces are never locked).
  const labels = await q.rows<QueueLabel>(
    sql`SELECT${scatter} q.queue_id, q.application_id, n.name AS namespace, q.name
       FROM orbit_queues q LEFT JOIN orbit_namespaces n ON n.namespace_id = q.namespace_id
      ${applicationId === null ? sql`` : sql`WHERE q.application_id = ${applicationId}`}`,
  );
  const queueIds = labels.map((r) => r.queue_id).sort(byIdAscending);
  // Scoped reads name the application's queues; an unscoped check reads whole tables.
  const scoped = applicationId !== null;
  const inQueues = scoped
    ? sql` AND queue_id IN (${sql.join(
        queueIds.map((id) => sql`${id}`),
        sql`, `,
      )})`
    : sql``;
  const noQueues = scoped && queueIds.length === 0;
  const queueRows = noQueues
    ? []
    : await q.rows<Pick<QueueRow, 'queue_id' | CounterName>>(
        sql`SELECT${scatter} queue_id, unfinished_tasks, active_attempts, pending_starts FROM orbit_queues
          WHERE TRUE${inQueues} ORDER BY queue_id${forUpdate('queue')}`,
      );

  // 3. Permits, last in the lock order.
  const permitRows = noQueues
    ? []
    : await q.rows<Pick<KeyPermitRow, 'queue_id' | 'resource_key' | 'holders'>>(
        sql`SELECT${scatter} queue_id, resource_key, holders FROM orbit_key_permits
          WHERE TRUE${inQueues} ORDER BY queue_id, resource_key${forUpdate('permit')}`,
      );

  // 4. The recount: one round trip, counts grouped by owner (application or queue).
  const byApplication = applicationId === null ? sql`` : sql` AND application_id = ${applicationId}`;
  const statements: SQL[] = [
    sql`SELECT${scatter} application_id AS owner, COUNT(*) AS n FROM orbit_tasks WHERE state IN (${UNFINISHED})${byApplication} GROUP BY application_id`,
    sql`SELECT${scatter} application_id AS owner, COUNT(*) AS active, SUM(state = 'RESERVED') AS pending FROM orbit_attempts
      WHERE state IN (${ACTIVE})${byApplication} GROUP BY application_id`,
  ];
  statements.push(
    sql`SELECT${scatter} namespace_id AS owner, COUNT(*) AS n FROM orbit_tasks WHERE state IN (${UNFINISHED})${byApplication} GROUP BY namespace_id`,
    sql`SELECT${scatter} namespace_id AS owner, COUNT(*) AS active, SUM(state = 'RESERVED') AS pending FROM orbit_attempts
      WHERE state IN (${ACTIVE})${byApplication} GROUP BY namespace_id`,
  );
  if (!noQueues) {
    statements.push(
      sql`SELECT${scatter} queue_id AS owner, COUNT(*) AS n FROM orbit_tasks WHERE state IN (${UNFINISHED})${inQueues} GROUP BY queue_id`,
      sql`SELECT${scatter} queue_id AS owner, COUNT(*) AS active, SUM(state = 'RESERVED') AS pending FROM orbit_attempts
        WHERE state IN (${ACTIVE})${inQueues} GROUP BY queue_id`,
      sql`SELECT${scatter} queue_id, resource_key, COUNT(*) AS n FROM orbit_attempts
        WHERE state IN (${ACTIVE}) AND resource_key IS NOT NULL${inQueues} GROUP BY queue_id, resource_key`,
    );
  }
  const results = (await q.batch(sql.join(statements, sql`;\n`))) as [
    TaskCount[],
    AttemptCount[],
    TaskCount[],
    AttemptCount[],
    TaskCount[]?,
    AttemptCount[]?,
    KeyCount[]?,
  ];
  const [appTasks, appAttempts, namespaceTasks, namespaceAttempts, queueTasks = [], queueAttempts = [], keyAttempts = []] = results;

  const recounts = (tasks: TaskCount[], attempts: AttemptCount[]) => {
    const map = new Map<string, Counters>();
    const get = (owner: Buffer) => {
      const key = hex(owner);
      let counters = map.get(key);
      if (!counters) map.set(key, (counters = { ...ZERO }));
      return counters;
    };
    for (const r of tasks) get(r.owner).unfinished_tasks = count(r.n);
    for (const r of attempts) Object.assign(get(r.owner), { active_attempts: count(r.active), pending_starts: count(r.pending) });
    return map;
  };
  const appRecount = recounts(appTasks, appAttempts);
  const namespaceRecount = recounts(namespaceTasks, namespaceAttempts);
  const queueRecount = recounts(queueTasks, queueAttempts);
  const keyRecount = new Map<string, { queueId: Buffer; resourceKey: string; n: string }>();
  for (const r of keyAttempts) {
    keyRecount.set(permitKey(r.queue_id, r.resource_key), { queueId: r.queue_id, resourceKey: r.resource_key, n: count(r.n) });
  }

  // 5. Put together per application.
  const queueInfo = new Map(labels.map((r) => [hex(r.queue_id), r]));
  const checks = new Map<string, ApplicationCheck>();
  for (const row of applications) {
    const id = row.application_id;
    checks.set(hex(id), {
      applicationId: id,
      stored: countersOf(row),
      recount: appRecount.get(hex(id)) ?? { ...ZERO },
      floors: { stored: floorFiguresOf(row), recount: { ...NO_FLOORS } },
      namespaces: [],
      queues: [],
      permits: [],
    });
  }
  const floorSums = new Map<string, Record<FloorFigure, bigint>>();
  for (const row of namespaceRows) {
    const owner = checks.get(hex(row.application_id));
    if (!owner) continue;
    const recount = namespaceRecount.get(hex(row.namespace_id)) ?? { ...ZERO };
    owner.namespaces.push({ namespaceId: row.namespace_id, label: namespaceNames.get(hex(row.namespace_id)) ?? '?', stored: countersOf(row), recount });
    // What the floors' figures are with this namespace's usage recounted (usage-writes.ts keeps them).
    const app = applications.find((a) => a.application_id.equals(row.application_id));
    const sums = floorSums.get(hex(row.application_id)) ?? Object.fromEntries(FLOOR_FIGURES.map((f) => [f, 0n]));
    const r = (n: string | number) => BigInt(n);
    const min = (a: bigint, b: bigint) => (a < b ? a : b);
    sums.reserved_unfinished_tasks += r(row.reserved_unfinished_tasks);
    sums.reserved_concurrency += r(row.reserved_concurrency);
    sums.reserved_rate_per_second += r(row.reserved_rate_per_second);
    sums.idle_reserved_unfinished_tasks += idleOf({ reserved: r(row.reserved_unfinished_tasks), usage: r(recount.unfinished_tasks) });
    sums.idle_reserved_concurrency += idleOf({ reserved: r(row.reserved_concurrency), usage: r(recount.active_attempts) });
    sums.window_reserved_starts += min(r(namespaceStartsInWindow(row, app?.window_started_at ?? null)), r(row.reserved_rate_per_second));
    floorSums.set(hex(row.application_id), sums as Record<FloorFigure, bigint>);
  }
  for (const [key, sums] of floorSums) {
    const c = checks.get(key) as ApplicationCheck;
    c.floors.recount = Object.fromEntries(FLOOR_FIGURES.map((f) => [f, sums[f].toString()])) as FloorFigures;
  }
  const labelOf = (info: QueueLabel) => `${info.namespace ?? '?'}/${info.name}`;
  for (const row of queueRows) {
    const info = queueInfo.get(hex(row.queue_id));
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
    c.namespaces.sort((a, b) => byIdAscending(a.namespaceId, b.namespaceId));
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
      out.push({
        level: 'application',
        applicationId: app,
        subject: `application ${app}`,
        counter,
        stored: c.stored[counter],
        recount: c.recount[counter],
        missingRow: false,
      });
    }
  }
  for (const figure of FLOOR_FIGURES) {
    if (c.floors.stored[figure] !== c.floors.recount[figure]) {
      out.push({
        level: 'application',
        applicationId: app,
        subject: `application ${app}`,
        counter: figure,
        stored: c.floors.stored[figure],
        recount: c.floors.recount[figure],
        missingRow: false,
      });
    }
  }
  for (const n of c.namespaces) {
    for (const counter of COUNTER_NAMES) {
      if (n.stored[counter] !== n.recount[counter]) {
        out.push({
          level: 'namespace',
          applicationId: app,
          subject: `namespace ${app}/${n.label}`,
          counter,
          stored: n.stored[counter],
          recount: n.recount[counter],
          missingRow: false,
          namespaceId: n.namespaceId,
        });
      }
    }
  }
  for (const q of c.queues) {
    for (const counter of COUNTER_NAMES) {
      if (q.stored[counter] !== q.recount[counter]) {
        out.push({
          level: 'queue',
          applicationId: app,
          subject: `queue ${app}/${q.label}`,
          counter,
          stored: q.stored[counter],
          recount: q.recount[counter],
          missingRow: false,
          queueId: q.queueId,
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

/** A queryable inside one consistent snapshot on a dedicated connection, then COMMIT. */
async function inSnapshot<T>(db: Database, fn: (q: Queryable) => Promise<T>): Promise<T> {
  const conn = await db.pool.getConnection();
  const send = async (statement: Statement, params: unknown[]) => {
    const [text, values] = statementText(statement, params);
    return (await conn.query(text, values))[0];
  };
  const q: Queryable = {
    async rows<R>(statement: Statement, params: unknown[] = []) {
      return (await send(statement, params)) as R[];
    },
    async exec(statement: Statement, params: unknown[] = []) {
      return (await send(statement, params)) as ResultSetHeader;
    },
    async batch(statement: Statement, params: unknown[] = []) {
      return (await send(statement, params)) as unknown as Array<Row[] | ResultSetHeader>;
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

    // In the lock order of the check's locking reads: application row, queue rows, permits.
    const statements: SQL[] = [];
    const set = (r: Counters) =>
      sql`SET unfinished_tasks = ${r.unfinished_tasks}, active_attempts = ${r.active_attempts}, pending_starts = ${r.pending_starts}`;
    if (differences.some((d) => d.level === 'application')) {
      statements.push(
        sql`UPDATE orbit_application_resources ${set(c.recount)}, ${sql.join(
          FLOOR_FIGURES.map((f) => sql`${sql.raw(f)} = ${c.floors.recount[f]}`),
          sql`, `,
        )} WHERE application_id = ${applicationId}`,
      );
    }
    const namespaces = c.namespaces.filter((n) => COUNTER_NAMES.some((k) => n.stored[k] !== n.recount[k]));
    for (const n of namespaces) statements.push(sql`UPDATE orbit_namespace_resources ${set(n.recount)} WHERE namespace_id = ${n.namespaceId}`);
    const queues = c.queues.filter((q) => COUNTER_NAMES.some((n) => q.stored[n] !== q.recount[n]));
    for (const q of queues) statements.push(sql`UPDATE orbit_queues ${set(q.recount)} WHERE queue_id = ${q.queueId}`);
    const permits = c.permits.filter((p) => p.stored !== p.recount);
    for (const p of permits) {
      statements.push(
        p.stored === null
          ? sql`INSERT INTO orbit_key_permits (queue_id, resource_key, application_id, holders, updated_at) VALUES (${p.queueId}, ${p.resourceKey}, ${applicationId}, ${p.recount}, NOW(6))`
          : sql`UPDATE orbit_key_permits SET holders = ${p.recount}, updated_at = NOW(6) WHERE queue_id = ${p.queueId} AND resource_key = ${p.resourceKey}`,
      );
    }
    await tx.batch(sql.join(statements, sql`;\n`));

    const [namespace] = await tx.rows<Pick<NamespaceRow, 'namespace_id' | 'name'>>(
      sql`SELECT namespace_id, name FROM orbit_namespaces WHERE application_id = ${applicationId} ORDER BY created_at, namespace_id LIMIT 1`,
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
      ...(differences.some((d) => d.level === 'application') ? c.floors[pick] : {}),
      namespaces: namespaces.map((n) => ({ namespace_id: hex(n.namespaceId), namespace: n.label, ...n[pick] })),
      queues: queues.map((q) => ({ queue_id: hex(q.queueId), queue: q.label, ...q[pick] })),
      permits: permits.map((p) => ({
        queue_id: hex(p.queueId),
        queue: p.queue,
        resource_key: p.resourceKey,
        holders: pick === 'stored' ? p.stored : p.recount,
      })),
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
  const [row] = await db.rows<{ n: string }>(sql`
    SELECT /* scatter: verify-task-attempt-agreement */ COUNT(*) AS n FROM orbit_tasks t
     WHERE (SELECT COUNT(*) FROM orbit_attempts x WHERE x.task_id = t.task_id AND x.state IN (${ACTIVE}))
           <> (CASE WHEN t.state IN ('LEASED', 'RUNNING') THEN 1 ELSE 0 END)`);
  return Number(row?.n ?? 0);
}

/**
 * How many schedules' `fired` counters disagree with the tasks they made (tasks carrying their
 * schedule_id): the loop counts a fire in the transaction that inserts its task, so they are
 * equal until retention prunes some of those tasks (finished ones only); the counter is never
 * below the tasks kept. Checked by the test helper after every scenario, like the agreement above.
 */
export async function schedulesDisagreeingWithTasks(db: Queryable): Promise<number> {
  const [row] = await db.rows<{ n: string }>(sql`
    SELECT /* scatter: verify-schedule-fired */ COUNT(*) AS n FROM orbit_schedules s
     WHERE s.fired < (SELECT COUNT(*) FROM orbit_tasks t WHERE t.schedule_id = s.schedule_id)`);
  return Number(row?.n ?? 0);
}
