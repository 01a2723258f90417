/**
 * The connection pool and the transaction helper: the only way the store talks to MySQL.
 *
 * Every connection runs in UTC and at READ COMMITTED. READ COMMITTED matters for the claim and
 * recovery paths: `FOR UPDATE SKIP LOCKED` and locking reads take no gap locks, so concurrent
 * inserts of new tasks never wait on a claim scanning the same index range.
 *
 * A transaction runs on one dedicated connection (`START TRANSACTION` … `COMMIT`). Deadlocks and
 * lock-wait timeouts roll back and run the whole function again: it must not have effects
 * outside the database before it returns.
 */
import { LockOrderCheck, LockOrderViolation, isLockingRead, splitStatements } from './lock-order.ts';
import { assertRoutable, ShardRoutingViolation } from './shard-routing.ts';
import mysql, { type Pool, type PoolConnection, type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';
import { sql, type SQL } from 'drizzle-orm';
import { MySqlDialect } from 'drizzle-orm/mysql-core';

export type Row = RowDataPacket & Record<string, unknown>;

/**
 * A statement: drizzle's `sql` template, where each value is bound exactly where it appears
 * (``sql`… WHERE task_id = ${taskId}` ``, `sql.join` for lists and multi-statement batches) -
 * or, in code not yet moved to it, text plus a parameter array that must stay in step.
 */
export type Statement = string | SQL;

const dialect = new MySqlDialect();

/** The text and parameters mysql2 is sent. An `sql` template carries its own parameters. */
export function statementText(statement: Statement, params: unknown[] = []): [string, unknown[]] {
  if (typeof statement === 'string') return [statement, params];
  if (params.length > 0) throw new Error('an sql`` statement carries its own parameters; pass none beside it');
  const query = dialect.sqlToQuery(statement);
  return [query.sql, query.params];
}

export interface Queryable {
  /** Rows of a SELECT. */
  rows<T = Row>(sql: Statement, params?: unknown[]): Promise<T[]>;
  /** Result of an INSERT/UPDATE/DELETE. */
  exec(sql: Statement, params?: unknown[]): Promise<ResultSetHeader>;
  /**
   * Two or more statements in one round trip (`multipleStatements`): one result per statement,
   * rows for SELECTs and a header for writes. Use it to hold hot-row locks for fewer round trips.
   */
  batch(sql: Statement, params?: unknown[]): Promise<Array<Row[] | ResultSetHeader>>;
}

/** A transaction in progress. */
export interface Transaction extends Queryable {
  /**
   * The transaction's last statements and its COMMIT in one round trip, so the locks it holds
   * are not kept across another round trip to this process. Results of `sql`'s statements.
   */
  finish(sql: Statement, params?: unknown[]): Promise<Array<Row[] | ResultSetHeader>>;
}

export interface Database extends Queryable {
  readonly pool: Pool;
  /**
   * A whole transaction in ONE round trip: `START TRANSACTION; <statements>; COMMIT`. A
   * statement that fails stops the server from running the rest (COMMIT included); the
   * transaction is then rolled back and the error thrown. Returns the statements' results.
   * Deadlocks are retried like `transaction`.
   */
  oneShot(sql: Statement, params?: unknown[], options?: { retries?: number }): Promise<Array<Row[] | ResultSetHeader>>;
  /** Runs `fn` in one transaction on a dedicated connection; retries deadlocks. */
  transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: { retries?: number }): Promise<T>;
  close(): Promise<void>;
}

/** The SQL mode every Orbit connection runs in (strict: writes that do not fit fail). */
export const SQL_MODE = 'STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

const DEADLOCK = 1213;
const LOCK_WAIT_TIMEOUT = 1205;

export function isRetryableTransactionError(error: unknown): boolean {
  const errno = (error as { errno?: number } | null)?.errno;
  return errno === DEADLOCK || errno === LOCK_WAIT_TIMEOUT;
}

/**
 * The inside of an `IN (…)` list, each value bound in its place (`?, ?, ?`). The list must not
 * be empty: `IN ()` is not SQL, so callers answer an empty list without asking the database.
 */
