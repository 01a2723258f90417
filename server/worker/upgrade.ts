/**
 * The HTTP upgrade of `GET /v1/workers/connect`. It does what @hono/node-ws's
 * `injectWebSocket` does - run the upgrade request through the Hono app, and hand the socket
 * to the WebSocket server when the route accepted it - except for a refusal: a bad token, a
 * missing action or an unreachable database answers with the full HTTP response the app made
 * (status, `X-Request-Id`, the error envelope), like any other refused request, not with a
 * bare status line.
 */
import { STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { WebSocketServer } from 'ws';

/**
 * `c.env` of a request that came as an HTTP upgrade: `viaUpgrade` tells the app so (only the
 * worker route takes one; every other operation refuses it), and the worker route sets
 * `accepted` when it took the upgrade.
 */
export interface UpgradeEnv {
  incoming: IncomingMessage;
  outgoing: undefined;
  viaUpgrade: true;
  accepted?: boolean;
}

interface FetchApp {
  request(url: URL, init: RequestInit, env: UpgradeEnv): Response | Promise<Response>;
}

async function writeResponse(socket: Duplex, response: Response): Promise<void> {
  const body = Buffer.from(await response.arrayBuffer());
  const lines = [`HTTP/1.1 ${response.status} ${STATUS_CODES[response.status] ?? ''}`];
  response.headers.forEach((value, name) => {
    if (name !== 'content-length' && name !== 'connection' && name !== 'transfer-encoding') lines.push(`${name}: ${value}`);
  });
  lines.push(`Content-Length: ${body.byteLength}`, 'Connection: close', '', '');
  socket.end(Buffer.concat([Buffer.from(lines.join('\r\n'), 'latin1'), body]));
}

export function serveWorkerUpgrades(server: Server, app: FetchApp, wss: WebSocketServer): void {
  server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    // A client that goes away mid-upgrade must not crash the process.
    socket.on('error', () => socket.destroy());
    void (async () => {
      const url = new URL(request.url ?? '/', 'http://localhost');
      const headers = new Headers();
      for (const [name, value] of Object.entries(request.headers)) {
        if (value !== undefined) headers.append(name, Array.isArray(value) ? (value[0] as string) : value);
      }
      const env: UpgradeEnv = { incoming: request, outgoing: undefined, viaUpgrade: true };
      // The method as sent: Node hands every request with `Connection: Upgrade` here, whatever
      // its path and method, and each must be answered as what it is (no body is read).
      const response = await app.request(url, { method: request.method ?? 'GET', headers }, env);
      if (env.accepted) {
        wss.handleUpgrade(request, socket, head, (ws) => wss.emit('connection', ws, request));
        return;
      }
      await writeResponse(socket, response);
    })().catch(() => socket.destroy());
  });
}
