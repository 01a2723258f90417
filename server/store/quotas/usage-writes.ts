/**
 * Every write of usage - the counters (`unfinished_tasks`, `active_attempts`, `pending_starts`),
 * the one-second start windows (`window_started_at`, `window_starts`), the idle part of the
 * namespaces' floors on the application row (`idle_reserved_*`, `window_reserved_starts`) and
 * keyed permits' `holders` - is built here and nowhere else (test/unit/usage-writes.test.ts holds every other
 * store file to that; configure writes only limits, and verify's repair writes recounts).
 *
 * Two forms (docs/quotas-and-locking.md):
 * - exact: the caller holds the rows' locks (or accepts that these statements take them now, in
 *   lock order: the application row, the namespace rows and the queue rows by ascending id, then
 *   permits by ascending (queue_id, resource_key)), decided in TypeScript and writes deltas or the
 *   window it decided.
 *
 * Every change of a queue's usage is also its namespace's (the namespace row gets the sum of its
 * queues' changes, and its start window follows the application's), and changes the idle part of
 * that namespace's floors, which the application row carries as a sum (domain/floors.ts). That
 * sum is computed in SQL from the namespace rows just written (`floorIdleStatement`), so no
 * caller needs to read a namespace row to keep it exact.
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
import { namespaceStartsInWindow, type WindowState } from '../../domain/start-window.ts';
import { idleOf } from '../../domain/floors.ts';
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

/** Where a queue's usage also counts: its namespace (a queue never moves). */
export interface QueueOwner {
  queueId: IdBytes;
  namespaceId: IdBytes;
}

export interface QueueUsageChange extends QueueOwner {
  change: UsageChange;
  /** Starts granted in this change (with `change.window`): the namespace's window counts them. */
  starts?: number;
}

/** How many of `items` are in each queue, with the queue's namespace (in the items' first-seen order). */
export function countByQueue(items: readonly QueueOwner[]): Array<QueueOwner & { count: number }> {
  const counts = new Map<string, QueueOwner & { count: number }>();
  for (const item of items) {
    const key = item.queueId.toString('hex');
    const entry = counts.get(key) ?? { queueId: item.queueId, namespaceId: item.namespaceId, count: 0 };
    entry.count += 1;
    counts.set(key, entry);
  }
  return [...counts.values()];
}

/** What one namespace row gets: its queues' counter deltas summed, and the starts granted in it. */
interface NamespaceChange {
  namespaceId: IdBytes;
  delta: Required<UsageDelta>;
  starts: number;
}

/** The namespaces' changes from their queues' changes, ascending namespace id (the lock order). */
function namespaceChanges(queues: ReadonlyArray<QueueOwner & { delta: UsageDelta; starts?: number }>): NamespaceChange[] {
  const byNamespace = new Map<string, NamespaceChange>();
  for (const q of queues) {
    const key = q.namespaceId.toString('hex');
    let n = byNamespace.get(key);
    if (n === undefined) {
      n = { namespaceId: q.namespaceId, delta: { unfinished: 0, active: 0, pending: 0 }, starts: 0 };
      byNamespace.set(key, n);
    }
    n.delta.unfinished += q.delta.unfinished ?? 0;
    n.delta.active += q.delta.active ?? 0;
    n.delta.pending += q.delta.pending ?? 0;
    n.starts += q.starts ?? 0;
  }
  return [...byNamespace.values()]
    .filter((n) => n.delta.unfinished !== 0 || n.delta.active !== 0 || n.delta.pending !== 0 || n.starts !== 0)
    .sort((a, b) => byIdAscending(a.namespaceId, b.namespaceId));
}

const COUNTERS = [
  ['unfinished_tasks', 'unfinished'],
  ['active_attempts', 'active'],
  ['pending_starts', 'pending'],
] as const;

const windowStart = (w: WindowState) => (w.startedAt === null ? null : millisToSql(w.startedAt));

const signed = (column: string) => sql.raw(`CAST(${column} AS SIGNED)`);

/**
 * Where a namespace's start window comes from: the application's window, which the statements
 * before it wrote - as decided in TypeScript (`exact`: the application window's start), or by
 * the guarded advance in SQL (`written`: read back from the row this transaction holds).
 */
type ApplicationWindow = { exact: WindowState | undefined } | 'written';

/** The session variable the application window's start is read into (one transaction per connection at a time). */
const WINDOW_VARIABLE = sql.raw('@orbit_application_window');

/**
 * The namespace rows' counters and start windows, in ONE statement (ascending namespace id). A
 * namespace's window is the application's: its `window_starts` count the starts granted in the
 * application window its `window_started_at` names.
 */
