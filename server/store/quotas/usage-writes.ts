/**
 * Every write of usage - the counters (`unfinished_tasks`, `active_attempts`, `pending_starts`),
 * the one-second start windows (`window_started_at`, `window_starts`) and keyed permits'
 * `holders` - is built here and nowhere else (test/unit/usage-writes.test.ts holds every other
 * store file to that; configure writes only limits, and verify's repair writes recounts).
 *
 * Two forms (docs/quotas-and-locking.md):
 * - exact: the caller holds the rows' locks (or accepts that these statements take them now, in
 *   lock order: the application row, the queue rows by ascending id, then permits by ascending
 *   (queue_id, resource_key)), decided in TypeScript and writes deltas or the window it decided.
 *   Exactly-once release comes from callers deriving deltas from state changes of rows they hold
 *   locked; the unsigned columns only add that a counter never goes below zero (ER_DATA_OUT_OF_RANGE).
 * - guarded: the one-round-trip paths, where nothing was read first. The statement states the
 *   domain rule in SQL and sets a NOT NULL column to NULL when it does not hold, which stops the
 *   transaction before its COMMIT (ER_BAD_NULL_ERROR); the careful path then decides. Each
 *   guarded form has a test that evaluates it in MariaDB against its TypeScript rule
 *   (test/store/usage-rules.test.ts).
 */
import type { IdBytes } from '../../ids.ts';
import { millisToSql } from '../../time.ts';
import type { WindowState } from '../../domain/start-window.ts';
import { permitOrder, type PermitRef, type PermitTally } from '../../domain/permits.ts';
import { sql, type SQL } from '../database/sql.ts';
import type { Queryable } from '../database/database.ts';
import { updateEachRow } from '../database/set-based.ts';
import { byIdAscending, lockRows } from '../database/lock-order.ts';

/** Changes of one quota row's counters. */
export interface UsageDelta {
  unfinished?: number;
  active?: number;
  pending?: number;
}

/** What one quota row gets: counter deltas and, when starts were granted, the window decided for it. */
export interface UsageChange extends UsageDelta {
  window?: WindowState;
}

export interface QueueUsageChange {
  queueId: IdBytes;
  change: UsageChange;
}

const COUNTERS = [
  ['unfinished_tasks', 'unfinished'],
  ['active_attempts', 'active'],
  ['pending_starts', 'pending'],
] as const;

const windowStart = (w: WindowState) => (w.startedAt === null ? null : millisToSql(w.startedAt));

/** The columns and values of a group of rows: a counter only when some row changes it, the window only when some row has one. */
function assignments(changes: UsageChange[]): { columns: string[]; valuesOf: (c: UsageChange) => SQL[] } {
  const counters = COUNTERS.filter(([, field]) => changes.some((c) => (c[field] ?? 0) !== 0));
  const window = changes.some((c) => c.window !== undefined);
  const columns = [...counters.map(([column]) => column), ...(window ? ['window_started_at', 'window_starts'] : [])];
  return {
    columns,
    valuesOf: (c) => [
      ...counters.map(([column, field]) => sql`${sql.raw(column)} + ${c[field] ?? 0}`),
      ...(window ? (c.window === undefined ? [sql`window_started_at`, sql`window_starts`] : [sql`${windowStart(c.window)}`, sql`${c.window.starts}`]) : []),
    ],
  };
}

/**
 * Exact form: the application row's change, then every queue row's own in ONE statement
 * (ascending queue id, the lock order), whatever the number of queues. Nothing for rows that
 * change nothing. Send them with the caller's other statements (`tx.batch`, `tx.finish`).
 */
export function usageStatements(applicationId: IdBytes, application: UsageChange, queues: QueueUsageChange[]): SQL[] {
  const statements: SQL[] = [];
  const app = assignments([application]);
  if (app.columns.length > 0) {
    statements.push(
      updateEachRow({
        table: 'orbit_application_resources',
        key: ['application_id'],
        columns: app.columns,
        rows: [{ key: [applicationId], values: app.valuesOf(application) }],
      }),
    );
  }
  const sorted = [...queues].sort((a, b) => byIdAscending(a.queueId, b.queueId));
  const perQueue = assignments(sorted.map((q) => q.change));
  if (sorted.length > 0 && perQueue.columns.length > 0) {
    statements.push(
      updateEachRow({
        table: 'orbit_queues',
        key: ['queue_id'],
        columns: perQueue.columns,
        rows: sorted.map((q) => ({ key: [q.queueId], values: perQueue.valuesOf(q.change) })),
      }),
    );
  }
  return statements;
}

/** Exact form of counter deltas per queue: the application row gets their sum. */
export function usageDeltaStatements(applicationId: IdBytes, queues: Array<{ queueId: IdBytes; delta: UsageDelta }>): SQL[] {
  const total = { unfinished: 0, active: 0, pending: 0 };
  for (const { delta } of queues) {
    total.unfinished += delta.unfinished ?? 0;
    total.active += delta.active ?? 0;
    total.pending += delta.pending ?? 0;
  }
  return usageStatements(
    applicationId,
    total,
    queues.map((q) => ({ queueId: q.queueId, change: q.delta })),
  );
}

/** One task's change of counters, for a single-row operation (cancel, resolve, retry). */
export async function usageAdjust(tx: Queryable, applicationId: IdBytes, queueId: IdBytes, delta: UsageDelta): Promise<void> {
  const statements = usageDeltaStatements(applicationId, [{ queueId, delta }]);
  if (statements.length > 0) await tx.batch(statements);
}

// ---------------------------------------------------------------------------------------------
// Guarded forms.

