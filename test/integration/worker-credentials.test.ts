/**
 * The worker SDK and credential problems, against a real `orbit-server` process: a refused
 * upgrade (bad token, missing `workers:consume`) makes `run()` reject with the server's error
 * envelope as an OrbitError and is not retried; a 503 is retried; and a credential revoked
 * while a worker holds a running attempt and a reservation ends its session within the
 * gateway's check interval - error frame, close 4401, the session row closed, the reservation
 * given back as on a disconnect - and `run()` rejects instead of idling.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { adminEnv, adminInProcess } from '../helpers/programs.ts';
import { waitFor } from '../helpers/wait.ts';
import { endLeases } from '../helpers/leases.ts';
import { frameGate } from '../helpers/frame-gate.ts';
import { OrbitError } from '../../sdk/index.ts';
import { OrbitWorker, type TaskContext, type WorkerEvent } from '../../sdk/worker.ts';

/**
 * Leases that do not run out while the test runs, however loaded the machine: the reservation
 * the worker never starts does not expire before the test sees it, and the running attempt is
 * still RUNNING when the test looks right after the session ended. Its lease is then ended in
 * the database (test/helpers/leases.ts) and recovery, every 100 ms, takes it.
 */
const LEASE_SECONDS = 600;

/** The outcome of `promise`, or a failure if it has not settled within `ms` (a bound, not a pause). */
async function settledWithin<T>(promise: Promise<T>, ms: number, what: string): Promise<{ value?: T; error?: unknown }> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not settled within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([
      promise.then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      ),
      bound,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

describe('worker SDK and credential problems', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let tenant: TestTenant;
  let keys = 0;

  before(async () => {
    t = await freshDatabase('workercred');
    tenant = await createTenant(t.db, { namespace: 'cred', queues: ['refused', 'held'] });
    server = await startServerProcess(t.url, { ORBIT_LEASE_SECONDS: String(LEASE_SECONDS), ORBIT_RECOVERY_INTERVAL_MS: '100' });
  });
  after(async () => {
    await server?.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const http = (method: string, path: string, body?: unknown) =>
    call(server.url, method, path, { token: tenant.token, key: method === 'POST' ? `k${++keys}` : undefined, body });
  const submit = async (queue: string) => (await http('POST', `/v1/queues/${queue}/tasks`, { payload: { n: keys } })).body.data.task;
  const task = async (id: string) => (await http('GET', `/v1/tasks/${id}`)).body.data;

  function worker(baseUrl: string, token: string, events: WorkerEvent[], options: { queue?: string; handler?: (task: TaskContext) => Promise<unknown> } = {}) {
    return new OrbitWorker({
      baseUrl,
      token,
      node_id: 'credential-test',
      queues: [options.queue ?? 'refused'],
      capacity: 2,
      handler: options.handler ?? (async () => null),
      maxPollIntervalMs: 50,
      startOnClaim: false,
      onEvent: (e) => events.push(e),
    });
  }

  /** The refusal HTTP gives the same token, for comparing messages. */
  async function httpRefusal(token: string) {
    const r = await call(server.url, 'GET', '/v1/queues', { token });
    return { status: r.status, code: r.body.error.code as string, message: r.body.error.message as string };
  }

  test('a bad token: run() rejects with the envelope as an OrbitError (401 UNAUTHENTICATED), and does not retry', async () => {
    for (const token of [`orbit_${'0'.repeat(32)}_${'x'.repeat(43)}`, 'not-a-token']) {
      const expected = await httpRefusal(token);
      assert.equal(expected.status, 401);
      const events: WorkerEvent[] = [];
      const { error } = await settledWithin(worker(server.url, token, events).run(), 10_000, 'run() with a bad token');
      assert.ok(error instanceof OrbitError, `an OrbitError, not ${String(error)}`);
      assert.equal(error.code, 'UNAUTHENTICATED');
      assert.equal(error.status, 401);
      assert.equal(error.message, expected.message, "the server's message");
      assert.match(error.requestId ?? '', /\S/, 'the request id of the refusal');
      assert.deepEqual(
        events.map((e) => e.type),
        ['failed'],
        'refused once, not retried',
      );
      // start() raises the same error instead of a bare "HTTP 401".
      await assert.rejects(worker(server.url, token, []).start(), (e: unknown) => e instanceof OrbitError && e.code === 'UNAUTHENTICATED' && e.status === 401);
    }
  });

  test('a credential without workers:consume: run() rejects with 403 PERMISSION_DENIED and the server message', async () => {
    const readOnly = await createCredential(t.db, tenant, ['tasks:read']);
    const events: WorkerEvent[] = [];
    const { error } = await settledWithin(worker(server.url, readOnly, events).run(), 10_000, 'run() without workers:consume');
    assert.ok(error instanceof OrbitError, `an OrbitError, not ${String(error)}`);
    assert.equal(error.code, 'PERMISSION_DENIED');
    assert.equal(error.status, 403);
    assert.match(error.message, /workers:consume/);
    assert.match(error.requestId ?? '', /\S/);
    assert.deepEqual(
      events.map((e) => e.type),
      ['failed'],
    );
  });

  test("a session refused at hello (a queue that does not exist): run() rejects with the frame's NOT_FOUND, not retried forever", async () => {
    const events: WorkerEvent[] = [];
    const { error } = await settledWithin(worker(server.url, tenant.token, events, { queue: 'no-such-queue' }).run(), 10_000, 'run() with an unknown queue');
    assert.ok(error instanceof OrbitError, `an OrbitError, not ${String(error)}`);
    assert.equal(error.code, 'NOT_FOUND');
    assert.match(error.message, /no-such-queue/);
    assert.deepEqual(
      events.map((e) => e.type),
      ['failed'],
    );
  });

  test('503 UNAVAILABLE (the database is down) is transient: the worker keeps trying with backoff until stopped', async () => {
    // What orbit-server answers a worker upgrade while its database is unreachable.
    let upgrades = 0;
    const unavailable = createServer((_req, res) => res.writeHead(404).end());
    unavailable.on('upgrade', (_req, socket) => {
      upgrades += 1;
      const body = JSON.stringify({
        request_id: `req-${upgrades}`,
        error: { code: 'UNAVAILABLE', message: 'the database is unavailable or busy; the outcome is unknown - retry with the same Idempotency-Key' },
      });
      socket.end(
        `HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nX-Request-Id: req-${upgrades}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    });
    await new Promise<void>((resolve) => unavailable.listen(0, '127.0.0.1', resolve));
    const events: WorkerEvent[] = [];
    const w = worker(`http://127.0.0.1:${(unavailable.address() as AddressInfo).port}`, tenant.token, events);
    let settled = false;
    const running = w.run().finally(() => (settled = true));
    await waitFor(async () => upgrades >= 3);
    assert.equal(settled, false, 'still trying');
    const failures = events.filter((e): e is Extract<WorkerEvent, { type: 'connect_failed' }> => e.type === 'connect_failed');
    assert.ok(failures.length >= 2);
    assert.deepEqual([failures[0]?.error.code, failures[0]?.error.status, failures[0]?.error.requestId], ['UNAVAILABLE', 503, 'req-1']);
    assert.ok(!events.some((e) => e.type === 'failed'));
    await w.stop();
    await settledWithin(running, 10_000, 'run() after stop()').then(({ error }) => assert.equal(error, undefined, 'run() resolves after stop()'));
    await new Promise<void>((resolve) => unavailable.close(() => resolve()));
  });

  test('revoking the credential of a connected worker ends its session promptly: run() rejects, the reservation goes back', async () => {
    const workerToken = await createCredential(t.db, tenant, ['workers:consume']);
    const credentialId = workerToken.slice(6, 38);
    const submitted = [await submit('held'), await submit('held')];
    // Every start frame after the first is held back (never delivered while the test runs).
    const gate = await frameGate(server.url, 'start', { passFirst: 1 });
    const proxy = {
      url: gate.url,
      close: () => gate.close(),
      get held() {
        return gate.heldFrames.map((f) => (JSON.parse(f) as { attempt_id: string }).attempt_id);
      },
    };
    const events: WorkerEvent[] = [];
    let abortReason: unknown;
    const w = worker(proxy.url, workerToken, events, {
      queue: 'held',
      handler: (taskContext) =>
        new Promise((_, reject) =>
          taskContext.signal.addEventListener('abort', () => {
            abortReason = taskContext.signal.reason;
            reject(new Error('aborted'));
          }),
        ),
    });
    const running = w.run();
    running.catch(() => {}); // observed below; it must not count as unhandled meanwhile

    type AttemptOfWorker = { attempt_id: Buffer; task_id: Buffer; state: string };
    const attemptsOfWorker = () =>
      t.db.rows<AttemptOfWorker>(
        `SELECT a.attempt_id, a.task_id, a.state FROM orbit_attempts a JOIN orbit_worker_sessions s ON s.session_id = a.session_id
          WHERE s.credential_id = ? ORDER BY a.state`,
        [Buffer.from(credentialId, 'hex')],
      );
    // One attempt runs (its handler waits), the other is reserved and its start is held back.
    let seen: string[] = [];
    const [reserved, runningAttempt] = await waitFor(async () => {
      const rows = await attemptsOfWorker();
      seen = rows.map((r) => r.state);
      return proxy.held.length === 1 && seen.join() === 'RESERVED,RUNNING' ? (rows as [AttemptOfWorker, AttemptOfWorker]) : null;
    }).catch((error: Error) => {
      const problems = server.logs.filter((l) => typeof l.level === 'number' && l.level >= 40);
      throw new Error(
        `${error.message}; attempts ${seen.join()}, held starts ${proxy.held.length}, events ${JSON.stringify(events)}, server ${JSON.stringify(problems)}`,
      );
    });
    assert.equal(reserved.attempt_id.toString('hex'), proxy.held[0]);
    assert.equal(w.heldAttempts, 2);
    let q = (await http('GET', '/v1/queues/held')).body.data;
    assert.deepEqual([q.active_attempts, q.pending_starts], ['2', '1']);

    // In process (the output and exit code the program would have): what it writes is what the server must notice.
    const revoke = await adminInProcess(['credential', 'revoke', '--credential-id', credentialId], adminEnv(t.url));
    assert.equal(revoke.code, 0, revoke.stderr);
    // The worker does nothing that would meet the revoke (no claim: it is full); the server's
    // credential check (once a second) ends the session, and run() rejects rather than idling -
    // well within this bound.
    const { error } = await settledWithin(running, 10_000, 'run() after the revoke');
    assert.ok(error instanceof OrbitError, `an OrbitError, not ${String(error)}`);
    assert.equal(error.code, 'UNAUTHENTICATED');
    assert.equal(error.message, 'the credential was revoked');
    assert.ok(events.some((e) => e.type === 'failed'));
    assert.equal(abortReason, 'session lost', "the running handler's signal was aborted");
    assert.equal(w.heldAttempts, 0);

    // As on a disconnect, and before the worker was told: the session row is closed and the
    // reservation given back (RELEASED, not expired by recovery); the running attempt keeps its lease.
    const [session] = await t.db.rows<{ state: string; closed_at: string | null }>(
      'SELECT state, closed_at FROM orbit_worker_sessions WHERE credential_id = ?',
      [Buffer.from(credentialId, 'hex')],
    );
    assert.equal(session?.state, 'CLOSED');
    assert.notEqual(session?.closed_at, null);
    const afterRevoke = await attemptsOfWorker();
    const stateOf = (id: Buffer) => afterRevoke.find((r) => r.attempt_id.equals(id))?.state;
    assert.equal(stateOf(reserved.attempt_id), 'RELEASED');
    assert.equal(stateOf(runningAttempt.attempt_id), 'RUNNING', 'a running attempt keeps its lease until recovery');
    const releasedTask = await task(reserved.task_id.toString('hex'));
    assert.deepEqual([releasedTask.state, releasedTask.attempts], ['WAITING', 0]);
    q = (await http('GET', '/v1/queues/held')).body.data;
    assert.deepEqual([q.active_attempts, q.pending_starts], ['1', '0'], 'the reservation is no longer counted; the running attempt still is');

    // The running attempt is recovered when its lease runs out (now: as if the worker had been
    // silent for the whole lease); then nothing is held.
    await endLeases(t.db, [runningAttempt.attempt_id.toString('hex')]);
    await waitFor(async () => (await attemptsOfWorker()).every((r) => r.state !== 'RUNNING' && r.state !== 'RESERVED'));
    q = (await http('GET', '/v1/queues/held')).body.data;
    assert.deepEqual([q.active_attempts, q.pending_starts], ['0', '0']);
    await proxy.close();
    for (const s of submitted) {
      const current = await task(s.task_id);
      if (['WAITING', 'NEEDS_REVIEW'].includes(current.state)) await http('POST', `/v1/tasks/${s.task_id}:cancel`, { reason: 'cleanup' });
    }
    await assertCountersMatchRecount(t.db);
  });
});