function namespaceStatements(applicationId: IdBytes, changes: NamespaceChange[], appWindow: ApplicationWindow): SQL[] {
  if (changes.length === 0) return [];
  const counters = COUNTERS.filter(([, field]) => changes.some((c) => c.delta[field] !== 0));
  const window = changes.some((c) => c.starts !== 0);
  const columns = [...counters.map(([column]) => column), ...(window ? ['window_starts', 'window_started_at'] : [])];
  if (columns.length === 0) return [];
  const out: SQL[] = [];
  let start: SQL = sql`NULL`;
  if (window) {
    if (appWindow === 'written') {
      out.push(sql`SELECT window_started_at INTO ${WINDOW_VARIABLE} FROM orbit_application_resources WHERE application_id = ${applicationId}`);
      start = WINDOW_VARIABLE;
    } else {
      if (appWindow.exact === undefined) throw new Error('usage: starts in a namespace without a window of the application');
      start = sql`${windowStart(appWindow.exact)}`;
    }
  }
  out.push(
    updateEachRow({
      table: 'orbit_namespace_resources',
      key: ['namespace_id'],
      columns,
      rows: changes.map((c) => ({
        key: [c.namespaceId],
        values: [
          ...counters.map(([column, field]) => sql`${sql.raw(column)} + ${c.delta[field]}`),
          ...(window
            ? c.starts === 0
              ? [sql`window_starts`, sql`window_started_at`]
              : [sql`IF(window_started_at <=> ${start}, window_starts + ${c.starts}, ${c.starts})`, start]
            : []),
        ],
      })),
    }),
  );
  return out;
}

/**
 * The idle part of the floors on the application row, after the namespace rows were written
 * (domain/floors.ts): for each namespace changed, max(0, reserved - usage) now less what it was
 * before its change, for unfinished tasks and active attempts; for the rate, the used part of
 * the reservations in the current window, min(starts, reserved) now less before. The sums are
 * read from the namespace rows this transaction has just written (a plain read of rows it
 * holds: nothing waits) into session variables, then added to the application row.
 */
function floorIdleStatements(applicationId: IdBytes, changes: NamespaceChange[]): SQL[] {
  const ids = sql.join(
    changes.map((c) => sql`${c.namespaceId}`),
    sql`, `,
  );
  const perNamespace = (value: (c: NamespaceChange) => number) =>
    sql`CASE namespace_id ${sql.join(
      changes.map((c) => sql`WHEN ${c.namespaceId} THEN ${value(c)}`),
      sql` `,
    )} ELSE 0 END`;
  const sums: Array<{ column: string; variable: string; sum: SQL }> = [];
  const idleChange = (reserved: string, usage: string, field: 'unfinished' | 'active') => {
    const d = perNamespace((c) => c.delta[field]);
    return sql`COALESCE(SUM(GREATEST(0, ${signed(reserved)} - ${signed(usage)}) - GREATEST(0, ${signed(reserved)} - (${signed(usage)} - ${d}))), 0)`;
  };
  if (changes.some((c) => c.delta.unfinished !== 0))
    sums.push({
      column: 'idle_reserved_unfinished_tasks',
      variable: '@orbit_idle_unfinished',
      sum: idleChange('reserved_unfinished_tasks', 'unfinished_tasks', 'unfinished'),
    });
  if (changes.some((c) => c.delta.active !== 0))
    sums.push({
      column: 'idle_reserved_concurrency',
      variable: '@orbit_idle_concurrency',
      sum: idleChange('reserved_concurrency', 'active_attempts', 'active'),
    });
  if (changes.some((c) => c.starts !== 0)) {
    const k = perNamespace((c) => c.starts);
    sums.push({
      column: 'window_reserved_starts',
      variable: '@orbit_window_reserved',
      sum: sql`COALESCE(SUM(LEAST(window_starts, reserved_rate_per_second) - LEAST(${signed('window_starts')} - ${k}, reserved_rate_per_second)), 0)`,
    });
  }
  if (sums.length === 0) return [];
  return [
    sql`SELECT ${sql.join(
      sums.map((x) => x.sum),
      sql`, `,
    )} INTO ${sql.raw(sums.map((x) => x.variable).join(', '))} FROM orbit_namespace_resources WHERE namespace_id IN (${ids})`,
    sql`UPDATE orbit_application_resources SET ${sql.raw(sums.map((x) => `${x.column} = ${x.column} + ${x.variable}`).join(', '))} WHERE application_id = ${applicationId}`,
  ];
}

/** The namespace level of a change: the namespace rows, then the application row's idle part of the floors. */
function namespaceLevel(applicationId: IdBytes, changes: NamespaceChange[], appWindow: ApplicationWindow = { exact: undefined }): SQL[] {
  return [...namespaceStatements(applicationId, changes, appWindow), ...floorIdleStatements(applicationId, changes)];
}

/**
 * The columns and values of a group of rows: a counter only when some row changes it, the window
 * only when some row has one. On the application row (`floors`), a window replaced by a new one
 * also starts its used part of the rate floors afresh (before `window_started_at` is written:
 * assignments run left to right).
 */
