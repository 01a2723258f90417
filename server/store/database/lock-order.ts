/**
 * THE lock order (docs/quotas-and-locking.md#the-lock-order), as code. Every transaction takes
 * row locks level by level, never going back to a lower level it has not taken yet, so two
 * transactions never wait on each other in a cycle:
 *
 *   identity     credential / namespace / application rows - shared (`LOCK IN SHARE MODE`), or
 *                not at all on the HTTP hot paths (authentication is a plain read before the
 *                transaction; writes re-check inside their statements)
 *   session      the worker session row                  (orbit_worker_sessions)
 *   schedule     schedule rows                            (orbit_schedules): the schedule loop takes
 *                due ones with SKIP LOCKED, pause and resume one by id, both before the
 *                application row they then lock; subscription rows (orbit_subscriptions) are at
 *                the same level (DESIGN: "schedule or subscription row"), one at a time by id
 *   application  the application resources row           (orbit_application_resources)
 *   namespace    namespace resources rows, ascending id   (orbit_namespace_resources): the floors
 *                and the namespace's usage, written with the application's and the queues' usage
 *   retention    the application's retention policy row   (orbit_retention_policies): configure
 *                takes it after the application row (its event orders the feed); the pruning
 *                loop takes policy rows alone (SKIP LOCKED) to choose whose history to prune
 *   queue        queue rows, in ascending queue_id        (orbit_queues)
 *   task         task rows                                (orbit_tasks)
 *   attempt      their attempt rows                       (orbit_attempts)
 *   permit       keyed permits, ascending (queue_id, key) (orbit_key_permits)
 *   records      receipts, audit records, events - rows written once and never locked for
 *                update afterwards; written last, under the locks they describe
 *
 * `LOCK_LEVEL_OF_TABLE` says which level a table's rows are. `LockOrderCheck` is the proof:
 * with `checkLockOrder` (ORBIT_CHECK_LOCK_ORDER=1, which `npm test` sets for every test and
 * every server process it starts), each transaction records the levels its statements lock -
 * a locking read (`FOR UPDATE`, `LOCK IN SHARE MODE`), an UPDATE, INSERT or DELETE - and a
 * statement that locks a level below the highest one taken, and not taken before in the same
 * transaction, stops the process: it is a bug that could deadlock in production. Going back to
 * a lower level is fine only for rows the transaction locked before, named by primary key
 * (updating the application or queue row it locked at its start: the lock is already held);
 * other rows of a lower level are a violation - unless the statement never waits for a lock
 * (`SKIP LOCKED`, `NOWAIT`: a claim that picks more task rows after locking its permits), since
 * a transaction that does not wait cannot close a cycle. Identity rows are shared locks only.
 * Inserting rows with fresh ids locks nothing (`NEW_ROWS_ONLY_ON_INSERT`).
 *
 * How late a lock is taken is a speed decision, not a change of order: the admission fast path
 * sends its guarded UPDATEs of the application and queue rows, then inserts the new task and
 * receipt rows and commits, all in one round trip. Rows looked up without a lock (to find which
 * queue a task is in, say) are locked afterwards in this order and re-checked.
 *
 * Quota rows (application, queue) are separate from identity rows, so authentication never
 * needs more than a shared lock. Recovery takes a busy application row with SKIP LOCKED - alone,
 * before anything else - and tries again later.
 *
 * Every writer of task, attempt and permit rows of an application holds its application row
 * first (admission writes only new rows), so those rows are in effect serialised per
 * application. Single statements outside a transaction that write a row of one level and
 * hold no other lock cannot take part in a cycle, and are the named exceptions to "application
 * row first": a lease renewal (one UPDATE of one attempt row), marking attempts as told of a
 * cancel (one UPDATE of attempt rows), and the session heartbeat (one UPDATE of session rows).
 */

import { sql, type SQL } from './sql.ts';

/** Sorts ids the way rows of one table are locked: ascending bytes. */
export function byIdAscending(a: Buffer, b: Buffer): number {
  return Buffer.compare(a, b);
}

/** Distinct ids in ascending order (the order their rows are locked in). */
export function distinctIdsAscending(ids: readonly Buffer[]): Buffer[] {
  return [...new Map(ids.map((id) => [id.toString('hex'), id])).values()].sort(byIdAscending);
}

