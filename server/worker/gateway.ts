/**
 * Worker sessions of this server process: the WebSocket upgrade, group commit of Starts and
 * results per application, the heartbeat that keeps this process's sessions alive in the
 * database, `cancel_requested` notifications for running attempts whose task was cancelled
 * (the cancel may have arrived at any server process; the database tells), and the end of
 * sessions whose credential may no longer act (revoked or disabled anywhere; the database tells).
 */
import type { Context } from 'hono';
import type { UpgradeWebSocket } from 'hono/ws';
import { OrbitError, invalidArgument } from '../errors.ts';
import { idToHex, type IdBytes } from '../ids.ts';
import type { Principal } from '../domain/principal.ts';
import { KeyedBatcher } from '../batcher.ts';
import { withoutDeadline } from '../deadline.ts';
import { withOperation } from '../operation.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { DEFAULT_DATABASE_TIMEOUT_MS, type Database } from '../store/database/database.ts';
import { startAttempts, type StartAnswer, type StartItem } from '../store/attempts/attempt-start.ts';
import { completeAttempts, completionBytes, type CompleteAnswer, type CompleteItem } from '../store/attempts/attempt-complete.ts';
import { sessionReleaseReservations } from '../store/attempts/attempt-results.ts';
import { attemptRenewBatch } from '../store/attempts/attempts.ts';
import type { KnownAttempt } from '../store/attempts/fast-path-guards.ts';
import { attemptTakeCancelNotices } from '../store/attempts/cancel-notices.ts';
import { sessionHeartbeat, sessionMarkClosed, sessionsWithInvalidCredential } from '../store/workers/worker-sessions.ts';
import { attemptClaimGroup, type ClaimOutcome, type ClaimRequest, type ClaimedAttemptInfo } from '../store/attempts/claims.ts';
import type { SessionInfo } from '../store/workers/worker-sessions.ts';
import { WorkerSession } from './session.ts';
import type { UpgradeEnv } from './upgrade.ts';

export interface WorkerGatewayOptions {
  db: Database;
  log: Logger;
  metrics: Metrics;
  leaseSeconds: number;
  /** How often running attempts of this process's sessions are checked for a cancel intent. */
  cancelPollMs?: number;
  /**
   * The longest a frame's database work may take in all (ORBIT_DB_TIMEOUT_MS): past it the frame
   * is answered with an `error` UNAVAILABLE (deadline.ts). Default DEFAULT_DATABASE_TIMEOUT_MS.
   */
  frameTimeoutMs?: number;
  /**
   * How often the credentials of this process's sessions are checked (default 1000 ms): a
   * session whose credential was revoked or expired, or whose namespace or application was
   * disabled, is ended within about this long, whether or not its worker sends anything.
   */
  credentialCheckMs?: number;
  /**
   * ORBIT_GROUP_LINGER_MS (default 0 here, 2 in orbit-server): how long the first start or
   * result of an idle application waits for others to join its group, and its first claim when
   * another session of the application is in this process. Measured (bench/RESULTS.md): a 1 × 16
   * drain sent 3.4 instead of 4.4 statements per task and spent about a tenth less CPU per task;
   * an idle worker's answer comes that much later.
   */
  groupLingerMs?: number;
}

export class WorkerGateway {
  readonly db: Database;
  readonly log: Logger;
  readonly metrics: Metrics;
  readonly leaseSeconds: number;
  readonly frameTimeoutMs: number;
  readonly groupLingerMs: number;
  private upgradeWebSocket: UpgradeWebSocket<unknown> | null = null;
  private readonly sessions = new Map<string, WorkerSession>();
  /** Open sessions of this process per application (hex id). */
  private readonly sessionsPerApplication = new Map<string, number>();
  private readonly starts: KeyedBatcher<StartItem & KnownAttempt, StartAnswer>;
  private readonly completes: KeyedBatcher<CompleteItem & KnownAttempt, CompleteAnswer>;
  private readonly claims: KeyedBatcher<ClaimRequest, ClaimOutcome>;
  private readonly renewals: KeyedBatcher<{ sessionId: IdBytes; attemptId: IdBytes }, number | null>;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly closing = new Set<Promise<void>>();

