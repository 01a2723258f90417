/**
 * Settings from the environment and their defaults (what they drive: docs/architecture.md).
 * Every variable Orbit reads is in SETTINGS (the README's "Configuration" table and
 * `orbit-server --help` list the same) and is parsed and range-checked here, once, at start-up:
 * a bad value stops the program with one line naming the variable (ConfigError), never a hang
 * or a surprise later.
 */
import { isIPv6 } from 'node:net';

export interface ServerConfig {
  databaseUrl: string;
  listenHost: string;
  /** 0: any free port (the `listening` log line says which). */
  listenPort: number;
  /** How long a reservation or a running attempt lives without a renew. */
  leaseSeconds: number;
  /** How often each process's recovery loop looks for expired leases and deadlines. */
  recoveryIntervalMs: number;
  /** How often each process's schedule loop looks for due trigger points. */
  scheduleIntervalMs: number;
  /** How many queues the usage gauges of /metrics report at most (the busiest). */
  metricsMaxQueues: number;
  /** Whether task lifecycle events are written to the feed (off only to measure what they cost). */
  taskEvents: boolean;
  databasePoolSize: number;
  /** How long this process reuses a successful authentication (writes re-check in their transaction anyway). */
  authCacheMs: number;
  /** Admission transactions one application may have in flight at once in this process. */
  admissionInFlight: number;
  /** The most one request (or worker frame) may wait on the database in all before it answers 503 (deadline.ts). */
  databaseTimeoutMs: number;
  /** ORBIT_GROUP_LINGER_MS: how long a group commit of an idle application waits for company. */
  groupLingerMs: number;
  /** How often each process's pruning loop looks for an application whose history is due (0: never - the loop is off). */
  pruneIntervalMs: number;
  /** Rows one prune batch removes at most (one statement per table). */
  pruneBatchRows: number;
  /** The share of one database connection's time a process's pruning may take (it pauses after each batch to keep under it). */
  pruneMaxShare: number;
  /** Test mode: every transaction is checked against the lock order; a violation stops the process. */
  checkLockOrder: boolean;
  /** Test mode: every statement is checked to route to one shard by application_id (docs/scale-out.md); a violation fails it. */
  checkShardRouting: boolean;
  /** ORBIT_SINGLE_STATEMENTS: one statement per command (unset: only on a Galera cluster; see store/database/single-statements.ts). */
  singleStatements?: boolean;
  logLevel: string;
}

/** A bad environment variable; the message names it and the value (a password redacted). Exit code 2. */
export class ConfigError extends Error {}

export const DEFAULT_DATABASE_URL = 'mysql://root@127.0.0.1:3306/orbit';
/**
 * ORBIT_DB_TIMEOUT_MS's default: a request's database waits stop after 4 s, so that with the
 * time to make and write the answer it is answered within 5 s however long the database is
 * frozen (docs/operations.md, "Bounded waits").
 */
export const DEFAULT_DATABASE_TIMEOUT_MS = 4000;
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

export interface Setting {
  name: string;
  /** As the README and `--help` show it. */
  default: string;
  /** The allowed values, as the README and `--help` show them. */
  range: string;
  meaning: string;
}

