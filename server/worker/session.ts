/**
 * One worker's WebSocket session on this server process. It keeps, per attempt it claimed,
 * which task and queue the attempt belongs to (so Start and results can lock the right rows in
 * lock order without a lookup); the database stays the authority on whether the attempt is
 * still this session's.
 */
import type { WSContext } from 'hono/ws';
import { OrbitError } from '../errors.ts';
import { idToHex, hexToId } from '../ids.ts';
import type { Principal } from '../domain/principal.ts';
import { toCallerError, toOrbitError } from '../failures.ts';
import type { AttemptRef } from '../store/attempts/attempts.ts';
import { attemptReleaseBatch } from '../store/attempts/attempt-results.ts';
import { sessionOpen, type SessionInfo } from '../store/workers/worker-sessions.ts';
import type { ClaimFrame, CompleteFrame, HelloFrame, ServerFrame, WorkerFrame } from '../generated/frames.ts';
import { encodeFrame, errorFrame, MAX_FRAME_BYTES, parseWorkerFrame } from './frames.ts';
import type { WorkerGateway } from './gateway.ts';
import { withFreshDeadline } from '../deadline.ts';
import { withOperation } from '../operation.ts';

/** A frame's size in bytes as received (text or binary). */
function frameBytes(data: unknown): number {
  if (typeof data === 'string') return Buffer.byteLength(data, 'utf8');
  if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) return data.byteLength;
  return MAX_FRAME_BYTES;
}

interface HeldAttempt extends AttemptRef {
  claimedAtMs: number;
  resourceKey: string | null;
  deadlineAtMs: number;
}

export class WorkerSession {
  info: SessionInfo | null = null;
  private hello: Promise<void> | null = null;
  private readonly held = new Map<string, HeldAttempt>();
  /** Recently finished attempts, so a repeated `complete` (a lost answer) gets the same answer. */
  private readonly finished = new Map<string, { outcome: string; taskState: string }>();
  private closed = false;
  /** The server is ending this session (`end`): it takes no more frames, and `end` closes it. */
  private ending = false;

  constructor(
    private readonly gateway: WorkerGateway,
    readonly principal: Principal,
    private readonly socket: WSContext,
  ) {}

  get sessionHex(): string | null {
    return this.info ? idToHex(this.info.sessionId) : null;
  }

  send(frame: ServerFrame): void {
    if (this.closed) return;
    try {
      this.socket.send(encodeFrame(frame));
    } catch {
      // The socket is going away; onClose cleans up.
    }
  }

  /**
   * Frames are handled concurrently (so Starts and results of many attempts batch), except that
   * everything waits for `hello`. Each frame is answered within the gateway's frame timeout
   * (ORBIT_DB_TIMEOUT_MS): every database wait it makes is bounded by it (deadline.ts).
   */
  onMessage(data: unknown): Promise<void> {
    // Its own bound, whatever context the socket's events run in (not the upgrade request's).
    return withFreshDeadline(this.gateway.frameTimeoutMs, () => this.handle(data));
  }

  private async handle(data: unknown): Promise<void> {
    // A session the server ends takes no more frames, as if its socket had closed: what the
    // worker sent meanwhile is not carried out (its running attempts are left to their leases).
    if (this.closed || this.ending) return;
    let frame: WorkerFrame;
    try {
      frame = parseWorkerFrame(data);
    } catch (error) {
      this.send(errorFrame(toOrbitError(error)));
      return;
    }
    const ids: { attempt_id?: string; claim_id?: string } = {};
    if ('attempt_id' in frame) ids.attempt_id = frame.attempt_id;
    if ('claim_id' in frame) ids.claim_id = frame.claim_id;
    // The frame's statements are counted as its type (operation.ts); the group commits of
    // claims, Starts and results name their own.
    return withOperation(frame.type, () => this.handleFrame(frame, ids, data));
  }

