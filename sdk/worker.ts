/**
 * The worker SDK: one WebSocket session (asyncapi.yaml) that claims attempts, starts them
 * under the server's rate limits, runs a handler, renews leases while it runs, and reports the
 * authoritative result.
 *
 * Names: the options that are fields of the `hello` frame are named as there (`node_id`,
 * `queues`, `capacity`), and the task the handler gets uses the `claimed` frame's field names
 * (`task_id`, `attempt_id`, `attempt_number`, `payload`, …) - the same names the HTTP client
 * returns. Options of the SDK's own (`baseUrl`, `token`, `handler`, `onEvent`, …) are camelCase.
 *
 * - RATE_LIMITED on Start: back off for `retry_after_ms` and Start again with the same attempt
 *   id, only while the reservation's lease is valid; after that the attempt is dropped (the
 *   server's recovery gives it back).
 * - Leases are renewed automatically; LEASE_LOST or a lost connection aborts the handler's
 *   AbortSignal (its result could no longer be reported).
 * - `cancel_requested` aborts the handler's signal with reason "cancelled"; a handler that then
 *   throws reports the outcome `cancelled`.
 * - `stop()` stops claiming, gives back reservations not started yet, waits for running
 *   handlers (up to a timeout), then closes the session.
 * - A credential the server refuses is permanent: a refused upgrade (401, 403: the server's
 *   error envelope, as the SDK's OrbitError) or a session the server ends with `error`
 *   UNAUTHENTICATED and close code 4401 (credential revoked or expired, namespace or
 *   application disabled) stops the worker, and `run()` rejects with that OrbitError. What may
 *   pass (no answer, 503 UNAVAILABLE while the database is down) is retried with backoff.
 */
import type { IncomingMessage } from 'node:http';
import WebSocket from 'ws';
import { OrbitError, isOrbitError, type ErrorCode } from './index.ts';
import type { ClaimedAttempt, ServerFrame, WorkerFrame } from './generated/frames.ts';
import * as serverFrameValidators from './generated/frame-validators.js';
import type { SERVER_FRAME_TYPES } from './generated/frames.ts';

/** The attempt a handler runs: the fields of the `claimed` frame's attempt, as the HTTP API names them too. */
export interface TaskContext {
  readonly task_id: string;
  readonly attempt_id: string;
  /** 1 for the first attempt of the task. */
  readonly attempt_number: number;
  readonly queue: string;
  readonly payload: Record<string, unknown>;
  readonly priority: number;
  /** Present when the task was submitted with one. */
  readonly resource_key?: string;
  /** The task's deadline (RFC 3339), when the server sent it. */
  readonly deadline_at?: string;
  /** Aborted on cancellation (reason "cancelled"), a lost lease, a lost connection or a stop that timed out. */
  readonly signal: AbortSignal;
}

/** The handler's view of a claimed attempt: plain fields, named like the `claimed` frame's. */
function taskContext(attempt: ClaimedAttempt, signal: AbortSignal): TaskContext {
  return {
    task_id: attempt.task_id,
    attempt_id: attempt.attempt_id,
    attempt_number: attempt.attempt_number,
    queue: attempt.queue,
    payload: attempt.payload as Record<string, unknown>,
    priority: attempt.priority,
    ...(attempt.resource_key !== undefined ? { resource_key: attempt.resource_key } : {}),
    ...(attempt.deadline_at !== undefined ? { deadline_at: attempt.deadline_at } : {}),
    signal,
  };
}

/** Waits for `promise`, but not longer than `ms`; leaves no timer behind. */
async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

/** Throw this (or any error with `retryable: false`) for a failure that must not be retried. */
export class NonRetryableError extends Error {
  readonly retryable = false;
}

/** The close code of a session the server ended because its credential may no longer act. */
const CLOSE_UNAUTHENTICATED = 4401;
/** The most of a refused upgrade's body read (an Orbit envelope is far smaller). */
const MAX_REFUSAL_BYTES = 64 * 1024;

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The body of a refused upgrade, as far as it arrives (a connection that breaks off ends it). */
function readBody(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = () => resolve(Buffer.concat(chunks).toString('utf8'));
    res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_REFUSAL_BYTES) chunks.push(chunk);
    });
    res.once('end', done);
    res.once('error', done);
    res.once('close', done);
  });
}

