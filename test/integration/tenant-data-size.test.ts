/**
 * Batches whose size depends on tenant data never fail for it, and one tenant's failure never
 * stops another's: payloads, results and errors at their limits made of characters that escape
 * (a quote is 2 bytes in JSON and 4 once mysql2 has escaped it for SQL), against the real
 * server's max_allowed_packet (16 MiB on MariaDB) and, with generated input, against a smaller
 * budget that makes every batch split.
 *  - schedules: 40 schedules of one application with such payloads falling due together (a
 *    ~20 MiB round, once refused whole by the server and failing every round since), and one
 *    schedule with 40 overdue points of such a payload; another application's schedule fires in
 *    the first round;
 *  - a schedule that fails (its stored definition corrupted) records `last_error` and the metric,
 *    is tried again later, does not hold up the other schedules of its application or other
 *    applications, and clears once it fires;
 *  - bulk submit of a 4 MiB body of such payloads, and concurrent single submits grouped by the
 *    admission batcher;
 *  - a worker's results and errors at the limit, completed together (one group, one UPDATE on the
 *    fast path), and claims of such tasks (a `claimed` frame carries at most 8 MiB of payloads).
 * Each part ends with every counter equal to a recount.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freshDatabase, CHECK_LOCK_ORDER, CHECK_SHARD_ROUTING, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { testApp } from '../helpers/app.ts';
import { startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw } from '../helpers/ws-session.ts';
import { createDatabase, type Database } from '../../server/store/database/database.ts';
import { ScheduleLoop } from '../../server/loops/schedules.ts';
import { createMetrics, type Metrics } from '../../server/metrics.ts';
import { silentLogger } from '../../server/log.ts';
import { MAX_CLAIMED_PAYLOAD_BYTES } from '../../server/domain/claim-decisions.ts';

/** The largest payload a task or schedule takes, as JSON. */
const PAYLOAD_LIMIT = 256 * 1024;
/** A payload of exactly `bytes` bytes of JSON (at least 8), made of `unit`s: quotes by default. */
function payloadOf(bytes: number, unit = '"'): Record<string, string> {
  const escaped = Buffer.byteLength(JSON.stringify(unit), 'utf8') - 2;
  const n = Math.max(0, Math.floor((bytes - 8) / escaped));
  return { q: unit.repeat(n) };
}
const jsonBytes = (v: unknown) => Buffer.byteLength(JSON.stringify(v), 'utf8');
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
/** Characters that escaping grows, and multi-byte ones. */
const ESCAPING = ['"', '\\', "'", '\n', '\r', '\t', '\0', 'é', '中', '😀'];