  constructor(options: WorkerGatewayOptions) {
    this.db = options.db;
    this.log = options.log;
    this.metrics = options.metrics;
    this.leaseSeconds = options.leaseSeconds;
    this.frameTimeoutMs = options.frameTimeoutMs ?? DEFAULT_DATABASE_TIMEOUT_MS;
    this.groupLingerMs = options.groupLingerMs ?? 0;
    const timed = <T>(operation: string, work: () => Promise<T>) => {
      const end = this.metrics.transactionSeconds.startTimer({ operation });
      return withOperation(operation, () => work().finally(end));
    };
    // Starts and results of one application group-commit; each group takes the one-round-trip
    // path when nothing is unusual, else the careful one (attempt-start.ts, attempt-complete.ts).
    this.starts = new KeyedBatcher(
      (applicationHex, items) =>
        timed('start', async () => {
          const { answers, path } = await startAttempts(this.db, { applicationId: Buffer.from(applicationHex, 'hex'), items, leaseSeconds: this.leaseSeconds });
          this.metrics.fastPath.inc({ operation: 'start', result: path === 'fast' ? 'hit' : 'miss' });
          return answers;
        }),
      { maxBatch: 128, maxInFlight: 1, lingerMs: this.groupLingerMs },
    );
    this.completes = new KeyedBatcher(
      (applicationHex, items) =>
        timed('complete', async () => {
          const { answers, path } = await completeAttempts(this.db, { applicationId: Buffer.from(applicationHex, 'hex'), items });
          this.metrics.fastPath.inc({ operation: 'complete', result: path === 'fast' ? 'hit' : 'miss' });
          return answers;
        }),
      // Bounded by bytes too: the fast path's one UPDATE carries every result of the group.
      {
        maxBatch: 128,
        maxInFlight: 1,
        weight: (item: CompleteItem & KnownAttempt) => completionBytes(item),
        maxWeight: () => this.db.packets.budgetBytes / 2,
        lingerMs: this.groupLingerMs,
      },
    );
    // Claims of one application group-commit too: the claims of every session of this process
    // that arrive while the previous group runs are decided together, in one transaction
    // (claims.ts), so more sessions mean larger groups rather than more transactions queueing
    // on the application row.
    // A claim lingers only where another session of its application in this process could join
    // it: a worker's session has one claim in flight at a time, so a lone session's claim would
    // wait for nobody (measured: 1 × 16 drained about a tenth slower with it).
    this.claims = new KeyedBatcher((_applicationHex, requests) => timed('claim', () => attemptClaimGroup(this.db, requests, this.leaseSeconds)), {
      lingerMs: (applicationHex) => ((this.sessionsPerApplication.get(applicationHex) ?? 0) > 1 ? this.groupLingerMs : 0),
      maxBatch: 64,
      maxInFlight: 1,
    });
    // Renewals group-commit too: they touch only attempt rows (no hot row), so several groups
    // may be in flight; what a group saves is commits.
    this.renewals = new KeyedBatcher((_applicationHex, items) => timed('renew', () => attemptRenewBatch(this.db, { items, leaseSeconds: this.leaseSeconds })), {
      maxBatch: 256,
      maxInFlight: 4,
    });
    // Background work, outside any request's deadline (deadline.ts).
    const every = (ms: number, fn: () => Promise<void>) => withoutDeadline(() => setInterval(() => void fn(), ms));
    const heartbeat = every(Math.max(1000, (this.leaseSeconds * 1000) / 3), () => this.heartbeat());
    const cancels = every(options.cancelPollMs ?? 250, () => this.notifyCancellations());
    const credentials = every(options.credentialCheckMs ?? 1000, () => this.endInvalidSessions());
    heartbeat.unref();
    cancels.unref();
    credentials.unref();
    this.timers.push(heartbeat, cancels, credentials);
  }

