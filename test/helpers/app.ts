/** The real Hono app over a test database, called with `app.request()` (no socket). */
import { readFileSync } from 'node:fs';
import { createApp } from '../../server/http/app.ts';
import type { AppDeps } from '../../server/http/deps.ts';
import { silentLogger } from '../../server/log.ts';
import { createMetrics } from '../../server/metrics.ts';
import { KeyedBatcher } from '../../server/domain/batcher.ts';
import { taskSubmitBatch } from '../../server/store/tasks/admission.ts';
import { DatabaseClock } from '../../server/store/database/clock.ts';
import type { Database } from '../../server/store/database/database.ts';
import { OPENAPI_PATH } from '../../server/server.ts';

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

/** `authCacheMs` as in production by default (1000 ms). */
export async function testApp(db: Database, options: { authCacheMs?: number } = {}) {
  const clock = new DatabaseClock(db);
  await clock.sample();
  const deps: AppDeps = {
    db,
    clock,
    log: silentLogger(),
    metrics: createMetrics(),
    admission: new KeyedBatcher((_key, items) => taskSubmitBatch(db, clock, items), { maxBatch: 64, maxInFlight: 2 }),
    openApiDocument: readFileSync(OPENAPI_PATH, 'utf8'),
    authCacheMs: options.authCacheMs ?? 1000,
    workers: null,
    ready: async () => ({ ok: true }),
  };
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
    let parsed: unknown = undefined;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: response.status, headers: response.headers, body: parsed, text };
  }
  return { app, deps, request };
}