export const SETTINGS: readonly Setting[] = [
  {
    name: 'ORBIT_DATABASE_URL',
    default: DEFAULT_DATABASE_URL,
    range: 'mysql://user:password@host:port/database, or mysql://user:password@host1:port1,host2:port2,…/database for the nodes of a Galera cluster',
    meaning: 'the database (name of [A-Za-z0-9_]); the password is never printed; with several hosts, the first is used and the next one when it is lost',
  },
  {
    name: 'ORBIT_LISTEN',
    default: '127.0.0.1:8080',
    range: 'host:port, port 0 to 65535 (0: any free port)',
    meaning: 'where orbit-server listens (IPv6 as [::1]:8080)',
  },
  { name: 'ORBIT_LEASE_SECONDS', default: '30', range: '1 to 3600', meaning: 'lifetime of a reservation or running attempt without a renew' },
  { name: 'ORBIT_RECOVERY_INTERVAL_MS', default: '500', range: '10 to 60000', meaning: 'how often each process looks for expired leases and deadlines' },
  {
    name: 'ORBIT_TASK_EVENTS',
    default: 'on',
    range: 'on or off',
    meaning: 'whether task lifecycle events are written to the event feed (off: only to measure what they cost)',
  },
  { name: 'ORBIT_METRICS_MAX_QUEUES', default: '200', range: '1 to 10000', meaning: 'how many queues (the busiest) the usage gauges of /metrics report' },
  { name: 'ORBIT_SCHEDULE_INTERVAL_MS', default: '500', range: '10 to 60000', meaning: 'how often each process looks for due schedule trigger points' },
  {
    name: 'ORBIT_AUTH_CACHE_MS',
    default: '1000',
    range: '0 to 60000',
    meaning: 'how long a process reuses a successful authentication for reads (writes always re-check; 0 turns it off)',
  },
  { name: 'ORBIT_DB_POOL_SIZE', default: '24', range: '2 to 500', meaning: 'database connections per server process' },
  {
    name: 'ORBIT_DB_TIMEOUT_MS',
    default: '4000',
    range: '100 to 600000',
    meaning:
      'the most one request or worker frame may wait on the database in all (pooled connection, statements, retries, COMMIT); past it the request answers 503 UNAVAILABLE, so every request is answered within about this long however long the database is frozen (5 s by default, the answer included)',
  },
  {
    name: 'ORBIT_CHECK_LOCK_ORDER',
    default: '0',
    range: '0 or 1',
    meaning: 'for tests: every transaction checks that it takes row locks in the lock order, and a violation stops the process (npm test sets 1)',
  },
  {
    name: 'ORBIT_CHECK_SHARD_ROUTING',
    default: '0',
    range: '0 or 1',
    meaning:
      'for tests: every statement sent checks that it would route to one shard when sharded by application_id (docs/scale-out.md), and a violation fails it (npm test sets 1)',
  },
  {
    name: 'ORBIT_SINGLE_STATEMENTS',
    default: 'unset: on a Galera node only',
    range: '0 or 1',
    meaning:
      'every write of a transaction sent as a database command of its own, as on a Galera cluster, where a multi-statement command is not atomic (docs/scale-out.md); 1 on any server, 0 never (not on a cluster)',
  },
  {
    name: 'ORBIT_ADMISSION_IN_FLIGHT',
    default: '1',
    range: '1 to 64',
    meaning: 'submission transactions one application may have in flight at once per process (the rest wait and are group-committed)',
  },
  {
    name: 'ORBIT_GROUP_LINGER_MS',
    default: '2',
    range: '0 to 100',
    meaning:
      'how long the first start or result of an idle application waits in a process for others to join its group commit, and its first claim when another session of the application is connected to that process (0: they go at once); groups that form behind one in flight never wait',
  },
  {
    name: 'ORBIT_PRUNE_INTERVAL_MS',
    default: '1000',
    range: '0 to 3600000',
    meaning:
      "how often each process's pruning loop looks for an application whose finished history is due for pruning by its retention policy (docs/operations.md#retention); 0 turns this process's pruning off",
  },
  {
    name: 'ORBIT_PRUNE_BATCH_ROWS',
    default: '500',
    range: '1 to 10000',
    meaning: 'rows one prune batch removes at most from one table (each batch is one short statement on rows no hot path takes)',
  },
  {
    name: 'ORBIT_PRUNE_MAX_SHARE',
    default: '0.1',
    range: '0.01 to 1',
    meaning: "the share of one database connection's time a process's pruning may use: after each batch it pauses long enough to stay under it",
  },
  { name: 'ORBIT_LOG_LEVEL', default: 'info', range: LOG_LEVELS.join(', '), meaning: 'pino level; logs are JSON lines on stdout' },
];

/** An unset or empty variable means its default. */
function raw(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === '' ? undefined : value;
}

/**
 * The test-mode database checks (lock order, shard routing) as the environment asks for them:
 * the server reads them with the rest of its configuration, the admin commands with this.
 */