function assignments(changes: UsageChange[], floors = false): { columns: string[]; valuesOf: (c: UsageChange) => SQL[] } {
  const counters = COUNTERS.filter(([, field]) => changes.some((c) => (c[field] ?? 0) !== 0));
  const window = changes.some((c) => c.window !== undefined);
  const windowColumns = window ? [...(floors ? ['window_reserved_starts'] : []), 'window_started_at', 'window_starts'] : [];
  const windowValues = (w: WindowState): SQL[] => [
    ...(floors ? [sql`IF(window_started_at <=> ${windowStart(w)}, window_reserved_starts, 0)`] : []),
    sql`${windowStart(w)}`,
    sql`${w.starts}`,
  ];
  return {
    columns: [...counters.map(([column]) => column), ...windowColumns],
    valuesOf: (c) => [
      ...counters.map(([column, field]) => sql`${sql.raw(column)} + ${c[field] ?? 0}`),
      ...(window ? (c.window === undefined ? windowColumns.map((column) => sql.raw(column)) : windowValues(c.window)) : []),
    ],
  };
}

/**
 * Exact form: the application row's change, the namespace level (namespaceLevel), then every
 * queue row's own in ONE statement (ascending queue id, the lock order), whatever the number of
 * queues. Nothing for rows that change nothing. Send them with the caller's other statements
 * (`tx.batch`, `tx.finish`).
 */