  private async handleFrame(frame: WorkerFrame, ids: { attempt_id?: string; claim_id?: string }, data: unknown): Promise<void> {
    try {
      if (frame.type === 'hello') {
        if (this.hello) throw new OrbitError('STATE_CONFLICT', 'hello was already sent on this session');
        this.hello = this.onHello(frame);
        await this.hello;
        return;
      }
      if (!this.hello) throw new OrbitError('STATE_CONFLICT', 'send hello first');
      await this.hello.catch(() => {
        throw new OrbitError('STATE_CONFLICT', 'the session did not open; send hello again');
      });
      switch (frame.type) {
        case 'claim':
          return await this.onClaim(frame);
        case 'start':
          return await this.onStart(frame.attempt_id);
        case 'renew':
          return await this.onRenew(frame.attempt_id);
        case 'complete':
          return await this.onComplete(frame, frameBytes(data));
        case 'release':
          return await this.onRelease(frame.attempt_id);
      }
    } catch (error) {
      const orbitError = await toCallerError(error, this.gateway.db, this.principal);
      if (orbitError.status >= 500) this.gateway.log.error({ err: error, frame: frame.type }, orbitError.message);
      if (orbitError.code === 'UNAUTHENTICATED') this.end(orbitError, ids);
      else this.send(errorFrame(orbitError, ids));
    }
  }

  /**
   * The server ends the session because its credential may no longer act (found by a frame, or
   * by the gateway's periodic check). The session row is closed and its unstarted reservations
   * given back first, exactly as on a disconnect - so a worker that hears of the end finds them
   * released already, and the cleanup does not wait for a close handshake the worker may never
   * answer; then the `error` frame says why and the socket closes with 4401.
   */
  end(error: OrbitError, ids: { attempt_id?: string; claim_id?: string } = {}): void {
    if (this.closed || this.ending) return;
    this.ending = true;
    this.gateway.trackClosing(this.finishEnd(error, ids));
  }

  private async finishEnd(error: OrbitError, ids: { attempt_id?: string; claim_id?: string }): Promise<void> {
    await this.hello?.catch(() => {});
    await this.gateway.unregister(this);
    this.send(errorFrame(error, ids));
    try {
      this.socket.close(4401, 'unauthenticated');
    } catch {
      // Already going away.
    }
    this.closed = true;
  }

  private async onHello(frame: HelloFrame): Promise<void> {
    try {
      this.info = await sessionOpen(this.gateway.db, { principal: this.principal, nodeId: frame.node_id, queues: frame.queues, capacity: frame.capacity });
    } catch (error) {
      this.hello = null; // a failed hello may be sent again
      throw error;
    }
    this.gateway.register(this);
    this.send({ type: 'welcome', session_id: idToHex(this.info.sessionId), lease_seconds: this.gateway.leaseSeconds });
  }

  private requireInfo(): SessionInfo {
    if (!this.info) throw new OrbitError('STATE_CONFLICT', 'send hello first');
    return this.info;
  }

  private async onClaim(frame: ClaimFrame): Promise<void> {
    const info = this.requireInfo();
    const claimed = await this.gateway.claim(info, frame.max, frame.start === true);
    const now = Date.now();
    for (const c of claimed) {
      this.held.set(idToHex(c.attemptId), {
        attemptId: c.attemptId,
        taskId: c.taskId,
        queueId: c.queueId,
        namespaceId: info.principal.namespaceId,
        claimedAtMs: now,
        resourceKey: c.resourceKey,
        deadlineAtMs: c.deadlineAtMs,
      });
    }
    this.gateway.metrics.claims.inc({ result: claimed.length > 0 ? 'granted' : 'empty' });
    this.gateway.metrics.claimedAttempts.inc(claimed.length);
    const startedHere = claimed.filter((c) => c.started).length;
    if (startedHere > 0) this.gateway.metrics.starts.inc({ result: 'started_on_claim' }, startedHere);
    this.send({
      type: 'claimed',
      claim_id: frame.claim_id,
      attempts: claimed.map((c) => ({
        attempt_id: idToHex(c.attemptId),
        task_id: idToHex(c.taskId),
        queue: c.queueName,
        payload: c.payload,
        priority: c.priority,
        ...(c.resourceKey === null ? {} : { resource_key: c.resourceKey }),
        attempt_number: c.attemptNumber,
        lease_expires_at: new Date(c.leaseExpiresAtMs).toISOString(),
        ...(c.started ? { started: true } : {}),
        deadline_at: new Date(c.deadlineAtMs).toISOString(),
      })),
    });
  }

  private heldAttempt(attemptId: string): HeldAttempt {
    const held = this.held.get(attemptId);
    if (!held) throw new OrbitError('LEASE_LOST', `attempt ${attemptId} is not held by this session`);
    return held;
  }

  private leaseLost(attemptId: string): OrbitError {
    this.held.delete(attemptId);
    return new OrbitError('LEASE_LOST', `attempt ${attemptId} is no longer held by this session (its lease ran out, or it was cancelled or recovered)`);
  }

