/**
 * Floors, property-based, end to end: generated sequences of configure (floors), submit, claim,
 * start, result, cancel and expiry over three namespaces of one application, sent to two real
 * server processes in turn (HTTP and worker sessions). After every step: no level (application,
 * namespace, queue) is over its limit, no namespace below its floor was refused because of the
 * others (a refused submission, a claim granted less than it could use, a Start refused) while the floors fit
 * beside the usage (a floor set while others already use the room is theirs to free first), and
 * every counter - the namespace level and the application row's floors figures included -
 * equals a recount. Seeded, by case count.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw, type RawSession } from '../helpers/ws-session.ts';
import { endLeases } from '../helpers/leases.ts';
import { waitFor } from '../helpers/wait.ts';
import { sql } from '../../server/store/database/sql.ts';
import { setFloors as setFloorsOf } from '../helpers/floors.ts';

const SEED = 20261205;
const _NAMES = ['a', 'b', 'c'] as const;
/** The application's limits; the rate is set per sequence: odd ones where it binds (1 a second), even ones where it does not. */
const LIMITS = { max_unfinished_tasks: 5, max_concurrency: 3, rate_per_second: 100000 };
const rateOfRound = (round: number) => (round % 2 === 1 ? 1 : 100000);

const stepArb = fc.oneof(
  { weight: 2, arbitrary: fc.record({ op: fc.constant('floors' as const), ns: fc.nat(2), unfinished: fc.nat(3), concurrency: fc.nat(2), rate: fc.nat(1) }) },
  { weight: 6, arbitrary: fc.record({ op: fc.constant('submit' as const), ns: fc.nat(2) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('claim' as const), ns: fc.nat(2), max: fc.integer({ min: 1, max: 4 }) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('start' as const), ns: fc.nat(2) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('result' as const), ns: fc.nat(2) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('cancel' as const), ns: fc.nat(2) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('expire' as const), ns: fc.nat(2) }) },
);

