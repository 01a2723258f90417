/** A raw WebSocket client for protocol tests: send frames as JSON (or raw text), await the next frame. */
import WebSocket from 'ws';

/**
 * How long `next` waits for a frame by default: generous, for a loaded machine (a frame that
 * comes costs nothing more). A session that closes ends every wait at once.
 */
export const DEFAULT_FRAME_TIMEOUT_MS = 30_000;

export interface RawSession {
  socket: WebSocket;
  send(frame: unknown): void;
  sendText(text: string): void;
  /**
   * The next frame matching `match` (frames that do not match stay queued for later calls).
   * Rejects after `timeoutMs`, or as soon as the session is closed (no frame can come then).
   */
  next(match?: (frame: any) => boolean, timeoutMs?: number): Promise<any>;
  /** Sends a frame and waits for the answer that carries the same attempt_id/claim_id (or the next frame). */
  request(frame: Record<string, unknown>, timeoutMs?: number): Promise<any>;
  close(): Promise<void>;
  closed: Promise<{ code: number; reason: string }>;
}

export async function connectRaw(baseUrl: string, token: string | null): Promise<RawSession> {
  const socket = new WebSocket(`${baseUrl.replace(/^http/, 'ws')}/v1/workers/connect`, { headers: token === null ? {} : { Authorization: `Bearer ${token}` } });
  const queue: any[] = [];
  const waiters: Array<{ match: (f: any) => boolean; resolve: (f: any) => void; reject: (e: Error) => void }> = [];
  let closedWith: { code: number; reason: string } | null = null;
  socket.on('message', (data) => {
    const frame = JSON.parse(data.toString());
    const i = waiters.findIndex((w) => w.match(frame));
    if (i >= 0) waiters.splice(i, 1)[0]!.resolve(frame);
    else queue.push(frame);
  });
  const closedError = () =>
    new Error(`the session closed (${closedWith?.code} ${closedWith?.reason}) with no matching frame; queued: ${JSON.stringify(queue)}`);
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    socket.once('close', (code, reason) => {
      closedWith = { code, reason: reason.toString() };
      resolve(closedWith);
      // Every frame has arrived: a wait for another one would only run out its time. Ended after
      // `closed` and what is chained on it, so that a race of `next` against `closed` sees the close.
      setImmediate(() => {
        for (const waiter of waiters.splice(0)) waiter.reject(closedError());
      });
    }),
  );
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('unexpected-response', (_req, res) => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode })));
    socket.once('error', reject);
  });
  const session: RawSession = {
    socket,
    closed,
    send: (frame) => socket.send(JSON.stringify(frame)),
    sendText: (text) => socket.send(text),
    next(match = () => true, timeoutMs = DEFAULT_FRAME_TIMEOUT_MS) {
      const i = queue.findIndex(match);
      if (i >= 0) return Promise.resolve(queue.splice(i, 1)[0]);
      if (closedWith) return new Promise((_resolve, reject) => setImmediate(() => reject(closedError())));
      return new Promise((resolve, reject) => {
        const waiter = {
          match,
          resolve: (f: any) => (clearTimeout(timer), resolve(f)),
          reject: (e: Error) => (clearTimeout(timer), reject(e)),
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(new Error(`no matching frame within ${timeoutMs} ms; queued: ${JSON.stringify(queue)}`));
        }, timeoutMs);
        waiters.push(waiter);
      });
    },
    request(frame, timeoutMs) {
      session.send(frame);
      const id = (frame.attempt_id ?? frame.claim_id) as string | undefined;
      return session.next((f) => (id === undefined ? true : f.attempt_id === id || f.claim_id === id), timeoutMs);
    },
    async close() {
      if (socket.readyState === WebSocket.OPEN) socket.close(1000);
      await closed;
    },
  };
  return session;
}
