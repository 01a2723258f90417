/**
 * One Orbit server process: HTTP and WebSocket on one port, plus the background loops.
 * Stateless: everything that matters is in MySQL, so any number of these run side by side.
 */
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { createNodeWebSocket } from '@hono/node-ws';
import { databaseProblem, redactUrl, type ServerConfig } from './config.ts';
import { createLogger, type Logger } from './log.ts';
import { createMetrics, databaseObserver } from './metrics.ts';
import { createDatabase } from './store/database/database.ts';
import { MIN_MAX_PACKET_BYTES } from './store/database/packets.ts';
import { DatabaseClock, type Clock } from './store/database/clock.ts';
import { migrationStatus, readMigrationFiles } from './store/database/migrate.ts';
import { createApp } from './http/app.ts';
import type { AppDeps } from './http/deps.ts';
import { buildDeps } from './deps.ts';
import { WorkerGateway } from './worker/gateway.ts';
import { MAX_FRAME_BYTES } from './worker/frames.ts';
import { serveWorkerUpgrades } from './worker/upgrade.ts';
import { RecoveryLoop } from './loops/recovery.ts';
import { ScheduleLoop } from './loops/schedules.ts';
import { PruneLoop } from './loops/prune.ts';
import { registerRetentionGauges } from './retention-metrics.ts';
import { retentionSnapshot } from './store/retention/retention-gauges.ts';
import { registerUsageGauges } from './usage-metrics.ts';
import { setTaskEventsEnabled } from './store/records/task-events.ts';
import { usageSnapshot } from './store/quotas/usage-gauges.ts';

export { OPENAPI_PATH } from './deps.ts';

export interface RunningServer {
  url: string;
  deps: AppDeps;
  recovery: RecoveryLoop;
  schedules: ScheduleLoop;
  prune: PruneLoop;
  close(): Promise<void>;
}

/** Why this process cannot start, in one line (main prints it and exits 1). */
export class StartupError extends Error {}

const KEEP_ALIVE_MS = 65_000;

/** `serve`, with listen errors (port in use, say) as a rejection instead of an uncaught 'error' event. */
function listen(fetch: Parameters<typeof serve>[0]['fetch'], host: string, port: number): Promise<ServerType> {
  return new Promise((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException) => {
      const where = `${host.includes(':') ? `[${host}]` : host}:${port}`;
      const hint = 'set ORBIT_LISTEN=host:port to listen elsewhere';
      if (error.code === 'EADDRINUSE') reject(new StartupError(`${where} is already in use; ${hint}`));
      else if (error.code === 'EACCES') reject(new StartupError(`not allowed to listen on ${where} (EACCES); ${hint}`));
      else if (error.code === 'EADDRNOTAVAIL') reject(new StartupError(`cannot listen on ${where}: no such address on this machine (EADDRNOTAVAIL); ${hint}`));
      else if (error.code === 'ENOTFOUND' || error.code === 'EAI_AGAIN')
        reject(new StartupError(`cannot listen on ${where}: the host name does not resolve (${error.code}); ${hint}`));
      else reject(new StartupError(`cannot listen on ${where}: ${error.message}; ${hint}`));
    };
    const s = serve({ fetch, hostname: host, port }, () => {
      s.off('error', onError);
      resolve(s);
    });
    // Node closes an idle keep-alive connection after 5 s; a client that sends its next request
    // on that connection just as it closes gets ECONNRESET (seen under load). Keep idle
    // connections longer than the usual proxies and clients do (60 s), so the client, which
    // is told the timeout in the Keep-Alive header, always gives up first; headersTimeout must
    // exceed it or Node would cut a connection that is merely idle.
    const http = s as unknown as { keepAliveTimeout: number; headersTimeout: number };
    http.keepAliveTimeout = KEEP_ALIVE_MS;
    http.headersTimeout = KEEP_ALIVE_MS + 1_000;
    s.once('error', onError);
  });
}

