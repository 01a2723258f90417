/**
 * The worker SDK against a real server: results and retries, cancellation reaching the handler's
 * AbortSignal, lease renewal for work longer than the lease, RATE_LIMITED backoff with the same
 * attempt, and a graceful stop that gives back reservations not started.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue as configureQueueVia } from '../helpers/server-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { frameGate } from '../helpers/frame-gate.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';
import { NonRetryableError, OrbitWorker, type TaskContext, type WorkerEvent } from '../../sdk/worker.ts';
import { isOrbitError } from '../../sdk/index.ts';
import { applicationSetEnabled } from '../../server/store/tenancy/tenancy.ts';

/** Short, so a handler can outlive it a few times over (the renew test), long enough that a renewal a loaded machine delays by a second still comes in time. */
const LEASE_SECONDS = 3;

describe('worker SDK', () => {
  let t: TestDatabase;
  let server: RunningServer;
  let tenant: TestTenant;
  let keys = 0;

  before(async () => {
    t = await freshDatabase('sdkworker');
    tenant = await createTenant(t.db, { namespace: 'sdk', queues: ['results', 'named', 'cancel', 'long', 'rated', 'stop', 'disabled'], resourceAccess: true });
    server = await startServer(
      { ...testConfig(), databaseUrl: t.url, listenPort: 0, leaseSeconds: LEASE_SECONDS, recoveryIntervalMs: 100 },
      { log: silentLogger() },
    );
  });
  after(async () => {
    await server.close();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const http = (method: string, path: string, body?: unknown) =>
    call(server.url, method, path, { token: tenant.token, key: method === 'POST' ? `k${++keys}` : undefined, body });
  const submit = async (queue: string, body: Record<string, unknown>) => (await http('POST', `/v1/queues/${queue}/tasks`, body)).body.data.task;
  const task = async (id: string) => (await http('GET', `/v1/tasks/${id}`)).body.data;
  function worker(queue: string, handler: (task: TaskContext) => Promise<unknown>, events: WorkerEvent[] = [], capacity = 4, startOnClaim = true) {
    return new OrbitWorker({
      baseUrl: server.url,
      token: tenant.token,
      node_id: `sdk-${queue}`,
      queues: [queue],
      capacity,
      handler,
      maxPollIntervalMs: 50,
      onEvent: (e) => events.push(e),
      startOnClaim,
    });
  }
  const configureQueue = (name: string, patch: Record<string, unknown>) => configureQueueVia(server.url, tenant.token, name, patch);

  test('results: a return value succeeds, a thrown error is retried, NonRetryableError fails at once', async () => {
    const ok = await submit('results', { payload: { kind: 'ok' } });
    const flaky = await submit('results', { payload: { kind: 'flaky' }, max_attempts: 3 });
    const fatal = await submit('results', { payload: { kind: 'fatal' }, max_attempts: 3 });
    const w = worker('results', async (task) => {
      if (task.payload.kind === 'flaky' && task.attempt_number === 1) throw new Error('transient');
      if (task.payload.kind === 'fatal') throw new NonRetryableError('broken input');
      return { attempt: task.attempt_number };
    });
    await w.start();
    const done = await waitFor(async () => {
      const states = await Promise.all([ok, flaky, fatal].map((x) => task(x.task_id)));
      return states.every((s) => ['SUCCEEDED', 'FAILED'].includes(s.state)) ? states : null;
    });
    await w.stop();
    assert.deepEqual(
      done.map((s) => [s.state, s.attempts]),
      [
        ['SUCCEEDED', 1],
        ['SUCCEEDED', 2],
        ['FAILED', 1],
      ],
    );
    assert.deepEqual(done[1].result, { attempt: 2 });
    assert.equal(done[2].error.message, 'broken input');
  });

  test("the handler's task is named like the frames and the HTTP API, survives JSON, and a token function is asked at connect", async () => {
    const submitted = await submit('named', { payload: { to: 'ada@example.com' }, priority: 7, resource_key: 'customer-1' });
    const seen: Array<Record<string, unknown>> = [];
    const events: WorkerEvent[] = [];
    let asked = 0;
    const w = new OrbitWorker({
      baseUrl: server.url,
      token: async () => {
        asked += 1;
        return tenant.token;
      },
      node_id: 'sdk-named',
      queues: ['named'],
      capacity: 1,
      maxPollIntervalMs: 50,
      onEvent: (e) => events.push(e),
      handler: async (task) => {
        seen.push(JSON.parse(JSON.stringify(task)));
        return { to: task.payload.to, task_id: task.task_id };
      },
    });
    await w.start();
    const done = await waitFor(async () => {
      const current = await task(submitted.task_id);
      return current.state === 'SUCCEEDED' ? current : null;
    });
    await w.stop();
    assert.equal(asked, 1, 'the token function is called for the connection');
    assert.deepEqual(done.result, { to: 'ada@example.com', task_id: submitted.task_id });
    const [context] = seen;
    assert.ok(context);
    const attemptId = context.attempt_id as string;
    assert.match(attemptId, /^[0-9a-f]{32}$/);
    // The same names as the task of the HTTP API and the `claimed` frame; no camelCase twins in the JSON.
    assert.deepEqual(context, {
      task_id: submitted.task_id,
      attempt_id: attemptId,
      attempt_number: 1,
      queue: 'named',
      payload: { to: 'ada@example.com' },
      priority: 7,
      resource_key: 'customer-1',
      deadline_at: submitted.deadline_at,
      signal: {},
    });
    const completed = events.find((e) => e.type === 'completed');
    assert.deepEqual(completed, { type: 'completed', attempt_id: attemptId, task_state: 'SUCCEEDED' });
    const connected = events.find((e) => e.type === 'connected');
    assert.match(connected?.type === 'connected' ? connected.session_id : '', /^[0-9a-f]{32}$/);
  });

  test('options are checked up front: an OrbitError INVALID_ARGUMENT naming the field', () => {
    const base = { baseUrl: server.url, token: tenant.token, node_id: 'n', queues: ['named'], capacity: 1, handler: async () => null };
    const cases: Array<[string, Record<string, unknown>]> = [
      ['baseUrl', { baseUrl: 'ftp://x' }],
      ['token', { token: 'has space' }],
      ['node_id', { node_id: '' }],
      ['queues', { queues: [] }],
      ['capacity', { capacity: 0 }],
      ['capacity', { capacity: 1.5 }],
      ['handler', { handler: undefined }],
    ];
    for (const [field, patch] of cases) {
      assert.throws(
        () => new OrbitWorker({ ...base, ...patch } as unknown as ConstructorParameters<typeof OrbitWorker>[0]),
        (e: unknown) => isOrbitError(e) && e.code === 'INVALID_ARGUMENT' && e.details?.field === field,
        field,
      );
    }
  });

  test('cancelling a running task aborts the handler signal with "cancelled" and the task ends CANCELLED', async () => {
    const submitted = await submit('cancel', { payload: {} });
    let reason: unknown;
    let running!: () => void;
    const started = new Promise<void>((resolve) => (running = resolve));
    const w = worker('cancel', (taskContext) => {
      running();
      return new Promise((_, reject) =>
        taskContext.signal.addEventListener('abort', () => {
          reason = taskContext.signal.reason;
          reject(new Error('stopped on request'));
        }),
      );
    });
    await w.start();
    await started;
    await http('POST', `/v1/tasks/${submitted.task_id}:cancel`, { reason: 'user asked' });
    const cancelled = await waitFor(async () => {
      const current = await task(submitted.task_id);
      return current.state === 'CANCELLED' ? current : null;
    });
    await w.stop();
    assert.equal(reason, 'cancelled');
    // The task says why it is CANCELLED - the reason given to :cancel, as for a task cancelled
    // while it waited; what the handler threw is in the task.cancelled event.
    assert.deepEqual(cancelled.error, { code: 'CANCELLED', message: 'user asked' });
    const events: Array<{ type: string; subject: string; data: any }> = [];
    for (let after = '0'; ; ) {
      const page = (await http('GET', `/v1/events?after=${after}&limit=100`)).body.data;
      if (page.events.length === 0) break;
      events.push(...page.events);
      after = page.next_after;
    }
    const event = events.find((e) => e.type === 'task.cancelled' && e.subject === submitted.task_id);
    assert.equal(event?.data.worker_error?.message, 'stopped on request');
  });

  test('leases are renewed while a handler runs longer than the lease', async () => {
    const submitted = await submit('long', { payload: {} });
    const w = worker('long', async () => {
      await new Promise((r) => setTimeout(r, LEASE_SECONDS * 1000 * 2));
      return 'done';
    });
    await w.start();
    const finished = await waitFor(async () => {
      const current = await task(submitted.task_id);
      return ['SUCCEEDED', 'WAITING', 'NEEDS_REVIEW'].includes(current.state) && current.attempts > 0 ? current : null;
    }, 15_000);
    await w.stop();
    assert.equal(finished.state, 'SUCCEEDED');
    assert.equal(finished.attempts, 1, 'no expiry and no second attempt');
  });

  test('RATE_LIMITED: the SDK backs off and starts the same attempt again', async () => {
    await configureQueue('rated', { rate_per_second: 2 });
    const tasks = await Promise.all(Array.from({ length: 4 }, (_, i) => submit('rated', { payload: { i } })));
    const events: WorkerEvent[] = [];
    // The worker's Starts are held back until the rate has been lowered under the two
    // reservations it holds, so the second Start meets a full window every time.
    const gate = await frameGate(server.url, 'start');
    // Reserve first, start after (a claim that starts its attempts itself is never RATE_LIMITED).
    const w = new OrbitWorker({
      baseUrl: gate.url,
      token: tenant.token,
      node_id: 'sdk-rated',
      queues: ['rated'],
      capacity: 4,
      handler: async () => null,
      maxPollIntervalMs: 50,
      onEvent: (e) => events.push(e),
      startOnClaim: false,
    });
    await w.start();
    await gate.held(2);
    await configureQueue('rated', { rate_per_second: 1 });
    gate.release();
    await waitFor(async () => {
      const states = await Promise.all(tasks.map((x) => task(x.task_id)));
      return states.every((s) => s.state === 'SUCCEEDED');
    }, 15_000);
    await w.stop();
    await gate.close();
    const attempts = await t.db.rows<{ n: string }>(
      "SELECT COUNT(*) AS n FROM orbit_attempts a JOIN orbit_queues q ON q.queue_id = a.queue_id WHERE q.name = 'rated' AND a.state = 'SUCCEEDED'",
    );
    assert.equal(attempts[0]?.n, '4', 'each task succeeded with exactly one attempt');
    const limited = events.filter((e) => e.type === 'rate_limited');
    assert.ok(limited.length > 0, 'at least one Start was rate limited and retried');
    // The retried Start used the attempt it was refused for: that attempt is among the four that succeeded.
    const succeeded = new Set(events.filter((e) => e.type === 'completed').map((e) => e.attempt_id));
    assert.ok(
      limited.every((e) => succeeded.has(e.attempt_id)),
      'a rate-limited attempt was started again, not replaced',
    );
    assert.ok(!events.some((e) => e.type === 'attempt_dropped'), JSON.stringify(events.filter((e) => e.type === 'attempt_dropped')));
  });

  test('stop() stops claiming, gives back unstarted reservations and lets running handlers finish', async () => {
    await configureQueue('stop', { rate_per_second: 1 });
    const tasks = await Promise.all(Array.from({ length: 3 }, (_, i) => submit('stop', { payload: { i } })));
    let finished = 0;
    const w = worker(
      'stop',
      async () => {
        await new Promise((r) => setTimeout(r, 300));
        finished += 1;
      },
      [],
      3,
      false,
    );
    await w.start();
    // One start per second: after the first starts, the other reservations wait on RATE_LIMITED.
    await waitFor(async () => (await t.db.rows("SELECT 1 FROM orbit_attempts WHERE state = 'RUNNING'")).length > 0);
    await w.stop({ timeoutMs: 5000 });
    assert.ok(finished >= 1, 'the running handler finished');
    const states = await Promise.all(tasks.map((x) => task(x.task_id)));
    assert.equal(states.filter((s) => s.state === 'SUCCEEDED').length, finished);
    assert.ok(
      states.every((s) => s.state === 'SUCCEEDED' || s.state === 'WAITING'),
      JSON.stringify(states.map((s) => s.state)),
    );
    const q = (await http('GET', '/v1/queues/stop')).body.data;
    assert.deepEqual([q.active_attempts, q.pending_starts], ['0', '0'], 'nothing left reserved');
    for (const s of states) if (s.state === 'WAITING') await http('POST', `/v1/tasks/${s.task_id}:cancel`, { reason: 'cleanup' });
  });

  test('recovery keeps running for a disabled application', async () => {
    const submitted = await submit('disabled', { payload: {} });
    const claimedOnly = worker('disabled', () => new Promise(() => {}), [], 1);
    await claimedOnly.start();
    await waitFor(async () => (await task(submitted.task_id)).state === 'RUNNING');
    await applicationSetEnabled(t.db, Buffer.from(tenant.applicationId, 'hex'), false);
    // The handler never returns and renewals stop with the session: the lease runs out and recovery releases it.
    await claimedOnly.stop({ timeoutMs: 100 });
    await waitFor(
      async () => {
        const [row] = await t.db.rows<{ state: string }>('SELECT state FROM orbit_tasks WHERE task_id = ?', [Buffer.from(submitted.task_id, 'hex')]);
        return row?.state === 'WAITING';
      },
      (LEASE_SECONDS + 5) * 1000,
    );
    const [usage] = await t.db.rows<{ active_attempts: string }>('SELECT active_attempts FROM orbit_application_resources WHERE application_id = ?', [
      Buffer.from(tenant.applicationId, 'hex'),
    ]);
    assert.equal(usage?.active_attempts, '0');
    await applicationSetEnabled(t.db, Buffer.from(tenant.applicationId, 'hex'), true);
    await http('POST', `/v1/tasks/${submitted.task_id}:cancel`, { reason: 'cleanup' });
  });
});
