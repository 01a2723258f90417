/**
 * What the database-fault tests share: a private MariaDB of the test's own (scripts/local-db.mjs,
 * under the test's folder, so it can be killed or frozen without touching anyone else's), and
 * timed probes of a server process - a submission, /readyz, a worker upgrade - that report what
 * came back and how long it took, never hanging longer than `giveUpMs`.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import type { ServerProcess } from './server-process.ts';
// @ts-expect-error - a plain ES module of the repository's scripts, no type declarations
import { ensureDatabase, stopPrivateDatabase } from '../../scripts/local-db.mjs';

/** Starts (or restarts) the private server under `root`; its URL without a database name. */
export async function startPrivateDatabase(root: string): Promise<string> {
  const saved = { force: process.env.ORBIT_LOCAL_DB, url: process.env.ORBIT_DATABASE_URL };
  process.env.ORBIT_LOCAL_DB = 'force';
  delete process.env.ORBIT_DATABASE_URL;
  try {
    return (await ensureDatabase({ root, log: () => {} })).url as string;
  } finally {
    if (saved.force === undefined) delete process.env.ORBIT_LOCAL_DB;
    else process.env.ORBIT_LOCAL_DB = saved.force;
    if (saved.url !== undefined) process.env.ORBIT_DATABASE_URL = saved.url;
  }
}

export function stopPrivateDatabaseAt(root: string): Promise<void> {
  return stopPrivateDatabase({ root });
}

/** The private server's process id (to SIGKILL, SIGSTOP or SIGCONT it). */
export function privateDatabasePid(root: string): number {
  return Number(readFileSync(join(root, '.local', 'mariadb', 'mariadb.pid'), 'utf8').trim());
}

/** Runs `fn` with ORBIT_TEST_DATABASE_URL pointing at `serverUrl` (freshDatabase reads it). */
export async function onServer<T>(serverUrl: string, fn: () => Promise<T>): Promise<T> {
  const saved = process.env.ORBIT_TEST_DATABASE_URL;
  process.env.ORBIT_TEST_DATABASE_URL = serverUrl;
  try {
    return await fn();
  } finally {
    if (saved === undefined) delete process.env.ORBIT_TEST_DATABASE_URL;
    else process.env.ORBIT_TEST_DATABASE_URL = saved;
  }
}

export interface TimedAnswer {
  /** 0: no answer within giveUpMs (a hang), or the connection failed. */
  status: number;
  ms: number;
  body: any;
  requestId: string | undefined;
  /** The body is Orbit's envelope, with the X-Request-Id header's id. */
  envelope: boolean;
}

function isEnvelope(body: any, requestId: string | undefined): boolean {
  return typeof body?.request_id === 'string' && body.request_id === requestId && (body.data !== undefined || typeof body.error?.code === 'string');
}

/** One HTTP request, timed. */
export async function timedFetch(url: string, init: RequestInit, giveUpMs: number): Promise<TimedAnswer> {
  const started = Date.now();
  try {
    const response = await fetch(url, { ...init, signal: AbortSignal.timeout(giveUpMs) });
    const text = await response.text();
    let body: any = null;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    const requestId = response.headers.get('x-request-id') ?? undefined;
    return { status: response.status, ms: Date.now() - started, body, requestId, envelope: isEnvelope(body, requestId) };
  } catch {
    return { status: 0, ms: Date.now() - started, body: null, requestId: undefined, envelope: false };
  }
}

/** `GET /readyz`, timed. */
export function readiness(server: ServerProcess, giveUpMs: number): Promise<TimedAnswer> {
  return timedFetch(`${server.url}/readyz`, {}, giveUpMs);
}

/** A new worker connection, timed: 101 when it opened (closed again at once), else the refused upgrade's status and body. */
export function connectWorker(server: ServerProcess, token: string, giveUpMs: number): Promise<TimedAnswer> {
  const started = Date.now();
  return new Promise((resolve) => {
    const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/workers/connect`, { headers: { Authorization: `Bearer ${token}` } });
    const timer = setTimeout(() => {
      socket.terminate();
      resolve({ status: 0, body: null, requestId: undefined, ms: Date.now() - started, envelope: false });
    }, giveUpMs);
    socket.on('open', () => {
      clearTimeout(timer);
      socket.close();
      resolve({ status: 101, body: null, requestId: undefined, ms: Date.now() - started, envelope: false });
    });
    socket.on('unexpected-response', (_request, response) => {
      let text = '';
      response.on('data', (chunk: Buffer) => (text += chunk.toString()));
      response.on('end', () => {
        clearTimeout(timer);
        let body: any = null;
        try {
          body = JSON.parse(text);
        } catch {
          // not JSON: the caller's assertion reports it
        }
        const requestId = response.headers['x-request-id'] as string | undefined;
        resolve({ status: response.statusCode ?? 0, body, requestId, ms: Date.now() - started, envelope: isEnvelope(body, requestId) });
      });
    });
    socket.on('error', () => {});
  });
}