describe('batches bounded by bytes: tenant data at its limits', () => {
  let t: TestDatabase;
  /** The same database with a 1 MiB packet budget: every batch of such data splits. */
  let small: Database;

  before(async () => {
    t = await freshDatabase('datasize');
    small = createDatabase({ url: t.url, connectionLimit: 10, checkLockOrder: CHECK_LOCK_ORDER, checkShardRouting: CHECK_SHARD_ROUTING });
    await small.readServerLimits();
    small.packets.learn(1024 * 1024);
    await t.db.readServerLimits();
  });
  after(async () => {
    await small.close();
    await t.drop();
  });

  function loop(db: Database, metrics: Metrics = createMetrics()): ScheduleLoop {
    return new ScheduleLoop({ db, log: silentLogger(), metrics, intervalMs: 60_000 });
  }

  async function createSchedule(app: Awaited<ReturnType<typeof testApp>>, tenant: TestTenant, queue: string, name: string, body: Record<string, unknown>) {
    const response = await app.request('POST', `/v1/queues/${queue}/schedules`, {
      token: tenant.token,
      key: `create-${name}`,
      body: { name, reason: 'test', interval_seconds: 3600, ...body },
    });
    assert.equal(response.status, 200, JSON.stringify(response.body));
    return (response.body as any).data.schedule.schedule_id as string;
  }

  /** Puts the heads of these applications' schedules a second in the past: due now. */
  async function makeDue(db: Database, ...tenants: TestTenant[]) {
    for (const tenant of tenants)
      await db.exec('UPDATE orbit_schedules SET next_fire_at = NOW(6) - INTERVAL 1 SECOND WHERE application_id = UNHEX(?)', [tenant.applicationId]);
  }

  /**
   * Ends the pause after a schedule's failure: its `retry_at` a second in the past, as if the
   * pause had been waited for (the pause itself is the domain rule's, failureRetryDelayMs).
   */
  async function retryDue(db: Database, tenant: TestTenant, scheduleId: string) {
    await db.exec('UPDATE orbit_schedules SET retry_at = NOW(6) - INTERVAL 1 SECOND WHERE application_id = UNHEX(?) AND schedule_id = UNHEX(?)', [
      tenant.applicationId,
      scheduleId,
    ]);
  }

  /** Pauses these applications' schedules, so that later tests' rounds see only their own. */
  async function pauseAll(db: Database, ...tenants: TestTenant[]) {
    for (const tenant of tenants) await db.exec("UPDATE orbit_schedules SET state = 'PAUSED' WHERE application_id = UNHEX(?)", [tenant.applicationId]);
  }

  /** Rounds until one fires nothing (at most `max`): every due point handled. */
  async function drain(schedules: ScheduleLoop, max = 20): Promise<number> {
    let rounds = 0;
    while (rounds < max) {
      rounds += 1;
      if ((await schedules.round()).fired === 0) break;
    }
    return rounds;
  }

  async function taskPayloads(db: Database, scheduleId: string): Promise<string[]> {
    const rows = await db.rows<{ payload: string }>('SELECT payload FROM orbit_tasks WHERE schedule_id = UNHEX(?) ORDER BY scheduled_for', [scheduleId]);
    return rows.map((r) => r.payload);
  }

  test('40 schedules with payloads at the limit due together, and many overdue points of one: all fire, once each; another application is not held up', async () => {
    const app = await testApp(t.db);
    const big = await createTenant(t.db, { namespace: 'big', queues: ['big'] });
    const other = await createTenant(t.db, { namespace: 'other', queues: ['other'] });
    const payload = payloadOf(PAYLOAD_LIMIT);
    assert.equal(jsonBytes(payload), PAYLOAD_LIMIT);
    // The first through the API with the payload (taken: it is at the limit, not over it); the
    // other 39 with a small one, then given the first one's stored payload in one statement. The
    // rows the round reads are the same, and each creation at the limit would cost about 0.1 s of
    // parsing, hashing and escaping 256 KiB (creation with such payloads: the generated test below).
    const ids = [await createSchedule(app, big, 'big', 'big-0', { payload })];
    for (let i = 1; i < 40; i++) ids.push(await createSchedule(app, big, 'big', `big-${i}`, { payload: { i } }));
    const [stored] = await t.db.rows<{ payload: string }>('SELECT payload FROM orbit_schedules WHERE application_id = UNHEX(?) AND schedule_id = UNHEX(?)', [
      big.applicationId,
      ids[0],
    ]);
    assert.deepEqual(JSON.parse(stored!.payload), payload);
    await t.db.exec('UPDATE orbit_schedules SET payload = ? WHERE application_id = UNHEX(?)', [stored!.payload, big.applicationId]);
    const otherId = await createSchedule(app, other, 'other', 'small', { payload: { small: true } });
    await makeDue(t.db, big, other);
    const metrics = createMetrics();
    const schedules = loop(t.db, metrics);

    const first = await schedules.round();
    assert.ok(first.fired >= 2, `the first round fired ${first.fired}`);
    assert.equal((await taskPayloads(t.db, otherId)).length, 1, "the other application's schedule fired in the first round");
    // The rest of the big ones in the next rounds (a round makes about one packet's worth).
    await drain(schedules);
    for (const id of ids) {
      const payloads = await taskPayloads(t.db, id);
      assert.equal(payloads.length, 1, `schedule ${id} fired once`);
      assert.deepEqual(JSON.parse(payloads[0] as string), payload, 'the payload arrives unchanged');
      const schedule = (await app.request('GET', `/v1/schedules/${id}`, { token: big.token })).body as any;
      assert.equal(schedule.data.fired, '1');
      assert.equal(schedule.data.last_error, undefined);
    }
    assert.equal(
      (await metrics.scheduleFailures.get()).values.reduce((n, v) => n + v.value, 0),
      0,
      'no round failed',
    );

    // One schedule, fire_all, 40 overdue points of a payload at the limit (~20 MiB of tasks, more
    // than one packet's worth, as the 40 schedules were): as if it had been created 41 s ago and
    // no process had run since.
    const many = await createSchedule(app, big, 'big', 'many-points', { payload, interval_seconds: 1, misfire_policy: 'fire_all', misfire_window_seconds: 1 });
    await t.db.exec(
      'UPDATE orbit_schedules SET created_at = NOW(6) - INTERVAL 41 SECOND, next_fire_at = NOW(6) - INTERVAL 40 SECOND WHERE application_id = UNHEX(?) AND schedule_id = UNHEX(?)',
      [big.applicationId, many],
    );
    const rounds = await drain(schedules);
    assert.ok(rounds > 2, `the points took several rounds (${rounds}), each within one packet`);
    const points = await t.db.rows<{ n: string; distinct_points: string }>(
      'SELECT COUNT(*) AS n, COUNT(DISTINCT scheduled_for) AS distinct_points FROM orbit_tasks WHERE schedule_id = UNHEX(?)',
      [many],
    );
    assert.ok(Number(points[0]?.n) >= 40, `${points[0]?.n} tasks for 40 points`);
    assert.equal(points[0]?.n, points[0]?.distinct_points, 'each trigger point made one task');
    assert.equal(
      (await metrics.scheduleFailures.get()).values.reduce((n, v) => n + v.value, 0),
      0,
      'no round failed',
    );
    await pauseAll(t.db, big, other);
    await assertCountersMatchRecount(t.db);
  });

  test('generated: schedules of escaping payloads against a 1 MiB budget fire once each, unchanged', async () => {
    const app = await testApp(small);
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ bytes: fc.integer({ min: 16, max: PAYLOAD_LIMIT }), unit: fc.constantFrom(...ESCAPING) }), { minLength: 1, maxLength: 8 }),
        async (specs) => {
          run += 1;
          const tenant = await createTenant(small, { namespace: `gen-${run}`, queues: ['q'] });
          const made = [];
          for (const [i, spec] of specs.entries()) {
            const payload = payloadOf(spec.bytes, spec.unit);
            made.push({ id: await createSchedule(app, tenant, 'q', `s-${i}`, { payload }), payload });
          }
          await makeDue(small, tenant);
          await drain(loop(small));
          for (const { id, payload } of made) {
            const payloads = await taskPayloads(small, id);
            assert.equal(payloads.length, 1);
            assert.deepEqual(JSON.parse(payloads[0] as string), payload);
          }
          await pauseAll(small, tenant);
        },
      ),
      { seed: 0x5c4ed, numRuns: 6 },
    );
    await assertCountersMatchRecount(t.db);
  });

  test('a failing schedule records last_error and the metric, is retried later, and holds up no other schedule or application', async () => {
    const app = await testApp(t.db);
    const a = await createTenant(t.db, { namespace: 'fail-a', queues: ['qa'] });
    const b = await createTenant(t.db, { namespace: 'fail-b', queues: ['qb'] });
    const broken = await createSchedule(app, a, 'qa', 'broken', { payload: { n: 1 } });
    const healthy = await createSchedule(app, a, 'qa', 'healthy', { payload: { n: 2 } });
    const elsewhere = await createSchedule(app, b, 'qb', 'elsewhere', { payload: { n: 3 } });
    // A stored definition that cannot be evaluated (as a bug or a hand edit could leave one).
    await t.db.exec(
      "UPDATE orbit_schedules SET cron_expression = 'not a cron', interval_seconds = NULL WHERE application_id = UNHEX(?) AND schedule_id = UNHEX(?)",
      [a.applicationId, broken],
    );
    await makeDue(t.db, a, b);
    const metrics = createMetrics();
    const schedules = loop(t.db, metrics);
    await schedules.round();
    assert.equal((await taskPayloads(t.db, healthy)).length, 1, 'the healthy schedule of the same application fired');
    assert.equal((await taskPayloads(t.db, elsewhere)).length, 1, "the other application's fired");
    assert.equal((await taskPayloads(t.db, broken)).length, 0);
    const failures = async () => (await metrics.scheduleFailures.get()).values.find((v) => v.labels.reason === 'invalid')?.value ?? 0;
    assert.equal(await failures(), 1);
    const shown = async () => ((await app.request('GET', `/v1/schedules/${broken}`, { token: a.token })).body as any).data;
    const firstError = (await shown()).last_error;
    assert.equal(firstError.consecutive_failures, 1);
    assert.match(firstError.message, /could not be evaluated/);
    assert.ok(Date.parse(firstError.retry_at) > Date.parse(firstError.occurred_at), 'a retry is set for later');

    // Not tried again before retry_at (an hour away here, so that a slow round cannot reach the
    // 1 s pause); then, once it has passed, again, with a longer pause.
    await t.db.exec('UPDATE orbit_schedules SET retry_at = NOW(6) + INTERVAL 1 HOUR WHERE application_id = UNHEX(?) AND schedule_id = UNHEX(?)', [
      a.applicationId,
      broken,
    ]);
    await schedules.round();
    assert.equal((await shown()).last_error.consecutive_failures, 1, 'not retried before retry_at');
    await retryDue(t.db, a, broken);
    await schedules.round();
    const second = (await shown()).last_error;
    assert.equal(second.consecutive_failures, 2, 'retried once retry_at had passed');
    assert.ok(
      Date.parse(second.retry_at) - Date.parse(second.occurred_at) > Date.parse(firstError.retry_at) - Date.parse(firstError.occurred_at),
      'the pause grows',
    );
    assert.equal(await failures(), 2);

    // Repaired: the next try fires, and the error is gone.
    await t.db.exec('UPDATE orbit_schedules SET cron_expression = NULL, interval_seconds = 3600 WHERE application_id = UNHEX(?) AND schedule_id = UNHEX(?)', [
      a.applicationId,
      broken,
    ]);
    await retryDue(t.db, a, broken);
    await schedules.round();
    assert.equal((await shown()).last_error, undefined);
    assert.equal((await taskPayloads(t.db, broken)).length, 1);
    await pauseAll(t.db, a, b);
    await assertCountersMatchRecount(t.db);
  });

  test('bulk submit of a 4 MiB body of escaping payloads, and concurrent single submits at the limit, against both budgets', async () => {
    for (const db of [t.db, small]) {
      const app = await testApp(db);
      const tenant = await createTenant(db, { queues: ['bulk'] });
      // 16 payloads just under 256 KiB: a body near the 4 MiB bulk limit.
      const tasks = Array.from({ length: 16 }, (_, i) => ({
        idempotency_key: `bulk-${i}`,
        payload: payloadOf(PAYLOAD_LIMIT - 1024, ESCAPING[i % ESCAPING.length]),
      }));
      assert.ok(jsonBytes({ tasks }) <= 4 * 1024 * 1024);
      const bulk = await app.request('POST', '/v1/queues/bulk/tasks:batch', { token: tenant.token, key: 'bulk', body: { tasks } });
      assert.equal(bulk.status, 200, bulk.text.slice(0, 500));
      assert.equal((bulk.body as any).data.accepted, 16);
      // At once, grouped by the admission batcher within one packet per group: 40 (~20 MiB
      // escaped) are more than one 16 MiB packet; against the 1 MiB budget no two fit in one,
      // and 8 already queue behind each other.
      const singles = await Promise.all(
        Array.from({ length: db === small ? 8 : 40 }, (_, i) =>
          app.request('POST', '/v1/queues/bulk/tasks', { token: tenant.token, key: `single-${i}`, body: { payload: payloadOf(PAYLOAD_LIMIT) } }),
        ),
      );
      assert.deepEqual(
        singles.map((r) => r.status),
        singles.map(() => 200),
      );
      for (const [i, item] of ((bulk.body as any).data.results as any[]).entries()) {
        const read = await app.request('GET', `/v1/tasks/${item.task.task_id}`, { token: tenant.token });
        assert.deepEqual((read.body as any).data.payload, tasks[i]?.payload, 'the payload comes back unchanged');
      }
    }
    // Generated bulk batches against the small budget.
    const app = await testApp(small);
    const tenant = await createTenant(small, { queues: ['gen'] });
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ bytes: fc.integer({ min: 16, max: 64 * 1024 }), unit: fc.constantFrom(...ESCAPING) }), { minLength: 1, maxLength: 40 }),
        async (specs) => {
          n += 1;
          const tasks = specs.map((s, i) => ({ idempotency_key: `gen-${n}-${i}`, payload: payloadOf(s.bytes, s.unit) }));
          const response = await app.request('POST', '/v1/queues/gen/tasks:batch', { token: tenant.token, key: `gen-${n}`, body: { tasks } });
          assert.equal(response.status, 200, response.text.slice(0, 300));
          assert.equal((response.body as any).data.accepted, tasks.length);
          const ids = ((response.body as any).data.results as any[]).map((r) => r.task.task_id as string);
          const rows = await small.rows<{ id: string; payload: string }>(
            `SELECT LOWER(HEX(task_id)) AS id, payload FROM orbit_tasks WHERE task_id IN (${ids.map(() => 'UNHEX(?)').join(', ')})`,
            ids,
          );
          const byId = new Map(rows.map((r) => [r.id, JSON.parse(r.payload)]));
          for (const [i, id] of ids.entries()) assert.deepEqual(byId.get(id), tasks[i]?.payload);
        },
      ),
      { seed: 0xb01c, numRuns: 8 },
    );
    await assertCountersMatchRecount(t.db);
  });

  describe('a worker, over a real server process', () => {
    let server: ServerProcess;
    before(async () => {
      server = await startServerProcess(t.url);
    });
    after(async () => {
      await server.stop();
    });

    test('claims of tasks with payloads at the limit carry at most 8 MiB each; 40 results and errors at the limit completed at once all commit', async () => {
      const app = await testApp(t.db);
      const tenant = await createTenant(t.db, { queues: ['work'] });
      const payload = payloadOf(PAYLOAD_LIMIT);
      // 40 tasks at the limit: the first submitted with the payload, the other 39 in one bulk
      // submission with a small one, then given the first one's stored payload in one statement
      // (the rows the claims read are the same; submitting 10 MiB of such payloads costs ~2-3 s
      // of parsing, hashing and escaping, which the bulk test above does).
      const first = await app.request('POST', '/v1/queues/work/tasks', { token: tenant.token, key: 'w-0', body: { payload } });
      assert.equal(first.status, 200, first.text.slice(0, 300));
      const tasks = Array.from({ length: 39 }, (_, i) => ({ idempotency_key: `w-${i + 1}`, payload: { i } }));
      const rest = await app.request('POST', '/v1/queues/work/tasks:batch', { token: tenant.token, key: 'w-rest', body: { tasks } });
      assert.equal(rest.status, 200, rest.text.slice(0, 300));
      assert.equal((rest.body as any).data.accepted, 39);
      const [stored] = await t.db.rows<{ payload: string }>('SELECT payload FROM orbit_tasks WHERE application_id = UNHEX(?) AND task_id = UNHEX(?)', [
        tenant.applicationId,
        (first.body as any).data.task.task_id,
      ]);
      assert.deepEqual(JSON.parse(stored!.payload), payload);
      await t.db.exec('UPDATE orbit_tasks SET payload = ? WHERE application_id = UNHEX(?)', [stored!.payload, tenant.applicationId]);
      const session = await connectRaw(server.url, tenant.token);
      assert.equal((await session.request({ type: 'hello', node_id: 'big-node', queues: ['work'], capacity: 40 })).type, 'welcome');
      const claimed: any[] = [];
      const perClaim: number[] = [];
      while (claimed.length < 40) {
        const frame = await session.request({ type: 'claim', claim_id: `c-${perClaim.length}`, max: 40, start: true }, 30_000);
        assert.equal(frame.type, 'claimed', JSON.stringify(frame).slice(0, 300));
        assert.ok(frame.attempts.length > 0);
        const bytes = sum(frame.attempts.map((a: any) => jsonBytes(a.payload)));
        assert.ok(bytes <= MAX_CLAIMED_PAYLOAD_BYTES || frame.attempts.length === 1, `a claimed frame of ${bytes} bytes of payloads`);
        for (const a of frame.attempts) assert.deepEqual(a.payload, payload);
        perClaim.push(frame.attempts.length);
        claimed.push(...frame.attempts);
      }
      assert.ok(perClaim.length > 1, `40 payloads of 256 KiB took more than one claim (${perClaim.join(', ')})`);
      // Every result at once: half succeed with a result at the limit, half fail with an error at the limit.
      const result = payloadOf(PAYLOAD_LIMIT, '\\');
      const error = { message: '"'.repeat(PAYLOAD_LIMIT / 2 - 64) };
      assert.ok(jsonBytes(error) <= PAYLOAD_LIMIT);
      for (const [i, a] of claimed.entries()) {
        session.send(
          i % 2 === 0
            ? { type: 'complete', attempt_id: a.attempt_id, outcome: 'succeeded', result }
            : { type: 'complete', attempt_id: a.attempt_id, outcome: 'failed', error },
        );
      }
      const answers = await Promise.all(claimed.map((a) => session.next((f) => f.attempt_id === a.attempt_id, 60_000)));
      assert.deepEqual(
        answers.map((f) => `${f.type} ${f.task_state}`),
        claimed.map((_, i) => (i % 2 === 0 ? 'completed SUCCEEDED' : 'completed FAILED')),
      );
      const rows = await t.db.rows<{ id: string; state: string; result: string | null; error: string | null }>(
        `SELECT LOWER(HEX(task_id)) AS id, state, result, error FROM orbit_tasks WHERE task_id IN (${claimed.map(() => 'UNHEX(?)').join(', ')})`,
        claimed.map((a) => a.task_id),
      );
      const byId = new Map(rows.map((r) => [r.id, r]));
      claimed.forEach((a, i) => {
        const row = byId.get(a.task_id);
        if (i % 2 === 0) assert.deepEqual(JSON.parse(row?.result ?? 'null'), result);
        else assert.equal(JSON.parse(row?.error ?? '{}').message, error.message);
      });
      await session.close();
      await assertCountersMatchRecount(t.db);
    });
  });
});