export function databaseChecksFromEnv(env: NodeJS.ProcessEnv = process.env): {
  checkLockOrder: boolean;
  checkShardRouting: boolean;
  singleStatements?: boolean;
} {
  // ORBIT_SINGLE_STATEMENTS=1: every statement a command of its own, as on a Galera cluster
  // (single-statements.ts), on any server - how the tests prove both ways agree.
  const single = intFromEnv(env, 'ORBIT_SINGLE_STATEMENTS', -1, 0, 1);
  return {
    checkLockOrder: intFromEnv(env, 'ORBIT_CHECK_LOCK_ORDER', 0, 0, 1) === 1,
    checkShardRouting: intFromEnv(env, 'ORBIT_CHECK_SHARD_ROUTING', 0, 0, 1) === 1,
    ...(single === -1 ? {} : { singleStatements: single === 1 }),
  };
}

function intFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number): number {
  const text = raw(env, name);
  if (text === undefined) return fallback;
  const value = /^\d{1,9}$/.test(text) ? Number(text) : NaN;
  if (!(value >= min && value <= max)) throw new ConfigError(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(text)}`);
  return value;
}

/** A share from 0.01 to 1 (a decimal such as 0.2). */
function shareFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const text = raw(env, name);
  if (text === undefined) return fallback;
  const value = /^(?:0|1)(?:\.\d{1,4})?$/.test(text) ? Number(text) : NaN;
  if (!(value >= 0.01 && value <= 1)) throw new ConfigError(`${name} must be a decimal from 0.01 to 1, got ${JSON.stringify(text)}`);
  return value;
}

/**
 * The URL with any password replaced by `***`: what Orbit prints wherever it shows a database URL.
 * Also masks `user:secret@` in text that is not a URL at all (a mistyped value in an error).
 */
export function redactUrl(url: string): string {
  // Whatever parses or not: the userinfo is between `scheme://` (if any) and the last `@`, the
  // password after its first `:`.
  const at = url.lastIndexOf('@');
  if (at < 0) return url;
  const slashes = url.indexOf('//');
  const start = slashes >= 0 && slashes < at ? slashes + 2 : 0;
  const colon = url.indexOf(':', start);
  if (colon < 0 || colon > at) return url;
  return `${url.slice(0, colon + 1)}***${url.slice(at)}`;
}

const DATABASE_NAME = /^[A-Za-z0-9_]+$/;

/**
 * The URL of each host a database URL names, in order. `mysql://user@h1:3306,h2:3306/orbit`
 * names several (the nodes of a Galera cluster, docs/scale-out.md): the same user, password,
 * database and options on each. A URL with one host is returned as it is.
 */
