/**
 * Namespace floors across two real server processes: 40 concurrent submitters over three
 * namespaces of one application, two of them with a floor - the floors hold exactly (no
 * submission within a floor is refused), the application's limit holds exactly, and what is
 * left is shared; then claims by real worker sessions under a concurrency floor. Ends with the
 * recount of every level (namespaces included).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw } from '../helpers/ws-session.ts';
import { setFloors } from '../helpers/floors.ts';

describe('namespace floors, two server processes', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  const tenants: Record<'a' | 'b' | 'c', TestTenant> = {} as never;

  before(async () => {
    t = await freshDatabase('floors');
    tenants.a = await createTenant(t.db, { namespace: 'a', queues: ['q'], resourceAccess: true });
    tenants.b = await createTenant(t.db, { applicationId: tenants.a.applicationId, namespace: 'b', queues: ['q'] });
    tenants.c = await createTenant(t.db, { applicationId: tenants.a.applicationId, namespace: 'c', queues: ['q'] });
    servers = await Promise.all([startServerProcess(t.url), startServerProcess(t.url)]);
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  async function setApplicationLimits(limits: { max_unfinished_tasks: number; max_concurrency: number }) {
    const current = await call(servers[0]!.url, 'GET', '/v1/application/resources', { token: tenants.a.token });
    const response = await call(servers[0]!.url, 'POST', '/v1/application/resources:configure', {
      token: tenants.a.token,
      key: `limits-${current.body.data.revision}`,
      body: { expected_revision: current.body.data.revision, reason: 'test', rate_per_second: 100000, ...limits },
    });
    assert.equal(response.status, 200, JSON.stringify(response.body));
  }

  const submit = (server: ServerProcess, tenant: TestTenant, key: string) =>
    call(server.url, 'POST', '/v1/queues/q/tasks', { token: tenant.token, key, body: { payload: { key } } });

  test('40 concurrent submitters over three namespaces: the floors are kept for their namespaces, the rest is shared, exactly', async () => {
    await setApplicationLimits({ max_unfinished_tasks: 30, max_concurrency: 10000 });
    await setFloors(t.db, tenants.a, { reserved_unfinished_tasks: 10, reserved_concurrency: 0, reserved_rate_per_second: 0 });
    await setFloors(t.db, tenants.b, { reserved_unfinished_tasks: 5, reserved_concurrency: 0, reserved_rate_per_second: 0 });
    // a: 10 submitters of one task each (its floor), b: 5 (its floor), c: 25 of two each (50 for the 15 left).
    const submitters: Array<{ ns: 'a' | 'b' | 'c'; keys: string[] }> = [
      ...Array.from({ length: 10 }, (_, i) => ({ ns: 'a' as const, keys: [`a-${i}`] })),
      ...Array.from({ length: 5 }, (_, i) => ({ ns: 'b' as const, keys: [`b-${i}`] })),
      ...Array.from({ length: 25 }, (_, i) => ({ ns: 'c' as const, keys: [`c-${i}-0`, `c-${i}-1`] })),
    ];
    // Interleaved, so the flood and the floors arrive together, spread over both servers.
    submitters.sort((x, y) => (x.keys[0] as string).localeCompare(y.keys[0] as string) * (x.ns === 'c' ? 1 : -1));
    const answers = await Promise.all(
      submitters.map(async (s, i) => {
        const out: Array<{ ns: string; status: number; body: any }> = [];
        for (const key of s.keys) {
          const r = await submit(servers[i % 2] as ServerProcess, tenants[s.ns], key);
          out.push({ ns: s.ns, status: r.status, body: r.body });
        }
        return out;
      }),
    );
    const all = answers.flat();
    const accepted = (ns: string) => all.filter((a) => a.ns === ns && a.status === 200).length;
    for (const a of all) assert.ok(a.status === 200 || a.status === 429, `only 200 or 429: ${a.status} ${JSON.stringify(a.body)}`);
    assert.equal(accepted('a'), 10, 'every submission within the floor of a was accepted');
    assert.equal(accepted('b'), 5, 'every submission within the floor of b was accepted');
    assert.equal(accepted('c'), 15, 'c had exactly what the floors leave');
    for (const refused of all.filter((a) => a.status === 429)) {
      assert.equal(refused.body.error.code, 'APPLICATION_FULL');
      assert.equal(refused.body.error.details.level, 'application');
    }
    // That refusals kept by the floors say so is test/integration/namespace-floors-api.test.ts's (deterministic there).
    const [app] = await t.db.rows<{ unfinished_tasks: string; idle_reserved_unfinished_tasks: string }>(
      'SELECT unfinished_tasks, idle_reserved_unfinished_tasks FROM orbit_application_resources WHERE application_id = UNHEX(?)',
      [tenants.a.applicationId],
    );
    assert.deepEqual(app, { unfinished_tasks: '30', idle_reserved_unfinished_tasks: '0' });
    await assertCountersMatchRecount(t.db);
  });

  test('claims under a concurrency floor: the flooding namespace takes what is shared, the floor stays for its namespace', async () => {
    await setApplicationLimits({ max_unfinished_tasks: 30, max_concurrency: 4 });
    await setFloors(t.db, tenants.a, { reserved_unfinished_tasks: 10, reserved_concurrency: 2, reserved_rate_per_second: 0 });
    const hello = async (server: ServerProcess, tenant: TestTenant) => {
      const s = await connectRaw(server.url, tenant.token);
      const welcome = await s.request({ type: 'hello', node_id: `node-${tenant.namespace}`, queues: ['q'], capacity: 10 });
      assert.equal(welcome.type, 'welcome', JSON.stringify(welcome));
      return s;
    };
    const flood = await hello(servers[0] as ServerProcess, tenants.c);
    const floored = await hello(servers[1] as ServerProcess, tenants.a);
    try {
      const first = await flood.request({ type: 'claim', claim_id: 'c-1', max: 10 });
      assert.equal(first.attempts.length, 2, 'c gets the 2 the floor of a leaves of max_concurrency 4');
      const again = await flood.request({ type: 'claim', claim_id: 'c-2', max: 10 });
      assert.equal(again.attempts.length, 0, 'and no more while a is below its floor');
      const own = await floored.request({ type: 'claim', claim_id: 'a-1', max: 10 });
      assert.equal(own.attempts.length, 2, 'a has its floor at once');
      const [app] = await t.db.rows<{ active_attempts: string; idle_reserved_concurrency: string }>(
        'SELECT active_attempts, idle_reserved_concurrency FROM orbit_application_resources WHERE application_id = UNHEX(?)',
        [tenants.a.applicationId],
      );
      assert.deepEqual(app, { active_attempts: '4', idle_reserved_concurrency: '0' });
      await assertCountersMatchRecount(t.db);
    } finally {
      await flood.close();
      await floored.close();
    }
  });
});