export function valueList(values: readonly unknown[]): SQL {
  if (values.length === 0) throw new Error('valueList: an IN list needs at least one value');
  return sql.join(
    values.map((value) => sql`${value}`),
    sql`, `,
  );
}

export function isDuplicateKeyError(error: unknown): boolean {
  return (error as { errno?: number } | null)?.errno === 1062;
}

/** ER_BAD_NULL_ERROR: what a guarded UPDATE (`SET x = IF(room, …, NULL)`) raises when there is no room. */
export function isGuardError(error: unknown): boolean {
  return (error as { errno?: number } | null)?.errno === 1048;
}

/**
 * Errors after which a connection must not be used again: mysql2 marks network and protocol
 * errors `fatal`, and a statement that ran into the query timeout leaves its connection in
 * the middle of a command (the server may still answer it later).
 */
function connectionIsBroken(error: unknown): boolean {
  const e = error as { fatal?: boolean; code?: string } | null;
  return e?.fatal === true || e?.code === 'PROTOCOL_SEQUENCE_TIMEOUT';
}

/** Errors that mean "the database did not answer" - the outcome of a write is unknown. */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'POOL_CLOSED',
  'ER_CON_COUNT_ERROR',
  'ORBIT_POOL_TIMEOUT',
]);
/** Server errors of a server that is going away or refusing work: shutdown in progress, connection killed, too many connections, read-only. */
const UNREACHABLE_ERRNOS = new Set([1040, 1053, 1290, 1927, 4031]);

export function isDatabaseUnreachable(error: unknown): boolean {
  const e = error as { code?: string; errno?: number } | null;
  if (e === null || typeof e !== 'object') return false;
  return connectionIsBroken(e) || (e.code !== undefined && UNREACHABLE_CODES.has(e.code)) || (e.errno !== undefined && UNREACHABLE_ERRNOS.has(e.errno));
}

/** One round trip on `conn`, cut off after `timeoutMs` (0: never). */
function sender(conn: PoolConnection, timeoutMs: number) {
  return async (sql: string, params: unknown[]) => (await conn.query(timeoutMs > 0 ? { sql, timeout: timeoutMs } : { sql }, params))[0];
}

function queryable(conn: PoolConnection, timeoutMs: number): Queryable {
  const send = sender(conn, timeoutMs);
  const query = (sql: Statement, params: unknown[]) => send(...statementText(sql, params));
  return {
    async rows<T>(sql: Statement, params: unknown[] = []) {
      return (await query(sql, params)) as T[];
    },
    async exec(sql: Statement, params: unknown[] = []) {
      return (await query(sql, params)) as ResultSetHeader;
    },
    async batch(sql: Statement, params: unknown[] = []) {
      return (await query(sql, params)) as unknown as Array<Row[] | ResultSetHeader>;
    },
  };
}

/**
 * A transaction's queryable. `START TRANSACTION` is not sent on its own: it rides in front of
 * the transaction's first statement, which saves one round trip per transaction.
 */
function transactionQueryable(
  conn: PoolConnection,
  timeoutMs: number,
  lockOrder: LockOrderCheck | null,
  shardRouting: boolean,
): Transaction & { readonly finished: boolean } {
  let begun = false;
  let finished = false;
  const query = sender(conn, timeoutMs);
  /** The user's statements' results: one result for one statement, an array for several. */
  async function send(sql: string, params: unknown[], statements: 'one' | 'several'): Promise<unknown> {
    if (finished) throw new Error('the transaction has already committed');
    if (shardRouting) {
      try {
        assertRoutable(sql);
      } catch (error) {
        throw reported(error);
      }
    }
    lockOrder?.observe(sql, params);
    let out: unknown;
    if (begun) out = await query(sql, params);
    else {
      begun = true;
      const results = (await query(`START TRANSACTION;\n${sql}`, params)) as unknown as unknown[];
      out = statements === 'one' ? results[1] : results.slice(1);
    }
    // The rows locking reads returned are the rows this transaction now holds.
    lockOrder?.locked(statements === 'one' ? [out] : (out as unknown[]));
    return out;
  }
  return {
    get finished() {
      return finished;
    },
    async rows<T>(sql: Statement, params: unknown[] = []) {
      return (await send(...statementText(sql, params), 'one')) as T[];
    },
    async exec(sql: Statement, params: unknown[] = []) {
      return (await send(...statementText(sql, params), 'one')) as ResultSetHeader;
    },
    async batch(sql: Statement, params: unknown[] = []) {
      return (await send(...statementText(sql, params), 'several')) as Array<Row[] | ResultSetHeader>;
    },
    async finish(sql: Statement, params: unknown[] = []) {
      const [text, values] = statementText(sql, params);
      const results = (await send(`${text};\nCOMMIT`, values, 'several')) as Array<Row[] | ResultSetHeader>;
      finished = true;
      return results.slice(0, -1);
    },
  };
}