  /** A session's claim, decided in its application's next claim group. */
  async claim(session: SessionInfo, max: number, start: boolean): Promise<ClaimedAttemptInfo[]> {
    const outcome = await this.claims.submit(idToHex(session.principal.applicationId), { session, max, start });
    if (!outcome.ok) throw outcome.error;
    return outcome.claimed;
  }

  /** Set once the Node WebSocket adapter exists (it needs the Hono app, which needs this gateway). */
  attach(upgradeWebSocket: UpgradeWebSocket<unknown>): void {
    this.upgradeWebSocket = upgradeWebSocket;
  }

  /** The handler of `GET /v1/workers/connect`, after authentication and the `workers:consume` check. */
  async connect(c: Context, principal: Principal): Promise<Response> {
    if (c.req.header('Upgrade')?.toLowerCase() !== 'websocket')
      throw invalidArgument('Upgrade', 'must be websocket: this is the worker WebSocket endpoint (see asyncapi.yaml)', 'header');
    // A request that did not come as an HTTP upgrade (no `Connection: Upgrade`) cannot become one.
    if ((c.env as Partial<UpgradeEnv> | undefined)?.viaUpgrade !== true)
      throw invalidArgument('Connection', 'must be Upgrade: a worker session is a WebSocket upgrade', 'header');
    // What the WebSocket server would refuse with a bare 400, refused here in the envelope.
    if (!/^[+/0-9A-Za-z]{22}==$/.test(c.req.header('Sec-WebSocket-Key') ?? ''))
      throw invalidArgument('Sec-WebSocket-Key', 'must be 16 bytes in base64', 'header');
    if (c.req.header('Sec-WebSocket-Version') !== '13') throw invalidArgument('Sec-WebSocket-Version', 'must be 13', 'header');
    if (!this.upgradeWebSocket) throw new OrbitError('UNAVAILABLE', 'worker sessions are not served by this process');
    let session: WorkerSession | null = null;
    const middleware = this.upgradeWebSocket(() => ({
      onOpen: (_event, ws) => {
        session = new WorkerSession(this, principal, ws);
      },
      onMessage: (event) => {
        void session?.onMessage(event.data);
      },
      onClose: () => {
        if (session) this.trackClosing(session.onClose());
      },
    }));
    const response = await middleware(c, async () => {});
    if (!response) throw new OrbitError('INTERNAL', 'the WebSocket upgrade was not taken');
    // Tells serveWorkerUpgrades (upgrade.ts) to hand the socket to the WebSocket server.
    (c.env as UpgradeEnv).accepted = true;
    return response;
  }

  register(session: WorkerSession): void {
    const key = session.sessionHex;
    if (key && !this.sessions.has(key)) {
      this.sessions.set(key, session);
      this.countSession(session.principal.applicationId, 1);
    }
    this.metrics.workerSessions.set(this.sessions.size);
  }

  private countSession(applicationId: IdBytes, delta: number): void {
    const app = idToHex(applicationId);
    const n = (this.sessionsPerApplication.get(app) ?? 0) + delta;
    if (n > 0) this.sessionsPerApplication.set(app, n);
    else this.sessionsPerApplication.delete(app);
  }

  /** Remembers a session's closing work, so `close()` waits for its reservations to go back. */
  trackClosing(closing: Promise<void>): void {
    this.closing.add(closing);
    void closing.finally(() => this.closing.delete(closing));
  }

