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
import mysql, { type Pool, type PoolConnection, type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';

export type Row = RowDataPacket & Record<string, unknown>;

export interface Queryable {
  /** Rows of a SELECT. */
  rows<T = Row>(sql: string, params?: unknown[]): Promise<T[]>;
  /** Result of an INSERT/UPDATE/DELETE. */
  exec(sql: string, params?: unknown[]): Promise<ResultSetHeader>;
  /**
   * Two or more statements in one round trip (`multipleStatements`): one result per statement,
   * rows for SELECTs and a header for writes. Use it to hold hot-row locks for fewer round trips.
   */
  batch(sql: string, params?: unknown[]): Promise<Array<Row[] | ResultSetHeader>>;
}

/** A transaction in progress. */
export interface Transaction extends Queryable {
  /**
   * The transaction's last statements and its COMMIT in one round trip, so the locks it holds
   * are not kept across another round trip to this process. Results of `sql`'s statements.
   */
  finish(sql: string, params?: unknown[]): Promise<Array<Row[] | ResultSetHeader>>;
}

export interface Database extends Queryable {
  readonly pool: Pool;
  /**
   * A whole transaction in ONE round trip: `START TRANSACTION; <statements>; COMMIT`. A
   * statement that fails stops the server from running the rest (COMMIT included); the
   * transaction is then rolled back and the error thrown. Returns the statements' results.
   * Deadlocks are retried like `transaction`.
   */
  oneShot(sql: string, params?: unknown[], options?: { retries?: number }): Promise<Array<Row[] | ResultSetHeader>>;
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

/** `?, ?, ?` for an IN list of `n` values. */
export function placeholders(n: number): string {
  return Array.from({ length: n }, () => '?').join(', ');
}

export function isDuplicateKeyError(error: unknown): boolean {
  return (error as { errno?: number } | null)?.errno === 1062;
}

/** ER_BAD_NULL_ERROR: what a guarded UPDATE (`SET x = IF(room, …, NULL)`) raises when there is no room. */
export function isGuardError(error: unknown): boolean {
  return (error as { errno?: number } | null)?.errno === 1048;
}

function queryable(conn: Pool | PoolConnection): Queryable {
  return {
    async rows<T>(sql: string, params: unknown[] = []) {
      const [rows] = await conn.query(sql, params);
      return rows as T[];
    },
    async exec(sql: string, params: unknown[] = []) {
      const [result] = await conn.query(sql, params);
      return result as ResultSetHeader;
    },
    async batch(sql: string, params: unknown[] = []) {
      const [results] = await conn.query(sql, params);
      return results as unknown as Array<Row[] | ResultSetHeader>;
    },
  };
}

/**
 * A transaction's queryable. `START TRANSACTION` is not sent on its own: it rides in front of
 * the transaction's first statement, which saves one round trip per transaction.
 */
function transactionQueryable(conn: PoolConnection): Transaction & { readonly finished: boolean } {
  let begun = false;
  let finished = false;
  /** The user's statements' results: one result for one statement, an array for several. */
  async function send(sql: string, params: unknown[], statements: 'one' | 'several'): Promise<unknown> {
    if (finished) throw new Error('the transaction has already committed');
    if (begun) return (await conn.query(sql, params))[0];
    begun = true;
    const results = (await conn.query(`START TRANSACTION;\n${sql}`, params))[0] as unknown as unknown[];
    return statements === 'one' ? results[1] : results.slice(1);
  }
  return {
    get finished() {
      return finished;
    },
    async rows<T>(sql: string, params: unknown[] = []) {
      return (await send(sql, params, 'one')) as T[];
    },
    async exec(sql: string, params: unknown[] = []) {
      return (await send(sql, params, 'one')) as ResultSetHeader;
    },
    async batch(sql: string, params: unknown[] = []) {
      return (await send(sql, params, 'several')) as Array<Row[] | ResultSetHeader>;
    },
    async finish(sql: string, params: unknown[] = []) {
      const results = (await send(`${sql};\nCOMMIT`, params, 'several')) as Array<Row[] | ResultSetHeader>;
      finished = true;
      return results.slice(0, -1);
    },
  };
}

export interface DatabaseOptions {
  url: string;
  connectionLimit?: number;
}

export function createDatabase(options: DatabaseOptions): Database {
  const pool = mysql.createPool({
    uri: options.url,
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
  pool.pool.on('connection', (conn) => {
    conn.query(`SET SESSION time_zone = '+00:00'; SET SESSION sql_mode = '${SQL_MODE}'; SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED`);
  });
  const base = queryable(pool);
  return {
    pool,
    ...base,
    async transaction<T>(fn: (tx: Transaction) => Promise<T>, { retries = 5 } = {}) {
      for (let attempt = 0; ; attempt++) {
        const conn = await pool.getConnection();
        let result: T;
        try {
          const tx = transactionQueryable(conn);
          result = await fn(tx);
          if (!tx.finished) await conn.query('COMMIT');
        } catch (error) {
          try {
            await conn.query('ROLLBACK');
            conn.release();
          } catch {
            // The connection is broken; it must not go back to the pool.
            conn.destroy();
          }
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
    oneShot(sql: string, params: unknown[] = [], options = {}) {
      // With nothing sent before it, `finish` carries START TRANSACTION, the statements and
      // COMMIT in one round trip.
      return this.transaction((tx) => tx.finish(sql, params), options);
    },
    async close() {
      await pool.end();
    },
  };
}