export function databaseHostUrls(url: string): string[] {
  const match = /^(mysql:\/\/(?:[^@/]*@)?)([^/?#]*)(.*)$/s.exec(url);
  if (!match || !match[2]?.includes(',')) return [url];
  const [, head, hosts, tail] = match as unknown as [string, string, string, string];
  return hosts.split(',').map((host) => `${head}${host}${tail}`);
}

/**
 * Checks a database URL: mysql:, a host (or several, comma-separated: databaseHostUrls), a port
 * from 1 to 65535 if given, a database name. Returns it unchanged.
 */
export function checkDatabaseUrl(url: string, name = 'ORBIT_DATABASE_URL'): string {
  const bad = () =>
    new ConfigError(
      `${name} must be mysql://user:password@host:port/database (cluster nodes: host1:port1,host2:port2; database name of [A-Za-z0-9_]), got ${JSON.stringify(redactUrl(url))}`,
    );
  for (const hostUrl of databaseHostUrls(url)) {
    let parsed: URL;
    try {
      parsed = new URL(hostUrl);
    } catch {
      throw bad();
    }
    if (parsed.protocol !== 'mysql:' || !parsed.hostname || parsed.port === '0') throw bad();
    let database: string;
    try {
      database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
    } catch {
      throw bad();
    }
    if (!DATABASE_NAME.test(database)) throw bad();
  }
  return url;
}

export function databaseUrlFromEnv(env: NodeJS.ProcessEnv = process.env): string {
  return checkDatabaseUrl(raw(env, 'ORBIT_DATABASE_URL') ?? DEFAULT_DATABASE_URL);
}

function listenFromEnv(env: NodeJS.ProcessEnv): { host: string; port: number } {
  const text = raw(env, 'ORBIT_LISTEN') ?? '127.0.0.1:8080';
  const bad = () => new ConfigError(`ORBIT_LISTEN must be host:port with a port from 0 to 65535, got ${JSON.stringify(text)}`);
  const match = /^(\[[^\]]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(text);
  if (!match) throw bad();
  const port = Number(match[2]);
  let host = match[1] as string;
  if (host.startsWith('[')) {
    host = host.slice(1, -1);
    if (!isIPv6(host)) throw bad();
  }
  if (port > 65535) throw bad();
  return { host, port };
}

function taskEventsFromEnv(env: NodeJS.ProcessEnv): boolean {
  const text = raw(env, 'ORBIT_TASK_EVENTS') ?? 'on';
  if (text !== 'on' && text !== 'off') throw new ConfigError(`ORBIT_TASK_EVENTS must be on or off, got ${JSON.stringify(text)}`);
  return text === 'on';
}

function logLevelFromEnv(env: NodeJS.ProcessEnv): string {
  const text = raw(env, 'ORBIT_LOG_LEVEL') ?? 'info';
  if (!(LOG_LEVELS as readonly string[]).includes(text))
    throw new ConfigError(`ORBIT_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(text)}`);
  return text;
}

/** Every setting of `orbit-server`, checked; throws ConfigError for the first bad one (in SETTINGS order). */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const databaseUrl = databaseUrlFromEnv(env);
  const listen = listenFromEnv(env);
  return {
    databaseUrl,
    listenHost: listen.host,
    listenPort: listen.port,
    leaseSeconds: intFromEnv(env, 'ORBIT_LEASE_SECONDS', 30, 1, 3600),
    recoveryIntervalMs: intFromEnv(env, 'ORBIT_RECOVERY_INTERVAL_MS', 500, 10, 60_000),
    scheduleIntervalMs: intFromEnv(env, 'ORBIT_SCHEDULE_INTERVAL_MS', 500, 10, 60_000),
    metricsMaxQueues: intFromEnv(env, 'ORBIT_METRICS_MAX_QUEUES', 200, 1, 10_000),
    taskEvents: taskEventsFromEnv(env),
    authCacheMs: intFromEnv(env, 'ORBIT_AUTH_CACHE_MS', 1000, 0, 60_000),
    databasePoolSize: intFromEnv(env, 'ORBIT_DB_POOL_SIZE', 24, 2, 500),
    admissionInFlight: intFromEnv(env, 'ORBIT_ADMISSION_IN_FLIGHT', 1, 1, 64),
    databaseTimeoutMs: intFromEnv(env, 'ORBIT_DB_TIMEOUT_MS', DEFAULT_DATABASE_TIMEOUT_MS, 100, 600_000),
    groupLingerMs: intFromEnv(env, 'ORBIT_GROUP_LINGER_MS', 2, 0, 100),
    pruneIntervalMs: intFromEnv(env, 'ORBIT_PRUNE_INTERVAL_MS', 1000, 0, 3_600_000),
    pruneBatchRows: intFromEnv(env, 'ORBIT_PRUNE_BATCH_ROWS', 500, 1, 10_000),
    pruneMaxShare: shareFromEnv(env, 'ORBIT_PRUNE_MAX_SHARE', 0.1),
    ...databaseChecksFromEnv(env),
    logLevel: logLevelFromEnv(env),
  };
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNRESET',
  'EPIPE',
  'PROTOCOL_CONNECTION_LOST',
]);
const LOGIN_CODES = new Set(['ER_ACCESS_DENIED_ERROR', 'ER_DBACCESS_DENIED_ERROR', 'ER_HOST_NOT_PRIVILEGED', 'ER_HOST_IS_BLOCKED']);

/**
 * One line for an error that means "this database cannot be used as configured" (not reachable,
 * login refused, no such database, no schema); null for anything else. The URL is redacted.
 */
export function databaseProblem(error: unknown, url: string): string | null {
  const { code, errno } = (error ?? {}) as { code?: string; errno?: number };
  const where = redactUrl(url);
  if (code && NETWORK_CODES.has(code)) return `cannot reach the database at ${where} (${code}); set ORBIT_DATABASE_URL`;
  if (code && LOGIN_CODES.has(code)) return `the database at ${where} refused the login (${code}); check the user and password in ORBIT_DATABASE_URL`;
  if (code === 'ER_BAD_DB_ERROR') return `the database at ${where} does not exist; run \`orbit-admin migrate\` first`;
  if (errno === 1146) return `the database at ${where} has no Orbit schema; run \`orbit-admin migrate\` first`;
  return null;
}