/**
 * Admission's rule (domain/admission.ts) as a guard: `total` more unfinished tasks on the
 * application row and each queue's own number on its row, each only while it stays within
 * `max_unfinished_tasks` - else NULL, and the transaction stops.
 */
export function unfinishedGuardedStatements(applicationId: IdBytes, total: number, perQueue: Array<{ queueId: IdBytes; count: number }>): SQL[] {
  const guarded = (n: number) => sql`IF(unfinished_tasks + ${n} <= max_unfinished_tasks, unfinished_tasks + ${n}, NULL)`;
  return [
    sql`UPDATE orbit_application_resources SET unfinished_tasks = ${guarded(total)} WHERE application_id = ${applicationId}`,
    // Every queue of the group in one statement; a full one fails it (NULL) like the application's.
    updateEachRow({
      table: 'orbit_queues',
      key: ['queue_id'],
      columns: ['unfinished_tasks'],
      rows: [...perQueue].sort((a, b) => byIdAscending(a.queueId, b.queueId)).map((q) => ({ key: [q.queueId], values: [guarded(q.count)] })),
    }),
  ];
}

/**
 * The start window's rule (domain/start-window.ts `windowAfterStarts`) as a guard, for `n`
 * starts at `now` (an SQL expression of database time): a window that has ended is replaced
 * by one opened at `now`; the starts must fit under `rate_per_second`, else NULL. The `n`
 * pending starts are given back. The same columns, in this order, for every row.
 */
export const WINDOW_GUARDED_COLUMNS = ['window_starts', 'window_started_at', 'pending_starts'] as const;
export function windowAdvanceGuarded(n: number, now: SQL): SQL[] {
  const ended = sql`window_started_at IS NULL OR window_started_at + INTERVAL 1 SECOND <= ${now}`;
  return [
    sql`IF(${ended}, IF(${n} <= rate_per_second, ${n}, NULL), IF(window_starts + ${n} <= rate_per_second, window_starts + ${n}, NULL))`,
    sql`IF(${ended}, ${now}, window_started_at)`,
    sql`pending_starts - ${n}`,
  ];
}

/** Both levels' windows advanced by their starts, guarded: the application row, then the queue rows. */
export function startWindowsGuardedStatements(applicationId: IdBytes, perQueue: Array<{ queueId: IdBytes; count: number }>, now: SQL): SQL[] {
  const total = perQueue.reduce((n, q) => n + q.count, 0);
  return [
    updateEachRow({
      table: 'orbit_application_resources',
      key: ['application_id'],
      columns: WINDOW_GUARDED_COLUMNS,
      rows: [{ key: [applicationId], values: windowAdvanceGuarded(total, now) }],
    }),
    updateEachRow({
      table: 'orbit_queues',
      key: ['queue_id'],
      columns: WINDOW_GUARDED_COLUMNS,
      rows: [...perQueue].sort((a, b) => byIdAscending(a.queueId, b.queueId)).map((q) => ({ key: [q.queueId], values: windowAdvanceGuarded(q.count, now) })),
    }),
  ];
}

/**
 * A guard on the statement before it: fails the transaction unless that statement changed
 * exactly `n` rows (the application row is written with its own value otherwise).
 */
export function rowCountGuard(n: number, applicationId: IdBytes): SQL {
  return sql`UPDATE orbit_application_resources SET active_attempts = IF(ROW_COUNT() = ${n}, active_attempts, NULL) WHERE application_id = ${applicationId}`;
}

// ---------------------------------------------------------------------------------------------
// Keyed permits: the last level of the lock order.

const permitKey = (p: PermitRef) => [Buffer.from(p.queue, 'hex'), p.resourceKey] as const;

/** ONE statement for every permit's holder change, ascending (queue_id, resource_key). Null when there is none. */
export function permitHoldersStatement(changes: PermitTally, now: SQL): SQL | null {
  const rows = changes.entries().filter(([, n]) => n !== 0);
  if (rows.length === 0) return null;
  return updateEachRow({
    table: 'orbit_key_permits',
    key: ['queue_id', 'resource_key'],
    columns: ['holders', 'updated_at'],
    rows: rows.map(([permit, n]) => ({ key: [...permitKey(permit)], values: [sql`holders + ${n}`, now] })),
  });
}

/** Gives back one keyed permit (the permit row is the last lock of the order). */
export async function permitRelease(tx: Queryable, permit: PermitRef | null): Promise<void> {
  if (permit === null) return;
  const [queueId, resourceKey] = permitKey(permit);
  await tx.exec(sql`UPDATE orbit_key_permits SET holders = holders - 1, updated_at = NOW(6) WHERE queue_id = ${queueId} AND resource_key = ${resourceKey}`);
}

/**
 * Permit rows created on demand (with no holders) and then locked, in one round trip: an
 * INSERT IGNORE of the missing ones and the locking read of all, ascending (queue_id, resource_key).
 * The second statement's rows are the permits' holders.
 */
export function permitRowsLockStatement(applicationId: IdBytes, permits: PermitRef[]): SQL {
  const pairs = [...permits].sort(permitOrder).map(permitKey);
  return sql.join(
    [
      sql`INSERT IGNORE INTO orbit_key_permits (queue_id, resource_key, application_id, holders, updated_at)
       VALUES ${sql.join(
         pairs.map(([q, k]) => sql`(${q}, ${k}, ${applicationId}, 0, NOW(6))`),
         sql`, `,
       )}`,
      sql`SELECT queue_id, resource_key, holders FROM orbit_key_permits
      WHERE (queue_id, resource_key) IN (${sql.join(
        pairs.map(([q, k]) => sql`(${q}, ${k})`),
        sql`, `,
      )})
      ORDER BY queue_id, resource_key ${lockRows('permit')}`,
    ],
    sql`;\n`,
  );
}
