/**
 * `orbit-admin verify [--repair]` on a database filled through the HTTP app and a worker session:
 * clean → exit 0; counters corrupted by hand → exit 1 with one line per difference; --repair →
 * fixed, audited, exit 0; and no false differences (nor lost updates from a repair) while
 * submissions, claims and results run beside it.
 *
 * The command runs in this process (`adminInProcess`: orbit-admin's main with the environment,
 * stdout, stderr and exit code the program would have, its own database pool, opened and closed
 * as the program does): what is tested is what it finds in and does to the database. That the
 * real bin/orbit-admin.mjs prints what the in-process run prints is test/integration/cli.test.ts's;
 * the real program against a database, startup.test.ts's.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { testApp } from '../helpers/app.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { adminEnv, adminInProcess, type InProcessResult } from '../helpers/programs.ts';
import { waitFor } from '../helpers/wait.ts';
import { connectRaw, type RawSession } from '../helpers/ws-session.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';
import { formatDifference } from '../../server/cli/verify-report.ts';
import { countersVerify } from '../../server/store/quotas/usage-recount.ts';
import { OrbitWorker } from '../../sdk/worker.ts';

describe('orbit-admin verify', () => {
  let t: TestDatabase;
  let server: RunningServer;
  let api: Awaited<ReturnType<typeof testApp>>;
  let first: TestTenant;
  let other: TestTenant;
  let keys = 0;

  before(async () => {
    t = await freshDatabase('verify');
    first = await createTenant(t.db, { namespace: 'first', queues: ['first', 'keyed'] });
    other = await createTenant(t.db, { namespace: 'other', queues: ['other'] });
    api = await testApp(t.db);
    // Leases of 10 minutes: the reservations a test holds open (and counts on) never run out
    // under it, however slowly the commands run on a loaded machine.
    server = await startServer({ ...testConfig(), databaseUrl: t.url, listenPort: 0, leaseSeconds: 600, recoveryIntervalMs: 100 }, { log: silentLogger() });
  });
  after(async () => {
    await server.close();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  /** `orbit-admin verify args` on this database, with the lock-order and shard-routing checks the test runs with. */
  const verify = (...args: string[]) => adminInProcess(['verify', ...args], adminEnv(t.url));

  async function submit(tenant: TestTenant, queue: string, body: Record<string, unknown> = {}) {
    const r = await api.request('POST', `/v1/queues/${queue}/tasks`, { token: tenant.token, key: `k-${++keys}`, body: { payload: { n: keys }, ...body } });
    assert.equal(r.status, 200, r.text);
    return r.body.data.task as { task_id: string };
  }

  async function queueId(tenant: TestTenant, name: string): Promise<Buffer> {
    const [row] = await t.db.rows<{ queue_id: Buffer }>('SELECT queue_id FROM orbit_queues WHERE namespace_id = ? AND name = ?', [
      Buffer.from(tenant.namespaceId, 'hex'),
      name,
    ]);
    assert.ok(row, `queue ${name}`);
    return row.queue_id;
  }

  /** Submissions through the HTTP app and a worker finishing them, until `stop()`; returns how many were submitted. */
  function traffic() {
    let running = true;
    let submitted = 0;
    const worker = new OrbitWorker({
      baseUrl: server.url,
      token: first.token,
      node_id: 'verify-traffic',
      queues: ['first', 'keyed'],
      capacity: 8,
      maxPollIntervalMs: 20,
      handler: async () => {
        await new Promise((r) => setTimeout(r, Math.random() * 20));
        return { ok: true };
      },
    });
    const loops = (async () => {
      await worker.start();
      await Promise.all(
        Array.from({ length: 4 }, async (_, lane) => {
          while (running) {
            await submit(first, lane % 2 === 0 ? 'first' : 'keyed', lane % 2 === 0 ? {} : { resource_key: `key-${submitted % 3}` });
            await submit(other, 'other');
            submitted += 2;
          }
        }),
      );
    })();
    return {
      get submitted() {
        return submitted;
      },
      async stop() {
        running = false;
        await loops;
        // Let the worker drain its queues, then stop it.
        await waitFor(async () => {
          const [row] = await t.db.rows<{ n: string }>(
            "SELECT COUNT(*) AS n FROM orbit_tasks WHERE application_id = ? AND state IN ('WAITING', 'LEASED', 'RUNNING')",
            [Buffer.from(first.applicationId, 'hex')],
          );
          return row?.n === '0';
        }, 30_000);
        await worker.stop();
      },
    };
  }

  // Its --help and wrong arguments (exit 2, no database): test/unit/cli.test.ts, in process.

  test('a consistent database verifies with exit 0', async () => {
    await submit(first, 'first');
    await submit(other, 'other');
    const r = await verify();
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.equal(r.stdout, 'verified 2 applications, 3 queues, 0 permits: 0 differences\n');
    const one = await verify('--application-id', other.applicationId);
    assert.equal(one.code, 0, one.stderr);
    assert.equal(one.stdout, 'verified 1 applications, 1 queues, 0 permits: 0 differences\n');
    const unknown = await verify('--application-id', '0'.repeat(32));
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /does not exist/);
  });

  test('no false differences while submissions, claims and results run beside it', async () => {
    const load = traffic();
    try {
      await waitFor(async () => load.submitted >= 20);
      // The command a few times, and its recount function alone many more times, all mid-traffic.
      const commands = (async () => {
        const runs: InProcessResult[] = [];
        for (let i = 0; i < 3; i++) runs.push(await verify());
        return runs;
      })();
      let recounts = 0;
      const start = load.submitted;
      while (recounts < 30 || load.submitted - start < 100) {
        const report = await countersVerify(t.db);
        assert.deepEqual(report.differences.map(formatDifference), [], `recount run ${recounts}`);
        recounts++;
      }
      for (const [i, run] of (await commands).entries()) {
        assert.equal(run.code, 0, `command run ${i}: ${run.stdout}${run.stderr}`);
        assert.match(run.stdout, /^verified 2 applications, 3 queues, \d+ permits: 0 differences\n$/);
      }
    } finally {
      await load.stop();
    }
    assert.ok(load.submitted > 100, `only ${load.submitted} submissions ran beside the verifies`);
  });

  test('corrupted counters: exit 1 naming each difference; --repair fixes them with an audit record; then exit 0', async () => {
    const app = first.applicationId;
    const appId = Buffer.from(app, 'hex');
    const firstQueue = await queueId(first, 'first');
    const keyedQueue = await queueId(first, 'keyed');
    // Two keyed reservations, held open by a worker session: two permits with one holder each.
    await submit(first, 'keyed', { resource_key: 'k1' });
    await submit(first, 'keyed', { resource_key: 'k2' });
    const session: RawSession = await connectRaw(server.url, first.token);
    try {
      assert.equal((await session.request({ type: 'hello', node_id: 'verify-node', queues: ['keyed'], capacity: 2 })).type, 'welcome');
      const claimed = await session.request({ type: 'claim', claim_id: 'c1', max: 2 });
      assert.equal(claimed.type, 'claimed', JSON.stringify(claimed));
      assert.equal(claimed.attempts.length, 2);

      const [resources] = await t.db.rows<{ unfinished_tasks: string }>('SELECT unfinished_tasks FROM orbit_application_resources WHERE application_id = ?', [
        appId,
      ]);
      const [queueRow] = await t.db.rows<{ active_attempts: string }>('SELECT active_attempts FROM orbit_queues WHERE queue_id = ?', [firstQueue]);
      const unfinished = BigInt(resources!.unfinished_tasks);
      const active = BigInt(queueRow!.active_attempts);
      const [permitCount] = await t.db.rows<{ n: string }>('SELECT COUNT(*) AS n FROM orbit_key_permits');
      const permits = Number(permitCount!.n);
      assert.ok(permits >= 2);

      await t.db.exec('UPDATE orbit_application_resources SET unfinished_tasks = unfinished_tasks + 3 WHERE application_id = ?', [appId]);
      await t.db.exec('UPDATE orbit_queues SET active_attempts = active_attempts + 2 WHERE queue_id = ?', [firstQueue]);
      await t.db.exec("UPDATE orbit_key_permits SET holders = 0 WHERE queue_id = ? AND resource_key = 'k1'", [keyedQueue]);
      await t.db.exec("DELETE FROM orbit_key_permits WHERE queue_id = ? AND resource_key = 'k2'", [keyedQueue]);

      const expected = [
        `application ${app} unfinished_tasks: stored ${unfinished + 3n}, recount ${unfinished}`,
        `queue ${app}/first/first active_attempts: stored ${active + 2n}, recount ${active}`,
        `permit ${app}/first/keyed key "k1" holders: stored 0, recount 1`,
        `permit ${app}/first/keyed key "k2" holders: stored 0, recount 1 (no permit row)`,
      ];
      const found = await verify();
      assert.equal(found.code, 1, found.stderr);
      assert.equal(found.stdout, `${expected.join('\n')}\nverified 2 applications, 3 queues, ${permits} permits: 4 differences\n`);
      // Scoped: the other application is fine, this one is not.
      assert.equal((await verify('--application-id', other.applicationId)).code, 0);
      const scoped = await verify('--application-id', app);
      assert.equal(scoped.code, 1);
      assert.equal(scoped.stdout, `${expected.join('\n')}\nverified 1 applications, 2 queues, ${permits} permits: 4 differences\n`);

      const repair = await verify('--repair');
      assert.equal(repair.code, 0, repair.stdout + repair.stderr);
      const lines = repair.stdout.trimEnd().split('\n');
      assert.deepEqual(lines.slice(0, 5), [...expected, `verified 2 applications, 3 queues, ${permits} permits: 4 differences`]);
      assert.deepEqual(lines.slice(5, 9), [
        `repaired application ${app} unfinished_tasks: ${unfinished + 3n} -> ${unfinished}`,
        `repaired queue ${app}/first/first active_attempts: ${active + 2n} -> ${active}`,
        `repaired permit ${app}/first/keyed key "k1" holders: 0 -> 1`,
        `repaired permit ${app}/first/keyed key "k2" holders: 0 -> 1 (permit row created)`,
      ]);
      const summary = /^repaired 4 differences in 1 applications \(audit request_id ([0-9a-f]{32})\)$/.exec(lines[9] ?? '');
      assert.ok(summary, repair.stdout);
      assert.equal(lines.length, 10);

      // The rows hold the recount again.
      await assertCountersMatchRecount(t.db);
      const held = await t.db.rows<{ resource_key: string; holders: number }>(
        'SELECT resource_key, holders FROM orbit_key_permits WHERE queue_id = ? ORDER BY resource_key',
        [keyedQueue],
      );
      assert.deepEqual(
        held.filter((p) => p.resource_key === 'k1' || p.resource_key === 'k2').map((p) => [p.resource_key, p.holders]),
        [
          ['k1', 1],
          ['k2', 1],
        ],
      );

      // One audit record, in the application's first namespace, visible to its audit:read credential.
      const audit = await api.request('GET', '/v1/audit-events?limit=100', { token: first.token });
      assert.equal(audit.status, 200, audit.text);
      const records = (audit.body.data.audit_events as any[]).filter((e) => e.action === 'application.counters.repaired');
      assert.equal(records.length, 1, JSON.stringify(audit.body.data));
      const record = records[0];
      assert.equal(record.namespace, 'first');
      assert.equal(record.resource_type, 'application_resources');
      assert.equal(record.resource, app);
      assert.equal(record.request_id, summary[1]);
      assert.equal(record.credential_id, '0'.repeat(32));
      assert.match(record.reason, /orbit-admin verify --repair/);
      assert.equal(record.before.unfinished_tasks, String(unfinished + 3n));
      assert.equal(record.after.unfinished_tasks, String(unfinished));
      assert.deepEqual(
        record.before.queues.map((q: any) => [q.queue, q.active_attempts]),
        [['first/first', String(active + 2n)]],
      );
      assert.deepEqual(
        record.after.queues.map((q: any) => [q.queue, q.active_attempts]),
        [['first/first', String(active)]],
      );
      assert.deepEqual(
        record.before.permits.map((p: any) => [p.resource_key, p.holders]),
        [
          ['k1', '0'],
          ['k2', null],
        ],
      );
      assert.deepEqual(
        record.after.permits.map((p: any) => [p.resource_key, p.holders]),
        [
          ['k1', '1'],
          ['k2', '1'],
        ],
      );
      // Nothing for the application that was fine.
      const otherAudit = await api.request('GET', '/v1/audit-events?limit=100', { token: other.token });
      assert.equal(otherAudit.body.data.audit_events.filter((e: any) => e.action === 'application.counters.repaired').length, 0);

      const again = await verify();
      assert.equal(again.code, 0, again.stdout);
      assert.match(again.stdout, /: 0 differences\n$/);
      // A repair with nothing to repair changes and audits nothing.
      const idle = await verify('--repair');
      assert.equal(idle.code, 0);
      assert.match(idle.stdout, /^verified .*: 0 differences\nrepaired 0 differences in 0 applications/);
    } finally {
      // Closing the session gives the reservations back (through the repaired permits).
      await session.close();
    }
    await waitFor(async () => {
      const [row] = await t.db.rows<{ n: string }>("SELECT COUNT(*) AS n FROM orbit_attempts WHERE state IN ('RESERVED', 'RUNNING')");
      return row?.n === '0';
    });
    await assertCountersMatchRecount(t.db);
  });

  test('a repair beside live traffic loses no concurrent update', async () => {
    const appId = Buffer.from(first.applicationId, 'hex');
    const load = traffic();
    try {
      await waitFor(async () => load.submitted >= 20);
      await t.db.exec(
        'UPDATE orbit_application_resources SET unfinished_tasks = unfinished_tasks + 5, pending_starts = pending_starts + 1 WHERE application_id = ?',
        [appId],
      );
      const repair = await verify('--repair');
      assert.equal(repair.code, 0, repair.stdout + repair.stderr);
      assert.match(repair.stdout, new RegExp(`^repaired application ${first.applicationId} unfinished_tasks: `, 'm'));
      const start = load.submitted;
      await waitFor(async () => load.submitted - start >= 20);
    } finally {
      await load.stop();
    }
    await assertCountersMatchRecount(t.db);
    const after = await verify();
    assert.equal(after.code, 0, after.stdout);
  });
});
