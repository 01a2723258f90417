/**
 * A WebSocket proxy between a worker and a real server that can hold back client frames of one
 * type until the test lets them through. It makes a race the test needs (for example "the rate
 * is lowered between a claim and its Start") happen every time instead of by luck; every frame
 * still reaches the real server unchanged, in order.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';

export interface FrameGate {
  /** The base URL to give the worker instead of the server's. */
  url: string;
  /** Resolves once `count` frames of the held type are waiting. */
  held(count: number): Promise<void>;
  /** The frames held so far (their text), in order. */
  heldFrames: string[];
  /** Lets every held frame through, in order, and stops holding. */
  release(): void;
  close(): Promise<void>;
}

/**
 * `passFirst`: that many frames of the type go through before the holding starts (a worker with
 * two reservations then runs one attempt and is still starting the other, every time). Close
 * codes pass both ways as sent (4401 included).
 */
export async function frameGate(serverUrl: string, holdType: string, options: { passFirst?: number } = {}): Promise<FrameGate> {
  let holding = true;
  let passed = 0;
  const heldFrames: string[] = [];
  const waiting: Array<() => void> = [];
  const watchers: Array<{ count: number; resolve: () => void }> = [];
  const notify = () => {
    for (const w of watchers.splice(0)) {
      if (waiting.length >= w.count) w.resolve();
      else watchers.push(w);
    }
  };
  const http: Server = createServer((_req, res) => res.writeHead(404).end());
  const wss = new WebSocketServer({ server: http });
  wss.on('connection', (client, request) => {
    const upstream = new WebSocket(`${serverUrl.replace(/^http/, 'ws')}${request.url ?? ''}`, {
      headers: { authorization: request.headers.authorization ?? '' },
    });
    const toServer: string[] = [];
    upstream.on('open', () => {
      for (const frame of toServer.splice(0)) upstream.send(frame);
    });
    const send = (frame: string): void => {
      if (upstream.readyState === WebSocket.OPEN) upstream.send(frame);
      else toServer.push(frame);
    };
    // One queue per connection keeps frames in order: once a frame is held, later ones wait
    // behind it.
    let chain = Promise.resolve();
    client.on('message', (data) => {
      const frame = data.toString('utf8');
      let type: unknown;
      try {
        type = (JSON.parse(frame) as { type?: unknown }).type;
      } catch {
        type = undefined;
      }
      if (holding && type === holdType && passed++ >= (options.passFirst ?? 0)) {
        heldFrames.push(frame);
        const gate = new Promise<void>((resolve) => waiting.push(resolve));
        notify();
        chain = chain.then(() => gate).then(() => send(frame));
      } else {
        chain = chain.then(() => send(frame));
      }
    });
    upstream.on('message', (data) => client.readyState === WebSocket.OPEN && client.send(data.toString('utf8')));
    // 1005/1006 (no code, abnormal) may not be sent; any other code reaches the worker as the server sent it.
    upstream.on('close', (code, reason) => client.close(code === 1005 || code === 1006 ? 1000 : code, reason));
    client.on('close', () => upstream.close());
    upstream.on('error', () => client.terminate());
    client.on('error', () => upstream.terminate());
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    heldFrames,
    held: (count) =>
      new Promise<void>((resolve) => {
        watchers.push({ count, resolve });
        notify();
      }),
    release() {
      holding = false;
      for (const open of waiting.splice(0)) open();
    },
    async close() {
      for (const c of wss.clients) c.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