  /** Called when a session's socket closed, or the server ended it: give back its unstarted reservations and close its row. */
  async unregister(session: WorkerSession): Promise<void> {
    const info = session.info;
    if (!info) return;
    if (this.sessions.delete(idToHex(info.sessionId))) this.countSession(info.principal.applicationId, -1);
    this.metrics.workerSessions.set(this.sessions.size);
    try {
      // Background work, not the frame's: outside any request's deadline (only the per-wait
      // timeouts bound it), so a session ended at the end of a frame's time still closes.
      await withoutDeadline(async () => {
        // Closed first: a claim still in flight locks the session row and refuses a closed
        // session, so the release below sees every reservation the session will ever have.
        await sessionMarkClosed(this.db, info.sessionId);
        const released = await sessionReleaseReservations(this.db, { applicationId: info.principal.applicationId, sessionId: info.sessionId });
        if (released > 0) this.metrics.releases.inc(released);
      });
    } catch (error) {
      // Recovery gives the reservations back when their leases run out.
      this.log.warn({ err: error, session: idToHex(info.sessionId) }, 'closing a session failed; recovery will release its reservations');
    }
  }

  start(applicationId: IdBytes, item: StartItem & KnownAttempt): Promise<StartAnswer> {
    return this.starts.submit(idToHex(applicationId), item);
  }

  /** A renewal, group-committed with the others of its application: the new lease end, or null when the lease was lost. */
  renew(applicationId: IdBytes, item: { sessionId: IdBytes; attemptId: IdBytes }): Promise<number | null> {
    return this.renewals.submit(idToHex(applicationId), item);
  }

  complete(applicationId: IdBytes, item: CompleteItem & KnownAttempt): Promise<CompleteAnswer> {
    return this.completes.submit(idToHex(applicationId), item);
  }

  /** The ids of this process's open sessions. */
  private sessionIds(): IdBytes[] {
    return [...this.sessions.values()].map((s) => s.info?.sessionId).filter((id): id is IdBytes => id !== undefined);
  }

  private readonly roundsRunning = new Set<string>();

  /**
   * One round of a background task over this process's sessions: skipped while the previous
   * round of the same task still runs or no session is open; a round that fails (the database is
   * away) is logged and changes nothing - the next one tries again.
   */
  private async sessionRound(name: string, round: (ids: IdBytes[]) => Promise<void>): Promise<void> {
    if (this.roundsRunning.has(name) || this.sessions.size === 0) return;
    this.roundsRunning.add(name);
    try {
      await round(this.sessionIds());
    } catch (error) {
      this.log.warn({ err: error }, `${name} round failed`);
    } finally {
      this.roundsRunning.delete(name);
    }
  }

  private heartbeat(): Promise<void> {
    return this.sessionRound('session heartbeat', (ids) => sessionHeartbeat(this.db, ids));
  }

  private notifyCancellations(): Promise<void> {
    return this.sessionRound('cancel notification', async (ids) => {
      const rows = await attemptTakeCancelNotices(this.db, ids);
      for (const row of rows) this.sessions.get(idToHex(row.session_id))?.send({ type: 'cancel_requested', attempt_id: idToHex(row.attempt_id) });
    });
  }

  /**
   * Ends the sessions of this process whose credential may no longer act. A revoke or disable
   * happens on any process (or in orbit-admin) and the per-process authentication cache does
   * not hear of it, so each round asks the database, in one read for all sessions; without it a
   * session would carry on until its next claim, and an idle one forever. The session sends an
   * `error` UNAUTHENTICATED with the cause, closes with 4401 and is closed as on a disconnect.
   * A failed round (the database is down) ends nothing: the next one asks again.
   */
  private endInvalidSessions(): Promise<void> {
    return this.sessionRound('credential check of worker sessions', async (ids) => {
      for (const { sessionId, cause } of await sessionsWithInvalidCredential(this.db, ids)) {
        const session = this.sessions.get(idToHex(sessionId));
        if (!session) continue;
        this.log.info({ session: idToHex(sessionId), cause }, 'ending a worker session: its credential may no longer act');
        session.end(new OrbitError('UNAUTHENTICATED', cause));
      }
    });
  }

  /** Stops the loops and waits for sessions that are closing to give back their reservations. */
  async close(): Promise<void> {
    for (const timer of this.timers) clearInterval(timer);
    await Promise.allSettled([...this.closing]);
  }
}
