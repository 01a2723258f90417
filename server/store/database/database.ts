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
import { LockOrderCheck, LockOrderViolation, isLockingRead, rememberedByText, splitStatements } from './lock-order.ts';
import { assertRoutable, ShardRoutingViolation } from './shard-routing.ts';
import { encodedBytesBound, mergeResults, PacketLimit, planRoundTrips, type BatchStatement } from './packets.ts';
import { DeadlineExceeded, remainingMs } from '../../deadline.ts';
import { databaseHostUrls, DEFAULT_DATABASE_TIMEOUT_MS as DEFAULT_TIMEOUT_MS } from '../../config.ts';
import mysql, { type Pool, type PoolConnection, type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';
import { sql, type SQL } from './sql.ts';
import { singleStatements } from './single-statements.ts';

export { rowsStatement, PacketTooLarge, type BatchStatement } from './packets.ts';

export type Row = RowDataPacket & Record<string, unknown>;

/**
 * A statement: the store's `sql` template (sql.ts), where each value is bound exactly where it appears
 * (``sql`… WHERE task_id = ${taskId}` ``, `sql.join` for lists and multi-statement batches) -
 * or, in code not yet moved to it, text plus a parameter array that must stay in step.
 */
export type Statement = string | SQL;

/**
 * What `batch`, `finish` and `oneShot` send: one statement (or several joined by the caller), or
 * a list of them - which is sent in as few round trips as fit in the server's
 * max_allowed_packet (packets.ts), one result per statement of the list either way.
 */
export type Statements = Statement | readonly BatchStatement[];

/** The text and parameters mysql2 is sent. An `sql` template carries its own parameters. */
export function statementText(statement: Statement, params: unknown[] = []): [string, unknown[]] {
  if (typeof statement === 'string') return [statement, params];
  if (params.length > 0) throw new Error('an sql`` statement carries its own parameters; pass none beside it');
  return [statement.text, statement.params as unknown[]];
}

export interface Queryable {
  /** Rows of a SELECT. */
  rows<T = Row>(sql: Statement, params?: unknown[]): Promise<T[]>;
  /** Result of an INSERT/UPDATE/DELETE. */
  exec(sql: Statement, params?: unknown[]): Promise<ResultSetHeader>;
  /**
   * Two or more statements in one round trip (`multipleStatements`): one result per statement,
   * rows for SELECTs and a header for writes. Use it to hold hot-row locks for fewer round trips.
   * A list that would not fit in one packet goes in several, in order (packets.ts).
   */
  batch(sql: Statements, params?: unknown[]): Promise<Array<Row[] | ResultSetHeader>>;
}

/** A transaction in progress. */
export interface Transaction extends Queryable {
  /**
   * The transaction's last statements and its COMMIT in one round trip, so the locks it holds
   * are not kept across another round trip to this process. Results of `sql`'s statements.
   */
  finish(sql: Statements, params?: unknown[]): Promise<Array<Row[] | ResultSetHeader>>;
}

export interface Database extends Queryable {
  readonly pool: Pool;
  /** The server's max_allowed_packet as this process knows it: what every batch is split by. */
  readonly packets: PacketLimit;
  /**
   * A whole transaction in ONE round trip: `START TRANSACTION; <statements>; COMMIT`. A
   * statement that fails stops the server from running the rest (COMMIT included); the
   * transaction is then rolled back and the error thrown. Returns the statements' results.
   * Deadlocks are retried like `transaction`.
   */
  oneShot(sql: Statements, params?: unknown[], options?: { retries?: number }): Promise<Array<Row[] | ResultSetHeader>>;
  /** Runs `fn` in one transaction on a dedicated connection; retries deadlocks. */
  transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: { retries?: number }): Promise<T>;
  /** Asks the server for its max_allowed_packet (and remembers it); start-up calls it. */
  readServerLimits(): Promise<{ maxAllowedPacket: number }>;
  /**
   * Runs `fn` on a connection of a small pool of its own, the whole of it cut off after
   * `timeoutMs`: what /readyz asks, so that a probe is answered in time even when every
   * connection of the main pool is stuck on a database that stopped answering.
   */
  probe<T>(fn: (q: Queryable) => Promise<T>, timeoutMs: number): Promise<T>;
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

/** A connection that could not be made, or was lost: the host is not there (or not reachable). */
const CONNECTION_FAILED_CODES = [
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'PROTOCOL_CONNECTION_LOST',
];
/** Errors that mean "the database did not answer" - the outcome of a write is unknown. */
const UNREACHABLE_CODES = new Set([
  ...CONNECTION_FAILED_CODES,
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'POOL_CLOSED',
  'ER_CON_COUNT_ERROR',
  'ORBIT_POOL_TIMEOUT',
  'ORBIT_DEADLINE',
]);
/**
 * Server errors of a server that is going away or refusing work: shutdown in progress,
 * connection killed, too many connections, read-only - and of a database that is not there for
 * this server any more (unknown database, access denied to it or to the user, its tables gone:
 * a dropped database answers open connections with "no such table"): an operator's fault to
 * fix, which /readyz reports, not a bug of the request (a table this build lacks is refused at
 * start-up: migrations are checked before the server listens).
 */
const UNREACHABLE_ERRNOS = new Set([1040, 1053, 1290, 1927, 4031, 1044, 1045, 1049, 1146, 1047, 1180]);

/**
 * Errors that say "this database host is gone, or not usable as a member of its cluster": the
 * connection failed or was lost, the server is shutting down, or a Galera node is not in the
 * primary component (1047, "WSREP has not yet prepared node for application use") or lost it
 * during a COMMIT (1180). With several hosts in the URL, the pool moves to the next one
 * (createDatabase). Not a statement cut off by its timeout, nor a connection killed by an operator:
 * one slow statement says nothing of the host, and moving a whole process for it would flap.
 */
const HOST_LOST_CODES = new Set(CONNECTION_FAILED_CODES);
const HOST_LOST_ERRNOS = new Set([1047, 1053, 1180]);

/** How often a process away from its first host asks whether an earlier one serves again (createDatabase). */
const FAILBACK_CHECK_MS = 2000;

export function isHostLost(error: unknown): boolean {
  const e = error as { code?: string; errno?: number } | null;
  if (e === null || typeof e !== 'object') return false;
  return (e.code !== undefined && HOST_LOST_CODES.has(e.code)) || (e.errno !== undefined && HOST_LOST_ERRNOS.has(e.errno));
}

/**
 * What the database layer knows of the servers it talks to, learned from the first connection
 * (`wsrep_on` and `version`; `singleStatements` as the options say, when they do).
 */
export interface ServerTraits {
  known: boolean;
  /** A Galera node (wsrep_on): statements go one write per command (single-statements.ts). */
  cluster: boolean;
  /** A MariaDB Galera node: plain reads are causal (`SET STATEMENT wsrep_sync_wait = 1 FOR …`, MariaDB's syntax). */
  causalReads: boolean;
  /** Every statement sent as a command of its own (single-statements.ts): on a cluster, always. */
  singleStatements: boolean;
}

/** A read that waits until the Galera node has applied what the cluster committed before it (MariaDB's syntax; this statement only). */
export function causalRead(select: string): string {
  return `SET STATEMENT wsrep_sync_wait = 1 FOR ${select}`;
}

export function isDatabaseUnreachable(error: unknown): boolean {
  const e = error as { code?: string; errno?: number; message?: string } | null;
  if (e === null || typeof e !== 'object') return false;
  // mysql2's pool closed under a connection it was opening (the pool moved to another host): no code.
  if (e.code === undefined && e.message === 'Pool is closed.') return true;
  return connectionIsBroken(e) || (e.code !== undefined && UNREACHABLE_CODES.has(e.code)) || (e.errno !== undefined && UNREACHABLE_ERRNOS.has(e.errno));
}

/**
 * How long the next wait may take: the per-wait timeout (0: none), cut to what is left of the
 * request's deadline (deadline.ts). Throws when nothing is left - the wait is not even begun.
 * Returns 0 for "no limit".
 */
function waitBudgetMs(timeoutMs: number, what: string): number {
  const left = remainingMs(timeoutMs > 0 ? timeoutMs : Number.POSITIVE_INFINITY);
  if (left <= 0) throw new DeadlineExceeded(what);
  return left === Number.POSITIVE_INFINITY ? 0 : Math.max(1, Math.ceil(left));
}

/**
 * One round trip on `conn` of `statements` statements (told to the observer), cut off after
 * `timeoutMs` (0: never) or at the request's deadline, whichever comes first.
 */
function sender(conn: PoolConnection, timeoutMs: number, observer: DatabaseObserver | undefined, traits: ServerTraits) {
  const one = async (sql: string, params: unknown[], statements: number) => {
    const timeout = waitBudgetMs(timeoutMs, 'a statement was sent');
    observer?.roundTrip(statements);
    return (await conn.query(timeout > 0 ? { sql, timeout } : { sql }, params))[0];
  };
  return async (sql: string, params: unknown[], statements = 1) => {
    if (!traits.singleStatements) return one(sql, params, statements);
    const commands = singleStatements(sql, params);
    if (commands.length === 1) return one(sql, params, statements);
    // In order; the first that fails stops the rest, as the server would. The results as one
    // multi-statement command would have them: one per statement.
    const results: unknown[] = [];
    for (const command of commands) {
      const result = await one(command.text, command.params, command.statements);
      if (command.statements === 1) results.push(result);
      else results.push(...(result as unknown[]));
    }
    return results as never;
  };
}

/** `statements` as round trips within the packet limit (a plain statement: one, as given). */
function roundTripsOf(statements: Statements, params: unknown[], packets: PacketLimit, extraBytes = 0) {
  if (typeof statements === 'string' || !Array.isArray(statements)) {
    const [text, values] = statementText(statements as Statement, params);
    return { trips: [{ text, params: values, slots: [] as number[] }], count: -1 };
  }
  if (params.length > 0) throw new Error('a list of sql`` statements carries its own parameters; pass none beside it');
  return { trips: planRoundTrips(statements as readonly BatchStatement[], packets.budgetBytes, extraBytes), count: statements.length };
}

/** A round trip's results as a list, one per statement in it (mysql2 answers one statement with its result alone). */
function resultList(result: unknown, statements: number): unknown[] {
  return statements === 1 ? [result] : (result as unknown[]);
}

function queryable(conn: PoolConnection, timeoutMs: number, packets: PacketLimit, observer: DatabaseObserver | undefined, traits: ServerTraits): Queryable {
  const send = sender(conn, timeoutMs, observer, traits);
  const query = (sql: Statement, params: unknown[]) => send(...statementText(sql, params));
  return {
    async rows<T>(sql: Statement, params: unknown[] = []) {
      return (await query(sql, params)) as T[];
    },
    async exec(sql: Statement, params: unknown[] = []) {
      return (await query(sql, params)) as ResultSetHeader;
    },
    async batch(sql: Statements, params: unknown[] = []) {
      const { trips, count } = roundTripsOf(sql, params, packets);
      if (count < 0) {
        const trip = trips[0] as { text: string; params: unknown[] };
        // Counted only when someone is told: counting scans the text.
        return (await send(trip.text, trip.params, observer ? splitStatements(trip.text).length : 1)) as Array<Row[] | ResultSetHeader>;
      }
      const results: unknown[] = [];
      const slots: number[] = [];
      for (const trip of trips) {
        results.push(...resultList(await send(trip.text, trip.params, trip.slots.length), trip.slots.length));
        slots.push(...trip.slots);
      }
      return mergeResults(slots, results, count) as Array<Row[] | ResultSetHeader>;
    },
  };
}

/**
 * A transaction's queryable. `START TRANSACTION` is not sent on its own: it rides in front of
 * the transaction's first statement, which saves one round trip per transaction. A list of
 * statements too large for one packet is sent in several round trips, in order, inside the
 * same transaction (packets.ts); `finish` puts the COMMIT after the last of them.
 */
function transactionQueryable(
  conn: PoolConnection,
  timeoutMs: number,
  packets: PacketLimit,
  lockOrder: LockOrderCheck | null,
  shardRouting: boolean,
  observer: DatabaseObserver | undefined,
  traits: ServerTraits,
): Transaction & { readonly finished: boolean; afterCommit(): void } {
  let begun = false;
  let finished = false;
  const query = sender(conn, timeoutMs, observer, traits);
  /** One round trip of `statements` statements; their results as a list. */
  async function send(sql: string, params: unknown[], statements: number): Promise<unknown[]> {
    if (finished) throw new Error('the transaction has already committed');
    if (shardRouting) {
      try {
        assertRoutable(sql);
      } catch (error) {
        throw reported(error);
      }
    }
    lockOrder?.observe(sql, params);
    let out: unknown[];
    if (begun) out = resultList(await query(sql, params, statements), statements);
    else {
      begun = true;
      out = ((await query(`START TRANSACTION;\n${sql}`, params, statements + 1)) as unknown as unknown[]).slice(1);
    }
    // The rows locking reads returned are the rows this transaction now holds.
    lockOrder?.locked(out);
    return out;
  }
  /** Sends `sql` (with a COMMIT after it when `commit`): one result per statement of it. */
  async function run(sql: Statements, params: unknown[], commit: boolean): Promise<Array<Row[] | ResultSetHeader>> {
    const commitBytes = commit ? encodedBytesBound(';\nCOMMIT', []) : 0;
    const { trips, count } = roundTripsOf(sql, params, packets, commitBytes + encodedBytesBound('START TRANSACTION;\n', []));
    const results: unknown[] = [];
    const slots: number[] = [];
    for (const [i, trip] of trips.entries()) {
      const last = i === trips.length - 1;
      // A plain statement may be several joined by the caller: count them.
      const statements = count < 0 ? splitStatements(trip.text).length : trip.slots.length;
      const text = commit && last ? `${trip.text};\nCOMMIT` : trip.text;
      const out = await send(text, trip.params, statements + (commit && last ? 1 : 0));
      if (commit && last) out.pop(); // the COMMIT's own header
      results.push(...out);
      slots.push(...trip.slots);
    }
    if (commit) finished = true;
    if (count < 0) return results as Array<Row[] | ResultSetHeader>;
    return mergeResults(slots, results, count) as Array<Row[] | ResultSetHeader>;
  }
  return {
    get finished() {
      return finished;
    },
    afterCommit() {
      lockOrder?.afterCommit();
    },
    async rows<T>(sql: Statement, params: unknown[] = []) {
      const [text, values] = statementText(sql, params);
      return (await send(text, values, 1))[0] as T[];
    },
    async exec(sql: Statement, params: unknown[] = []) {
      const [text, values] = statementText(sql, params);
      return (await send(text, values, 1))[0] as ResultSetHeader;
    },
    batch(sql: Statements, params: unknown[] = []) {
      return run(sql, params, false);
    },
    finish(sql: Statements, params: unknown[] = []) {
      return run(sql, params, true);
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
  /** Told of every round trip and transaction (orbit-server counts them in /metrics). */
  observer?: DatabaseObserver;
  /**
   * Send every statement as a command of its own (single-statements.ts). Unset: only on a Galera
   * node, where a multi-statement command is not atomic. Tests set it to run the suite that way
   * on a single server.
   */
  singleStatements?: boolean;
  /** Told when the pool moves to the next host of the URL (its URL, the password redacted by the caller). */
  onHostChange?: (url: string, cause: unknown) => void;
}

/** What the database layer tells about the work it sends (cheap callbacks: they run on every round trip). */
export interface DatabaseObserver {
  /** A round trip that carried `statements` statements (START TRANSACTION and COMMIT included). */
  roundTrip(statements: number): void;
  /** A transaction ended (committed or not) after holding its connection this long, from its start to its end. */
  transactionHeld(seconds: number): void;
  /**
   * A transaction failed with a deadlock (1213: on a Galera cluster, a certification failure or
   * a brute-force abort too) or a lock-wait timeout (1205), and was run again whole (`retried`) or
   * not, its retries spent (`gave_up`: the caller answers 503, or a fast path hands over to its careful path).
   */
  transactionRetry?(reason: 'deadlock' | 'lock_wait_timeout', outcome: 'retried' | 'gave_up'): void;
}

export { DEFAULT_DATABASE_TIMEOUT_MS } from '../../config.ts';

/** Whether a text has a locking read, remembered per text. */
const hasLockingRead = rememberedByText((sql) => splitStatements(sql).some(isLockingRead));

/** The mysql2 pool settings every Orbit pool shares. */
function poolOptions(url: string, connectTimeoutMs: number, connectionLimit: number): mysql.PoolOptions {
  return {
    uri: url,
    connectTimeout: connectTimeoutMs,
    connectionLimit,
    maxIdle: connectionLimit,
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
    // No stack captured at every query for its possible error (mysql2's `trace`): a database
    // error becomes an OrbitError here, named by the operation, and the capture cost a share of
    // every statement's CPU (a tenth of a test process's).
    trace: false,
  };
}

/** A connection from `pool`, or ORBIT_POOL_TIMEOUT when none frees up (or opens) within `timeoutMs` (0: wait). */
async function acquireFrom(pool: Pool, timeoutMs: number): Promise<PoolConnection> {
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

export function createDatabase(options: DatabaseOptions): Database {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const connectionLimit = options.connectionLimit ?? 20;
  const hostUrls = databaseHostUrls(options.url);
  const packets = new PacketLimit();
  const traits: ServerTraits = { known: false, cluster: false, causalReads: false, singleStatements: options.singleStatements ?? false };
  // Runs before any other statement on each new connection. Strict mode is not a preference:
  // the guarded statements (`IF(room, …, NULL)` on NOT NULL columns) must FAIL, not store a 0
  // with a warning, whatever the server's own default is.
  // A lock wait must end (as a retryable ER_LOCK_WAIT_TIMEOUT, on a connection that stays
  // usable) before the statement timeout cuts the connection off: InnoDB's own default is 50 s.
  // (Without a statement timeout, the server's own setting stays.)
  // The server's max_allowed_packet is read on every new connection, so the batches are split
  // by the limit of the server actually connected to (packets.ts).
  const lockWait = timeoutMs > 0 ? `; SET SESSION innodb_lock_wait_timeout = ${Math.max(1, Math.floor(timeoutMs / 1000) - 1)}` : '';
  const setup = `SET SESSION time_zone = '+00:00'; SET SESSION sql_mode = '${SQL_MODE}'; SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED${lockWait}; SELECT @@max_allowed_packet AS max_allowed_packet`;
  const onConnection = (conn: { query: (...args: unknown[]) => unknown; destroy: () => void }) => {
    // With a callback, a failure here (the database going away right after the handshake) is
    // this connection's problem, not an unhandled 'error' event; the connection is dropped.
    conn.query(timeoutMs > 0 ? { sql: setup, timeout: timeoutMs } : { sql: setup }, (error: unknown, results: unknown) => {
      if (error) {
        conn.destroy();
        return;
      }
      const rows = Array.isArray(results) ? (results.at(-1) as Array<{ max_allowed_packet?: unknown }>) : [];
      packets.learn(Number(rows?.[0]?.max_allowed_packet));
    });
  };
  /**
   * The host in use and its pools. With several hosts in the URL (the nodes of a cluster), a
   * failure that says the host is lost (isHostLost) moves every later request to the next one, in
   * turn: the request that met the failure is answered 503, the ones after it are served; and
   * back to an earlier host once it serves again (watchForFailback).
   */
  interface Host {
    index: number;
    pool: Pool;
    probePool: Pool | null;
  }
  function openHost(index: number): Host {
    const pool = mysql.createPool(poolOptions(hostUrls[index] as string, timeoutMs || 10_000, connectionLimit));
    pool.pool.on('connection', onConnection as never);
    return { index, pool, probePool: null };
  }
  let active = openHost(0);
  const hostOf = new WeakMap<PoolConnection, Host>();
  const retired = new Set<Host>();
  async function retire(host: Host): Promise<void> {
    if (!retired.delete(host)) return;
    await Promise.all([host.pool.end().catch(() => {}), host.probePool?.end().catch(() => {})]);
  }
  function failOver(from: Host | undefined, cause: unknown): void {
    if (hostUrls.length === 1 || from === undefined || from !== active || !isHostLost(cause)) return;
    moveTo((from.index + 1) % hostUrls.length, cause);
  }
  function moveTo(index: number, cause: unknown): void {
    const from = active;
    active = openHost(index);
    options.onHostChange?.(hostUrls[index] as string, cause);
    // Nothing new is taken from the old pool. Its connections still out finish what they are doing
    // (or fail on their own: the host is likely gone) and come back; it is closed once they have
    // had a request's time to, or at close().
    retired.add(from);
    const timer = setTimeout(() => void retire(from), 2 * Math.max(timeoutMs, 1000));
    timer.unref();
    watchForFailback();
  }
  /**
   * Moving back. The hosts are listed in order of preference: every server of a deployment
   * names the same node first, so that one node takes every write (docs/scale-out.md: written
   * through several nodes, an application's row fails certification all the time). Away from the
   * first host, the process asks every FAILBACK_CHECK_MS whether a host before the one in use
   * serves again - it connects, and a cluster node must say it is Synced and ready - and moves to
   * the first that does. A transient failure (a node briefly out of the primary component while
   * another leaves) so costs a detour, not a deployment split over the nodes for good.
   */
  let failback: NodeJS.Timeout | null = null;
  let checkingFailback = false;
  function watchForFailback(): void {
    if (active.index === 0) {
      if (failback) clearInterval(failback);
      failback = null;
      return;
    }
    if (failback) return;
    failback = setInterval(() => void tryFailback(), FAILBACK_CHECK_MS);
    failback.unref();
  }
  async function tryFailback(): Promise<void> {
    if (checkingFailback) return;
    checkingFailback = true;
    try {
      for (let index = 0; index < active.index; index++) {
        if (await hostServes(hostUrls[index] as string)) {
          moveTo(index, new Error('a host listed before the one in use serves again'));
          break;
        }
      }
    } finally {
      checkingFailback = false;
    }
  }
  async function hostServes(url: string): Promise<boolean> {
    let conn: mysql.Connection | undefined;
    try {
      conn = await mysql.createConnection({ uri: url, connectTimeout: FAILBACK_CHECK_MS });
      if (!traits.cluster) return true;
      const text = "SHOW STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state_comment')";
      const [rows] = (await conn.query({ sql: text, timeout: FAILBACK_CHECK_MS })) as unknown as [Array<{ Variable_name: string; Value: string }>];
      const status = Object.fromEntries(rows.map((row) => [row.Variable_name, row.Value]));
      return status.wsrep_ready === 'ON' && status.wsrep_local_state_comment === 'Synced';
    } catch {
      return false;
    } finally {
      conn?.destroy();
    }
  }
  /** Learns what the server is (once), on a connection just taken from the pool. */
  async function learnTraits(conn: PoolConnection): Promise<void> {
    const text = "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'version')";
    const [rows] = (await conn.query(timeoutMs > 0 ? { sql: text, timeout: timeoutMs } : { sql: text })) as unknown as [
      Array<{ Variable_name: string; Value: string }>,
    ];
    const value = (name: string) => String(rows.find((row) => row.Variable_name === name)?.Value ?? '');
    const cluster = value('wsrep_on').toUpperCase() === 'ON';
    traits.cluster = cluster;
    traits.causalReads = cluster && /mariadb/i.test(value('version'));
    // ORBIT_SINGLE_STATEMENTS=0 on a cluster: the operator's choice, against the docs (scale-out.md).
    traits.singleStatements = options.singleStatements ?? cluster;
    traits.known = true;
  }
  /** A connection from the active host's pool within the per-wait timeout and the request's deadline. */
  async function acquire(): Promise<PoolConnection> {
    for (let tries = 0; ; tries++) {
      const host = active;
      let conn: PoolConnection;
      try {
        conn = await acquireFrom(host.pool, waitBudgetMs(timeoutMs, 'a database connection was free'));
        if (!traits.known) {
          await learnTraits(conn).catch((error) => {
            conn.destroy();
            throw error;
          });
        }
      } catch (error) {
        failOver(host, error);
        // The pool moved to another host while this waited (its pool was closed under it, or this
        // very failure moved it): once more, on the host now in use - nothing was sent yet.
        if (host !== active && tries < hostUrls.length) continue;
        throw error;
      }
      hostOf.set(conn, host);
      return conn;
    }
  }
  /** Gives a connection back, or destroys it when it cannot be trusted any more. */
  function giveBack(conn: PoolConnection, error?: unknown): void {
    if (error !== undefined) failOver(hostOf.get(conn), error);
    if (error !== undefined && connectionIsBroken(error)) conn.destroy();
    else conn.release();
  }
  /**
   * A plain read on a cluster node waits until the node has applied what the cluster committed
   * before it (`wsrep_sync_wait = 1`, for this statement only): a client that wrote through one
   * node and reads through another sees its write. Reads inside transactions do not wait: a
   * write decided on a stale read fails certification and the transaction is retried whole.
   */
  function causal(text: string): string {
    return traits.causalReads && /^\s*(?:\(\s*)?(?:SELECT|WITH)\b/i.test(text) && splitStatements(text).length === 1 ? causalRead(text) : text;
  }
  /**
   * Ends a failed transaction: ROLLBACK, then the connection goes back to the pool (or is
   * destroyed when it is broken). Awaited while the request's deadline allows; past it, the
   * request is answered at once and the ROLLBACK finishes on its own (until then the
   * connection is not in the pool, and the server rolls back anyway if it never answers).
   */
  async function endFailed(conn: PoolConnection, error: unknown): Promise<void> {
    failOver(hostOf.get(conn), error);
    if (connectionIsBroken(error)) {
      // Nothing more can be sent on it; the server rolls back what it has when the
      // connection goes away (or commits, if the COMMIT had already reached it: the
      // caller reports the outcome as unknown).
      conn.destroy();
      return;
    }
    const rollback = async (ms: number) => {
      try {
        await conn.query(ms > 0 ? { sql: 'ROLLBACK', timeout: ms } : { sql: 'ROLLBACK' });
        conn.release();
      } catch {
        // The connection is broken; it must not go back to the pool.
        conn.destroy();
      }
    };
    const left = remainingMs(timeoutMs > 0 ? timeoutMs : Number.POSITIVE_INFINITY);
    if (left > 0) await rollback(left === Number.POSITIVE_INFINITY ? 0 : Math.ceil(left));
    else void rollback(timeoutMs);
  }
  /** Runs `fn` on `conn` (statements cut off after `statementTimeoutMs`), then gives the connection back or destroys it. */
  async function using<T>(conn: PoolConnection, statementTimeoutMs: number, fn: (q: Queryable) => Promise<T>): Promise<T> {
    try {
      const result = await fn(queryable(conn, statementTimeoutMs, packets, options.observer, traits));
      giveBack(conn);
      return result;
    } catch (error) {
      giveBack(conn, error);
      throw error;
    }
  }
  async function withConnection<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    return using(await acquire(), timeoutMs, fn);
  }
  /**
   * With checkShardRouting, a statement that would not route to one shard is rejected before it
   * is sent. With checkLockOrder, so is a locking read outside a transaction: its locks would end
   * with the statement, so whatever it meant to protect is not protected (lock-order.ts).
   */
  function check(sql: string): void {
    if (options.checkLockOrder && hasLockingRead(sql)) {
      failLoudly(new LockOrderViolation(`lock order: a locking read outside a transaction\n  statement: ${sql.replace(/\s+/g, ' ').slice(0, 200)}`));
    }
    if (options.checkShardRouting) {
      try {
        assertRoutable(sql);
      } catch (error) {
        throw reported(error);
      }
    }
  }
  function routed<T>(sql: string, send: () => Promise<T>): Promise<T> {
    try {
      check(sql);
    } catch (error) {
      return Promise.reject(error);
    }
    return send();
  }
  const database: Database = {
    get pool() {
      return active.pool;
    },
    packets,
    rows: (sql, params) => {
      const [text, values] = statementText(sql, params);
      return routed(text, () => withConnection((q) => q.rows(causal(text), values)));
    },
    exec: (sql, params) => {
      const [text, values] = statementText(sql, params);
      return routed(text, () => withConnection((q) => q.exec(text, values)));
    },
    batch: (sql, params = []) => {
      let trips: ReturnType<typeof roundTripsOf>;
      try {
        trips = roundTripsOf(sql, params, packets);
        for (const trip of trips.trips) check(trip.text);
      } catch (error) {
        return Promise.reject(error);
      }
      return withConnection((q) => q.batch(sql, params));
    },
    async transaction<T>(fn: (tx: Transaction) => Promise<T>, { retries = 5 } = {}) {
      const observer = options.observer;
      for (let attempt = 0; ; attempt++) {
        const conn = await acquire();
        const startedAt = observer ? performance.now() : 0;
        let result: T;
        try {
          const tx = transactionQueryable(
            conn,
            timeoutMs,
            packets,
            options.checkLockOrder ? new LockOrderCheck() : null,
            options.checkShardRouting === true,
            observer,
            traits,
          );
          result = await fn(tx);
          if (!tx.finished) await sender(conn, timeoutMs, observer, traits)('COMMIT', []);
          tx.afterCommit();
        } catch (error) {
          await endFailed(conn, error);
          observer?.transactionHeld((performance.now() - startedAt) / 1000);
          if (error instanceof LockOrderViolation) failLoudly(error);
          const retryable = isRetryableTransactionError(error);
          if (retryable) {
            const reason = (error as { errno?: number }).errno === DEADLOCK ? 'deadlock' : 'lock_wait_timeout';
            observer?.transactionRetry?.(reason, attempt < retries ? 'retried' : 'gave_up');
          }
          if (attempt < retries && retryable) {
            await new Promise((r) => setTimeout(r, 2 + Math.random() * 8 * (attempt + 1)));
            continue;
          }
          throw error;
        }
        conn.release();
        observer?.transactionHeld((performance.now() - startedAt) / 1000);
        return result;
      }
    },
    oneShot(sql: Statements, params: unknown[] = [], options = {}) {
      // With nothing sent before it, `finish` carries START TRANSACTION, the statements and
      // COMMIT in one round trip (several only when they would not fit in one packet).
      return this.transaction((tx) => tx.finish(sql, params), options);
    },
    async readServerLimits() {
      const [row] = await database.rows<{ max_allowed_packet: string | number }>(sql`SELECT @@max_allowed_packet AS max_allowed_packet`);
      const maxAllowedPacket = Number(row?.max_allowed_packet);
      packets.learn(maxAllowedPacket);
      return { maxAllowedPacket };
    },
    async probe<T>(fn: (q: Queryable) => Promise<T>, probeTimeoutMs: number): Promise<T> {
      const host = active;
      if (!host.probePool) {
        host.probePool = mysql.createPool(poolOptions(hostUrls[host.index] as string, probeTimeoutMs, 2));
        host.probePool.pool.on('connection', onConnection as never);
      }
      const startedAt = Date.now();
      let conn: PoolConnection;
      try {
        conn = await acquireFrom(host.probePool, probeTimeoutMs);
      } catch (error) {
        failOver(host, error);
        throw error;
      }
      hostOf.set(conn, host);
      return using(conn, Math.max(1, probeTimeoutMs - (Date.now() - startedAt)), fn);
    },
    async close() {
      if (failback) clearInterval(failback);
      failback = null;
      await Promise.all([active.pool.end(), active.probePool?.end(), ...[...retired].map(retire)]);
    },
  };
  return database;
}
