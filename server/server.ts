/**
 * One Orbit server process: HTTP and WebSocket on one port, plus the background loops.
 * Stateless: everything that matters is in MySQL, so any number of these run side by side.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { createNodeWebSocket } from '@hono/node-ws';
import type { ServerConfig } from './config.ts';
import { createLogger, type Logger } from './log.ts';
import { createMetrics } from './metrics.ts';
import { createDatabase } from './store/database.ts';
import { DatabaseClock, type Clock } from './store/clock.ts';
import { pendingMigrations, readMigrationFiles } from './store/migrate.ts';
import { KeyedBatcher } from './domain/batcher.ts';
import { taskSubmitBatch } from './store/admission.ts';
import { createApp } from './http/app.ts';
import type { AppDeps } from './http/deps.ts';
import { WorkerGateway } from './worker/gateway.ts';
import { MAX_FRAME_BYTES } from './worker/frames.ts';
import { RecoveryLoop } from './loops/recovery.ts';

export const OPENAPI_PATH = fileURLToPath(new URL('../openapi.yaml', import.meta.url));

export interface RunningServer {
  url: string;
  deps: AppDeps;
  recovery: RecoveryLoop;
  close(): Promise<void>;
}

export async function startServer(config: ServerConfig, options: { log?: Logger; clock?: Clock } = {}): Promise<RunningServer> {
  const log = options.log ?? createLogger(config.logLevel);
  const db = createDatabase({ url: config.databaseUrl, connectionLimit: config.databasePoolSize });
  // Read once: /readyz compares the database with these on every probe.
  const migrationFiles = readMigrationFiles();
  const pending = await pendingMigrations((sql) => db.rows(sql), migrationFiles);
  if (pending.length > 0) {
    await db.close();
    throw new Error(`the database has pending migrations (${pending.join(', ')}); run \`orbit-admin migrate\` first`);
  }
  let clock = options.clock;
  let dbClock: DatabaseClock | null = null;
  if (!clock) {
    dbClock = new DatabaseClock(db);
    await dbClock.start();
    clock = dbClock;
  }
  const metrics = createMetrics();
  const admissionClock = clock;
  const workers = new WorkerGateway({ db, log, metrics, leaseSeconds: config.leaseSeconds });
  const deps: AppDeps = {
    db,
    clock,
    log,
    metrics,
    admission: new KeyedBatcher((_applicationId, items) => {
      const end = metrics.transactionSeconds.startTimer({ operation: 'submit' });
      return taskSubmitBatch(db, admissionClock, items).finally(end);
    }, { maxBatch: 64, maxInFlight: Number(process.env.ORBIT_ADMISSION_IN_FLIGHT ?? 1) }),
    openApiDocument: readFileSync(OPENAPI_PATH, 'utf8'),
    authCacheMs: config.authCacheMs,
    workers,
    async ready() {
      const missing = await pendingMigrations((sql) => db.rows(sql), migrationFiles);
      return missing.length === 0 ? { ok: true } : { ok: false, detail: `pending migrations: ${missing.join(', ')}` };
    },
  };
  const app = createApp(deps);
  const nodeWs = createNodeWebSocket({ app });
  nodeWs.wss.options.maxPayload = MAX_FRAME_BYTES;
  workers.attach(nodeWs.upgradeWebSocket as never);
  const server: ServerType = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: config.listenHost, port: config.listenPort }, () => resolve(s));
  });
  nodeWs.injectWebSocket(server as never);
  const recovery = new RecoveryLoop({ db, log, metrics, intervalMs: config.recoveryIntervalMs, leaseSeconds: config.leaseSeconds });
  recovery.start();
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  log.info({ url, leaseSeconds: config.leaseSeconds }, 'listening');
  return {
    url,
    deps,
    recovery,
    async close() {
      // Stop accepting, close worker sockets (their unstarted reservations go back), then stop the loops.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const client of nodeWs.wss.clients) client.close(1001, 'server shutting down');
      await recovery.stop();
      await workers.close();
      (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      await closed;
      dbClock?.stop();
      await db.close();
    },
  };
}