/** A shard-routing violation is also written to stderr: callers that log and carry on (the recovery loop) must not hide it. */
function reported(error: unknown): unknown {
  if (error instanceof ShardRoutingViolation) process.stderr.write(`orbit: ${error.message}\n`);
  return error;
}

/**
 * A lock-order violation is a bug that can deadlock production; in check mode it must not be
 * swallowed by a caller that logs and carries on (the recovery loop does): stop the process.
 */
function failLoudly(error: LockOrderViolation): never {
  process.stderr.write(`orbit: ${error.message}\n`);
  process.exit(70);
}

export interface DatabaseOptions {
  url: string;
  connectionLimit?: number;
  /**
   * How long one statement (or one multi-statement round trip), opening a connection, or
   * waiting for a free one in the pool may take before it fails as "unreachable". This is
   * what turns a database that stops answering (paused, network gone) into a prompt 503
   * instead of a request that hangs. 0: statements and pool waits may take as long as they
   * take (orbit-admin: a migration or a verify of a large table), connects 10 s.
   */
  timeoutMs?: number;
  /**
   * Check every transaction against the lock order (lock-order.ts); a violation stops the
   * process. Tests and the servers they start run with it (ORBIT_CHECK_LOCK_ORDER=1).
   */
  checkLockOrder?: boolean;
  /**
   * Check every statement sent (transactions and plain rows/exec/batch) routes to one shard when
   * sharded by application_id (shard-routing.ts, docs/scale-out.md); a violation throws.
   * Tests and the servers they start run with it (ORBIT_CHECK_SHARD_ROUTING=1).
   */
  checkShardRouting?: boolean;
}

export const DEFAULT_DATABASE_TIMEOUT_MS = 5000;