  private async onStart(attemptId: string): Promise<void> {
    const held = this.heldAttempt(attemptId);
    const answer = await this.gateway.start(this.principal.applicationId, { ...held, sessionId: this.requireInfo().sessionId });
    if (answer.kind === 'started') {
      this.gateway.metrics.starts.inc({ result: answer.duplicate ? 'duplicate' : 'started' });
      this.send({ type: 'started', attempt_id: attemptId, lease_expires_at: new Date(answer.leaseExpiresAtMs).toISOString() });
    } else if (answer.kind === 'rate_limited') {
      this.gateway.metrics.starts.inc({ result: 'rate_limited' });
      this.send(
        errorFrame(
          new OrbitError(
            'RATE_LIMITED',
            'the start rate of the application or the queue is used up in this one-second window; retry after retry_after_ms with the same attempt_id',
          ),
          { attempt_id: attemptId },
          answer.retryAfterMs,
        ),
      );
    } else {
      this.gateway.metrics.starts.inc({ result: 'lease_lost' });
      throw this.leaseLost(attemptId);
    }
  }

  private async onRenew(attemptId: string): Promise<void> {
    const info = this.requireInfo();
    const leaseExpiresAtMs = await this.gateway.renew(this.principal.applicationId, { sessionId: info.sessionId, attemptId: hexToId(attemptId) });
    if (leaseExpiresAtMs === null) throw this.leaseLost(attemptId);
    this.send({ type: 'renewed', attempt_id: attemptId, lease_expires_at: new Date(leaseExpiresAtMs).toISOString() });
  }

  /** `bytes`: the frame's size, an upper bound of its result's and error's JSON (results are grouped by it). */
  private async onComplete(frame: CompleteFrame, bytes: number): Promise<void> {
    if (frame.outcome !== 'failed' && frame.retryable !== undefined) {
      throw new OrbitError('INVALID_ARGUMENT', 'retryable: only with outcome failed', {
        details: { field: 'retryable', location: 'frame', reason: 'only with outcome failed' },
      });
    }
    const earlier = this.finished.get(frame.attempt_id);
    if (earlier && earlier.outcome === frame.outcome && !this.held.has(frame.attempt_id)) {
      this.send({ type: 'completed', attempt_id: frame.attempt_id, task_state: earlier.taskState as 'SUCCEEDED' });
      return;
    }
    const held = this.heldAttempt(frame.attempt_id);
    const answer = await this.gateway.complete(this.principal.applicationId, {
      ...held,
      sessionId: this.requireInfo().sessionId,
      outcome: frame.outcome,
      result: frame.result,
      error: frame.error,
      retryable: frame.retryable ?? false,
      frameBytes: bytes,
    });
    if (answer.kind === 'not_started') {
      throw new OrbitError('STATE_CONFLICT', `attempt ${frame.attempt_id} was never started: start it, or release it`);
    }
    if (answer.kind === 'lease_lost') throw this.leaseLost(frame.attempt_id);
    this.held.delete(frame.attempt_id);
    this.finished.set(frame.attempt_id, { outcome: frame.outcome, taskState: answer.taskState });
    if (this.finished.size > 1000) this.finished.delete(this.finished.keys().next().value as string);
    if (!answer.duplicate) {
      this.gateway.metrics.completions.inc({ outcome: frame.outcome, task_state: answer.taskState });
      this.gateway.metrics.leaseAgeSeconds.observe((Date.now() - held.claimedAtMs) / 1000);
    }
    this.send({ type: 'completed', attempt_id: frame.attempt_id, task_state: answer.taskState as 'SUCCEEDED' });
  }

  private async onRelease(attemptId: string): Promise<void> {
    const held = this.heldAttempt(attemptId);
    const { answers } = await attemptReleaseBatch(this.gateway.db, {
      applicationId: this.principal.applicationId,
      items: [{ ...held, sessionId: this.requireInfo().sessionId }],
    });
    const answer = answers[0];
    if (answer?.kind === 'already_started') throw new OrbitError('STATE_CONFLICT', `attempt ${attemptId} was started: finish it with complete`);
    if (answer?.kind !== 'released') throw this.leaseLost(attemptId);
    this.held.delete(attemptId);
    this.gateway.metrics.releases.inc();
    this.send({ type: 'released', attempt_id: attemptId });
  }

  /** The socket closed: unstarted reservations go back now; running attempts keep their lease until it runs out. */
  async onClose(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Closing in the middle of `end`, which does the cleanup itself.
    if (this.ending) return;
    await this.hello?.catch(() => {});
    await this.gateway.unregister(this);
  }
}
