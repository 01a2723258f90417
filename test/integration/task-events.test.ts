/**
 * Task lifecycle events in the feed, against two real server processes: every transition a user
 * can cause writes its event in the same transaction (checked against the tasks table for every
 * task), a reader paging with `after=` while transitions run concurrently misses none, queue scope
 * and namespaces filter them, and `GET /v1/tasks/{id}?wait_seconds=` answers when the task
 * settles, without a database connection per waiting request.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw } from '../helpers/ws-session.ts';
import { waitFor } from '../helpers/wait.ts';
import { NonRetryableError, OrbitWorker } from '../../sdk/worker.ts';

type FeedEvent = { sequence: string; type: string; subject: string; data: Record<string, any>; namespace: string };

const TERMINAL_EVENT: Record<string, string> = {
  SUCCEEDED: 'task.succeeded',
  FAILED: 'task.failed',
  CANCELLED: 'task.cancelled',
  EXPIRED: 'task.expired',
  NEEDS_REVIEW: 'task.needs_review',
};

describe('task lifecycle events, two server processes', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  let tenant: TestTenant;
  let keys = 0;
  const key = (label: string) => `${label}-${++keys}`;

  before(async () => {
    t = await freshDatabase('task_events');
    tenant = await createTenant(t.db, { namespace: 'lifecycle', queues: ['jobs', 'other', 'review', 'expiry'], resourceAccess: true });
    const env = { ORBIT_LEASE_SECONDS: '1', ORBIT_RECOVERY_INTERVAL_MS: '100', ORBIT_SCHEDULE_INTERVAL_MS: '100' };
    servers = await Promise.all([startServerProcess(t.url, env), startServerProcess(t.url, { ...env, ORBIT_DB_POOL_SIZE: '4' })]);
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const url = (n = 0) => servers[n % servers.length]!.url;
  const submit = async (queue: string, body: Record<string, unknown>, n = 0) => {
    const r = await call(url(n), 'POST', `/v1/queues/${queue}/tasks`, { token: tenant.token, key: key('submit'), body });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.task.task_id as string;
  };
  async function feed(token = tenant.token, from = '0'): Promise<FeedEvent[]> {
    const all: FeedEvent[] = [];
    let after = from;
    for (;;) {
      const page = (await call(url(), 'GET', `/v1/events?after=${after}&limit=100`, { token })).body.data;
      all.push(...page.events);
      after = page.next_after;
      if (page.events.length < 100) return all;
    }
  }

  test('every task of every outcome has the events of its transitions, in order, as the tasks table says', async () => {
    const succeed = await submit('jobs', { payload: { kind: 'succeed' } });
    const fail = await submit('jobs', { payload: { kind: 'fail' }, max_attempts: 3 });
    const retry = await submit('jobs', { payload: { kind: 'retry-once' }, max_attempts: 3 }, 1);
    const cancelWaiting = await submit('other', { payload: {} });
    const expire = await submit('expiry', { payload: {}, deadline_seconds: 1 });
    const review = await submit('review', { payload: {}, max_attempts: 1, on_unknown_outcome: 'review' });
    const schedule = (
      await call(url(), 'POST', '/v1/queues/jobs/schedules', {
        token: tenant.token,
        key: key('schedule'),
        body: { name: 'once-a-second', interval_seconds: 1, payload: { kind: 'succeed' }, reason: 'events test' },
      })
    ).body.data.schedule;

    let retried = false;
    const worker = new OrbitWorker({
      baseUrl: url(1),
      token: tenant.token,
      node_id: 'events',
      queues: ['jobs'],
      capacity: 4,
      maxPollIntervalMs: 50,
      handler: async (task) => {
        if (task.payload.kind === 'fail') throw new NonRetryableError('no');
        if (task.payload.kind === 'retry-once' && !retried) {
          retried = true;
          throw new Error('once');
        }
        return { ok: true };
      },
    });
    await worker.start();
    // The review task: started by a raw session that then disappears (its outcome is unknown).
    const raw = await connectRaw(url(), tenant.token);
    await raw.request({ type: 'hello', node_id: 'vanishing', queues: ['review'], capacity: 1 });
    const granted = await raw.request({ type: 'claim', claim_id: 'c1', max: 1, start: true });
    assert.equal(granted.attempts[0].task_id, review);
    await raw.close();
    assert.equal(
      (await call(url(), 'POST', `/v1/tasks/${cancelWaiting}:cancel`, { token: tenant.token, key: key('cancel'), body: { reason: 'not needed' } })).status,
      200,
    );

    const state = async (id: string) => (await call(url(), 'GET', `/v1/tasks/${id}`, { token: tenant.token })).body.data.state;
    await waitFor(async () => ((await state(review)) === 'NEEDS_REVIEW' ? true : null));
    await waitFor(async () => ((await state(expire)) === 'EXPIRED' ? true : null));
    for (const id of [succeed, fail, retry]) await waitFor(async () => (['SUCCEEDED', 'FAILED'].includes(await state(id)) ? true : null));
    await waitFor(async () => {
      const rows = await t.db.rows<{ n: number }>("SELECT COUNT(*) AS n FROM orbit_tasks WHERE schedule_id IS NOT NULL AND state = 'SUCCEEDED'");
      return Number(rows[0]?.n) >= 1 ? true : null;
    });
    // The pause takes the schedule's row lock: a round in flight has committed before it answers, and none fires after it.
    const paused = await call(url(), 'POST', `/v1/schedules/${schedule.schedule_id}:pause`, {
      token: tenant.token,
      key: key('pause'),
      body: { reason: 'enough' },
    });
    assert.equal(paused.status, 200, JSON.stringify(paused.body));
    await worker.stop();
    const resolved = await call(url(), 'POST', `/v1/tasks/${review}:resolve`, {
      token: tenant.token,
      key: key('resolve'),
      body: { outcome: 'failed', reason: 'checked' },
    });
    assert.equal(resolved.status, 200, JSON.stringify(resolved.body));

    const events = (await feed()).filter((e) => e.type.startsWith('task.'));
    const byTask = new Map<string, FeedEvent[]>();
    for (const e of events) byTask.set(e.subject, [...(byTask.get(e.subject) ?? []), e]);
    const sequences = events.map((e) => BigInt(e.sequence));
    assert.deepEqual(
      sequences,
      [...sequences].sort((a, b) => (a < b ? -1 : 1)),
      'in sequence order',
    );
    assert.equal(new Set(sequences).size, sequences.length);

    // Every task in the table, against its events.
    const tasks = await t.db.rows<{ task_id: Buffer; state: string; attempts: number; queue: string; schedule_id: Buffer | null }>(
      'SELECT k.task_id, k.state, k.attempts, q.name AS queue, k.schedule_id FROM orbit_tasks k JOIN orbit_queues q ON q.queue_id = k.queue_id',
    );
    assert.ok(tasks.length >= 7);
    for (const task of tasks) {
      const id = task.task_id.toString('hex');
      const mine = byTask.get(id) ?? [];
      const types = mine.map((e) => e.type);
      assert.equal(types[0], 'task.submitted', `${id}: ${types.join(', ')}`);
      assert.equal(types.filter((x) => x === 'task.submitted').length, 1);
      assert.equal(types.filter((x) => x === 'task.started').length, task.attempts, `${id} started ${task.attempts} times: ${types.join(', ')}`);
      for (const e of mine) {
        assert.equal(e.data.task_id, id);
        assert.equal(e.data.queue, task.queue);
        if (task.schedule_id) assert.equal(e.data.schedule_id, task.schedule_id.toString('hex'));
      }
      const started = mine.filter((e) => e.type === 'task.started').map((e) => e.data.attempt_number);
      assert.deepEqual(
        started,
        started.map((_, i) => i + 1),
        'attempt numbers 1, 2, …',
      );
      if (task.state !== 'WAITING' && task.state !== 'LEASED' && task.state !== 'RUNNING') {
        const expected = id === review ? 'task.resolved' : TERMINAL_EVENT[task.state];
        assert.equal(types.at(-1), expected, `${id} is ${task.state}: ${types.join(', ')}`);
      }
    }
    assert.deepEqual(
      byTask.get(succeed)?.map((e) => e.type),
      ['task.submitted', 'task.started', 'task.succeeded'],
    );
    assert.deepEqual(
      byTask.get(fail)?.map((e) => e.type),
      ['task.submitted', 'task.started', 'task.failed'],
    );
    assert.deepEqual(
      byTask.get(retry)?.map((e) => e.type),
      ['task.submitted', 'task.started', 'task.retry_scheduled', 'task.started', 'task.succeeded'],
    );
    const retryScheduled = byTask.get(retry)?.find((e) => e.type === 'task.retry_scheduled');
    assert.equal(retryScheduled?.data.attempt_number, 1);
    assert.match(String(retryScheduled?.data.available_at), /Z$/);
    assert.deepEqual(
      byTask.get(cancelWaiting)?.map((e) => e.type),
      ['task.submitted', 'task.cancelled'],
    );
    assert.deepEqual(
      byTask.get(expire)?.map((e) => e.type),
      ['task.submitted', 'task.expired'],
    );
    assert.deepEqual(
      byTask.get(review)?.map((e) => e.type),
      ['task.submitted', 'task.started', 'task.needs_review', 'task.resolved'],
    );
    const scheduled = tasks.find((x) => x.schedule_id !== null && x.state === 'SUCCEEDED');
    const scheduledEvents = byTask.get(scheduled!.task_id.toString('hex'))!;
    assert.equal(scheduledEvents[0]!.data.schedule_id, schedule.schedule_id);
    assert.match(scheduledEvents[0]!.data.scheduled_for, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  });

  test('a reader paging with after= while both servers run transitions misses none of them', async () => {
    const head = (await feed()).at(-1)?.sequence ?? '0';
    const seen: FeedEvent[] = [];
    let after = head;
    let writing = true;
    const reader = (async () => {
      while (writing || seen.length === 0) {
        const page = (await call(url(1), 'GET', `/v1/events?after=${after}&limit=50`, { token: tenant.token })).body.data;
        seen.push(...page.events);
        after = page.next_after;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    const ids = await Promise.all(Array.from({ length: 60 }, (_, i) => submit(i % 2 ? 'jobs' : 'other', { payload: { i } }, i)));
    await Promise.all(ids.map((id, i) => call(url(i + 1), 'POST', `/v1/tasks/${id}:cancel`, { token: tenant.token, key: key('c'), body: { reason: 'race' } })));
    writing = false;
    await reader;
    // Drain what the reader had not reached yet, then compare with one read of everything.
    for (;;) {
      const page = (await call(url(1), 'GET', `/v1/events?after=${after}&limit=100`, { token: tenant.token })).body.data;
      seen.push(...page.events);
      after = page.next_after;
      if (page.events.length === 0) break;
    }
    const truth = await feed(tenant.token, head);
    assert.deepEqual(
      seen.map((e) => e.sequence),
      truth.map((e) => e.sequence),
      'the concurrent reader saw exactly the events a later full read sees, in the same order',
    );
    for (const id of ids)
      assert.deepEqual(
        truth.filter((e) => e.subject === id).map((e) => e.type),
        ['task.submitted', 'task.cancelled'],
      );
  });

  test('queue scope and namespaces: a credential sees task events of its queues only; another namespace none', async () => {
    const jobsOnly = await createCredential(t.db, tenant, ['events:read'], ['jobs']);
    await configureQueue(url(), tenant.token, 'other', { max_concurrency: 77 });
    const events = await feed(jobsOnly);
    assert.ok((await feed()).some((e) => e.type === 'queue.configured' && e.subject === 'other'));
    const aboutQueues = events.filter((e) => e.type.startsWith('queue.') || e.type.startsWith('schedule.'));
    assert.ok(aboutQueues.length > 0, 'the schedule on jobs is visible');
    assert.deepEqual([...new Set(aboutQueues.map((e) => e.data.queue ?? e.subject))], ['jobs'], 'events about other queues are not shown');
    const taskEvents = events.filter((e) => e.type.startsWith('task.'));
    assert.ok(taskEvents.length > 0);
    assert.deepEqual([...new Set(taskEvents.map((e) => e.data.queue))], ['jobs']);
    const stranger = await createTenant(t.db, { namespace: 'stranger', queues: ['jobs'] });
    await submit('jobs', { payload: {} });
    assert.deepEqual(
      (await feed(stranger.token)).filter((e) => e.type.startsWith('task.')),
      [],
      'another namespace (and application) sees none of these',
    );
  });

  test('GET /v1/tasks/{id}?wait_seconds= answers when the task settles, holding no connection while it waits', async () => {
    // Asked to wait 30 s: an answer well before that came because the task settled. (The times
    // below are generous for a loaded machine and still far from the 30 s a wait would take.)
    const id = await submit('other', { payload: {} });
    const startedAt = Date.now();
    const waiting = call(url(1), 'GET', `/v1/tasks/${id}?wait_seconds=30`, { token: tenant.token });
    // Time for the request to start waiting; should it not have yet, it reads the task CANCELLED
    // at once - the checks below hold either way.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const cancelled = await call(url(), 'POST', `/v1/tasks/${id}:cancel`, { token: tenant.token, key: key('w'), body: { reason: 'answer the waiter' } });
    const answer = await waiting;
    assert.equal(cancelled.status, 200);
    assert.equal(answer.status, 200);
    assert.equal(answer.body.data.state, 'CANCELLED');
    assert.ok(Date.now() - startedAt < 20_000, `answered ${Date.now() - startedAt} ms after the request, not when its 30 s were up`);

    // Nothing happens: the task as it is, after about wait_seconds (never before).
    const idle = await submit('other', { payload: {} });
    const t0 = Date.now();
    const timedOut = await call(url(1), 'GET', `/v1/tasks/${idle}?wait_seconds=1`, { token: tenant.token });
    assert.equal(timedOut.body.data.state, 'WAITING');
    assert.ok(Date.now() - t0 >= 950 && Date.now() - t0 < 15_000, `${Date.now() - t0} ms`);

    // 40 waiters on a server with 4 database connections: other requests still answer while all
    // of them wait (were a connection held per waiter, it would wait for theirs, 30 s).
    let answered = 0;
    const waiters = Array.from({ length: 40 }, () =>
      call(url(1), 'GET', `/v1/tasks/${idle}?wait_seconds=30`, { token: tenant.token }).finally(() => {
        answered += 1;
      }),
    );
    // Time for the requests to start waiting (the check holds whether or not all of them have).
    await new Promise((resolve) => setTimeout(resolve, 500));
    const plain = await call(url(1), 'GET', '/v1/queues/other', { token: tenant.token });
    assert.equal(plain.status, 200);
    assert.equal(answered, 0, 'a plain request answered while the 40 waiters waited');
    // They answer once the task settles.
    const settled = await call(url(), 'POST', `/v1/tasks/${idle}:cancel`, { token: tenant.token, key: key('w2'), body: { reason: 'done' } });
    assert.equal(settled.status, 200);
    assert.ok((await Promise.all(waiters)).every((r) => r.status === 200 && r.body.data.state === 'CANCELLED'));

    const tooLong = await call(url(), 'GET', `/v1/tasks/${idle}?wait_seconds=31`, { token: tenant.token });
    assert.equal(tooLong.status, 400);
    assert.equal(tooLong.body.error.details.field, 'wait_seconds');
  });
});
