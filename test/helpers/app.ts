/**
 * The real Hono app over a test database, called with `app.request()` (no socket). Its
 * dependencies are wired by the server's own buildDeps (server/deps.ts), with the default
 * configuration: the same admission batcher, readiness probe and documents as orbit-server.
 */
import { createApp } from '../../server/http/app.ts';
import { buildDeps } from '../../server/deps.ts';
import { loadConfig } from '../../server/config.ts';
import { silentLogger } from '../../server/log.ts';
import { TEST_DATABASE_TIMEOUT_MS } from './server-process.ts';
import { DatabaseClock } from '../../server/store/database/clock.ts';
import type { Database } from '../../server/store/database/database.ts';

export interface TestResponse {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

export interface RequestOptions {
  token?: string;
  body?: unknown;
  /** A raw body, sent as is. */
  rawBody?: string;
  key?: string;
  headers?: Record<string, string>;
}

/** Settings as in production by default (`authCacheMs` 1000 ms, `admissionInFlight` 1); no worker gateway. */
export async function testApp(db: Database, options: { authCacheMs?: number; admissionInFlight?: number } = {}) {
  const clock = new DatabaseClock(db);
  await clock.sample();
  const defaults = loadConfig({});
  const deps = buildDeps({
    db,
    clock,
    log: silentLogger(),
    config: {
      authCacheMs: options.authCacheMs ?? defaults.authCacheMs,
      admissionInFlight: options.admissionInFlight ?? defaults.admissionInFlight,
      // Slow is not down on a loaded test machine (helpers/server-process.ts).
      databaseTimeoutMs: TEST_DATABASE_TIMEOUT_MS,
    },
    workers: null,
  });
  const app = createApp(deps);
  async function request(method: string, path: string, options: RequestOptions = {}): Promise<TestResponse> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token !== undefined) headers.Authorization = `Bearer ${options.token}`;
    if (options.key !== undefined) headers['Idempotency-Key'] = options.key;
    let body: string | undefined;
    if (options.rawBody !== undefined) body = options.rawBody;
    else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['Content-Type'] ??= 'application/json';
    }
    const response = await app.request(path, { method, headers, body });
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: response.status, headers: response.headers, body: parsed, text };
  }
  return { app, deps, request };
}