export async function startServer(config: ServerConfig, options: { log?: Logger; clock?: Clock } = {}): Promise<RunningServer> {
  const log = options.log ?? createLogger(config.logLevel);
  const metrics = createMetrics();
  const db = createDatabase({
    url: config.databaseUrl,
    connectionLimit: config.databasePoolSize,
    timeoutMs: config.databaseTimeoutMs,
    checkLockOrder: config.checkLockOrder,
    checkShardRouting: config.checkShardRouting,
    ...(config.singleStatements === undefined ? {} : { singleStatements: config.singleStatements }),
    // Several hosts in ORBIT_DATABASE_URL (a cluster's nodes): say when the pool moves on.
    onHostChange: (url, cause) =>
      log.warn({ host: redactUrl(url), err: cause }, 'database host changed (the one in use was lost, or one listed before it serves again)'),
    // Statements, round trips and connection hold per operation, in /metrics.
    observer: databaseObserver(metrics),
  });
  // Read once: the start-up check below and /readyz (buildDeps) compare the database with these.
  const migrationFiles = readMigrationFiles();
  const status = await migrationStatus((sql) => db.rows(sql), migrationFiles).catch(async (error: unknown) => {
    await db.close();
    const problem = databaseProblem(error, config.databaseUrl);
    throw problem ? new StartupError(problem) : error;
  });
  if (status.mismatch || status.pending.length > 0) {
    await db.close();
    throw new StartupError(status.mismatch ?? `the database has pending migrations (${status.pending.join(', ')}); run \`orbit-admin migrate\` first`);
  }
  // Every batch is split by the server's max_allowed_packet (store/database/packets.ts); below
  // the minimum, one task's largest statement might not fit at all.
  const { maxAllowedPacket } = await db.readServerLimits();
  if (!(maxAllowedPacket >= MIN_MAX_PACKET_BYTES)) {
    await db.close();
    throw new StartupError(
      `the database's max_allowed_packet is ${maxAllowedPacket} bytes; Orbit needs at least ${MIN_MAX_PACKET_BYTES} (set max_allowed_packet = 16M or more in the server's configuration)`,
    );
  }
  let clock = options.clock;
  let dbClock: DatabaseClock | null = null;
  if (!clock) {
    dbClock = new DatabaseClock(db);
    await dbClock.start();
    clock = dbClock;
  }
  setTaskEventsEnabled(config.taskEvents);
  registerUsageGauges(metrics.registry, () => usageSnapshot(db, config.metricsMaxQueues), log);
  registerRetentionGauges(metrics.registry, () => retentionSnapshot(db), log);
  const workers = new WorkerGateway({
    db,
    log,
    metrics,
    leaseSeconds: config.leaseSeconds,
    frameTimeoutMs: config.databaseTimeoutMs,
    groupLingerMs: config.groupLingerMs,
  });
  const deps = buildDeps({ db, clock, log, config, workers, metrics, migrationFiles });
  const app = createApp(deps);
  const nodeWs = createNodeWebSocket({ app });
  nodeWs.wss.options.maxPayload = MAX_FRAME_BYTES;
  workers.attach(nodeWs.upgradeWebSocket as never);
  let server: ServerType;
  try {
    server = await listen(app.fetch, config.listenHost, config.listenPort);
  } catch (error) {
    // Nothing may keep the process alive: the gateway's timers, the clock, the pool.
    await workers.close();
    dbClock?.stop();
    await db.close();
    throw error;
  }
  serveWorkerUpgrades(server as never, app, nodeWs.wss);
  const recovery = new RecoveryLoop({ db, log, metrics, intervalMs: config.recoveryIntervalMs, leaseSeconds: config.leaseSeconds });
  recovery.start();
  const schedules = new ScheduleLoop({ db, log, metrics, intervalMs: config.scheduleIntervalMs });
  schedules.start();
  const prune = new PruneLoop({
    db,
    log,
    metrics,
    intervalMs: config.pruneIntervalMs,
    batchRows: config.pruneBatchRows,
    maxShare: config.pruneMaxShare,
  });
  if (config.pruneIntervalMs > 0) prune.start();
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  log.info({ url, leaseSeconds: config.leaseSeconds }, 'listening');
  return {
    url,
    deps,
    recovery,
    schedules,
    prune,
    async close() {
      // Stop accepting, close worker sockets (their unstarted reservations go back), then stop the loops.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const client of nodeWs.wss.clients) client.close(1001, 'server shutting down');
      await recovery.stop();
      await schedules.stop();
      await prune.stop();
      deps.watcher.stop();
      await workers.close();
      (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      await closed;
      dbClock?.stop();
      await db.close();
    },
  };
}
