/**
 * Bulk submit (`POST /v1/queues/{queue}/tasks:batch`) against two real server processes: one
 * result per item in order; each item all-or-nothing at both levels; a quota that fills in the
 * middle keeps the earlier items and refuses the rest with nothing written for them; replays and
 * conflicts per item, shared with single submits; bad items refused on their own; and concurrent
 * batches and single submits never admit more than the limit.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
describe('bulk submit, two server processes', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  let tenant: TestTenant;
  let runs = 0;

  before(async () => {
    t = await freshDatabase('bulk');
    tenant = await createTenant(t.db, { namespace: 'bulk', queues: ['plain', 'full', 'app', 'race', 'mixed', 'bad'], resourceAccess: true });
    servers = await Promise.all([startServerProcess(t.url), startServerProcess(t.url)]);
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const url = (n = 0) => servers[n % servers.length]!.url;
  const batch = (queue: string, tasks: unknown[], n = 0, token = tenant.token) =>
    call(url(n), 'POST', `/v1/queues/${queue}/tasks:batch`, { token, body: { tasks } });
  const items = (prefix: string, count: number, extra: Record<string, unknown> = {}) =>
    Array.from({ length: count }, (_, i) => ({ idempotency_key: `${prefix}-${i}`, payload: { i }, ...extra }));
  async function unfinishedIn(queue: string): Promise<number> {
    const [row] = await t.db.rows<{ n: string }>(
      "SELECT COUNT(*) AS n FROM orbit_tasks k JOIN orbit_queues q ON q.queue_id = k.queue_id WHERE q.name = ? AND k.state IN ('WAITING','LEASED','RUNNING','NEEDS_REVIEW')",
      [queue],
    );
    return Number(row?.n);
  }
  async function setApplicationLimit(max: number) {
    const current = (await call(url(), 'GET', '/v1/application/resources', { token: tenant.token })).body.data;
    const r = await call(url(), 'POST', '/v1/application/resources:configure', {
      token: tenant.token,
      key: `app-limit-${++runs}`,
      body: {
        expected_revision: current.revision,
        reason: 'test',
        max_unfinished_tasks: max,
        max_concurrency: current.max_concurrency,
        rate_per_second: current.rate_per_second,
      },
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }

  test('every item accepted: one result per item, in order, each a task of the queue', async () => {
    const sent = items('plain', 5, { priority: 7 });
    const r = await batch('plain', sent);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const data = r.body.data;
    assert.deepEqual([data.accepted, data.replayed, data.refused], [5, 0, 0]);
    assert.deepEqual(
      data.results.map((x: any) => [x.idempotency_key, x.status]),
      sent.map((s) => [s.idempotency_key, 'accepted']),
    );
    for (const [i, result] of data.results.entries()) {
      assert.deepEqual(result.task.payload, { i });
      assert.equal(result.task.priority, 7);
      const got = await call(url(1), 'GET', `/v1/tasks/${result.task.task_id}`, { token: tenant.token });
      assert.equal(got.body.data.state, 'WAITING');
      assert.equal(got.body.data.queue, 'plain');
    }
    assert.equal(await unfinishedIn('plain'), 5);
  });

  test('replays per item, shared with single submits; a changed item is IDEMPOTENCY_CONFLICT and changes nothing', async () => {
    const first = await batch('plain', items('replay', 3));
    assert.equal(first.body.data.accepted, 3);
    const before = await unfinishedIn('plain');
    const again = await batch('plain', [...items('replay', 3).slice(0, 2), { idempotency_key: 'replay-2', payload: { changed: true } }], 1);
    assert.equal(again.status, 200);
    assert.deepEqual(
      again.body.data.results.map((x: any) => x.status),
      ['replayed', 'replayed', 'refused'],
    );
    assert.equal(again.body.data.results[0].task.task_id, first.body.data.results[0].task.task_id);
    assert.deepEqual(again.body.data.results[0].task.payload, { i: 0 });
    assert.equal(again.body.data.results[2].error.code, 'IDEMPOTENCY_CONFLICT');
    // A single submit with an item's key and content is the same submission, and the other way round.
    const single = await call(url(), 'POST', '/v1/queues/plain/tasks', { token: tenant.token, key: 'replay-1', body: { payload: { i: 1 } } });
    assert.equal(single.status, 200);
    assert.equal(single.body.data.deduplicated, true);
    assert.equal(single.body.data.task.task_id, first.body.data.results[1].task.task_id);
    const solo = await call(url(), 'POST', '/v1/queues/plain/tasks', { token: tenant.token, key: 'solo', body: { payload: { s: 1 }, priority: 5 } });
    const inBatch = await batch('plain', [{ idempotency_key: 'solo', payload: { s: 1 } }]);
    assert.equal(inBatch.body.data.results[0].status, 'replayed', 'defaults filled in: priority 5 sent or not is the same submission');
    assert.equal(inBatch.body.data.results[0].task.task_id, solo.body.data.task.task_id);
    // The same key twice in one batch: the second is a replay of the first, or a conflict when it differs.
    const twins = await batch('plain', [
      { idempotency_key: 'twin', payload: { a: 1 } },
      { idempotency_key: 'twin', payload: { a: 1 } },
      { idempotency_key: 'twin', payload: { a: 2 } },
    ]);
    assert.deepEqual(
      twins.body.data.results.map((x: any) => x.status),
      ['accepted', 'replayed', 'refused'],
    );
    assert.equal(twins.body.data.results[1].task.task_id, twins.body.data.results[0].task.task_id);
    assert.equal(twins.body.data.results[2].error.code, 'IDEMPOTENCY_CONFLICT');
    assert.equal(await unfinishedIn('plain'), before + 2, 'only "solo" and "twin" were new');
  });

  test('the queue fills mid-batch: earlier items accepted, the rest QUEUE_FULL with nothing written; the same keys succeed later', async () => {
    await configureQueue(url(), tenant.token, 'full', { max_unfinished_tasks: 5 });
    await batch('full', items('pre', 2));
    const sent = items('mid', 6);
    const r = await batch('full', sent, 1);
    assert.equal(r.status, 200);
    assert.deepEqual(
      r.body.data.results.map((x: any) => x.status),
      ['accepted', 'accepted', 'accepted', 'refused', 'refused', 'refused'],
    );
    for (const refused of r.body.data.results.slice(3)) {
      assert.equal(refused.error.code, 'QUEUE_FULL');
      assert.deepEqual(refused.error.details, { level: 'queue', queue: 'full', limit: 'max_unfinished_tasks' });
      assert.equal(refused.task, undefined);
    }
    assert.equal(await unfinishedIn('full'), 5);
    const receipts = await t.db.rows<{ n: string }>("SELECT COUNT(*) AS n FROM orbit_idempotency_receipts WHERE idempotency_key LIKE 'mid-%'");
    assert.equal(receipts[0]?.n, '3', 'no receipt for a refused item');
    await configureQueue(url(), tenant.token, 'full', { max_unfinished_tasks: 100 });
    const later = await batch('full', sent);
    assert.deepEqual(
      later.body.data.results.map((x: any) => x.status),
      ['replayed', 'replayed', 'replayed', 'accepted', 'accepted', 'accepted'],
    );
    assert.equal(await unfinishedIn('full'), 8);
  });

  test('the application fills mid-batch: APPLICATION_FULL for the rest, whatever queue room is left', async () => {
    const [row] = await t.db.rows<{ n: string }>('SELECT unfinished_tasks AS n FROM orbit_application_resources WHERE application_id = ?', [
      Buffer.from(tenant.applicationId, 'hex'),
    ]);
    const used = Number(row?.n);
    await setApplicationLimit(used + 2);
    try {
      const r = await batch('app', items('appfull', 4));
      assert.deepEqual(
        r.body.data.results.map((x: any) => x.status),
        ['accepted', 'accepted', 'refused', 'refused'],
      );
      assert.equal(r.body.data.results[2].error.code, 'APPLICATION_FULL');
      assert.deepEqual(r.body.data.results[2].error.details, { level: 'application', limit: 'max_unfinished_tasks' });
      assert.equal(await unfinishedIn('app'), 2);
    } finally {
      await setApplicationLimit(1_000_000);
    }
  });

  test('a bad item is refused on its own, naming its field; the others are admitted', async () => {
    const r = await batch('bad', [
      { idempotency_key: 'ok-0', payload: {} },
      { idempotency_key: 'bad-1', payload: {}, priority: 12 },
      { idempotency_key: 'bad-2', payload: {}, delay_seconds: 10, deadline_seconds: 10 },
      { payload: {} },
      { idempotency_key: 'bad-4', payload: {}, colour: 'red' },
      { idempotency_key: 'ok-5', payload: { x: 1 } },
    ]);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const results = r.body.data.results;
    assert.deepEqual(
      results.map((x: any) => x.status),
      ['accepted', 'refused', 'refused', 'refused', 'refused', 'accepted'],
    );
    assert.deepEqual(
      results.slice(1, 5).map((x: any) => [x.idempotency_key, x.error.code, x.error.details.field]),
      [
        ['bad-1', 'INVALID_ARGUMENT', 'tasks[1].priority'],
        ['bad-2', 'INVALID_ARGUMENT', 'tasks[2].delay_seconds'],
        ['', 'INVALID_ARGUMENT', 'tasks[3].idempotency_key'],
        ['bad-4', 'INVALID_ARGUMENT', 'tasks[4].colour'],
      ],
    );
    assert.equal(await unfinishedIn('bad'), 2);
  });

  test('the request itself: empty, too many items, too large, unknown queue, missing action - 4xx and nothing written', async () => {
    const before = await unfinishedIn('plain');
    const empty = await batch('plain', []);
    assert.equal(empty.status, 400);
    assert.equal(empty.body.error.details.field, 'tasks');
    const many = await batch('plain', items('many', 1001));
    assert.equal(many.status, 400);
    assert.equal(many.body.error.details.field, 'tasks');
    const notObject = await batch('plain', [1]);
    assert.equal(notObject.status, 400);
    assert.equal(notObject.body.error.details.field, 'tasks[0]');
    // 4 MiB is the limit of this operation (a single submit keeps 1 MiB).
    // The server reads and discards the rest of a refused body, so a client still sending can read the 400.
    const large = await batch('plain', items('large', 20, { payload: { text: 'x'.repeat(250_000) } }));
    assert.equal(large.status, 400);
    assert.equal(large.body.error.details.field, 'body');
    const fits = await batch('plain', items('fits', 12, { payload: { text: 'x'.repeat(250_000) } }));
    assert.equal(fits.status, 200, JSON.stringify(fits.body).slice(0, 300));
    assert.equal(fits.body.data.accepted, 12);
    const unknown = await batch('nope', items('nope', 1));
    assert.equal(unknown.status, 404);
    const readOnly = await createCredential(t.db, tenant, ['tasks:read']);
    const denied = await batch('plain', items('denied', 1), 0, readOnly);
    assert.equal(denied.status, 403);
    const scoped = await createCredential(t.db, tenant, ['tasks:submit'], ['other']);
    const outOfScope = await batch('plain', items('scoped', 1), 0, scoped);
    assert.equal(outOfScope.status, 404);
    assert.equal(await unfinishedIn('plain'), before + 12);
  });

  test('concurrent batches and single submits on two processes never admit more than the limit', async () => {
    const limit = 150;
    await configureQueue(url(), tenant.token, 'race', { max_unfinished_tasks: limit });
    const requests = [
      ...Array.from({ length: 8 }, (_, b) => batch('race', items(`race-b${b}`, 40), b)),
      ...Array.from({ length: 60 }, (_, i) =>
        call(url(i), 'POST', '/v1/queues/race/tasks', { token: tenant.token, key: `race-s${i}`, body: { payload: { i } } }),
      ),
    ];
    const answers = await Promise.all(requests);
    let accepted = 0;
    let refused = 0;
    for (const a of answers.slice(0, 8)) {
      assert.equal(a.status, 200);
      accepted += a.body.data.accepted;
      refused += a.body.data.refused;
      // Within a batch, once the queue is full nothing after it is accepted.
      const statuses: string[] = a.body.data.results.map((x: any) => x.status);
      const firstRefused = statuses.indexOf('refused');
      if (firstRefused !== -1)
        assert.ok(
          statuses.slice(firstRefused).every((s) => s === 'refused'),
          statuses.join(','),
        );
    }
    for (const a of answers.slice(8)) {
      if (a.status === 200) accepted += 1;
      else {
        assert.equal(a.status, 429);
        assert.equal(a.body.error.code, 'QUEUE_FULL');
        refused += 1;
      }
    }
    assert.equal(accepted, limit);
    assert.equal(refused, 8 * 40 + 60 - limit);
    assert.equal(await unfinishedIn('race'), limit);
  });
});