export const LOCK_LEVELS = [
  'identity',
  'session',
  'schedule',
  'application',
  'namespace',
  'retention',
  'queue',
  'task',
  'attempt',
  'permit',
  'records',
] as const;
export type LockLevel = (typeof LOCK_LEVELS)[number];

export const LOCK_LEVEL_OF_TABLE: Readonly<Record<string, LockLevel>> = {
  orbit_credentials: 'identity',
  orbit_namespaces: 'identity',
  orbit_applications: 'identity',
  orbit_worker_sessions: 'session',
  orbit_schedules: 'schedule',
  orbit_subscriptions: 'schedule',
  orbit_application_resources: 'application',
  orbit_namespace_resources: 'namespace',
  orbit_retention_policies: 'retention',
  orbit_queues: 'queue',
  orbit_tasks: 'task',
  orbit_attempts: 'attempt',
  orbit_key_permits: 'permit',
  orbit_idempotency_receipts: 'records',
  orbit_audit_events: 'records',
  orbit_events: 'records',
};

/**
 * How a locking read locks: `update` waits for and takes exclusive row locks (`FOR UPDATE`),
 * `share` shared ones (`LOCK IN SHARE MODE`, identity rows only), `skip-locked` takes exclusive
 * locks on the rows no one else holds and passes over the others without waiting.
 */
export type LockMode = 'update' | 'share' | 'skip-locked';

const LOCK_CLAUSE: Readonly<Record<LockMode, string>> = {
  update: 'FOR UPDATE',
  share: 'LOCK IN SHARE MODE',
  'skip-locked': 'FOR UPDATE SKIP LOCKED',
};

/**
 * THE way to end a locking read: ``sql`SELECT … FROM orbit_queues WHERE … ${lockRows('queue')}` ``.
 * The clause carries the level it takes (`FOR UPDATE /* lock: queue *\/`), and under the check
 * (`LockOrderCheck`) a locking read without it, or naming another level than its table's, is a
 * violation, as is a locking read sent outside a transaction (it would lock nothing beyond its
 * own statement). Store functions that lock take a `Transaction`, never a plain `Queryable`, so
 * the type checker refuses to hand them a pooled connection.
 */
export function lockRows(level: LockLevel, mode: LockMode = 'update'): SQL {
  if (mode === 'share' && level !== 'identity') throw new Error(`shared locks are for identity rows, not ${level} rows`);
  return sql.raw(`${LOCK_CLAUSE[mode]} /* lock: ${level} */`);
}

const LOCKING_CLAUSE = /\bFOR UPDATE\b|\bLOCK IN SHARE MODE\b|\bFOR SHARE\b/i;

/** Whether a statement is a SELECT, or a UNION of parenthesised SELECTs (`(SELECT …) UNION ALL (SELECT …)`). */
function isSelect(statement: string): boolean {
  return /^\s*\(?\s*SELECT\b/i.test(statement);
}

/** Whether a statement is a locking read (`SELECT … FOR UPDATE` or in share mode). */
export function isLockingRead(statement: string): boolean {
  return isSelect(statement) && LOCKING_CLAUSE.test(statement);
}

/** The level a locking read says it takes (`/* lock: queue *\/`, written by `lockRows`), or null. */
function declaredLevel(statement: string): string | null {
  return /\/\* lock: ([a-z]+) \*\//.exec(statement)?.[1] ?? null;
}

/**
 * The positions of `char` in `text` outside quoted strings and identifiers (a backslash escapes
 * inside quotes) and outside comments (`/* … *\/`, `-- ` and `#` to the end of the line), as the
 * server and mysql2's placeholders see the text.
 */
export function unquotedPositions(text: string, char: string): number[] {
  const out: number[] = [];
  let quote: string | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote !== null) {
      if (c === '\\') i++;
      else if (c === quote) quote = null;
    } else if (c === "'" || c === '"' || c === '`') quote = c;
    else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      i = end < 0 ? text.length : end + 1;
    } else if (c === '#' || (c === '-' && text[i + 1] === '-' && /[ \t\r\n]/.test(text[i + 2] ?? '\n'))) {
      const end = text.indexOf('\n', i);
      i = end < 0 ? text.length : end;
    } else if (c === char) out.push(i);
  }
  return out;
}

