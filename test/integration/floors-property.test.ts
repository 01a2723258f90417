/**
 * Floors, property-based, end to end: generated sequences of configure (floors), submit, claim,
 * start, result, cancel and expiry over three namespaces of one application, sent to two real
 * server processes in turn (HTTP and worker sessions). After every step: no level (application,
 * namespace, queue) is over its limit, no namespace below its floor was refused because of the
 * others (a refused submission, a claim granted less than it could use) while the floors fit
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
const LIMITS = { max_unfinished_tasks: 5, max_concurrency: 3, rate_per_second: 100000 };

const stepArb = fc.oneof(
  { weight: 2, arbitrary: fc.record({ op: fc.constant('floors' as const), ns: fc.nat(2), unfinished: fc.nat(3), concurrency: fc.nat(2) }) },
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
    const current = await call(servers[0]!.url, 'GET', '/v1/application/resources', { token: tenants[0]!.token });
    const configured = await call(servers[0]!.url, 'POST', '/v1/application/resources:configure', {
      token: tenants[0]!.token,
      key: 'floors-property-limits',
      body: { expected_revision: current.body.data.revision, reason: 'test', ...LIMITS },
    });
    assert.equal(configured.status, 200);
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const applicationId = () => Buffer.from(tenants[0]!.applicationId, 'hex');

  async function usage() {
    const [app] = await t.db.rows<{ unfinished_tasks: string; active_attempts: string }>(
      sql`SELECT unfinished_tasks, active_attempts FROM orbit_application_resources WHERE application_id = ${applicationId()}`,
    );
    const namespaces = await t.db.rows<{
      namespace_id: Buffer;
      unfinished_tasks: string;
      active_attempts: string;
      reserved_unfinished_tasks: number;
      reserved_concurrency: number;
    }>(
      sql`SELECT namespace_id, unfinished_tasks, active_attempts, reserved_unfinished_tasks, reserved_concurrency FROM orbit_namespace_resources WHERE application_id = ${applicationId()}`,
    );
    const of = (i: number) => namespaces.find((n) => n.namespace_id.toString('hex') === tenants[i]!.namespaceId) as (typeof namespaces)[number];
    // usage + the idle part of every floor: while it is within the limit, every floor can be reached
    // (a floor set while others already use the room is kept for its namespace as that room frees).
    const committed = (usageOf: (n: (typeof namespaces)[number]) => number, reservedOf: (n: (typeof namespaces)[number]) => number) =>
      namespaces.reduce((sum, n) => sum + Math.max(usageOf(n), reservedOf(n)), 0);
    return {
      app: { unfinished: Number(app?.unfinished_tasks), active: Number(app?.active_attempts) },
      of,
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
      },
    };
  }

  /** Floors that fit beside the others' (a configure that would not fit is refused; here it is not tried). */
  async function setFloors(i: number, unfinished: number, concurrency: number): Promise<void> {
    const [app] = await t.db.rows<{ reserved_unfinished_tasks: string; reserved_concurrency: string }>(
      sql`SELECT reserved_unfinished_tasks, reserved_concurrency FROM orbit_application_resources WHERE application_id = ${applicationId()}`,
    );
    const own = (await usage()).of(i);
    assert.ok(app);
    await setFloorsOf(t.db, tenants[i] as TestTenant, {
      reserved_unfinished_tasks: Math.min(unfinished, LIMITS.max_unfinished_tasks - Number(app.reserved_unfinished_tasks) + own.reserved_unfinished_tasks),
      reserved_concurrency: Math.min(concurrency, LIMITS.max_concurrency - Number(app.reserved_concurrency) + own.reserved_concurrency),
      reserved_rate_per_second: 0,
    });
  }

  test('after every step: no level over its limit, no refusal within a floor, counters equal a recount', async () => {
    const sequences = fc.sample(fc.array(stepArb, { minLength: 10, maxLength: 24 }), { numRuns: 10, seed: SEED });
    let round = 0;
    let refusalsOutsideFloors = 0;
    for (const steps of sequences) {
      round++;
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
            await setFloors(i, step.unfinished, step.concurrency);
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
            const answer = await session.request({ type: 'claim', claim_id: `r${round}-c${n}`, max: step.max });
            assert.equal(answer.type, 'claimed', where);
            for (const a of answer.attempts as Array<{ attempt_id: string; task_id: string }>) {
              held[i]!.push({ attempt_id: a.attempt_id, task_id: a.task_id, running: false });
              waiting[i] = waiting[i]!.filter((id) => id !== a.task_id);
            }
            // Below its concurrency floor, a claim gets what its floor leaves, up to what it asked and what is waiting.
            const ownRoom = own.reserved_concurrency - Number(own.active_attempts);
            const couldUse = Math.min(step.max, ownRoom, waiting[i]!.length + answer.attempts.length);
            if (couldUse > 0 && before.floorsReachable.concurrency)
              assert.ok(answer.attempts.length >= couldUse, `a claim within its floor got ${answer.attempts.length} of ${couldUse}: ${where}`);
          } else if (step.op === 'start') {
            const attempt = held[i]!.find((a) => !a.running);
            if (attempt) {
              const answer = await session.request({ type: 'start', attempt_id: attempt.attempt_id });
              assert.equal(answer.type, 'started', where);
              attempt.running = true;
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
          await setFloors(i, 0, 0);
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
  });
});