/**
 * A refused upgrade as the HTTP client methods would raise it (sdk/index.ts): the envelope's
 * code, message and details with the status and request id; an answer that is not an Orbit
 * envelope (a proxy's page) is UNAVAILABLE, since Orbit itself may well be fine.
 */
function refusal(status: number, headers: IncomingMessage['headers'], text: string): OrbitError {
  const header = (name: string) => {
    const value = headers[name];
    return Array.isArray(value) ? value[0] : value;
  };
  const headerRequestId = header('x-request-id');
  const retryAfterText = header('retry-after');
  const retryAfter = retryAfterText !== undefined && /^\s*\d+\s*$/.test(retryAfterText) ? Number(retryAfterText) : undefined;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (isObject(body) && isObject(body.error) && typeof body.error.code === 'string') {
    const { code, message, details } = body.error;
    return new OrbitError(code as ErrorCode, typeof message === 'string' ? message : code, {
      status,
      requestId: typeof body.request_id === 'string' ? body.request_id : headerRequestId,
      details: isObject(details) ? details : undefined,
      retryAfter,
    });
  }
  return new OrbitError('UNAVAILABLE', `worker connect: HTTP ${status} without an Orbit envelope (a proxy or load balancer answered?)`, {
    status,
    requestId: headerRequestId,
    retryAfter,
  });
}

/**
 * Whether trying again cannot help: the credential was refused (UNAUTHENTICATED,
 * PERMISSION_DENIED), the session's own settings were (`hello` answered INVALID_ARGUMENT or
 * NOT_FOUND: a queue that does not exist or is outside the credential's scope, a capacity out of
 * range), or Orbit itself refused the upgrade with another 4xx but 429 (a request it understood
 * and will refuse the same way again). No answer, UNAVAILABLE (the database is down, a proxy
 * answered), 429 and 5xx may pass.
 */
const PERMANENT_CODES = new Set(['UNAUTHENTICATED', 'PERMISSION_DENIED', 'INVALID_ARGUMENT', 'NOT_FOUND']);

function isPermanent(error: OrbitError): boolean {
  if (PERMANENT_CODES.has(error.code)) return true;
  return error.status >= 400 && error.status < 500 && error.status !== 429 && error.code !== 'UNAVAILABLE';
}

/** Runs one attempt: what it resolves with is the task's `result` (SUCCEEDED); a throw is a failure (see NonRetryableError). */
export type TaskHandler = (task: TaskContext) => Promise<unknown>;

interface OrbitWorkerBaseOptions {
  /** http(s) URL of an Orbit server (the session is `ws(s)://…/v1/workers/connect`). */
  baseUrl: string;
  /** A credential token with `workers:consume`, or a function called for the current one at every connect. */
  token: string | (() => string | Promise<string>);
  /** The queues to claim from (hello's `queues`: 1-100 queue names). */
  queues: string[];
  /** Most attempts held (reserved or running) at once (hello's `capacity`: 1-10000). */
  capacity: number;
  handler: TaskHandler;
  /** Longest wait between claims when there is nothing to do (default 1000 ms). */
  maxPollIntervalMs?: number;
  /** Problems the worker handled itself (a dropped attempt, a reconnect); default: ignored. */
  onEvent?: (event: WorkerEvent) => void;
  /**
   * Reserve and start in one step (`claim` with `start: true`, default true): what a claim grants
   * runs at once, one frame and one server transaction fewer per task. Turn it off to reserve
   * first and send `start` per attempt (then a start window that filled since the claim answers
   * RATE_LIMITED, and the worker backs off and starts the same attempt again).
   */
  startOnClaim?: boolean;
}

export type OrbitWorkerOptions = OrbitWorkerBaseOptions & {
  /** The worker node, host or process (hello's `node_id`: 1-128 printable ASCII): fairness divides scarce room between nodes. */
  node_id: string;
};

