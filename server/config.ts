/** Settings from the environment, with the defaults of DESIGN.md §11. */
export interface ServerConfig {
  databaseUrl: string;
  listenHost: string;
  listenPort: number;
  /** How long a reservation or a running attempt lives without a renew. */
  leaseSeconds: number;
  /** How often each process's recovery loop looks for expired leases and deadlines. */
  recoveryIntervalMs: number;
  databasePoolSize: number;
  /** How long this process reuses a successful authentication (writes re-check in their transaction anyway). */
  authCacheMs: number;
  logLevel: string;
}

export const DEFAULT_DATABASE_URL = 'mysql://root@127.0.0.1:3306/orbit';

function intFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) throw new Error(`${name} must be an integer from ${min} to ${max}, got "${raw}"`);
  return value;
}

export function databaseUrlFromEnv(env: NodeJS.ProcessEnv = process.env): string {
  return env.ORBIT_DATABASE_URL || DEFAULT_DATABASE_URL;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const listen = env.ORBIT_LISTEN || '127.0.0.1:8080';
  const match = /^(.*):(\d+)$/.exec(listen);
  if (!match) throw new Error(`ORBIT_LISTEN must be host:port, got "${listen}"`);
  const port = Number(match[2]);
  if (port > 65535) throw new Error(`ORBIT_LISTEN port out of range: ${listen}`);
  return {
    databaseUrl: databaseUrlFromEnv(env),
    listenHost: (match[1] as string).replace(/^\[(.*)\]$/, '$1'),
    listenPort: port,
    leaseSeconds: intFromEnv(env, 'ORBIT_LEASE_SECONDS', 30, 1, 3600),
    recoveryIntervalMs: intFromEnv(env, 'ORBIT_RECOVERY_INTERVAL_MS', 500, 10, 60_000),
    databasePoolSize: intFromEnv(env, 'ORBIT_DB_POOL_SIZE', 24, 2, 500),
    authCacheMs: intFromEnv(env, 'ORBIT_AUTH_CACHE_MS', 1000, 0, 60_000),
    logLevel: env.ORBIT_LOG_LEVEL || 'info',
  };
}
