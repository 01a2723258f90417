/**
 * The one wiring of what the HTTP app runs on (`AppDeps`, server/http/deps.ts): orbit-server
 * (server.ts) and the tests' in-process app (test/helpers/app.ts) both build it here, so the
 * tests exercise the same admission batcher (its in-flight bound from the configuration), the
 * same readiness probe and the same documents as production.
 *
 * Everything a process keeps between requests is created here, per call, never at module
 * level: two apps in one process (tests) share nothing but the database. The principal cache
 * is per app (server/http/app.ts).
 */
import { readFileSync } from 'node:fs';
import type { ServerConfig } from './config.ts';
import type { Logger } from './log.ts';
import { createMetrics, type Metrics } from './metrics.ts';
import type { Database } from './store/database/database.ts';
import type { Clock } from './store/database/clock.ts';
import { migrationStatus, readMigrationFiles, type MigrationFile, type MigrationStatus } from './store/database/migrate.ts';
import { submissionBytes, taskSubmitBatch, type SubmitItem, type SubmitOutcome } from './store/tasks/admission.ts';
import { QueueIdCache } from './store/quotas/queues.ts';
import { KeyedBatcher } from './batcher.ts';
import { withOperation } from './operation.ts';
import type { AppDeps } from './http/deps.ts';
import { loadPageAssets } from './http/pages.ts';
import { EventWatcher } from './http/event-watcher.ts';

export { OPENAPI_PATH } from './paths.ts';
import { OPENAPI_PATH } from './paths.ts';

/** Submissions one admission transaction takes at most. */
const ADMISSION_MAX_BATCH = 64;

/**
 * How long /readyz waits for the database at most: a Kubernetes probe gives up after 1 s by
 * default, and a probe that times out tells it nothing. Past it the answer is 503.
 */
export const READINESS_TIMEOUT_MS = 700;

export interface BuildDepsOptions {
  db: Database;
  clock: Clock;
  log: Logger;
  /** The settings the app depends on (the rest of ServerConfig is the server's: listening, pool, loops). */
  config: Pick<ServerConfig, 'admissionInFlight' | 'authCacheMs' | 'databaseTimeoutMs'>;
  /** The worker gateway, or null where only HTTP is served (tests of the HTTP API). */
  workers: AppDeps['workers'];
  /** Created when not given; the server passes the registry its gateway and loops count into too. */
  metrics?: Metrics;
  /**
   * This build's migrations, which /readyz compares with the database on every probe. Read
   * from migrations/ when not given; the server passes the ones its start-up check read.
   */
  migrationFiles?: MigrationFile[];
}

export function readiness(status: MigrationStatus): { ok: boolean; detail?: string } {
  if (status.mismatch) return { ok: false, detail: status.mismatch };
  if (status.pending.length > 0) return { ok: false, detail: `pending migrations: ${status.pending.join(', ')}` };
  return { ok: true };
}

/** Concurrent callers share the call in flight: a burst of probes makes one. */
function singleFlight<T>(fn: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | null = null;
  return () => {
    running ??= fn().finally(() => {
      running = null;
    });
    return running;
  };
}

export function buildDeps(options: BuildDepsOptions): AppDeps {
  const { db, clock, log, config, workers } = options;
  const metrics = options.metrics ?? createMetrics();
  // Read once: /readyz compares the database with these on every probe.
  const migrationFiles = options.migrationFiles ?? readMigrationFiles();
  // One admission transaction, timed: what the batcher runs for grouped single submits and what
  // a bulk submit runs for its items.
  const submitBatch = (items: SubmitItem[]): Promise<SubmitOutcome[]> => {
    if (items.length === 0) return Promise.resolve([]);
    const end = metrics.transactionSeconds.startTimer({ operation: 'submit' });
    return withOperation('submit', () => taskSubmitBatch(db, clock, items).finally(end));
  };
  return {
    db,
    clock,
    log,
    metrics,
    admission: new KeyedBatcher((_applicationId, items) => submitBatch(items), {
      maxBatch: ADMISSION_MAX_BATCH,
      maxInFlight: config.admissionInFlight,
      // Bounded by bytes too: the payloads of a group fit in one database packet.
      weight: submissionBytes,
      maxWeight: () => db.packets.budgetBytes,
    }),
    submitBatch,
    openApiDocument: readFileSync(OPENAPI_PATH, 'utf8'),
    pages: loadPageAssets(),
    watcher: new EventWatcher(db, log),
    authCacheMs: config.authCacheMs,
    requestTimeoutMs: config.databaseTimeoutMs,
    queueIds: new QueueIdCache(),
    workers,
    ready: singleFlight(async () =>
      // Its own small pool, not behind the requests' connections: a probe is answered in time
      // even while every pooled connection waits on a database that stopped answering.
      readiness(await db.probe((q) => migrationStatus((sql) => q.rows(sql), migrationFiles), READINESS_TIMEOUT_MS)),
    ),
  };
}
