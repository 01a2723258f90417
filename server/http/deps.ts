/** What the HTTP app and its handlers are built from; tests build the same with their own database. */
import type { Database } from '../store/database/database.ts';
import type { Clock } from '../store/database/clock.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { KeyedBatcher } from '../batcher.ts';
import type { SubmitItem, SubmitOutcome } from '../store/tasks/admission.ts';
import type { Context } from 'hono';
import type { QueueIdCache } from '../store/quotas/queues.ts';
import type { Principal } from '../domain/principal.ts';
import type { PageAssets } from './pages.ts';
import type { EventWatcher } from './event-watcher.ts';

export interface AppDeps {
  db: Database;
  clock: Clock;
  log: Logger;
  metrics: Metrics;
  /** Group commit of submissions per application. */
  admission: KeyedBatcher<SubmitItem, SubmitOutcome>;
  /** One admission transaction for these items, in order (a bulk submit; the batcher runs the same). */
  submitBatch(items: SubmitItem[]): Promise<SubmitOutcome[]>;
  /** The OpenAPI document served at /openapi.yaml. */
  openApiDocument: string;
  /** Wakes requests that wait for events (long-polls): one per app, reading only while someone waits. */
  watcher: EventWatcher;
  /** /asyncapi.yaml, /docs and /console with what they load (pages.ts). */
  pages: PageAssets;
  /** How long a successful authentication is reused by this process (0: never). */
  authCacheMs: number;
  /**
   * The most one request may spend waiting on the database in all (ORBIT_DB_TIMEOUT_MS); past it
   * the request answers 503 UNAVAILABLE. A long-poll's own wait does not count: its reads do.
   */
  requestTimeoutMs: number;
  /** (namespace, queue name) → queue id, for the operations that name a queue in their path. */
  queueIds: QueueIdCache;
  /** Worker sessions (the WebSocket side); null where only HTTP is served (tests of the HTTP API). */
  workers: { connect(c: Context, principal: Principal): Promise<Response> } | null;
  /**
   * Readiness: the database answers and no migration is pending - asked on a connection of its
   * own, answered within READINESS_TIMEOUT_MS whatever the database does.
   */
  ready(): Promise<{ ok: boolean; detail?: string }>;
}