export function usageStatements(applicationId: IdBytes, application: UsageChange, queues: QueueUsageChange[]): SQL[] {
  const statements: SQL[] = [];
  const app = assignments([application], true);
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
  statements.push(...namespaceLevel(applicationId, namespaceChanges(queues.map((q) => ({ ...q, delta: q.change }))), { exact: application.window }));
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

/** Exact form of counter deltas per queue: the application row gets their sum, each namespace its queues'. */
export function usageDeltaStatements(applicationId: IdBytes, queues: Array<QueueOwner & { delta: UsageDelta }>): SQL[] {
  const total = { unfinished: 0, active: 0, pending: 0 };
  for (const { delta } of queues) {
    total.unfinished += delta.unfinished ?? 0;
    total.active += delta.active ?? 0;
    total.pending += delta.pending ?? 0;
  }
  return usageStatements(
    applicationId,
    total,
    queues.map((q) => ({ queueId: q.queueId, namespaceId: q.namespaceId, change: q.delta })),
  );
}

/** One task's change of counters, for a single-row operation (cancel, resolve, retry). */
export async function usageAdjust(tx: Queryable, applicationId: IdBytes, queue: QueueOwner, delta: UsageDelta): Promise<void> {
  const statements = usageDeltaStatements(applicationId, [{ ...queue, delta }]);
  if (statements.length > 0) await tx.batch(statements);
}

// ---------------------------------------------------------------------------------------------
// Guarded forms.

/**
 * Admission's rule (domain/admission.ts) as a guard: `total` more unfinished tasks on the
 * application row and each queue's own number on its row, each only while it stays within
 * `max_unfinished_tasks` - else NULL, and the transaction stops. On the application row the
 * idle part of every floor counts as used (domain/floors.ts `fitsBesideAllFloors`): enough for
 * any namespace, whoever's floors those are; a namespace that needs its own floor to fit goes to
 * the careful path, which reads its row.
 */
export function unfinishedGuardedStatements(applicationId: IdBytes, total: number, perQueue: Array<QueueOwner & { count: number }>): SQL[] {
  const guarded = (n: number) => sql`IF(unfinished_tasks + ${n} <= max_unfinished_tasks, unfinished_tasks + ${n}, NULL)`;
  return [
    sql`UPDATE orbit_application_resources
           SET unfinished_tasks = IF(unfinished_tasks + ${total} + idle_reserved_unfinished_tasks <= max_unfinished_tasks, unfinished_tasks + ${total}, NULL)
         WHERE application_id = ${applicationId}`,
    ...namespaceLevel(applicationId, namespaceChanges(perQueue.map((q) => ({ ...q, delta: { unfinished: q.count } })))),
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
export function windowAdvanceGuarded(n: number, now: SQL, idleReserved: SQL = sql`0`): SQL[] {
  const ended = sql`window_started_at IS NULL OR window_started_at + INTERVAL 1 SECOND <= ${now}`;
  return [
    sql`IF(${ended}, IF(${n} + ${idleReserved} <= rate_per_second, ${n}, NULL), IF(window_starts + ${n} + ${idleReserved} <= rate_per_second, window_starts + ${n}, NULL))`,
    // A new window opens at the millisecond, as the exact form writes it (millisToSql): the
    // namespaces' windows are compared with the application's by equality.
    sql`IF(${ended}, CAST(${now} AS DATETIME(3)), window_started_at)`,
    sql`pending_starts - ${n}`,
  ];
}

/**
 * The application row's window advanced by `n` starts, guarded, with the idle part of the rate
 * floors counted as used (as admission's guard does): the used part starts afresh in a new
 * window (first, while `window_started_at` still names the old one), then the window's rule
 * with what is idle of the floors in the window that will be current.
 */
export const APPLICATION_WINDOW_GUARDED_COLUMNS = ['window_reserved_starts', ...WINDOW_GUARDED_COLUMNS] as const;
export function applicationWindowAdvanceGuarded(n: number, now: SQL): SQL[] {
  const ended = sql`window_started_at IS NULL OR window_started_at + INTERVAL 1 SECOND <= ${now}`;
  return [
    sql`IF(${ended}, 0, window_reserved_starts)`,
    ...windowAdvanceGuarded(n, now, sql`(${signed('reserved_rate_per_second')} - ${signed('window_reserved_starts')})`),
  ];
}

/** Both levels' windows advanced by their starts, guarded: the application row, the namespace level, then the queue rows. */
export function startWindowsGuardedStatements(applicationId: IdBytes, perQueue: Array<QueueOwner & { count: number }>, now: SQL): SQL[] {
  const total = perQueue.reduce((n, q) => n + q.count, 0);
  return [
    updateEachRow({
      table: 'orbit_application_resources',
      key: ['application_id'],
      columns: APPLICATION_WINDOW_GUARDED_COLUMNS,
      rows: [{ key: [applicationId], values: applicationWindowAdvanceGuarded(total, now) }],
    }),
    ...namespaceLevel(applicationId, namespaceChanges(perQueue.map((q) => ({ ...q, delta: { pending: -q.count }, starts: q.count }))), 'written'),
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

// ---------------------------------------------------------------------------------------------
// Floors: a namespace's reservations changed by configure.

/** One namespace's three reservations. */
export interface Reservations {
  reserved_unfinished_tasks: number;
  reserved_concurrency: number;
  reserved_rate_per_second: number;
}

/**
 * The writes of a namespace's new reservations, under the application row's and that namespace
 * row's locks (read by the caller, `before`): the namespace row's reservations and revision, and
 * on the application row the sums of the reservations and their idle part (domain/floors.ts
 * `idleChange`): what the namespace's own usage leaves idle of the old reservation and of the new.
 * For the rate, the used part in the application's window changes with the reservation when
 * the namespace's starts are in that window.
 */
export function reservationStatements(
  applicationId: IdBytes,
  namespaceId: IdBytes,
  before: Reservations & { unfinished_tasks: string | number; active_attempts: string | number; window_started_at: string | null; window_starts: number },
  after: Reservations,
  applicationWindowStartedAt: string | null,
): SQL[] {
  const min = (a: bigint, b: bigint) => (a < b ? a : b);
  const b = (n: string | number) => BigInt(n);
  const idle = (reserved: number, usage: string | number) => idleOf({ reserved: b(reserved), usage: b(usage) });
  const idleUnfinished = idle(after.reserved_unfinished_tasks, before.unfinished_tasks) - idle(before.reserved_unfinished_tasks, before.unfinished_tasks);
  const idleConcurrency = idle(after.reserved_concurrency, before.active_attempts) - idle(before.reserved_concurrency, before.active_attempts);
  const starts = b(namespaceStartsInWindow(before, applicationWindowStartedAt));
  const usedRate = min(starts, b(after.reserved_rate_per_second)) - min(starts, b(before.reserved_rate_per_second));
  const delta = (column: string, n: bigint | number) => sql`${sql.raw(column)} = ${sql.raw(column)} + ${Number(n)}`;
  return [
    sql`UPDATE orbit_application_resources SET ${sql.join(
      [
        delta('reserved_unfinished_tasks', after.reserved_unfinished_tasks - before.reserved_unfinished_tasks),
        delta('reserved_concurrency', after.reserved_concurrency - before.reserved_concurrency),
        delta('reserved_rate_per_second', after.reserved_rate_per_second - before.reserved_rate_per_second),
        delta('idle_reserved_unfinished_tasks', idleUnfinished),
        delta('idle_reserved_concurrency', idleConcurrency),
        delta('window_reserved_starts', usedRate),
      ],
      sql`, `,
    )}, updated_at = NOW(6) WHERE application_id = ${applicationId}`,
    sql`UPDATE orbit_namespace_resources
           SET reserved_unfinished_tasks = ${after.reserved_unfinished_tasks}, reserved_concurrency = ${after.reserved_concurrency},
               reserved_rate_per_second = ${after.reserved_rate_per_second}, revision = revision + 1, updated_at = NOW(6)
         WHERE namespace_id = ${namespaceId}`,
  ];
}
