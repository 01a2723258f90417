/**
 * Real `orbit-server` processes on a test database, for tests that must prove behaviour across
 * processes. Each listens on a free port and reports its URL in its "listening" log line.
 *
 * What runs is bin/orbit-server.mjs, or - when `npm test` has bundled the same sources into
 * `.local/orbit-server.mjs` for this run (scripts/bundle-server.mjs, named by
 * ORBIT_TEST_SERVER_BUNDLE) - that bundle, which starts without loading TypeScript through tsx.
 * The real bin program is still run by test/integration/cli.test.ts and startup.test.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';

const BUNDLE = process.env.ORBIT_TEST_SERVER_BUNDLE;
const BIN = BUNDLE && existsSync(BUNDLE) ? BUNDLE : fileURLToPath(new URL('../../bin/orbit-server.mjs', import.meta.url));

/** The database bound of the servers and apps tests start, unless a test sets its own (see server-process.ts). */
export const TEST_DATABASE_TIMEOUT_MS = 30_000;

export interface ServerProcess {
  url: string;
  child: ChildProcess;
  /** Log lines seen so far (JSON objects). */
  logs: Array<Record<string, unknown>>;
  /** SIGTERM and wait for the exit. */
  stop(): Promise<void>;
  /** SIGKILL: no shutdown work at all, like a crash. */
  kill(): Promise<void>;
}

export async function startServerProcess(databaseUrl: string, env: Record<string, string> = {}): Promise<ServerProcess> {
  const child = spawn(process.execPath, [BIN], {
    env: {
      ...process.env,
      ORBIT_DATABASE_URL: databaseUrl,
      ORBIT_LISTEN: '127.0.0.1:0',
      ORBIT_LOG_LEVEL: 'info',
      // A request that is merely slow on a loaded machine must not turn into a 503 that an exact
      // count then misses: tests about the bound itself (database-freeze, database-outage) set it.
      ORBIT_DB_TIMEOUT_MS: String(TEST_DATABASE_TIMEOUT_MS),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: Array<Record<string, unknown>> = [];
  const stderr: string[] = [];
  child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`orbit-server did not start in 30 s: ${stderr.join('')}`)), 30_000);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      logs.push(entry);
      if (entry.msg === 'listening' && typeof entry.url === 'string') {
        clearTimeout(timer);
        resolve(entry.url);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`orbit-server exited with ${code}: ${stderr.join('')}`));
    });
  });
  return {
    url,
    child,
    logs,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      // A process that does not stop in time is killed: a test never leaves one behind.
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
    async kill() {
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/** A small HTTP client for raw requests against a server process. */
export async function call(
  url: string,
  method: string,
  path: string,
  options: { token: string; key?: string; body?: unknown },
): Promise<{ status: number; body: any; headers: Headers }> {
  const headers: Record<string, string> = { Authorization: `Bearer ${options.token}` };
  if (options.key !== undefined) headers['Idempotency-Key'] = options.key;
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(`${url}${path}`, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined, headers: response.headers };
}

/** Changes some of a queue's settings through the API (full replacement: the rest as they are). */
export async function configureQueue(url: string, token: string, name: string, patch: Record<string, unknown>): Promise<void> {
  const q = (await call(url, 'GET', `/v1/queues/${name}`, { token })).body.data;
  const response = await call(url, 'POST', `/v1/queues/${name}:configure`, {
    token,
    key: `configure-${name}-${q.revision}-${Math.random().toString(36).slice(2)}`,
    body: {
      expected_revision: q.revision,
      reason: 'test',
      max_unfinished_tasks: q.max_unfinished_tasks,
      max_concurrency: q.max_concurrency,
      rate_per_second: q.rate_per_second,
      key_concurrency: q.key_concurrency,
      paused: q.paused,
      ...patch,
    },
  });
  if (response.status !== 200) throw new Error(`configure ${name}: ${JSON.stringify(response.body)}`);
}