/**
 * `compute`, remembering its answer per text: under the checks the same few hundred statement
 * texts (placeholders, not values) are analysed again and again. Bounded: emptied when full.
 */
export function rememberedByText<T>(compute: (text: string) => T): (text: string) => T {
  const seen = new Map<string, T>();
  return (text) => {
    let value = seen.get(text);
    if (value === undefined) {
      if (seen.size >= 10_000) seen.clear();
      value = compute(text);
      seen.set(text, value);
    }
    return value;
  };
}

/** The statements of a multi-statement text, split at semicolons outside quotes. */
export const splitStatements: (sql: string) => readonly string[] = rememberedByText((sql) => {
  const cuts = [-1, ...unquotedPositions(sql, ';'), sql.length];
  return cuts
    .slice(1)
    .map((end, k) => sql.slice((cuts[k] as number) + 1, end).trim())
    .filter((s) => s !== '');
});

const TABLE = /\borbit_[a-z_]+\b/g;

/** The tables whose rows one statement locks (only Orbit's tables, only the locking kinds of statement). */
export const lockedTables: (statement: string) => readonly string[] = rememberedByText(lockedTablesOf);
function lockedTablesOf(statement: string): string[] {
  const text = statement.replace(/\s+/g, ' ').trim();
  const verb = isSelect(text) ? 'SELECT' : /^(\w+)/.exec(text)?.[1]?.toUpperCase();
  let tables: string[] = [];
  if (verb === 'SELECT') {
    if (!LOCKING_CLAUSE.test(text)) return [];
    tables = [...text.matchAll(/\b(?:FROM|JOIN) (orbit_[a-z_]+)/gi)].map((m) => m[1] as string);
  } else if (verb === 'UPDATE') {
    tables = (/^UPDATE (.*?) SET /i.exec(text)?.[1] ?? '').match(TABLE) ?? [];
  } else if (verb === 'INSERT' || verb === 'REPLACE') {
    const table = /^(?:INSERT|REPLACE)(?: IGNORE)? INTO (orbit_[a-z_]+)/i.exec(text)?.[1];
    const updatesOnDuplicate = /\bON DUPLICATE KEY UPDATE\b/i.test(text);
    tables = table === undefined || (NEW_ROWS_ONLY_ON_INSERT.has(table) && !updatesOnDuplicate && verb === 'INSERT') ? [] : [table];
  } else if (verb === 'DELETE') {
    // `DELETE FROM orbit_x …`, or the join form `DELETE x FROM orbit_x x JOIN (…) …`.
    tables = [/^DELETE (?:\w+(?:, ?\w+)* )?FROM (orbit_[a-z_]+)/i.exec(text)?.[1] ?? ''].filter(Boolean);
  }
  return [...new Set(tables.filter((t) => t in LOCK_LEVEL_OF_TABLE))];
}

/**
 * Tables whose INSERTs lock nothing another transaction can hold: the primary key is a fresh
 * id made by this process (or, for events and audit records, a position decided under the
 * application row), and there is no other unique key. Inserting such a row is not "taking" its
 * level; updating or locking existing rows of the table is. Receipts and permits are not here:
 * their unique keys are the caller's (namespace + Idempotency-Key, queue + resource key), so an
 * INSERT can wait for another transaction's row. Tasks do have one more unique key, the trigger
 * point of a schedule (schedule_id, scheduled_for), but only the schedule loop writes non-NULL
 * values there, and only while it holds that schedule's row: two transactions never insert the
 * same trigger point at once, so a task INSERT still never waits for another transaction.
 */
export const NEW_ROWS_ONLY_ON_INSERT: ReadonlySet<string> = new Set([
  // Made with its namespace, keyed by that namespace's fresh id alone.
  'orbit_namespace_resources',
  'orbit_tasks',
  'orbit_attempts',
  'orbit_worker_sessions',
  'orbit_audit_events',
  'orbit_events',
]);

/** The single-column primary keys of the tables whose rows are locked by key (permits: queue_id + resource_key). */
const PRIMARY_KEY: Readonly<Record<string, readonly string[]>> = {
  orbit_worker_sessions: ['session_id'],
  orbit_schedules: ['schedule_id'],
  orbit_subscriptions: ['subscription_id'],
  orbit_application_resources: ['application_id'],
  orbit_namespace_resources: ['namespace_id'],
  orbit_retention_policies: ['application_id'],
  orbit_queues: ['queue_id'],
  orbit_tasks: ['task_id'],
  orbit_attempts: ['attempt_id'],
  orbit_key_permits: ['queue_id', 'resource_key'],
};

