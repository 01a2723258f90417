/** A raw WebSocket client for protocol tests: send frames as JSON (or raw text), await the next frame. */
import WebSocket from 'ws';

export interface RawSession {
  socket: WebSocket;
  send(frame: unknown): void;
  sendText(text: string): void;
  /** The next frame matching `match` (frames that do not match stay queued for later calls). */
  next(match?: (frame: any) => boolean, timeoutMs?: number): Promise<any>;
  /** Sends a frame and waits for the answer that carries the same attempt_id/claim_id (or the next frame). */
  request(frame: Record<string, unknown>, timeoutMs?: number): Promise<any>;
  close(): Promise<void>;
  closed: Promise<{ code: number; reason: string }>;
}

export async function connectRaw(baseUrl: string, token: string | null): Promise<RawSession> {
  const socket = new WebSocket(`${baseUrl.replace(/^http/, 'ws')}/v1/workers/connect`, { headers: token === null ? {} : { Authorization: `Bearer ${token}` } });
  const queue: any[] = [];
  const waiters: Array<{ match: (f: any) => boolean; resolve: (f: any) => void }> = [];
  socket.on('message', (data) => {
    const frame = JSON.parse(data.toString());
    const i = waiters.findIndex((w) => w.match(frame));
    if (i >= 0) waiters.splice(i, 1)[0]!.resolve(frame);
    else queue.push(frame);
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    socket.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
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
    next(match = () => true, timeoutMs = 5000) {
      const i = queue.findIndex(match);
      if (i >= 0) return Promise.resolve(queue.splice(i, 1)[0]);
      return new Promise((resolve, reject) => {
        const waiter = { match, resolve: (f: any) => (clearTimeout(timer), resolve(f)) };
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
