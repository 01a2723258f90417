/**
 * Schedules against two real server processes whose schedule loops run on one database: tasks
 * made like submissions at both quota levels; a full quota defers trigger points and never
 * skips them; the misfire policies for points older than the window; pause and resume; a
 * disabled namespace; a process SIGKILLed while firing (no point twice, none lost); scope,
 * validation and idempotency of the operations.
 *
 * The loops run on their own time, so nothing here waits a fixed time for them: each check waits
 * for the state it needs (points fired, deferred, handled), and what depends on when a round ran
 * is judged in database time (the loops' clock), never against this process's clock.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { sqlToMillis } from '../../server/time.ts';

const LOOP = { ORBIT_SCHEDULE_INTERVAL_MS: '100' };
/** Only for periods that are the behaviour under test (a quota kept full, a pause, a disabled namespace); never to wait for something. */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('schedules, two server processes', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  let keys = 0;

  before(async () => {
    t = await freshDatabase('schedules');
    servers = await Promise.all([startServerProcess(t.url, LOOP), startServerProcess(t.url, LOOP)]);
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const url = (n = 0) => servers[n % servers.length]!.url;
  const key = (label: string) => `${label}-${++keys}`;

  async function tenantWithLimit(label: string, maxUnfinished: number, queues = ['sched']): Promise<TestTenant> {
    const tenant = await createTenant(t.db, { namespace: label, queues, resourceAccess: true, actions: undefined });
    await setApplicationLimit(tenant, maxUnfinished);
    return tenant;
  }
  async function setApplicationLimit(tenant: TestTenant, max: number) {
    const current = (await call(url(), 'GET', '/v1/application/resources', { token: tenant.token })).body.data;
    const r = await call(url(), 'POST', '/v1/application/resources:configure', {
      token: tenant.token,
      key: key('limit'),
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
  async function create(tenant: TestTenant, body: Record<string, unknown>, queue = 'sched') {
    const r = await call(url(), 'POST', `/v1/queues/${queue}/schedules`, {
      token: tenant.token,
      key: key('create'),
      body: { reason: 'test', payload: { from: 'schedule' }, ...body },
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.schedule;
  }
  const get = async (tenant: TestTenant, id: string, n = 0) => (await call(url(n), 'GET', `/v1/schedules/${id}`, { token: tenant.token })).body.data;
  /** Waits for at least `count` tasks of the schedule, asserts their trigger points are consecutive seconds (none missing or twice), returns them. */
  async function firesEverySecond(scheduleId: string, count: number): Promise<Awaited<ReturnType<typeof tasksOf>>> {
    const tasks = await waitFor(async () => {
      const now = await tasksOf(scheduleId);
      return now.length >= count ? now : null;
    });
    const seconds = tasks.map((x) => x.scheduled_for / 1000);
    assert.deepEqual(
      seconds,
      seconds.map((_, i) => (seconds[0] as number) + i),
      'consecutive seconds, none missing',
    );
    return tasks;
  }

  async function tasksOf(scheduleId: string): Promise<Array<{ task_id: string; scheduled_for: number; created_at: number; state: string }>> {
    const rows = await t.db.rows<{ task_id: Buffer; scheduled_for: string; created_at: string; state: string }>(
      'SELECT task_id, scheduled_for, created_at, state FROM orbit_tasks WHERE schedule_id = ? ORDER BY scheduled_for',
      [Buffer.from(scheduleId, 'hex')],
    );
    const ms = (v: string) => Date.parse(`${v.replace(' ', 'T').slice(0, 23)}Z`);
    return rows.map((r) => ({ task_id: r.task_id.toString('hex'), scheduled_for: ms(r.scheduled_for), created_at: ms(r.created_at), state: r.state }));
  }
  /** The database's clock, the one the loops and created_at use (epoch ms). */
  async function dbNow(): Promise<number> {
    const [row] = await t.db.rows<{ now: string }>('SELECT NOW(3) AS now');
    return sqlToMillis(row!.now);
  }
  async function cancelAll(tenant: TestTenant, taskIds: string[]) {
    for (const id of taskIds) {
      const r = await call(url(1), 'POST', `/v1/tasks/${id}:cancel`, { token: tenant.token, key: key('cancel'), body: { reason: 'make room' } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
  }
  async function pause(tenant: TestTenant, id: string, verb: 'pause' | 'resume' = 'pause') {
    const r = await call(url(1), 'POST', `/v1/schedules/${id}:${verb}`, { token: tenant.token, key: key(verb), body: { reason: 'test' } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.schedule;
  }

  /**
   * The behaviours that take whole seconds of trigger points (points falling due, a quota kept
   * full, a pause, a disabled namespace) run side by side: each has its own application, queue and
   * schedule and judges only its own, and none of them changes anything the others read - so the
   * seconds each needs are spent once for all of them, not one after the other. The test that
   * kills servers, and the one that counts every schedule row, run alone after them.
   */
  describe('trigger points over time, side by side', { concurrency: true }, () => {
    test('a full quota defers trigger points, never skips them; freed room fires from the first deferred point', async () => {
      const tenant = await tenantWithLimit('full', 2);
      const s = await create(tenant, { name: 'every-second', interval_seconds: 1 });
      assert.equal(s.state, 'ACTIVE');
      assert.equal(s.fired, '0');
      const created = Date.parse(s.created_at);
      assert.equal(Date.parse(s.next_fire_at), created + 1000, 'the first point is one interval after creation');
      // Two points fire, then the quota is full: the next two wait (deferred_full counts them).
      const full = await waitFor(async () => {
        const now = await get(tenant, s.schedule_id);
        return now.fired === '2' && Number(now.deferred_full) >= 2 ? now : null;
      });
      const tasks = await tasksOf(s.schedule_id);
      assert.equal(tasks.length, 2, 'exactly as many tasks as the application admits');
      assert.equal(full.skipped_misfire, '0', 'a full quota is never a misfire');
      assert.deepEqual(
        tasks.map((x) => x.scheduled_for - created),
        [1000, 2000],
      );
      const firstDeferred = Date.parse(full.next_fire_at);
      assert.equal(firstDeferred, created + 3000, 'the head stays at the first refused point');
      assert.equal(Date.parse(full.last_fire_at), created + 2000);
      // Each second one more point waits (seen through the other server).
      const later = await waitFor(async () => {
        const now = await get(tenant, s.schedule_id, 1);
        return Number(now.deferred_full) > Number(full.deferred_full) ? now : null;
      });
      assert.equal(later.fired, '2', 'still full: nothing more fired');
      assert.equal(Date.parse(later.next_fire_at), firstDeferred, 'the head stays at the first refused point');
      // The task made for a point carries it, on both servers.
      const task = (await call(url(1), 'GET', `/v1/tasks/${tasks[0]!.task_id}`, { token: tenant.token })).body.data;
      assert.equal(task.schedule_id, s.schedule_id);
      assert.equal(Date.parse(task.scheduled_for), created + 1000);
      assert.deepEqual(task.payload, { from: 'schedule' });

      await cancelAll(
        tenant,
        tasks.map((x) => x.task_id),
      );
      const resumed = await waitFor(async () => {
        const now = await tasksOf(s.schedule_id);
        return now.length >= 4 ? now : null;
      });
      assert.equal(resumed[2]!.scheduled_for, firstDeferred, 'firing resumes from the first deferred point');
      assert.equal(resumed[3]!.scheduled_for, firstDeferred + 1000);
      const after = await get(tenant, s.schedule_id);
      assert.equal(after.skipped_misfire, '0');
      await pause(tenant, s.schedule_id);
    });

    test('a full queue defers like a full application: nothing written for the point, a direct submit is QUEUE_FULL too', async () => {
      const tenant = await tenantWithLimit('queue-full', 1_000);
      await configureQueue(url(), tenant.token, 'sched', { max_unfinished_tasks: 1 });
      const s = await create(tenant, { name: 'queue-full', interval_seconds: 1 });
      // One point fires, then the queue is full and the next one waits.
      const now = await waitFor(async () => {
        const current = await get(tenant, s.schedule_id, 1);
        return current.fired === '1' && Number(current.deferred_full) >= 1 ? current : null;
      });
      assert.equal((await tasksOf(s.schedule_id)).length, 1);
      assert.equal(now.skipped_misfire, '0');
      const direct = await call(url(), 'POST', '/v1/queues/sched/tasks', { token: tenant.token, key: key('direct'), body: { payload: {} } });
      assert.equal(direct.status, 429);
      assert.equal(direct.body.error.code, 'QUEUE_FULL');
      const queue = (await call(url(), 'GET', '/v1/queues/sched', { token: tenant.token })).body.data;
      assert.equal(queue.unfinished_tasks, '1');
      await pause(tenant, s.schedule_id);
    });

    /**
     * Each policy with the quota full for longer than the window. A point older than the window
     * when it is processed is overdue: `skip` fires none of them, `fire_once` exactly one per run,
     * `fire_all` every one. The lag of a task (created_at - scheduled_for, both database time)
     * says whether its point was overdue when it fired.
     *
     * The quota is kept full for 4 s - a period, the behaviour under test - and the check waits
     * until the points that waited have been handled (the head is past the moment room came back,
     * in database time). What a loop could do late on a loaded machine on its own (a point that
     * fell due just then, handled more than the window late) is a run of its own: the run made by
     * the full quota is the points after the first task and before that head.
     */
    for (const policy of ['skip', 'fire_once', 'fire_all'] as const) {
      test(`misfire policy ${policy}: quota full for longer than the window`, async () => {
        const tenant = await tenantWithLimit(`policy-${policy.replace('_', '-')}`, 1);
        const windowMs = 1_000;
        const s = await create(tenant, { name: `policy-${policy}`, interval_seconds: 1, misfire_policy: policy, misfire_window_seconds: 1 });
        // The schedule's first point (one interval after its creation): every point is this plus whole seconds.
        const anchor = Date.parse(s.next_fire_at);
        await waitFor(async () => ((await tasksOf(s.schedule_id)).length === 1 ? true : null));
        await sleep(4_000); // the behaviour under test: full, every point after the first waits, for longer than the window
        await setApplicationLimit(tenant, 1_000);
        const roomAt = await dbNow();
        // Room again: the next rounds handle every waiting point by the policy, until the head is past `roomAt`.
        const handledUpTo = await waitFor(async () => {
          const head = Date.parse((await get(tenant, s.schedule_id)).next_fire_at);
          return head > roomAt ? head : null;
        });
        await pause(tenant, s.schedule_id);
        const final = await get(tenant, s.schedule_id);
        const tasks = await tasksOf(s.schedule_id);
        const processed = Number(final.fired) + Number(final.skipped_misfire);
        // No point lost, none twice: the head is the point after every fired or skipped one.
        assert.equal(Date.parse(final.next_fire_at), anchor + processed * 1000, JSON.stringify(final));
        assert.equal(tasks.length, Number(final.fired));
        assert.equal(new Set(tasks.map((x) => x.scheduled_for)).size, tasks.length);
        for (const x of tasks) assert.equal((x.scheduled_for - anchor) % 1000, 0);
        assert.ok(Number(final.deferred_full) >= 1, 'the full quota deferred points');
        const overdue = (x: { created_at: number; scheduled_for: number }) => x.created_at - x.scheduled_for > windowMs;
        const overdueFired = tasks.filter(overdue);
        // The points that waited for the full quota, and were handled once there was room.
        const waited = tasks.filter((x) => x.scheduled_for > tasks[0]!.scheduled_for && x.scheduled_for < handledUpTo);
        const skipped = Number(final.skipped_misfire);
        if (policy === 'skip') {
          assert.ok(skipped >= 1, 'overdue points were dropped');
          assert.equal(overdueFired.length, 0, 'no task for an overdue point');
        } else if (policy === 'fire_once') {
          assert.ok(skipped >= 1, 'the other overdue points were dropped');
          const once = waited.filter(overdue);
          assert.equal(once.length, 1, `exactly one task for the run of overdue points: ${JSON.stringify(waited)}`);
          // It is the latest of the run: the points skipped come before it, and every point after it fired.
          const onceAt = once[0]!.scheduled_for;
          assert.ok(waited.filter((x) => x.scheduled_for > onceAt).every((x, i) => x.scheduled_for === onceAt + (i + 1) * 1000));
        } else {
          assert.equal(skipped, 0, 'fire_all drops nothing');
          assert.ok(overdueFired.length >= 2, 'every overdue point fired');
          assert.deepEqual(
            tasks.map((x) => (x.scheduled_for - anchor) / 1000),
            tasks.map((_, i) => i),
          );
        }
      });
    }

    test('pause fires nothing; resume handles the paused points by the policy; events and audit are written', async () => {
      const tenant = await tenantWithLimit('pause', 1_000);
      const s = await create(tenant, {
        name: 'paused',
        cron: '* * * * * *',
        timezone: 'Europe/Berlin',
        misfire_policy: 'fire_all',
        misfire_window_seconds: 60,
      });
      assert.equal(s.cron, '* * * * * *');
      assert.equal(s.interval_seconds, undefined);
      await waitFor(async () => ((await tasksOf(s.schedule_id)).length >= 1 ? true : null));
      const paused = await pause(tenant, s.schedule_id);
      assert.equal(paused.state, 'PAUSED');
      // The pause took the schedule's row lock: a round in flight has committed, and none fires after it.
      const atPause = (await tasksOf(s.schedule_id)).length;
      await sleep(2_500); // the behaviour under test: two points fall due while it is paused, and nothing fires
      assert.equal((await tasksOf(s.schedule_id)).length, atPause, 'a paused schedule fires nothing');
      const again = await call(url(), 'POST', `/v1/schedules/${s.schedule_id}:pause`, { token: tenant.token, key: key('pause'), body: { reason: 'twice' } });
      assert.equal(again.status, 409);
      assert.equal(again.body.error.code, 'STATE_CONFLICT');
      await pause(tenant, s.schedule_id, 'resume');
      // fire_all within the window: every point of the paused time fires, in order, none twice.
      const tasks = await firesEverySecond(s.schedule_id, atPause + 3);
      await pause(tenant, s.schedule_id);
      const events = (await call(url(), 'GET', '/v1/events?limit=100', { token: tenant.token })).body.data.events.filter(
        (e: any) => e.subject === s.schedule_id,
      );
      assert.deepEqual(
        events.map((e: any) => e.type),
        ['schedule.created', 'schedule.paused', 'schedule.resumed', 'schedule.paused'],
      );
      const audit = (await call(url(), 'GET', '/v1/audit-events?limit=100', { token: tenant.token })).body.data.audit_events.filter(
        (a: any) => a.resource === s.schedule_id,
      );
      assert.deepEqual(
        audit.map((a: any) => [a.action, a.resource_type]),
        [
          ['schedule.create', 'schedule'],
          ['schedule.pause', 'schedule'],
          ['schedule.resume', 'schedule'],
          ['schedule.pause', 'schedule'],
        ],
      );
      // Counted by the process that fired: whichever of the two it was, together they fired.
      let fired = 0;
      for (const server of servers) {
        const metrics = await (await fetch(`${server.url}/metrics`)).text();
        fired += Number(/^orbit_schedule_trigger_points_total\{outcome="fired"\} (\d+)/m.exec(metrics)?.[1] ?? 0);
      }
      assert.ok(fired >= tasks.length, `orbit_schedule_trigger_points_total{outcome="fired"}: ${fired} on both servers, ${tasks.length} tasks made`);
    });

    test('a schedule on a disabled namespace fires nothing and is not lost', async () => {
      const tenant = await tenantWithLimit('disabled', 1_000);
      const s = await create(tenant, { name: 'off', interval_seconds: 1, misfire_policy: 'fire_all' });
      await waitFor(async () => ((await tasksOf(s.schedule_id)).length >= 1 ? true : null));
      await t.db.exec('UPDATE orbit_namespaces SET enabled = 0 WHERE namespace_id = ?', [Buffer.from(tenant.namespaceId, 'hex')]);
      const disabledAt = await dbNow();
      await sleep(2_000); // the behaviour under test: two points fall due while it is disabled, and nothing fires
      // A round that read the namespace as enabled before the UPDATE committed may still have fired
      // (its tasks are created before it, in database time); nothing is created after it.
      const whileDisabled = await tasksOf(s.schedule_id);
      assert.deepEqual(
        whileDisabled.filter((x) => x.created_at > disabledAt),
        [],
        'nothing fires while disabled',
      );
      const atDisable = whileDisabled.length;
      await t.db.exec('UPDATE orbit_namespaces SET enabled = 1 WHERE namespace_id = ?', [Buffer.from(tenant.namespaceId, 'hex')]);
      // The points of the disabled time fire afterwards (the loop does not care about the credential cache).
      await firesEverySecond(s.schedule_id, atDisable + 3);
      await pause(tenant, s.schedule_id);
    });
  });

  test('a server SIGKILLed while both loops fire: no trigger point fires twice, none is lost', async () => {
    const tenant = await tenantWithLimit('crash', 100_000);
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) ids.push((await create(tenant, { name: `crash-${i}`, interval_seconds: 1, misfire_policy: 'fire_all' })).schedule_id);
    /** The fewest tasks any of the schedules has made. */
    const fewest = async () => {
      const rows = await t.db.rows<{ schedule_id: Buffer; n: number }>(
        `SELECT schedule_id, COUNT(*) AS n FROM orbit_tasks WHERE schedule_id IN (${ids.map(() => '?').join(', ')}) GROUP BY schedule_id`,
        ids.map((id) => Buffer.from(id, 'hex')),
      );
      const counts = new Map(rows.map((r) => [r.schedule_id.toString('hex'), Number(r.n)]));
      return Math.min(...ids.map((id) => counts.get(id) ?? 0));
    };
    const roundsFired = (server: ServerProcess) => server.logs.filter((line) => line.msg === 'schedules fired').length;
    /** Both loops fire (each process logs a round that fired from now on) and every schedule has made `n` tasks. */
    const bothFiring = async (n: number) => {
      const marks = servers.map(roundsFired);
      await waitFor(async () => servers.every((server, i) => roundsFired(server) > marks[i]!) && (await fewest()) >= n);
    };
    // SIGKILLed wherever its round is, while both fire; then the other, after the first is back.
    await bothFiring(1);
    await servers[0]!.kill();
    servers[0] = await startServerProcess(t.url, LOOP);
    await bothFiring(2);
    await servers[1]!.kill();
    servers[1] = await startServerProcess(t.url, LOOP);
    await bothFiring(3);
    for (const id of ids) await pause(tenant, id);
    for (const id of ids) {
      const s = await get(tenant, id);
      const tasks = await tasksOf(id);
      const anchor = Date.parse(s.created_at) + 1000;
      assert.equal(s.skipped_misfire, '0');
      assert.equal(tasks.length, Number(s.fired));
      assert.ok(tasks.length >= 3, `${id} fired ${tasks.length}`);
      assert.deepEqual(
        tasks.map((x) => (x.scheduled_for - anchor) / 1000),
        tasks.map((_, i) => i),
        'every point once, in order',
      );
      assert.equal(Date.parse(s.next_fire_at), anchor + tasks.length * 1000, 'the head is right after the last fired point');
    }
  });

  test('scope, validation and idempotency of the operations', async () => {
    const tenant = await tenantWithLimit('scope', 1_000, ['sched', 'other']);
    const body = { name: 'daily', reason: 'test', cron: '0 9 * * 1-5', timezone: 'Asia/Shanghai', payload: { report: true } };
    const k = key('create');
    const first = await call(url(), 'POST', '/v1/queues/sched/schedules', { token: tenant.token, key: k, body });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.body.data.deduplicated, false);
    const schedule = first.body.data.schedule;
    assert.deepEqual(
      Object.keys(schedule).sort(),
      [
        'schedule_id',
        'queue',
        'namespace',
        'name',
        'cron',
        'timezone',
        'payload',
        'priority',
        'max_attempts',
        'deadline_seconds',
        'on_unknown_outcome',
        'misfire_policy',
        'misfire_window_seconds',
        'state',
        'next_fire_at',
        'fired',
        'skipped_misfire',
        'deferred_full',
        'created_at',
      ].sort(),
    );
    assert.equal(schedule.misfire_policy, 'skip');
    assert.equal(schedule.misfire_window_seconds, 60);
    assert.match(schedule.next_fire_at, /T01:00:00\.000Z$/, '09:00 in Shanghai is 01:00 UTC');
    const replay = await call(url(1), 'POST', '/v1/queues/sched/schedules', { token: tenant.token, key: k, body });
    assert.equal(replay.status, 200);
    assert.equal(replay.body.data.deduplicated, true);
    assert.deepEqual(replay.body.data.schedule, schedule);
    const conflict = await call(url(), 'POST', '/v1/queues/sched/schedules', { token: tenant.token, key: k, body: { ...body, name: 'other-name' } });
    assert.equal(conflict.body.error?.code, 'IDEMPOTENCY_CONFLICT');
    const sameName = await call(url(), 'POST', '/v1/queues/sched/schedules', { token: tenant.token, key: key('dup'), body });
    assert.equal(sameName.status, 409);
    assert.equal(sameName.body.error.details.field, 'name');
    // The same name on another queue is another schedule.
    assert.equal((await call(url(), 'POST', '/v1/queues/other/schedules', { token: tenant.token, key: key('other'), body })).status, 200);

    const refused: Array<[Record<string, unknown>, string]> = [
      [{ ...body, interval_seconds: 60 }, 'cron'],
      [{ name: 'neither', reason: 'x', payload: {} }, 'cron'],
      [{ ...body, name: 'bad-cron', cron: '61 * * * *' }, 'cron'],
      [{ ...body, name: 'four', cron: '* * * *' }, 'cron'],
      [{ ...body, name: 'zone', timezone: 'Mars/Olympus' }, 'timezone'],
      [{ name: 'zone2', reason: 'x', payload: {}, interval_seconds: 5, timezone: 'Nowhere/City' }, 'timezone'],
      [{ ...body, name: 'window', misfire_window_seconds: 86_401 }, 'misfire_window_seconds'],
      [{ ...body, name: 'policy', misfire_policy: 'sometimes' }, 'misfire_policy'],
      [{ name: 'interval', reason: 'x', payload: {}, interval_seconds: 0 }, 'interval_seconds'],
      [{ ...body, name: 'start', start_at: '2026-02-30T00:00:00Z' }, 'start_at'],
      [{ ...body, name: 'start2', start_at: 'tomorrow' }, 'start_at'],
      [{ ...body, name: 'payload', payload: [1] }, 'payload'],
    ];
    const before = await t.db.rows<{ n: number }>('SELECT COUNT(*) AS n FROM orbit_schedules');
    for (const [bad, field] of refused) {
      const r = await call(url(), 'POST', '/v1/queues/sched/schedules', { token: tenant.token, key: key('bad'), body: bad });
      assert.equal(r.status, 400, `${JSON.stringify(bad)} → ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.details.field, field, JSON.stringify(r.body));
    }
    assert.deepEqual(await t.db.rows('SELECT COUNT(*) AS n FROM orbit_schedules'), before, 'refused requests write nothing');

    // Out of scope: another namespace, a credential without the queue, a credential without the action.
    const stranger = await createTenant(t.db, { namespace: 'stranger', queues: ['sched'] });
    assert.equal((await call(url(), 'GET', `/v1/schedules/${schedule.schedule_id}`, { token: stranger.token })).status, 404);
    assert.equal(
      (await call(url(), 'POST', `/v1/schedules/${schedule.schedule_id}:pause`, { token: stranger.token, key: key('p'), body: { reason: 'x' } })).status,
      404,
    );
    const otherOnly = await createCredential(t.db, tenant, ['schedules:manage'], ['other']);
    assert.equal((await call(url(), 'GET', `/v1/schedules/${schedule.schedule_id}`, { token: otherOnly })).status, 404);
    assert.equal((await call(url(), 'GET', '/v1/queues/sched/schedules', { token: otherOnly })).status, 404);
    assert.equal((await call(url(), 'POST', '/v1/queues/sched/schedules', { token: otherOnly, key: key('s'), body: { ...body, name: 'x' } })).status, 404);
    const noAction = await createCredential(t.db, tenant, ['queues:read']);
    assert.equal((await call(url(), 'GET', `/v1/schedules/${schedule.schedule_id}`, { token: noAction })).status, 403);

    // Listing by name with a cursor.
    for (const name of ['b', 'c', 'a'])
      await call(url(), 'POST', '/v1/queues/sched/schedules', { token: tenant.token, key: key('l'), body: { ...body, name } });
    const page1 = (await call(url(), 'GET', '/v1/queues/sched/schedules?limit=2', { token: tenant.token })).body.data;
    assert.deepEqual(
      page1.schedules.map((x: any) => x.name),
      ['a', 'b'],
    );
    const page2 = (await call(url(), 'GET', `/v1/queues/sched/schedules?limit=2&cursor=${page1.next_cursor}`, { token: tenant.token })).body.data;
    assert.deepEqual(
      page2.schedules.map((x: any) => x.name),
      ['c', 'daily'],
    );
    assert.equal(page2.next_cursor, undefined);
  });
});