/** How many `?` placeholders a statement has (outside quotes). */
const placeholderCount = rememberedByText((statement) => unquotedPositions(statement, '?').length);

function keyText(value: unknown): string {
  return Buffer.isBuffer(value) ? value.toString('hex') : String(value);
}

/**
 * The rows of `table` a statement names by primary key (`WHERE pk = ?`, `pk IN (?, …)`,
 * `pk1 = ? AND pk2 = ?`), or null when it cannot tell (a join, a range, a subquery): then the
 * statement is taken to lock rows the transaction did not lock before.
 */
function rowsNamed(statement: string, params: readonly unknown[], table: string): string[] | null {
  const columns = PRIMARY_KEY[table];
  if (!columns) return null;
  const text = statement.replace(/\s+/g, ' ');
  const where = /\bWHERE\b/i.exec(text);
  if (!where || /\bJOIN\b/i.test(text) || /\(\s*SELECT\b/i.test(text.slice(where.index))) return null;
  const before = placeholderCount(text.slice(0, where.index));
  const clause = text.slice(where.index);
  const valuesOf = (column: string): unknown[] | null => {
    const m = new RegExp(`\\b(?:\\w+\\.)?${column} (?:= \\?|IN \\(([?, ]+)\\))`, 'i').exec(clause);
    if (!m) return null;
    const offset = before + placeholderCount(clause.slice(0, m.index));
    const count = m[1] === undefined ? 1 : placeholderCount(m[1]);
    return params.slice(offset, offset + count);
  };
  if (columns.length > 1) {
    // A composite key compared as rows: `(queue_id, resource_key) IN ((?, ?), (?, ?))`.
    const m = new RegExp(`\\(${columns.join(', ')}\\) IN \\(((?:\\(\\?(?:, \\?)*\\)(?:, )?)+)\\)`, 'i').exec(clause);
    if (m) {
      const offset = before + placeholderCount(clause.slice(0, m.index));
      const values = params.slice(offset, offset + placeholderCount(m[1] as string));
      const keys: string[] = [];
      for (let i = 0; i + columns.length <= values.length; i += columns.length)
        keys.push(
          values
            .slice(i, i + columns.length)
            .map(keyText)
            .join('/'),
        );
      return keys;
    }
  }
  const perColumn = columns.map(valuesOf);
  if (perColumn.some((v) => v === null)) return null;
  if (columns.length === 1) return (perColumn[0] as unknown[]).map(keyText);
  const [queues, keys] = perColumn as [unknown[], unknown[]];
  return queues.length === 1 && keys.length === 1 ? [`${keyText(queues[0])}/${keyText(keys[0])}`] : null;
}

export class LockOrderViolation extends Error {}

/** One transaction's record of the levels and rows it has locked; `observe` each text sent, in order, with its parameters. */
export class LockOrderCheck {
  private readonly rows = new Map<LockLevel, Set<string>>();
  private highest = -1;
  private readonly history: string[] = [];

  /** Locking reads of the text last observed, by statement index, whose returned rows carry the primary key. */
  private capture: Array<{ index: number; level: LockLevel; columns: readonly string[] }> = [];
  private insertsEvents = false;
  private writesApplicationRow = false;
  /** Statements of the text last observed that write the application row: by index, UPDATE or INSERT. */
  private applicationWrites: Array<{ index: number; update: boolean }> = [];

  /**
   * The feed's rule, checked once the transaction has committed: a transaction that inserts
   * events changed the application row (not only locked it, nor ran an UPDATE that matched it and
   * changed nothing). On one server the row lock alone orders the application's events; on a
   * Galera cluster locks are local to a node, and only a changed row is in the transaction's
   * certification keys, so two nodes' event inserts for one application are ordered (the second
   * one sees the first, or fails and is retried whole). After the commit, because the one-round-
   * trip transactions send their COMMIT with the writes: only then are their results known.
   */
  afterCommit(): void {
    if (this.insertsEvents && !this.writesApplicationRow) {
      throw new LockOrderViolation(
        `feed order: a transaction inserted events without writing its application row (orbit_application_resources)\n  statements: ${this.history.join(' | ')}`,
      );
    }
  }

  observe(sql: string, params: readonly unknown[] = []): void {
    let offset = 0;
    this.capture = [];
    this.applicationWrites = [];
    for (const [index, statement] of splitStatements(sql).entries()) {
      if (/^\s*INSERT\s+(?:IGNORE\s+)?INTO\s+orbit_events\b/i.test(statement)) this.insertsEvents = true;
      const own = params.slice(offset);
      offset += placeholderCount(statement);
      const tables = [...lockedTables(statement)].sort(
        (a, b) => LOCK_LEVELS.indexOf(LOCK_LEVEL_OF_TABLE[a] as LockLevel) - LOCK_LEVELS.indexOf(LOCK_LEVEL_OF_TABLE[b] as LockLevel),
      );
      // A write of the application row (an UPDATE, or an INSERT of it): whether it changed the row is in its result (`locked`).
      if (!isSelect(statement) && tables.includes('orbit_application_resources')) {
        this.applicationWrites.push({ index, update: /^\s*UPDATE\b/i.test(statement) });
      }
      if (isLockingRead(statement)) {
        // Every locking read goes through lockRows(), naming the one level it takes.
        const declared = declaredLevel(statement);
        const levels = [...new Set(tables.map((t) => LOCK_LEVEL_OF_TABLE[t]))];
        if (declared === null || levels.length !== 1 || levels[0] !== declared) {
          throw new LockOrderViolation(
            `lock order: a locking read must end with lockRows(<its level>) and lock rows of that one level ` +
              `(declared ${declared ?? 'none'}, locks ${levels.join('+') || 'no Orbit table'})\n  statement: ${statement.replace(/\s+/g, ' ').slice(0, 200)}`,
          );
        }
      }
      for (const table of tables) {
        const level = LOCK_LEVEL_OF_TABLE[table] as LockLevel;
        const rank = LOCK_LEVELS.indexOf(level);
        const named = rowsNamed(statement, own, table);
        const held = this.rows.get(level);
        // Below the highest level taken: fine only for rows this transaction locked before.
        const relocking = held !== undefined && named !== null && named.every((r) => held.has(r));
        // A locking read that never waits (SKIP LOCKED, NOWAIT) cannot close a cycle of waits:
        // a claim may lock more task rows after its permits that way.
        const neverWaits = /\b(?:SKIP LOCKED|NOWAIT)\b/i.test(statement);
        if (rank < this.highest && !relocking && !neverWaits && level !== 'identity') {
          throw new LockOrderViolation(
            `lock order: ${level} rows locked after ${LOCK_LEVELS[this.highest]} rows in one transaction\n` +
              `  statement: ${statement.replace(/\s+/g, ' ').slice(0, 200)}\n  before it: ${this.history.join(' | ')}`,
          );
        }
        const set = held ?? new Set<string>();
        for (const r of named ?? []) set.add(r);
        this.rows.set(level, set);
        // A locking read that picks its rows (SKIP LOCKED candidates, say): they are known from what it returns.
        if (named === null && tables.length === 1 && isSelect(statement)) this.capture.push({ index, level, columns: PRIMARY_KEY[table] ?? [] });
        this.highest = Math.max(this.highest, rank);
      }
      if (tables.length > 0) this.history.push(tables.map((t) => LOCK_LEVEL_OF_TABLE[t]).join('+'));
    }
  }

  /** The results of the text last observed, one per statement: records the keys of rows that locking reads returned. */
  locked(results: readonly unknown[]): void {
    for (const { index, update } of this.applicationWrites) {
      const header = results[index] as { affectedRows?: number; changedRows?: number } | undefined;
      if (((update ? header?.changedRows : header?.affectedRows) ?? 0) > 0) this.writesApplicationRow = true;
    }
    this.applicationWrites = [];
    for (const { index, level, columns } of this.capture) {
      const rows = results[index];
      if (!Array.isArray(rows) || columns.length === 0) continue;
      const set = this.rows.get(level) ?? new Set<string>();
      for (const row of rows as Array<Record<string, unknown>>) {
        if (columns.every((c) => row[c] !== undefined)) set.add(columns.map((c) => keyText(row[c])).join('/'));
      }
      this.rows.set(level, set);
    }
    this.capture = [];
  }
}
