/**
 * Limits under load and failure, with real processes: two server processes, several worker
 * processes (the worker SDK), two namespaces of one application.
 *  - active attempts never exceed the application's or a queue's max_concurrency (sampled
 *    throughout, from the attempts table);
 *  - starts per one-second window never exceed rate_per_second, per application and per queue
 *    (windows rebuilt from the attempts' start times, exactly as the server opens them);
 *  - a worker SIGKILLed mid-task and a server SIGKILLed mid-flight and restarted: every task
 *    ends SUCCEEDED, none ran twice without an expiry in between, counters equal a recount.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { startWorkerProcess, type WorkerProcess } from '../helpers/worker-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { sqlToMillis } from '../../server/time.ts';

const LEASE_SECONDS = 2;
const SERVER_ENV = { ORBIT_LEASE_SECONDS: String(LEASE_SECONDS), ORBIT_RECOVERY_INTERVAL_MS: '200' };

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

describe('limits under load and failure, two servers and several workers', () => {
  let t: TestDatabase;
  let ports: number[];
  let servers: ServerProcess[];
  let first: TestTenant;
  let second: TestTenant;
  const workers: WorkerProcess[] = [];

  before(async () => {
    t = await freshDatabase('load');
    first = await createTenant(t.db, { namespace: 'first', queues: ['fast', 'slow'], resourceAccess: true });
    second = await createTenant(t.db, { applicationId: first.applicationId, namespace: 'second', queues: ['fast'], resourceAccess: true });
    ports = [await freePort(), await freePort()];
    servers = await Promise.all(ports.map((port) => startServerProcess(t.url, { ...SERVER_ENV, ORBIT_LISTEN: `127.0.0.1:${port}` })));
  });
  after(async () => {
    await Promise.all(workers.map((w) => w.stop()));
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const url = (i: number) => `http://127.0.0.1:${ports[i]}`;

  async function configure(limits: { app: [number, number]; queues: Array<[TestTenant, string, number, number]> }) {
    const r = await call(url(0), 'GET', '/v1/application/resources', { token: first.token });
    const app = await call(url(0), 'POST', '/v1/application/resources:configure', {
      token: first.token,
      key: `app-${r.body.data.revision}`,
      body: {
        expected_revision: r.body.data.revision,
        reason: 'load test',
        max_unfinished_tasks: 100000,
        max_concurrency: limits.app[0],
        rate_per_second: limits.app[1],
      },
    });
    assert.equal(app.status, 200);
    for (const [tenant, queue, concurrency, rate] of limits.queues) {
      const q = await call(url(1), 'GET', `/v1/queues/${queue}`, { token: tenant.token });
      const res = await call(url(1), 'POST', `/v1/queues/${queue}:configure`, {
        token: tenant.token,
        key: `q-${queue}-${q.body.data.revision}`,
        body: {
          expected_revision: q.body.data.revision,
          reason: 'load test',
          max_unfinished_tasks: 100000,
          max_concurrency: concurrency,
          rate_per_second: rate,
          key_concurrency: 1,
          paused: false,
        },
      });
      assert.equal(res.status, 200);
    }
  }

  async function submitMany(label: string, count: number, body: Record<string, unknown> = {}) {
    const targets: Array<[TestTenant, string]> = [
      [first, 'fast'],
      [first, 'slow'],
      [second, 'fast'],
    ];
    for (let i = 0; i < count; i += 25) {
      await Promise.all(
        Array.from({ length: Math.min(25, count - i) }, (_, j) => {
          const n = i + j;
          const [tenant, queue] = targets[n % 3]!;
          return call(url(n % 2), 'POST', `/v1/queues/${queue}/tasks`, {
            token: tenant.token,
            key: `${label}-${n}`,
            body: { payload: { n }, max_attempts: 10, ...body },
          }).then((r) => assert.equal(r.status, 200));
        }),
      );
    }
  }

  async function unfinished(): Promise<number> {
    const [row] = await t.db.rows<{ n: string }>("SELECT COUNT(*) AS n FROM orbit_tasks WHERE state IN ('WAITING','LEASED','RUNNING','NEEDS_REVIEW')");
    return Number(row?.n);
  }

  async function waitUntilDone(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while ((await unfinished()) > 0) {
      if (Date.now() > deadline) {
        const states = await t.db.rows(
          "SELECT t.state, a.state AS attempt_state, a.lease_expires_at, NOW(6) AS now, COUNT(*) AS n FROM orbit_tasks t LEFT JOIN orbit_attempts a ON a.attempt_id = t.current_attempt_id WHERE t.state IN ('WAITING','LEASED','RUNNING','NEEDS_REVIEW') GROUP BY 1, 2, 3, 4",
        );
        throw new Error(`tasks still unfinished after ${timeoutMs} ms: ${JSON.stringify(states)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Greedy fixed windows exactly as the server opens them: a window starts at the first start after the previous one ended. */
  function maxStartsPerWindow(startTimes: number[]): number {
    const sorted = [...startTimes].sort((a, b) => a - b);
    let max = 0;
    let windowStart = -Infinity;
    let count = 0;
    for (const at of sorted) {
      if (at >= windowStart + 1000) {
        windowStart = at;
        count = 0;
      }
      count += 1;
      max = Math.max(max, count);
    }
    return max;
  }

  test('concurrency and start rate hold at both levels while four workers drain 360 tasks', async () => {
    await configure({
      app: [12, 40],
      queues: [
        [first, 'fast', 8, 25],
        [first, 'slow', 5, 1000],
        [second, 'fast', 6, 1000],
      ],
    });
    await submitMany('load', 360);
    let samples = 0;
    let worst = { app: 0, fastFirst: 0, slow: 0, fastSecond: 0 };
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const rows = await t.db.rows<{ queue_id: Buffer; namespace_id: Buffer; n: string }>(
          "SELECT queue_id, namespace_id, COUNT(*) AS n FROM orbit_attempts WHERE state IN ('RESERVED', 'RUNNING') GROUP BY queue_id, namespace_id",
        );
        const queues = await t.db.rows<{ queue_id: Buffer; name: string; namespace_id: Buffer }>('SELECT queue_id, name, namespace_id FROM orbit_queues');
        const byQueue = new Map(rows.map((r) => [r.queue_id.toString('hex'), Number(r.n)]));
        const count = (tenant: TestTenant, name: string) =>
          byQueue.get(queues.find((q) => q.name === name && q.namespace_id.toString('hex') === tenant.namespaceId)!.queue_id.toString('hex')) ?? 0;
        const app = rows.reduce((sum, r) => sum + Number(r.n), 0);
        worst = {
          app: Math.max(worst.app, app),
          fastFirst: Math.max(worst.fastFirst, count(first, 'fast')),
          slow: Math.max(worst.slow, count(first, 'slow')),
          fastSecond: Math.max(worst.fastSecond, count(second, 'fast')),
        };
        samples += 1;
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    for (let i = 0; i < 4; i++) {
      const tenant = i % 2 === 0 ? first : second;
      workers.push(
        startWorkerProcess({
          url: url(i % 2),
          token: tenant.token,
          queues: tenant === first ? ['fast', 'slow'] : ['fast'],
          capacity: 6,
          node: `node-${i}`,
          workMs: [5, 40],
        }),
      );
    }
    await waitUntilDone(90_000);
    sampling = false;
    await sampler;
    assert.ok(samples > 20, `sampled ${samples} times`);
    if (process.env.ORBIT_TEST_VERBOSE) console.log('peaks', worst, 'samples', samples);
    assert.ok(worst.app <= 12, `application concurrency peaked at ${worst.app} > 12`);
    assert.ok(worst.fastFirst <= 8, `first/fast concurrency peaked at ${worst.fastFirst} > 8`);
    assert.ok(worst.slow <= 5, `first/slow concurrency peaked at ${worst.slow} > 5`);
    assert.ok(worst.fastSecond <= 6, `second/fast concurrency peaked at ${worst.fastSecond} > 6`);
    assert.ok(worst.app >= 8, `the limit was actually exercised (peak ${worst.app})`);

    const started = await t.db.rows<{ queue_id: Buffer; started_at: string }>('SELECT queue_id, started_at FROM orbit_attempts WHERE started_at IS NOT NULL');
    assert.ok(maxStartsPerWindow(started.map((r) => sqlToMillis(r.started_at))) <= 40, 'application start rate');
    const fastFirst = (
      await t.db.rows<{ queue_id: Buffer }>('SELECT queue_id FROM orbit_queues WHERE namespace_id = ? AND name = ?', [
        Buffer.from(first.namespaceId, 'hex'),
        'fast',
      ])
    )[0]!.queue_id;
    const fastStarts = started.filter((r) => r.queue_id.equals(fastFirst)).map((r) => sqlToMillis(r.started_at));
    assert.ok(maxStartsPerWindow(fastStarts) <= 25, `first/fast start rate: ${maxStartsPerWindow(fastStarts)}`);
    assert.equal(maxStartsPerWindow(started.map((r) => sqlToMillis(r.started_at))), 40, 'the rate limit was actually reached');
    const [{ n }] = (await t.db.rows<{ n: string }>("SELECT COUNT(*) AS n FROM orbit_tasks WHERE state = 'SUCCEEDED'")) as [{ n: string }];
    assert.equal(n, '360');
    await assertCountersMatchRecount(t.db);
    await Promise.all(workers.splice(0).map((w) => w.stop()));
  });

  test('a worker killed mid-task and a server killed and restarted: every task ends once, counters equal a recount', async () => {
    await configure({
      app: [20, 10000],
      queues: [
        [first, 'fast', 1000, 10000],
        [first, 'slow', 1000, 10000],
        [second, 'fast', 1000, 10000],
      ],
    });
    await t.db.exec('DELETE FROM orbit_attempts');
    await t.db.exec('DELETE FROM orbit_tasks');
    await t.db.exec('UPDATE orbit_application_resources SET unfinished_tasks = 0');
    await t.db.exec('UPDATE orbit_queues SET unfinished_tasks = 0');
    await submitMany('crash', 150);
    for (let i = 0; i < 4; i++) {
      const tenant = i % 2 === 0 ? first : second;
      workers.push(
        startWorkerProcess({
          url: url(i % 2),
          token: tenant.token,
          queues: tenant === first ? ['fast', 'slow'] : ['fast'],
          capacity: 4,
          node: `crash-${i}`,
          // The worker killed below works long: whenever it is killed after starting a task, it is in the middle of it.
          workMs: i === 0 ? [5_000, 6_000] : [150, 300],
        }),
      );
    }
    // Once it has begun a task, kill a worker in the middle of it (its run lasts 5 s or more).
    await waitForLine(workers[0]!, 'run');
    await workers[0]!.kill();
    // Then kill a server hard (its sessions vanish without closing) and bring it back on the same
    // port after a moment down. (Whatever its workers hold at that moment - nothing needs it to
    // be anything: the reruns the check below needs come from the killed worker.)
    await servers[1]!.kill();
    await new Promise((r) => setTimeout(r, 1000)); // down for a while: the period is the scenario, nothing waits on it
    servers[1] = await startServerProcess(t.url, { ...SERVER_ENV, ORBIT_LISTEN: `127.0.0.1:${ports[1]}` });
    await waitUntilDone(90_000);

    const states = await t.db.rows<{ state: string; n: string }>('SELECT state, COUNT(*) AS n FROM orbit_tasks GROUP BY state');
    assert.deepEqual(
      states.map((s) => [s.state, s.n]),
      [['SUCCEEDED', '150']],
    );
    // Exactly one successful attempt per task; a task ran again only after its earlier attempt expired.
    const attempts = await t.db.rows<{ task_id: Buffer; state: string; started_at: string | null; lease_expires_at: string; finished_at: string | null }>(
      'SELECT task_id, state, started_at, lease_expires_at, finished_at FROM orbit_attempts ORDER BY task_id, claimed_at',
    );
    const byTask = new Map<string, typeof attempts>();
    for (const a of attempts) byTask.set(a.task_id.toString('hex'), [...(byTask.get(a.task_id.toString('hex')) ?? []), a]);
    let reruns = 0;
    for (const [taskId, list] of byTask) {
      assert.equal(list.filter((a) => a.state === 'SUCCEEDED').length, 1, `task ${taskId}`);
      const started = list.filter((a) => a.started_at !== null);
      for (let i = 0; i + 1 < started.length; i++) {
        reruns += 1;
        const earlier = started[i]!;
        const later = started[i + 1]!;
        assert.equal(earlier.state, 'EXPIRED', `task ${taskId}: an earlier run ended ${earlier.state}, not by expiry`);
        assert.ok(sqlToMillis(earlier.lease_expires_at) <= sqlToMillis(later.started_at!), `task ${taskId}: ran again before the earlier lease expired`);
      }
    }
    assert.ok(reruns > 0, 'the crashes interrupted running work (otherwise this test proves nothing)');
    await assertCountersMatchRecount(t.db);
  });
});

async function waitForLine(worker: WorkerProcess, event: string): Promise<void> {
  await waitFor(async () => worker.lines.some((l) => l.event === event), 60_000).catch(() => {
    throw new Error(`worker never logged ${event}`);
  });
}