/** What the worker tells `onEvent`; the fields are named like the frames' (and JSON.stringify keeps them all). */
export type WorkerEvent =
  | { type: 'connected'; session_id: string }
  | { type: 'disconnected'; reason: string }
  | { type: 'rate_limited'; attempt_id: string; retry_after_ms: number }
  | { type: 'attempt_dropped'; attempt_id: string; reason: string }
  | { type: 'completed'; attempt_id: string; task_state: string }
  | { type: 'protocol_error'; message: string }
  /** A connection attempt failed in a way that may pass; the worker tries again after `retry_in_ms`. */
  | { type: 'connect_failed'; error: OrbitError; retry_in_ms: number }
  /** The server refused the credential; the worker has stopped and `run()` rejects with `error`. */
  | { type: 'failed'; error: OrbitError };

interface ResolvedOptions extends Required<Omit<OrbitWorkerBaseOptions, 'onEvent'>>, Pick<OrbitWorkerBaseOptions, 'onEvent'> {
  node_id: string;
}

function invalid(field: string, reason: string): OrbitError {
  return new OrbitError('INVALID_ARGUMENT', `${field}: ${reason}`, { status: 0, details: { field, location: 'options', reason } });
}

/** The options checked up front (the server would refuse the same in `hello`, after a connection). */
function checkOptions(options: OrbitWorkerOptions): ResolvedOptions {
  if (!isObject(options)) throw invalid('options', 'new OrbitWorker takes one options object: { baseUrl, token, node_id, queues, capacity, handler }');
  const { node_id: node, ...rest } = options as OrbitWorkerBaseOptions & { node_id?: string };
  if (typeof rest.baseUrl !== 'string' || !/^https?:\/\//.test(rest.baseUrl)) throw invalid('baseUrl', 'must be an http(s) URL');
  if (typeof rest.token !== 'function' && (typeof rest.token !== 'string' || !/^[!-~]+$/.test(rest.token)))
    throw invalid('token', 'must be a non-empty token of printable non-space ASCII, or a function returning one');
  if (typeof node !== 'string' || !/^[!-~]{1,128}$/.test(node)) throw invalid('node_id', 'must be 1-128 printable non-space ASCII characters');
  if (!Array.isArray(rest.queues) || rest.queues.length === 0 || !rest.queues.every((q) => typeof q === 'string'))
    throw invalid('queues', 'must be a non-empty array of queue names');
  if (!Number.isInteger(rest.capacity) || rest.capacity < 1 || rest.capacity > 10_000) throw invalid('capacity', 'must be an integer from 1 to 10000');
  if (typeof rest.handler !== 'function') throw invalid('handler', 'must be a function (task) => Promise<result>');
  return { maxPollIntervalMs: 1000, startOnClaim: true, ...rest, node_id: node };
}

interface Waiter {
  resolve: (frame: ServerFrame) => void;
  reject: (error: Error) => void;
}

class SessionLost extends Error {}

export class OrbitWorker {
  private readonly options: ResolvedOptions;
  private socket: WebSocket | null = null;
  private leaseSeconds = 30;
  private running = false;
  private stopping = false;
  /** One outstanding request per key: `claim:<id>` or `attempt:<id>`; answers and errors carry the id. */
  private readonly waiters = new Map<string, Waiter>();
  /** Per attempt, operations run one after another, so an error frame maps to exactly one request. */
  private readonly attemptChains = new Map<string, Promise<unknown>>();
  private readonly aborts = new Map<string, AbortController>();
  private readonly unstarted = new Set<string>();
  private held = 0;
  private claimCounter = 0;
  private loop: Promise<void> | null = null;
  private readonly inFlight = new Set<Promise<void>>();
  private wake: (() => void) | null = null;
  /** Why the worker stopped by itself (the credential was refused): what `run()` rejects with. */
  private fatal: OrbitError | null = null;
  /** `run()` calls waiting for the worker to end (stop() finished, or it failed). */
  private readonly endWaiters: Array<() => void> = [];

  /** Checks the options (an OrbitError INVALID_ARGUMENT naming the field); connects only in `start()` / `run()`. */
  constructor(options: OrbitWorkerOptions) {
    this.options = checkOptions(options);
  }

  /**
   * Connects and starts claiming; resolves once the session is open. Connecting retries what
   * may pass (as `run()` does); a refused credential rejects with its OrbitError (the envelope's
   * code and message, the status and request id) and leaves the worker stopped. For a worker
   * that stops by itself later (its credential revoked), `run()` is what rejects.
   */
  async start(): Promise<void> {
    if (this.running) return;
    this.begin();
    if (!(await this.establish())) {
      // Refused (fatal is set), or stop() was called while connecting.
      const refused = this.fatal;
      this.finish();
      if (refused) throw refused;
      return;
    }
    this.loop = this.claimLoop();
  }

  /**
   * Runs the worker until it ends. Connects - retrying, with backoff up to 5 s, what may pass: no
   * answer, `503 UNAVAILABLE` while the database is down - claims and runs tasks, and reconnects
   * after a lost connection. Resolves once `stop()` has finished. Rejects with an OrbitError when
   * the server refuses the credential, which is never retried: a refused upgrade (`401
   * UNAUTHENTICATED`, `403 PERMISSION_DENIED`, with the server's message, status and request id)
   * or a session the server ended (close code 4401, code UNAUTHENTICATED and the server's
   * message, status 0: no HTTP answer) because the credential was revoked or expired or its
   * namespace or application was disabled. Called after `start()`, it waits for the end.
   */
  async run(): Promise<void> {
    const ended = new Promise<void>((resolve) => this.endWaiters.push(resolve));
    if (!this.running) {
      this.begin();
      this.loop = this.claimLoop();
    }
    await ended;
    if (this.fatal) throw this.fatal;
  }

  private begin(): void {
    this.running = true;
    this.stopping = false;
    this.fatal = null;
  }

  /** The worker has ended: nothing runs any more; `run()` returns (or rejects with `fatal`). */
  private finish(): void {
    this.running = false;
    for (const resolve of this.endWaiters.splice(0)) resolve();
  }

  /**
   * The server refused the credential: no more claims, the session is dropped (its handlers'
   * signals abort, as on a lost connection) and the claim loop ends, then `run()` rejects.
   */
  private fail(error: OrbitError): void {
    if (this.fatal) return;
    this.fatal = error;
    this.stopping = true;
    this.emit({ type: 'failed', error });
    this.socket?.terminate();
    this.wake?.();
  }

  /**
   * Opens a session, trying again with backoff (up to 5 s, or the refusal's Retry-After) while
   * the failure may pass. False when the credential was refused (the worker has failed) or the
   * worker is stopping.
   */
  private async establish(): Promise<boolean> {
    let delayMs = 10;
    while (!this.stopping) {
      try {
        await this.connect();
        return true;
      } catch (error) {
        const refused = isOrbitError(error) ? error : new OrbitError('UNAVAILABLE', String(error), { status: 0, cause: error });
        // A refused credential stays refused: stop instead of knocking forever.
        if (isPermanent(refused)) {
          this.fail(refused);
          return false;
        }
        delayMs = Math.min(delayMs * 2, 5000);
        const retryInMs = Math.max(delayMs, (refused.retryAfter ?? 0) * 1000);
        this.emit({ type: 'connect_failed', error: refused, retry_in_ms: retryInMs });
        await this.sleep(retryInMs);
      }
    }
    return false;
  }

  private emit(event: WorkerEvent): void {
    this.options.onEvent?.(event);
  }

  private async connect(): Promise<void> {
    const url = `${this.options.baseUrl.replace(/\/+$/, '').replace(/^http/, 'ws')}/v1/workers/connect`;
    // A server that takes the connection but never answers the upgrade must not hang the worker.
    const token = typeof this.options.token === 'function' ? await this.options.token() : this.options.token;
    if (typeof token !== 'string' || !/^[!-~]+$/.test(token))
      throw invalid('token', 'the token function must return a non-empty token of printable non-space ASCII');
    const socket = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` }, handshakeTimeout: 10_000 });
    socket.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      // A refused upgrade is an ordinary HTTP response with Orbit's error envelope
      // (server/worker/upgrade.ts): read it, so the caller learns the server's code and message.
      socket.once('unexpected-response', (_req, res) => {
        void readBody(res).then((text) => {
          reject(refusal(res.statusCode ?? 0, res.headers, text));
          socket.terminate();
        });
      });
      socket.once('error', (error) =>
        reject(new OrbitError('UNAVAILABLE', `worker connect: no response from Orbit (${error.message})`, { status: 0, cause: error })),
      );
    });
    // Only an open socket becomes the session's: a failed attempt leaves `socket` null, so the
    // claim loop keeps reconnecting instead of sending into a dead socket.
    this.socket = socket;
    socket.on('message', (data, isBinary) => this.onFrame(isBinary ? '' : data.toString('utf8')));
    socket.on('close', (code, reason) => {
      // 4401 comes after the `error` frame that says why (onFrame has failed the worker with it
      // already); on its own it is still the end of this credential.
      if (code === CLOSE_UNAUTHENTICATED) {
        this.fail(new OrbitError('UNAUTHENTICATED', reason.toString() || 'the server ended the session: the credential may no longer act', { status: 0 }));
      }
      // A socket given up while opening (below) is no longer the session's.
      if (this.socket === socket) this.onSocketClosed(`closed ${code} ${reason.toString()}`);
    });
    let welcome: ServerFrame;
    try {
      welcome = await this.request('hello', {
        type: 'hello',
        node_id: this.options.node_id,
        queues: this.options.queues,
        capacity: this.options.capacity,
      });
    } catch (error) {
      welcome = { type: 'error', code: 'UNAVAILABLE', message: (error as Error).message };
    }
    if (welcome.type !== 'welcome') {
      // Without a session the socket is of no use: drop it so the next attempt starts afresh.
      this.socket = null;
      socket.terminate();
      if (this.fatal) throw this.fatal;
      if (welcome.type !== 'error') throw new OrbitError('INTERNAL', `the session did not open: the server answered hello with ${welcome.type}`, { status: 0 });
      throw new OrbitError(welcome.code, `the session did not open: ${welcome.message}`, { status: 0, details: welcome.details });
    }
    this.leaseSeconds = welcome.lease_seconds;
    this.emit({ type: 'connected', session_id: welcome.session_id });
  }

  private send(frame: WorkerFrame): void {
    if (!this.socket || this.socket.readyState !== WebSocket.OPEN) throw new SessionLost('the session is not connected');
    this.socket.send(JSON.stringify(frame));
  }

  private request(key: string, frame: WorkerFrame): Promise<ServerFrame> {
    return new Promise<ServerFrame>((resolve, reject) => {
      this.waiters.set(key, { resolve, reject });
      try {
        this.send(frame);
      } catch (error) {
        this.waiters.delete(key);
        reject(error as Error);
      }
    });
  }

  private onFrame(text: string): void {
    let frame: ServerFrame;
    try {
      frame = JSON.parse(text) as ServerFrame;
      const validate = serverFrameValidators[frame.type as (typeof SERVER_FRAME_TYPES)[number]];
      if (!validate || !validate(frame)) throw new Error(`unexpected frame from the server: ${text.slice(0, 200)}`);
    } catch (error) {
      this.emit({ type: 'protocol_error', message: (error as Error).message });
      return;
    }
    if (frame.type === 'cancel_requested') {
      this.aborts.get(frame.attempt_id)?.abort('cancelled');
      return;
    }
    // The credential may no longer act (revoked, expired, namespace or application disabled):
    // the server closes the session with 4401 next, and no reconnect could succeed.
    if (frame.type === 'error' && frame.code === 'UNAUTHENTICATED') {
      this.fail(new OrbitError('UNAUTHENTICATED', frame.message, { status: 0, details: frame.details }));
    }
    let key: string | null = null;
    if (frame.type === 'welcome') key = 'hello';
    else if (frame.type === 'claimed') key = `claim:${frame.claim_id}`;
    else if ('attempt_id' in frame && frame.attempt_id !== undefined) key = `attempt:${frame.attempt_id}`;
    else if (frame.type === 'error' && frame.claim_id !== undefined) key = `claim:${frame.claim_id}`;
    else if (frame.type === 'error' && this.waiters.has('hello')) key = 'hello';
    const waiter = key === null ? undefined : this.waiters.get(key);
    if (!waiter || key === null) {
      if (frame.type === 'error') this.emit({ type: 'protocol_error', message: `${frame.code}: ${frame.message}` });
      return;
    }
    this.waiters.delete(key);
    waiter.resolve(frame);
  }

  private onSocketClosed(reason: string): void {
    this.socket = null;
    for (const [, waiter] of this.waiters) waiter.reject(new SessionLost(reason));
    this.waiters.clear();
    // Attempts of the lost session cannot be reported any more: their handlers are told.
    for (const [, controller] of this.aborts) controller.abort('session lost');
    this.emit({ type: 'disconnected', reason });
    this.wake?.();
  }

  private async claimLoop(): Promise<void> {
    let idleMs = 10;
    while (this.running && !this.stopping) {
      if (!this.socket) {
        if (!(await this.establish())) break;
        idleMs = 10;
      }
      const room = this.options.capacity - this.held;
      // Claim in batches: while busy, wait until a quarter of the capacity is free (a completion
      // wakes the loop early), so one claim transaction serves several attempts.
      if (room <= 0 || (this.held > 0 && room < Math.ceil(this.options.capacity / 4))) {
        await this.sleep(this.options.maxPollIntervalMs);
        continue;
      }
      const claimId = `c${++this.claimCounter}`;
      let frame: ServerFrame;
      try {
        frame = await this.request(`claim:${claimId}`, { type: 'claim', claim_id: claimId, max: room, ...(this.options.startOnClaim ? { start: true } : {}) });
      } catch {
        // The session was lost while claiming; the loop reconnects (after a pause, never spinning).
        await this.sleep(Math.min((idleMs *= 2), 5000));
        continue;
      }
      if (frame.type !== 'claimed' || frame.attempts.length === 0) {
        idleMs = Math.min(idleMs * 2, this.options.maxPollIntervalMs);
        await this.sleep(idleMs);
        continue;
      }
      idleMs = 10;
      for (const attempt of frame.attempts) this.track(this.runAttempt(attempt));
    }
    if (this.fatal) {
      // The session is gone and the handlers' signals are aborted: give them a moment to return,
      // so run() rejects after their attempts have settled, but never hang on one that ignores it.
      await within(Promise.allSettled([...this.inFlight]), 1000);
      this.finish();
    }
  }

  /** Sleeps, but wakes early when capacity frees up or the worker stops. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.stopping) {
        resolve();
        return;
      }
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  private track(work: Promise<void>): void {
    this.inFlight.add(work);
    void work.finally(() => {
      this.inFlight.delete(work);
      this.wake?.();
    });
  }

  /** Runs `op` after the attempt's previous operation, so there is one outstanding frame per attempt. */
  private serial<T>(attemptId: string, op: () => Promise<T>): Promise<T> {
    const previous = this.attemptChains.get(attemptId) ?? Promise.resolve();
    const next = previous.then(op, op);
    this.attemptChains.set(
      attemptId,
      next.catch(() => {}),
    );
    return next;
  }

  private async runAttempt(attempt: ClaimedAttempt): Promise<void> {
    const id = attempt.attempt_id;
    this.held += 1;
    this.unstarted.add(id);
    let leaseExpiresAt = Date.parse(attempt.lease_expires_at);
    try {
      // Start (unless the claim did), backing off on RATE_LIMITED while the reservation's lease lasts.
      for (;;) {
        if (attempt.started === true) break;
        if (this.stopping) {
          await this.serial(id, () => this.request(`attempt:${id}`, { type: 'release', attempt_id: id })).catch(() => {});
          return;
        }
        const answer = await this.serial(id, () => this.request(`attempt:${id}`, { type: 'start', attempt_id: id }));
        if (answer.type === 'started') {
          leaseExpiresAt = Date.parse(answer.lease_expires_at);
          break;
        }
        if (answer.type === 'error' && answer.code === 'RATE_LIMITED') {
          const wait = answer.retry_after_ms ?? 100;
          this.emit({ type: 'rate_limited', attempt_id: id, retry_after_ms: wait });
          if (Date.now() + wait >= leaseExpiresAt) {
            this.emit({ type: 'attempt_dropped', attempt_id: id, reason: 'rate limited until the reservation expired' });
            return;
          }
          await new Promise((r) => setTimeout(r, wait));
          continue;
        }
        this.emit({ type: 'attempt_dropped', attempt_id: id, reason: answer.type === 'error' ? `${answer.code}: ${answer.message}` : answer.type });
        return;
      }
      this.unstarted.delete(id);
      await this.runHandler(
        attempt,
        () => leaseExpiresAt,
        (at) => (leaseExpiresAt = at),
      );
    } catch (error) {
      this.emit({ type: 'attempt_dropped', attempt_id: id, reason: (error as Error).message });
    } finally {
      this.unstarted.delete(id);
      this.attemptChains.delete(id);
      this.held -= 1;
    }
  }

  private async runHandler(attempt: ClaimedAttempt, lease: () => number, setLease: (at: number) => void): Promise<void> {
    const id = attempt.attempt_id;
    const controller = new AbortController();
    this.aborts.set(id, controller);
    // Renew at a third of the lease, so two renewals can fail before it runs out.
    const renewEvery = Math.max(200, (this.leaseSeconds * 1000) / 3);
    const renewer = setInterval(() => {
      void this.serial(id, () => this.request(`attempt:${id}`, { type: 'renew', attempt_id: id }))
        .then((answer) => {
          if (answer.type === 'renewed') setLease(Date.parse(answer.lease_expires_at));
          else if (answer.type === 'error' && answer.code === 'LEASE_LOST') controller.abort('lease lost');
        })
        .catch(() => {});
    }, renewEvery);
    // Renewing is pointless once the attempt is cancelled, lost or abandoned, and it must not keep
    // a process alive on its own.
    renewer.unref();
    controller.signal.addEventListener('abort', () => {
      if (controller.signal.reason !== 'cancelled') clearInterval(renewer);
    });
    try {
      let frame: WorkerFrame;
      try {
        const result = await this.options.handler(taskContext(attempt, controller.signal));
        frame = { type: 'complete', attempt_id: id, outcome: 'succeeded', ...(result === undefined ? {} : { result }) };
      } catch (error) {
        const err = error as { message?: string; name?: string; retryable?: boolean };
        const description = { message: String(err?.message ?? error), ...(err?.name ? { name: err.name } : {}) };
        if (controller.signal.aborted && controller.signal.reason === 'cancelled') {
          frame = { type: 'complete', attempt_id: id, outcome: 'cancelled', error: description };
        } else {
          frame = { type: 'complete', attempt_id: id, outcome: 'failed', error: description, retryable: err?.retryable !== false };
        }
      }
      if (Date.now() >= lease()) {
        this.emit({ type: 'attempt_dropped', attempt_id: id, reason: 'the lease ran out before the result' });
        return;
      }
      const answer = await this.serial(id, () => this.request(`attempt:${id}`, frame));
      if (answer.type === 'completed') this.emit({ type: 'completed', attempt_id: id, task_state: answer.task_state });
      else this.emit({ type: 'attempt_dropped', attempt_id: id, reason: answer.type === 'error' ? `${answer.code}: ${answer.message}` : answer.type });
    } finally {
      clearInterval(renewer);
      this.aborts.delete(id);
    }
  }

  /**
   * Graceful shutdown: no more claims; reservations not started yet are released; running
   * handlers get `timeoutMs` to finish (then their signals are aborted), and the session closes.
   */
  async stop({ timeoutMs = 30_000 }: { timeoutMs?: number } = {}): Promise<void> {
    if (!this.running) return;
    this.stopping = true;
    this.wake?.();
    await this.loop;
    const all = Promise.allSettled([...this.inFlight]);
    await within(all, timeoutMs);
    for (const [, controller] of this.aborts) controller.abort('worker stopping');
    await within(all, 1000);
    this.running = false;
    const socket = this.socket;
    if (socket && socket.readyState === WebSocket.OPEN) {
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.close(1000, 'worker stopped');
      await within(closed, 2000);
    }
    this.finish();
  }

  /** Attempts held right now (reserved or running). */
  get heldAttempts(): number {
    return this.held;
  }
}
