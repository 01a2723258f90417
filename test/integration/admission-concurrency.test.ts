/**
 * Admission across two real server processes and many concurrent clients: the application's
 * and the queues' max_unfinished_tasks hold exactly, and the counters equal a recount.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';

describe('admission under concurrency, two server processes', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  let first: TestTenant;
  let second: TestTenant;

  before(async () => {
    t = await freshDatabase('admission');
    first = await createTenant(t.db, { namespace: 'first', queues: ['a', 'b', 'c'], resourceAccess: true });
    second = await createTenant(t.db, { applicationId: first.applicationId, namespace: 'second', queues: ['a', 'b'], resourceAccess: true });
    servers = await Promise.all([startServerProcess(t.url), startServerProcess(t.url)]);
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  async function setApplicationLimit(max: number) {
    const current = await call(servers[0]!.url, 'GET', '/v1/application/resources', { token: first.token });
    const response = await call(servers[0]!.url, 'POST', '/v1/application/resources:configure', {
      token: first.token,
      key: `limit-${max}-${current.body.data.revision}`,
      body: { expected_revision: current.body.data.revision, reason: 'test', max_unfinished_tasks: max, max_concurrency: 10000, rate_per_second: 100000 },
    });
    assert.equal(response.status, 200);
  }

  async function setQueueLimit(tenant: TestTenant, queue: string, max: number) {
    const current = await call(servers[1]!.url, 'GET', `/v1/queues/${queue}`, { token: tenant.token });
    const response = await call(servers[1]!.url, 'POST', `/v1/queues/${queue}:configure`, {
      token: tenant.token,
      key: `qlimit-${queue}-${max}-${current.body.data.revision}`,
      body: {
        expected_revision: current.body.data.revision,
        reason: 'test',
        max_unfinished_tasks: max,
        max_concurrency: 1000,
        rate_per_second: 10000,
        key_concurrency: 1,
        paused: false,
      },
    });
    assert.equal(response.status, 200);
  }

  async function cancelAllUnfinished() {
    for (const tenant of [first, second]) {
      for (const queue of tenant === first ? ['a', 'b', 'c'] : ['a', 'b']) {
        const list = await call(servers[0]!.url, 'GET', `/v1/queues/${queue}/tasks?state=WAITING&limit=100`, { token: tenant.token });
        for (const task of list.body.data.tasks) {
          const r = await call(servers[0]!.url, 'POST', `/v1/tasks/${task.task_id}:cancel`, {
            token: tenant.token,
            key: `cleanup-${task.task_id}`,
            body: { reason: 'cleanup' },
          });
          assert.equal(r.status, 200);
        }
      }
    }
  }

  /** 40 concurrent clients, each sending `perClient` submissions one after another, spread over both servers, namespaces and queues. */
  async function storm(label: string, perClient: number, target: (client: number) => { tenant: TestTenant; queue: string }) {
    const results = await Promise.all(
      Array.from({ length: 40 }, async (_, client) => {
        const out: Array<{ status: number; code?: string }> = [];
        for (let i = 0; i < perClient; i++) {
          const { tenant, queue } = target(client);
          const server = servers[(client + i) % 2]!;
          const r = await call(server.url, 'POST', `/v1/queues/${queue}/tasks`, {
            token: tenant.token,
            key: `${label}-${client}-${i}`,
            body: { payload: { client, i } },
          });
          if (r.status === 429) assert.equal(r.headers.get('retry-after'), '1');
          out.push({ status: r.status, code: r.body?.error?.code });
        }
        return out;
      }),
    );
    return results.flat();
  }

  test('application limit 50: exactly 50 accepted across namespaces, queues and processes', async () => {
    await setApplicationLimit(50);
    for (let round = 0; round < 3; round++) {
      const results = await storm(`app-${round}`, 4, (client) => {
        const tenant = client % 2 === 0 ? first : second;
        return { tenant, queue: ['a', 'b', 'c'][client % (tenant === first ? 3 : 2)] as string };
      });
      const accepted = results.filter((r) => r.status === 200).length;
      assert.equal(accepted, 50, `round ${round}`);
      assert.equal(results.filter((r) => r.status === 429 && r.code === 'APPLICATION_FULL').length, results.length - 50);
      const resources = await call(servers[1]!.url, 'GET', '/v1/application/resources', { token: second.token });
      assert.equal(resources.body.data.unfinished_tasks, '50');
      await assertCountersMatchRecount(t.db);
      await cancelAllUnfinished();
      await assertCountersMatchRecount(t.db);
    }
  });

  test('queue limits bind: each queue admits exactly its limit; when both are full APPLICATION_FULL is reported', async () => {
    await setApplicationLimit(1000);
    await setQueueLimit(first, 'a', 20);
    await setQueueLimit(second, 'a', 15);
    const results = await storm('queue', 3, (client) => ({ tenant: client % 2 === 0 ? first : second, queue: 'a' }));
    const [a1, a2] = await Promise.all([
      call(servers[0]!.url, 'GET', '/v1/queues/a', { token: first.token }),
      call(servers[0]!.url, 'GET', '/v1/queues/a', { token: second.token }),
    ]);
    assert.equal(a1.body.data.unfinished_tasks, '20');
    assert.equal(a2.body.data.unfinished_tasks, '15');
    assert.equal(results.filter((r) => r.status === 200).length, 35);
    assert.equal(results.filter((r) => r.code === 'QUEUE_FULL').length, results.length - 35);
    await assertCountersMatchRecount(t.db);

    // Now the application is full too (35 unfinished, limit 35): both full → APPLICATION_FULL.
    await setApplicationLimit(35);
    const both = await call(servers[0]!.url, 'POST', '/v1/queues/a/tasks', { token: first.token, key: 'both-full', body: { payload: {} } });
    assert.equal(both.status, 429);
    assert.equal(both.body.error.code, 'APPLICATION_FULL');
    // Lowering below usage refuses new work and deletes nothing.
    await setApplicationLimit(10);
    const resources = await call(servers[0]!.url, 'GET', '/v1/application/resources', { token: first.token });
    assert.equal(resources.body.data.unfinished_tasks, '35');
    assert.equal(resources.body.data.max_unfinished_tasks, 10);
    const refused = await call(servers[1]!.url, 'POST', '/v1/queues/b/tasks', { token: second.token, key: 'below-usage', body: { payload: {} } });
    assert.equal(refused.body.error.code, 'APPLICATION_FULL');
    await cancelAllUnfinished();
    await setApplicationLimit(1000);
    await setQueueLimit(first, 'a', 100000);
    await setQueueLimit(second, 'a', 100000);
  });

  test('an accepted submission replays even when full; a refused one can succeed later with the same key', async () => {
    await setApplicationLimit(1);
    const accepted = await call(servers[0]!.url, 'POST', '/v1/queues/b/tasks', { token: first.token, key: 'replay-full', body: { payload: { x: 1 } } });
    assert.equal(accepted.status, 200);
    const replay = await call(servers[1]!.url, 'POST', '/v1/queues/b/tasks', { token: first.token, key: 'replay-full', body: { payload: { x: 1 } } });
    assert.equal(replay.status, 200);
    assert.equal(replay.body.data.deduplicated, true);
    assert.deepEqual(replay.body.data.task, accepted.body.data.task);
    const refused = await call(servers[1]!.url, 'POST', '/v1/queues/b/tasks', { token: second.token, key: 'later', body: { payload: { y: 1 } } });
    assert.equal(refused.body.error.code, 'APPLICATION_FULL');
    const receipts = await t.db.rows("SELECT 1 FROM orbit_idempotency_receipts WHERE idempotency_key = 'later'");
    assert.equal(receipts.length, 0);
    await call(servers[0]!.url, 'POST', `/v1/tasks/${accepted.body.data.task.task_id}:cancel`, {
      token: first.token,
      key: 'free-it',
      body: { reason: 'make room' },
    });
    const later = await call(servers[0]!.url, 'POST', '/v1/queues/b/tasks', { token: second.token, key: 'later', body: { payload: { y: 1 } } });
    assert.equal(later.status, 200);
    assert.equal(later.body.data.deduplicated, false);
    await cancelAllUnfinished();
    await setApplicationLimit(1000);
  });

  test('the same key sent 20 times at once, to both processes, creates one task', async () => {
    for (let round = 0; round < 3; round++) {
      const responses = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          call(servers[i % 2]!.url, 'POST', '/v1/queues/c/tasks', { token: first.token, key: `burst-${round}`, body: { payload: { round } } }),
        ),
      );
      assert.deepEqual([...new Set(responses.map((r) => r.status))], [200]);
      assert.equal(new Set(responses.map((r) => r.body.data.task.task_id)).size, 1);
      assert.equal(responses.filter((r) => r.body.data.deduplicated === false).length, 1);
      const tasks = await t.db.rows('SELECT 1 FROM orbit_tasks WHERE idempotency_key = ?', [`burst-${round}`]);
      assert.equal(tasks.length, 1);
    }
    await cancelAllUnfinished();
  });
});