describe('floors, generated sequences over three namespaces and two servers', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  const tenants: TestTenant[] = [];

  before(async () => {
    t = await freshDatabase('floors_property');
    tenants.push(await createTenant(t.db, { namespace: 'a', queues: ['q'], resourceAccess: true }));
    for (const name of ['b', 'c'])
      tenants.push(await createTenant(t.db, { applicationId: (tenants[0] as TestTenant).applicationId, namespace: name, queues: ['q'] }));
    // Long leases (an expiry is the test's step, endLeases) and a quick recovery loop.
    servers = await Promise.all([0, 1].map(() => startServerProcess(t.url, { ORBIT_LEASE_SECONDS: '600', ORBIT_RECOVERY_INTERVAL_MS: '20' })));
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const applicationId = () => Buffer.from(tenants[0]!.applicationId, 'hex');

  async function setApplicationLimits(key: string): Promise<void> {
    const current = await call(servers[0]!.url, 'GET', '/v1/application/resources', { token: tenants[0]!.token });
    const configured = await call(servers[0]!.url, 'POST', '/v1/application/resources:configure', {
      token: tenants[0]!.token,
      key: `floors-property-${key}`,
      body: { expected_revision: current.body.data.revision, reason: 'test', ...LIMITS },
    });
    assert.equal(configured.status, 200, JSON.stringify(configured.body));
  }

  async function usage() {
    // One statement: the application's row, its window as of database time, and the namespaces' rows.
    const [app] = await t.db.rows<{
      unfinished_tasks: string;
      active_attempts: string;
      pending_starts: string;
      window_open: number;
      window_starts: number;
      window_started_at: string | null;
    }>(
      sql`SELECT unfinished_tasks, active_attempts, pending_starts, window_starts, window_started_at,
                 (window_started_at IS NOT NULL AND window_started_at + INTERVAL 1 SECOND > NOW(6)) AS window_open
            FROM orbit_application_resources WHERE application_id = ${applicationId()}`,
    );
    const namespaces = await t.db.rows<{
      namespace_id: Buffer;
      unfinished_tasks: string;
      active_attempts: string;
      reserved_unfinished_tasks: number;
      reserved_concurrency: number;
      reserved_rate_per_second: number;
      window_started_at: string | null;
      window_starts: number;
      pending_starts: string;
    }>(
      sql`SELECT namespace_id, unfinished_tasks, active_attempts, reserved_unfinished_tasks, reserved_concurrency, reserved_rate_per_second,
                 window_started_at, window_starts, pending_starts
            FROM orbit_namespace_resources WHERE application_id = ${applicationId()}`,
    );
    type Row = (typeof namespaces)[number];
    const of = (i: number) => namespaces.find((n) => n.namespace_id.toString('hex') === tenants[i]!.namespaceId) as Row;
    const open = app?.window_open === 1;
    /** A namespace's starts in the application's current window. */
    const startsOf = (n: Row) => (open && n.window_started_at !== null && n.window_started_at === app?.window_started_at ? n.window_starts : 0);
    // usage + the idle part of every floor: while it is within the limit, every floor can be reached
    // (a floor set while others already use the room is kept for its namespace as that room frees).
    const committed = (usageOf: (n: Row) => number, reservedOf: (n: Row) => number) =>
      namespaces.reduce((sum, n) => sum + Math.max(usageOf(n), reservedOf(n)), 0);
    return {
      app: {
        unfinished: Number(app?.unfinished_tasks),
        active: Number(app?.active_attempts),
        windowStarts: open ? Number(app?.window_starts) : 0,
        pending: Number(app?.pending_starts),
      },
      of,
      startsOf: (i: number) => startsOf(of(i)),
      /** The rate room a claim in namespace i has at least, whatever the others' floors: the others' idle rate floors kept out. */
      claimRateRoom: (i: number) =>
        LIMITS.rate_per_second -
        (open ? Number(app?.window_starts) : 0) -
        Number(app?.pending_starts) -
        namespaces.filter((n) => n !== of(i)).reduce((sum, n) => sum + Math.max(0, n.reserved_rate_per_second - startsOf(n)), 0),
      /** The concurrency room namespace i has whatever the others do: the limit, less usage and the others' idle floors. */
      concurrencyRoom: (i: number) =>
        LIMITS.max_concurrency -
        Number(app?.active_attempts) -
        namespaces.filter((n) => n !== of(i)).reduce((sum, n) => sum + Math.max(0, n.reserved_concurrency - Number(n.active_attempts)), 0),
      /** What is left of namespace i's own rate floor in this window: its reservation less its starts and its reservations waiting. */
      ownRateLeft: (i: number) => of(i).reserved_rate_per_second - startsOf(of(i)) - Number(of(i).pending_starts),
      floorsReachable: {
        unfinished:
          committed(
            (n) => Number(n.unfinished_tasks),
            (n) => n.reserved_unfinished_tasks,
          ) <= LIMITS.max_unfinished_tasks,
        concurrency:
          committed(
            (n) => Number(n.active_attempts),
            (n) => n.reserved_concurrency,
          ) <= LIMITS.max_concurrency,
        rate: committed(startsOf, (n) => n.reserved_rate_per_second) <= LIMITS.rate_per_second,
      },
    };
  }

  /** Floors that fit beside the others' (a configure that would not fit is refused; here it is not tried). */
  async function setFloors(i: number, unfinished: number, concurrency: number, rate: number): Promise<void> {
    const [app] = await t.db.rows<{ reserved_unfinished_tasks: string; reserved_concurrency: string; reserved_rate_per_second: string }>(
      sql`SELECT reserved_unfinished_tasks, reserved_concurrency, reserved_rate_per_second FROM orbit_application_resources WHERE application_id = ${applicationId()}`,
    );
    const own = (await usage()).of(i);
    assert.ok(app);
    await setFloorsOf(t.db, tenants[i] as TestTenant, {
      reserved_unfinished_tasks: Math.min(unfinished, LIMITS.max_unfinished_tasks - Number(app.reserved_unfinished_tasks) + own.reserved_unfinished_tasks),
      reserved_concurrency: Math.min(concurrency, LIMITS.max_concurrency - Number(app.reserved_concurrency) + own.reserved_concurrency),
      reserved_rate_per_second: Math.min(rate, LIMITS.rate_per_second - Number(app.reserved_rate_per_second) + own.reserved_rate_per_second),
    });
  }

  test('after every step: no level over its limit, no refusal within a floor, counters equal a recount', async () => {
    const sequences = fc.sample(fc.array(stepArb, { minLength: 10, maxLength: 24 }), { numRuns: 10, seed: SEED });
    let round = 0;
    let refusalsOutsideFloors = 0;
    let rateLimited = 0;
    let rateFloorClaims = 0;
    let rateBound = 0;
    for (const steps of sequences) {
      round++;
      LIMITS.rate_per_second = rateOfRound(round);
      await setApplicationLimits(`round-${round}`);
      const sessions: RawSession[] = [];
      for (const [i, tenant] of tenants.entries()) {
        const s = await connectRaw(servers[i % 2]!.url, tenant.token);
        assert.equal((await s.request({ type: 'hello', node_id: `n-${round}-${i}`, queues: ['q'], capacity: 8 })).type, 'welcome');
        sessions.push(s);
      }
      const held: Array<Array<{ attempt_id: string; task_id: string; running: boolean }>> = [[], [], []];
      const waiting: string[][] = [[], [], []];
      let n = 0;
      try {
        for (const step of steps) {
          n++;
          const i = step.ns;
          const server = servers[n % 2] as ServerProcess;
          const tenant = tenants[i] as TestTenant;
          const session = sessions[i] as RawSession;
          const before = await usage();
          const own = before.of(i);
          const where = JSON.stringify({ round, n, step });
          if (step.op === 'floors') {
            await setFloors(i, step.unfinished, step.concurrency, step.rate);
          } else if (step.op === 'submit') {
            const r = await call(server.url, 'POST', '/v1/queues/q/tasks', { token: tenant.token, key: `r${round}-s${n}`, body: { payload: {} } });
            if (r.status === 200) waiting[i]!.push(r.body.data.task_id);
            else {
              assert.equal(r.status, 429, where);
              if (before.floorsReachable.unfinished)
                assert.ok(Number(own.unfinished_tasks) >= own.reserved_unfinished_tasks, `refused within its floor: ${where}`);
              refusalsOutsideFloors++;
            }
          } else if (step.op === 'claim') {
            // What it could be granted: its WAITING tasks that are due (a retry after an expiry waits out its backoff).
            const [due] = await t.db.rows<{ n: string }>(
              "SELECT COUNT(*) AS n FROM orbit_tasks WHERE namespace_id = UNHEX(?) AND state = 'WAITING' AND available_at <= NOW(6)",
              [tenant.namespaceId],
            );
            const answer = await session.request({ type: 'claim', claim_id: `r${round}-c${n}`, max: step.max });
            assert.equal(answer.type, 'claimed', where);
            for (const a of answer.attempts as Array<{ attempt_id: string; task_id: string }>) {
              held[i]!.push({ attempt_id: a.attempt_id, task_id: a.task_id, running: false });
              waiting[i] = waiting[i]!.filter((id) => id !== a.task_id);
            }
            // Below its concurrency floor, a claim gets what its floor leaves, up to what it asked and what is waiting.
            const ownRoom = own.reserved_concurrency - Number(own.active_attempts);
            const couldUse = Math.min(step.max, ownRoom, Number(due?.n));
            // (When the rate's room is what binds, fairness shares it among the waiting nodes: not a floor's matter.)
            if (couldUse > 0 && before.floorsReachable.concurrency && before.claimRateRoom(i) >= LIMITS.max_concurrency)
              assert.ok(answer.attempts.length >= couldUse, `a claim within its floor got ${answer.attempts.length} of ${couldUse}: ${where}`);
            // Below its rate floor, a claim gets at least one, whatever the others' reservations waiting to start.
            const concurrencyRoom = before.concurrencyRoom(i);
            if (before.ownRateLeft(i) >= 1 && concurrencyRoom >= 1 && Number(due?.n) >= 1 && before.floorsReachable.concurrency) {
              assert.ok(answer.attempts.length >= 1, `a claim within its rate floor got nothing: ${where}`);
              rateFloorClaims++;
            }
            if (answer.attempts.length < Math.min(step.max, concurrencyRoom, Number(due?.n))) rateBound++;
          } else if (step.op === 'start') {
            const attempt = held[i]!.find((a) => !a.running);
            if (attempt) {
              const answer = await session.request({ type: 'start', attempt_id: attempt.attempt_id });
              if (answer.type === 'started') attempt.running = true;
              else {
                assert.equal(answer.code, 'RATE_LIMITED', `${where}: ${JSON.stringify(answer)}`);
                // Time only adds room (a new window): below its rate floor, read before, a Start is never refused.
                if (before.floorsReachable.rate)
                  assert.ok(before.startsOf(i) >= own.reserved_rate_per_second, `a Start within its rate floor was refused: ${where}`);
                rateLimited++;
              }
            }
          } else if (step.op === 'result') {
            const attempt = held[i]!.find((a) => a.running);
            if (attempt) {
              const answer = await session.request({ type: 'complete', attempt_id: attempt.attempt_id, outcome: 'succeeded' });
              assert.equal(answer.type, 'completed', where);
              held[i] = held[i]!.filter((a) => a !== attempt);
            }
          } else if (step.op === 'cancel') {
            const id = waiting[i]!.shift();
            if (id !== undefined) {
              const r = await call(server.url, 'POST', `/v1/tasks/${id}:cancel`, { token: tenant.token, key: `r${round}-x${n}`, body: { reason: 'test' } });
              assert.equal(r.status, 200, where);
            }
          } else {
            // A worker gone silent: its oldest reservation's lease ends, recovery puts the task back.
            const attempt = held[i]!.shift();
            if (attempt) {
              await endLeases(t.db, [attempt.attempt_id]);
              await waitFor(async () => {
                const [row] = await t.db.rows<{ state: string }>('SELECT state FROM orbit_attempts WHERE attempt_id = UNHEX(?)', [attempt.attempt_id]);
                return row?.state === 'EXPIRED';
              });
              const [task] = await t.db.rows<{ state: string }>('SELECT state FROM orbit_tasks WHERE task_id = UNHEX(?)', [attempt.task_id]);
              if (task?.state === 'WAITING') waiting[i]!.push(attempt.task_id);
            }
          }
          const afterStep = await usage();
          assert.ok(afterStep.app.unfinished <= LIMITS.max_unfinished_tasks, `application over max_unfinished_tasks: ${where}`);
          assert.ok(afterStep.app.active <= LIMITS.max_concurrency, `application over max_concurrency: ${where}`);
          await assertCountersMatchRecount(t.db);
        }
      } finally {
        for (const s of sessions) await s.close();
        // Each sequence starts from nothing: what it left is cancelled, its floors removed.
        for (const [i, tenant] of tenants.entries()) {
          await setFloors(i, 0, 0, 0);
          const left = await t.db.rows<{ id: string }>(
            "SELECT LOWER(HEX(task_id)) AS id FROM orbit_tasks WHERE namespace_id = UNHEX(?) AND state IN ('WAITING', 'LEASED', 'RUNNING')",
            [tenant.namespaceId],
          );
          for (const { id } of left) {
            const r = await call(servers[0]!.url, 'POST', `/v1/tasks/${id}:cancel`, {
              token: tenant.token,
              key: `r${round}-end-${id}`,
              body: { reason: 'end of sequence' },
            });
            assert.equal(r.status, 200);
          }
        }
        // A RUNNING task's cancel is an intent; its session closed, so the lease ends and recovery finishes it.
        await endLeases(
          t.db,
          (await t.db.rows<{ id: string }>("SELECT LOWER(HEX(attempt_id)) AS id FROM orbit_attempts WHERE state IN ('RESERVED', 'RUNNING')")).map((r) => r.id),
        );
        await waitFor(async () => {
          const [row] = await t.db.rows<{ n: string }>(
            "SELECT COUNT(*) AS n FROM orbit_tasks WHERE application_id = UNHEX(?) AND state IN ('WAITING', 'LEASED', 'RUNNING')",
            [tenants[0]!.applicationId],
          );
          return row?.n === '0';
        });
      }
    }
    assert.ok(refusalsOutsideFloors > 0, 'the sequences reached the limit');
    // The rate binds at claims (reservations waiting to start hold its room), so Starts are rarely refused.
    assert.ok(
      rateBound > 0 && rateFloorClaims > 0,
      `the rate bound ${rateBound} claims; ${rateFloorClaims} claims within a rate floor; ${rateLimited} Starts refused`,
    );
  });
});