export function createDatabase(options: DatabaseOptions): Database {
  const timeoutMs = options.timeoutMs ?? DEFAULT_DATABASE_TIMEOUT_MS;
  const pool = mysql.createPool({
    uri: options.url,
    connectTimeout: timeoutMs || 10_000,
    connectionLimit: options.connectionLimit ?? 20,
    maxIdle: options.connectionLimit ?? 20,
    waitForConnections: true,
    multipleStatements: true,
    supportBigNumbers: true,
    // uint64 counters and revisions stay exact as decimal strings.
    bigNumberStrings: true,
    // DATETIME(6) comes back as text in UTC; the API formats it, nothing converts time zones.
    dateStrings: true,
    timezone: 'Z',
    charset: 'utf8mb4_bin',
    enableKeepAlive: true,
  });
  // Runs before any other statement on each new connection. Strict mode is not a preference:
  // the guarded statements (`IF(room, …, NULL)` on NOT NULL columns) must FAIL, not store a 0
  // with a warning, whatever the server's own default is.
  // A lock wait must end (as a retryable ER_LOCK_WAIT_TIMEOUT, on a connection that stays
  // usable) before the statement timeout cuts the connection off: InnoDB's own default is 50 s.
  // (Without a statement timeout, the server's own setting stays.)
  const lockWait = timeoutMs > 0 ? `; SET SESSION innodb_lock_wait_timeout = ${Math.max(1, Math.floor(timeoutMs / 1000) - 1)}` : '';
  pool.pool.on('connection', (conn) => {
    const setup = `SET SESSION time_zone = '+00:00'; SET SESSION sql_mode = '${SQL_MODE}'; SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED${lockWait}`;
    // With a callback, a failure here (the database going away right after the handshake) is
    // this connection's problem, not an unhandled 'error' event; the connection is dropped.
    conn.query(timeoutMs > 0 ? { sql: setup, timeout: timeoutMs } : { sql: setup }, (error: unknown) => {
      if (error) conn.destroy();
    });
  });
  /** A connection from the pool, or ORBIT_POOL_TIMEOUT when none frees up (or opens) in time. */
  async function acquire(): Promise<PoolConnection> {
    if (timeoutMs === 0) return pool.getConnection();
    const pending = pool.getConnection();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error(`no database connection within ${timeoutMs} ms`), { code: 'ORBIT_POOL_TIMEOUT' })), timeoutMs);
    });
    try {
      return await Promise.race([pending, timeout]);
    } catch (error) {
      // A connection that arrives after the deadline goes straight back.
      pending.then(
        (conn) => conn.release(),
        () => {},
      );
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }
  /** Gives a connection back, or destroys it when it cannot be trusted any more. */
  function giveBack(conn: PoolConnection, error?: unknown): void {
    if (error !== undefined && connectionIsBroken(error)) conn.destroy();
    else conn.release();
  }
  async function withConnection<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    const conn = await acquire();
    try {
      const result = await fn(queryable(conn, timeoutMs));
      giveBack(conn);
      return result;
    } catch (error) {
      giveBack(conn, error);
      throw error;
    }
  }
  /**
   * With checkShardRouting, a statement that would not route to one shard is rejected before it
   * is sent. With checkLockOrder, so is a locking read outside a transaction: its locks would end
   * with the statement, so whatever it meant to protect is not protected (lock-order.ts).
   */
  function routed<T>(sql: string, send: () => Promise<T>): Promise<T> {
    if (options.checkLockOrder && splitStatements(sql).some(isLockingRead)) {
      failLoudly(new LockOrderViolation(`lock order: a locking read outside a transaction\n  statement: ${sql.replace(/\s+/g, ' ').slice(0, 200)}`));
    }
    if (options.checkShardRouting) {
      try {
        assertRoutable(sql);
      } catch (error) {
        return Promise.reject(reported(error));
      }
    }
    return send();
  }
  return {
    pool,
    rows: (sql, params) => {
      const [text, values] = statementText(sql, params);
      return routed(text, () => withConnection((q) => q.rows(text, values)));
    },
    exec: (sql, params) => {
      const [text, values] = statementText(sql, params);
      return routed(text, () => withConnection((q) => q.exec(text, values)));
    },
    batch: (sql, params) => {
      const [text, values] = statementText(sql, params);
      return routed(text, () => withConnection((q) => q.batch(text, values)));
    },
    async transaction<T>(fn: (tx: Transaction) => Promise<T>, { retries = 5 } = {}) {
      for (let attempt = 0; ; attempt++) {
        const conn = await acquire();
        let result: T;
        try {
          const tx = transactionQueryable(conn, timeoutMs, options.checkLockOrder ? new LockOrderCheck() : null, options.checkShardRouting === true);
          result = await fn(tx);
          if (!tx.finished) await sender(conn, timeoutMs)('COMMIT', []);
        } catch (error) {
          if (connectionIsBroken(error)) {
            // Nothing more can be sent on it; the server rolls back what it has when the
            // connection goes away (or commits, if the COMMIT had already reached it: the
            // caller reports the outcome as unknown).
            conn.destroy();
          } else {
            try {
              await sender(conn, timeoutMs)('ROLLBACK', []);
              conn.release();
            } catch {
              // The connection is broken; it must not go back to the pool.
              conn.destroy();
            }
          }
          if (error instanceof LockOrderViolation) failLoudly(error);
          if (attempt < retries && isRetryableTransactionError(error)) {
            await new Promise((r) => setTimeout(r, 2 + Math.random() * 8 * (attempt + 1)));
            continue;
          }
          throw error;
        }
        conn.release();
        return result;
      }
    },
    oneShot(sql: Statement, params: unknown[] = [], options = {}) {
      // With nothing sent before it, `finish` carries START TRANSACTION, the statements and
      // COMMIT in one round trip.
      return this.transaction((tx) => tx.finish(sql, params), options);
    },
    async close() {
      await pool.end();
    },
  };
}
