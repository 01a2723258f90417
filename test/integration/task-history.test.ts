/**
 * "What happened to my task", over the public API against a real server and raw worker frames:
 *
 * - GET /v1/tasks lists the tasks of every queue the credential's scope includes, newest first,
 *   filtered by queue and state, paged by cursor without a task twice or missing; a queue outside
 *   the scope is 404 and its tasks never appear;
 * - GET /v1/tasks/{id}/attempts and /events: a task's attempts (with the worker's node id) and
 *   its lifecycle events, in order;
 * - POST /v1/tasks/{id}:retry: FAILED, EXPIRED and CANCELLED tasks go back to WAITING and run
 *   again; admitted like a submission (APPLICATION_FULL, QUEUE_FULL: nothing changed, no
 *   receipt, the same key later succeeds); a receipt replays it; other states are 409; audit
 *   and the `task.retried` event record it;
 * - GET /v1/tasks/{id}?wait_seconds says whether the wait ended on a settled task or ran out;
 * - a create of a queue outside the credential's scope says so.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue } from '../helpers/server-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { connectRaw, type RawSession } from '../helpers/ws-session.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';

describe('task history: list, attempts, events, retry', () => {
  let t: TestDatabase;
  let server: RunningServer;
  let tenant: TestTenant;
  let worker: RawSession;
  let keys = 0;
  let claims = 0;

  before(async () => {
    t = await freshDatabase('task_history');
    tenant = await createTenant(t.db, { namespace: 'history', queues: ['mail', 'bills', 'other'], resourceAccess: true });
    server = await startServer({ ...testConfig(), databaseUrl: t.url, listenPort: 0, leaseSeconds: 600, recoveryIntervalMs: 100 }, { log: silentLogger() });
    worker = await connectRaw(server.url, tenant.token);
    const welcome = await worker.request({ type: 'hello', node_id: 'history-node', queues: ['mail', 'bills'], capacity: 50 });
    assert.equal(welcome.type, 'welcome', JSON.stringify(welcome));
  });
  after(async () => {
    await worker.close();
    await server.close();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const http = (method: string, path: string, body?: unknown, options: { token?: string; key?: string } = {}) =>
    call(server.url, method, path, {
      token: options.token ?? tenant.token,
      key: method === 'POST' ? (options.key ?? `k-${++keys}`) : undefined,
      body,
    });
  async function submit(queue: string, body: Record<string, unknown> = {}): Promise<string> {
    const r = await http('POST', `/v1/queues/${queue}/tasks`, { payload: { n: keys }, ...body });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.task.task_id;
  }
  const task = async (id: string) => (await http('GET', `/v1/tasks/${id}`)).body.data;
  async function cancel(id: string): Promise<void> {
    const r = await http('POST', `/v1/tasks/${id}:cancel`, { reason: 'test' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  /** Claims and starts exactly these tasks; the attempts by task id. */
  async function start(ids: string[]): Promise<Map<string, string>> {
    const answer = await worker.request({ type: 'claim', claim_id: `c${++claims}`, max: 50, start: true });
    assert.equal(answer.type, 'claimed', JSON.stringify(answer));
    const attempts = new Map<string, string>((answer.attempts as Array<{ task_id: string; attempt_id: string }>).map((a) => [a.task_id, a.attempt_id]));
    assert.deepEqual([...attempts.keys()].sort(), [...ids].sort());
    return attempts;
  }
  async function fail(id: string): Promise<string> {
    const attemptId = (await start([id])).get(id) as string;
    const done = await worker.request({ type: 'complete', attempt_id: attemptId, outcome: 'failed', retryable: false, error: { code: 'SMTP_DOWN' } });
    assert.equal(done.task_state, 'FAILED', JSON.stringify(done));
    return attemptId;
  }
  async function listAll(query: string): Promise<string[]> {
    const ids: string[] = [];
    for (let cursor: string | undefined; ; ) {
      const r = await http('GET', `/v1/tasks?${query}&limit=2${cursor === undefined ? '' : `&cursor=${cursor}`}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      ids.push(...r.body.data.tasks.map((x: { task_id: string }) => x.task_id));
      cursor = r.body.data.next_cursor;
      if (cursor === undefined) return ids;
    }
  }

  test('GET /v1/tasks lists every visible queue newest first, by queue and state, page by page', async () => {
    const submitted: Array<{ id: string; queue: string }> = [];
    for (const queue of ['mail', 'bills', 'mail', 'other', 'bills']) submitted.push({ id: await submit(queue, { delay_seconds: 3600 }), queue });
    await cancel(submitted[1]?.id as string);
    const newestFirst = [...submitted].reverse();
    const all = await listAll('state=WAITING');
    assert.deepEqual(
      all,
      newestFirst.filter((s) => s.id !== submitted[1]?.id).map((s) => s.id),
      'newest first, across queues, each once',
    );
    assert.deepEqual(
      await listAll('queue=mail'),
      newestFirst.filter((s) => s.queue === 'mail').map((s) => s.id),
    );
    assert.deepEqual(await listAll('state=CANCELLED'), [submitted[1]?.id]);
    // A credential scoped to one queue sees that queue's tasks only, and not the others by name.
    const mailOnly = await createCredential(t.db, tenant, ['tasks:read'], ['mail']);
    const scoped = await http('GET', '/v1/tasks?limit=100', undefined, { token: mailOnly });
    assert.ok(
      scoped.body.data.tasks.every((x: { queue: string }) => x.queue === 'mail'),
      JSON.stringify(scoped.body),
    );
    const outside = await http('GET', '/v1/tasks?queue=bills', undefined, { token: mailOnly });
    assert.equal(outside.status, 404);
    assert.equal((await http('GET', '/v1/tasks?cursor=bm90LWEtdGFzaw')).status, 400, 'a cursor not from this operation');
    for (const s of submitted) if (s.id !== submitted[1]?.id) await cancel(s.id);
  });

  test("a task's attempts and events tell its history; a retried FAILED task runs again", async () => {
    const id = await submit('mail', { max_attempts: 1 });
    const firstAttempt = await fail(id);
    const failed = await task(id);
    assert.equal(failed.state, 'FAILED');
    const retried = await http('POST', `/v1/tasks/${id}:retry`, { reason: 'SMTP is back' }, { key: 'retry-1' });
    assert.equal(retried.status, 200, JSON.stringify(retried.body));
    const again = retried.body.data.task;
    assert.equal(retried.body.data.deduplicated, false);
    assert.deepEqual(
      [again.state, again.attempts, again.max_attempts, again.error, again.finished_at, again.task_id],
      ['WAITING', 1, 2, undefined, undefined, id],
      'WAITING with one more attempt allowed, the error gone (kept in the event)',
    );
    const replay = await http('POST', `/v1/tasks/${id}:retry`, { reason: 'SMTP is back' }, { key: 'retry-1' });
    assert.deepEqual([replay.status, replay.body.data.deduplicated, replay.body.data.task.state], [200, true, 'WAITING']);
    const conflict = await http('POST', `/v1/tasks/${id}:retry`, { reason: 'another reason' }, { key: 'retry-1' });
    assert.equal(conflict.body.error.code, 'IDEMPOTENCY_CONFLICT');
    const notFinished = await http('POST', `/v1/tasks/${id}:retry`, { reason: 'twice' });
    assert.deepEqual([notFinished.status, notFinished.body.error.code, notFinished.body.error.details.state], [409, 'STATE_CONFLICT', 'WAITING']);
    // It runs again and succeeds.
    const secondAttempt = (await start([id])).get(id) as string;
    const done = await worker.request({ type: 'complete', attempt_id: secondAttempt, outcome: 'succeeded', result: { sent: true } });
    assert.equal(done.task_state, 'SUCCEEDED', JSON.stringify(done));
    assert.equal((await http('POST', `/v1/tasks/${id}:retry`, { reason: 'a success is an answer' })).status, 409);

    const attempts = (await http('GET', `/v1/tasks/${id}/attempts`)).body.data.attempts;
    assert.deepEqual(
      attempts.map((a: Record<string, unknown>) => [a.attempt_id, a.attempt_number, a.state, a.node_id, typeof a.started_at, typeof a.finished_at]),
      [
        [firstAttempt, 1, 'FAILED', 'history-node', 'string', 'string'],
        [secondAttempt, 2, 'SUCCEEDED', 'history-node', 'string', 'string'],
      ],
    );
    const events = (await http('GET', `/v1/tasks/${id}/events`)).body.data;
    assert.deepEqual(
      events.events.map((e: { type: string }) => e.type),
      ['task.submitted', 'task.started', 'task.failed', 'task.retried', 'task.started', 'task.succeeded'],
    );
    const retriedEvent = events.events[3];
    assert.deepEqual(
      [retriedEvent.subject, retriedEvent.data.state, retriedEvent.data.previous_state, retriedEvent.data.previous_error],
      [id, 'WAITING', 'FAILED', { code: 'SMTP_DOWN' }],
    );
    const page = (await http('GET', `/v1/tasks/${id}/events?after=${events.events[2].sequence}&limit=1`)).body.data;
    assert.deepEqual(
      page.events.map((e: { type: string }) => e.type),
      ['task.retried'],
    );
    const audit = (await http('GET', '/v1/audit-events?limit=100')).body.data.audit_events;
    const record = audit.find((a: { action: string }) => a.action === 'task.retry');
    assert.ok(record, 'an audit record of the retry');
    assert.deepEqual([record.resource_id ?? record.resource, record.reason], [id, 'SMTP is back']);
    // A queue may be named like a task id: its events are not the task's history.
    const operator = await createCredential(t.db, tenant, ['queues:manage'], ['*']);
    assert.equal((await http('POST', '/v1/queues', { name: id, reason: 'a queue named like a task' }, { token: operator })).status, 200);
    const after = (await http('GET', `/v1/tasks/${id}/events?limit=100`)).body.data.events.map((e: { type: string }) => e.type);
    assert.ok(after.length === 6 && after.every((type: string) => type.startsWith('task.')), JSON.stringify(after));
    // Another credential's scope: the history of a task outside it is 404.
    const otherOnly = await createCredential(t.db, tenant, ['tasks:read', 'tasks:submit'], ['other']);
    for (const path of [`/v1/tasks/${id}/attempts`, `/v1/tasks/${id}/events`]) {
      assert.equal((await http('GET', path, undefined, { token: otherOnly })).status, 404, path);
    }
    assert.equal((await http('POST', `/v1/tasks/${id}:retry`, { reason: 'x' }, { token: otherOnly })).status, 404);
  });

  test('a retry is admitted like a submission: full at either level changes nothing and leaves no receipt', async () => {
    const id = await submit('bills');
    await cancel(id);
    const resources = (await http('GET', '/v1/application/resources')).body.data;
    // The application holds exactly what it has now: no room for one more.
    const configure = (max: number, revision: string) =>
      http('POST', '/v1/application/resources:configure', {
        expected_revision: revision,
        reason: 'test',
        max_unfinished_tasks: max,
        max_concurrency: resources.max_concurrency,
        rate_per_second: resources.rate_per_second,
      });
    const full = await configure(Math.max(1, Number(resources.unfinished_tasks)), resources.revision);
    assert.equal(full.status, 200, JSON.stringify(full.body));
    const filler = Number(resources.unfinished_tasks) === 0 ? await submit('other', { delay_seconds: 3600 }) : null;
    const refused = await http('POST', `/v1/tasks/${id}:retry`, { reason: 'try' }, { key: 'retry-full' });
    assert.deepEqual([refused.status, refused.body.error.code, refused.headers.get('retry-after')], [429, 'APPLICATION_FULL', '1']);
    assert.equal((await task(id)).state, 'CANCELLED', 'nothing changed');
    const restored = await configure(resources.max_unfinished_tasks, full.body.data.resources.revision);
    assert.equal(restored.status, 200, JSON.stringify(restored.body));
    if (filler) await cancel(filler);

    await configureQueue(server.url, tenant.token, 'bills', { max_unfinished_tasks: 1 });
    const occupant = await submit('bills', { delay_seconds: 3600 });
    const queueFull = await http('POST', `/v1/tasks/${id}:retry`, { reason: 'try' }, { key: 'retry-full' });
    assert.deepEqual([queueFull.status, queueFull.body.error.code, queueFull.body.error.details.queue], [429, 'QUEUE_FULL', 'bills']);
    await cancel(occupant);
    // The refusals left no receipt: the same key succeeds now.
    const accepted = await http('POST', `/v1/tasks/${id}:retry`, { reason: 'try' }, { key: 'retry-full' });
    assert.deepEqual([accepted.status, accepted.body.data.deduplicated, accepted.body.data.task.state], [200, false, 'WAITING']);
    await configureQueue(server.url, tenant.token, 'bills', { max_unfinished_tasks: 100000 });
    await cancel(id);
  });

  test('an EXPIRED task retried gets a deadline as long as its first one', async () => {
    const id = await submit('mail', { deadline_seconds: 120, delay_seconds: 60 });
    // Its 120 s have passed (as if submitted two minutes ago); recovery, every 100 ms, expires it.
    await t.db.exec('UPDATE orbit_tasks SET created_at = NOW(6) - INTERVAL 121 SECOND, deadline_at = NOW(6) - INTERVAL 1 SECOND WHERE task_id = UNHEX(?)', [
      id,
    ]);
    await waitFor(async () => ((await task(id)).state === 'EXPIRED' ? true : null));
    const before = Date.now();
    const retried = (await http('POST', `/v1/tasks/${id}:retry`, { reason: 'once more' })).body.data.task;
    assert.equal(retried.state, 'WAITING');
    const left = Date.parse(retried.deadline_at) - before;
    assert.ok(left > 100_000 && left <= 125_000, `a new deadline about 120 s away (${left} ms)`);
    assert.ok(Date.parse(retried.available_at) <= Date.now(), 'claimable at once');
    await cancel(id);
  });

  test('a task retried again and again keeps the deadline length it was submitted with', async () => {
    const id = await submit('mail', { deadline_seconds: 300, delay_seconds: 200 });
    const deadlineLeft = (task: { deadline_at: string }, at: number) => Date.parse(task.deadline_at) - at;
    for (let round = 1; round <= 3; round++) {
      await cancel(id);
      // As if a day passed since the task (and its last retry) was made: every time of it a day older.
      await t.db.exec('UPDATE orbit_tasks SET created_at = created_at - INTERVAL 1 DAY, deadline_at = deadline_at - INTERVAL 1 DAY WHERE task_id = UNHEX(?)', [
        id,
      ]);
      const at = Date.now();
      const retried = (await http('POST', `/v1/tasks/${id}:retry`, { reason: `round ${round}` })).body.data.task;
      assert.equal(retried.state, 'WAITING');
      const left = deadlineLeft(retried, at);
      assert.ok(left > 280_000 && left <= 305_000, `round ${round}: a deadline 300 s away, not more (${left} ms)`);
    }
    await cancel(id);
  });

  test('a wait that runs out says so; one that ends on a settled task says that', async () => {
    const id = await submit('other', { delay_seconds: 3600 });
    const waiting = await http('GET', `/v1/tasks/${id}?wait_seconds=1`);
    assert.deepEqual([waiting.status, waiting.headers.get('x-orbit-wait'), waiting.body.data.state], [200, 'timed_out', 'WAITING']);
    await cancel(id);
    const settled = await http('GET', `/v1/tasks/${id}?wait_seconds=1`);
    assert.deepEqual([settled.headers.get('x-orbit-wait'), settled.body.data.state], ['settled', 'CANCELLED']);
    assert.equal((await http('GET', `/v1/tasks/${id}`)).headers.get('x-orbit-wait'), null, 'no wait asked, no header');
  });

  test("a create of a queue outside the credential's scope says so, the same whether it exists or not", async () => {
    const body = (name: string) => ({ name, reason: 'test' });
    const existing = await http('POST', '/v1/queues', body('bills'), { token: await createCredential(t.db, tenant, ['queues:manage'], ['mail']) });
    const missing = await http('POST', '/v1/queues', body('nowhere'), { token: await createCredential(t.db, tenant, ['queues:manage'], ['mail']) });
    for (const [r, name] of [
      [existing, 'bills'],
      [missing, 'nowhere'],
    ] as const) {
      assert.equal(r.status, 404);
      assert.equal(
        r.body.error.message.replace(name, 'X'),
        `this credential's queue scope (mail) does not include queue "X"; creating it needs a credential whose scope includes it, such as one from \`orbit-admin credential create --queue '*'\``,
      );
      assert.deepEqual(r.body.error.details, { queue: name, scope: ['mail'] });
    }
  });
});
