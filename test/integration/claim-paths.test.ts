/**
 * The claim's two paths against a real database. The fast path reads without locks and writes
 * with every limit re-checked by guards in one round trip; when something changed between its
 * read and its write, the guards roll it back untouched and the careful path decides under
 * locks. These tests make that happen on purpose: the write is held behind a lock the test owns
 * while the test changes what the decision assumed.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'drizzle-orm';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { waitFor } from '../helpers/wait.ts';
import { testApp } from '../helpers/app.ts';
import { credentialAuthenticate } from '../../server/store/tenancy/credentials.ts';
import { sessionOpen, type SessionInfo } from '../../server/store/attempts/sessions.ts';
import { attemptClaimGroup, type ClaimRequest } from '../../server/store/attempts/claims.ts';
import { lockRows } from '../../server/store/database/lock-order.ts';
import { createDatabase, type Database } from '../../server/store/database/database.ts';

describe('claim paths: fast, and careful when the fast one no longer holds', () => {
  let t: TestDatabase;
  let other: Database;
  let tenant: TestTenant;
  let api: Awaited<ReturnType<typeof testApp>>;
  let keys = 0;

  before(async () => {
    t = await freshDatabase('claimpaths');
    // A second pool, as another server process would have.
    other = createDatabase({ url: t.url, connectionLimit: 4, checkLockOrder: true });
    tenant = await createTenant(t.db, { namespace: 'paths', queues: ['fast', 'paused', 'raced'], resourceAccess: true });
    api = await testApp(t.db);
  });
  after(async () => {
    await other.close();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const submit = async (queue: string) => {
    const r = await api.request('POST', `/v1/queues/${queue}/tasks`, { token: tenant.token, key: `k${++keys}`, body: { payload: {} } });
    assert.equal(r.status, 200, r.text);
    return r.body.data.task.task_id as string;
  };
  const session = async (queue: string, node: string): Promise<SessionInfo> =>
    sessionOpen(t.db, { principal: await credentialAuthenticate(t.db, tenant.token), nodeId: node, queues: [queue], capacity: 10 });
  const tracked = () => {
    const seen: boolean[] = [];
    return { seen, metrics: { fastPath: (hit: boolean) => seen.push(hit) } };
  };
  const queueRow = async (name: string) =>
    (await t.db.rows<{ active_attempts: string; pending_starts: string; window_starts: number }>(sql`SELECT active_attempts, pending_starts, window_starts FROM orbit_queues WHERE name = ${name}`))[0];

  test('without contention the fast path claims in one round trip, starting on claim when asked', async () => {
    const ids = [await submit('fast'), await submit('fast')];
    const s = await session('fast', 'n-fast');
    const { seen, metrics } = tracked();
    const [outcome] = await attemptClaimGroup(t.db, [{ session: s, max: 5, start: true }], 30, metrics);
    assert.deepEqual(seen, [true]);
    assert.ok(outcome?.ok);
    assert.deepEqual(outcome.claimed.map((c) => c.taskId.toString('hex')).sort(), ids.sort());
    assert.ok(outcome.claimed.every((c) => c.started));
    assert.deepEqual(await queueRow('fast'), { active_attempts: '2', pending_starts: '0', window_starts: 2 });
    await assertCountersMatchRecount(t.db);
  });

  test('a queue paused between the read and the write: the guard rolls the fast path back, the careful path grants nothing', async () => {
    const id = await submit('paused');
    const s = await session('paused', 'n-paused');
    const queueId = s.queues[0]?.queueId as Buffer;
    // Hold the application row, so the fast path's write waits behind it.
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const holding = t.db.transaction(async (tx) => {
      await tx.rows(sql`SELECT application_id FROM orbit_application_resources WHERE application_id = ${Buffer.from(tenant.applicationId, 'hex')} ${lockRows('application')}`);
      locked();
      await waitFor(async () => {
        // The claim's one round trip is waiting for the application row (its guard statement).
        const [row] = await t.db.rows<{ n: string }>(
          sql`SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE INFO LIKE 'UPDATE orbit_application_resources SET active_attempts = IF(@sessions_matched%'`,
        );
        return Number(row?.n) > 0 ? true : null;
      }, 5000);
      await tx.exec(sql`UPDATE orbit_queues SET paused = 1 WHERE queue_id = ${queueId}`);
    });
    await isLocked;
    const { seen, metrics } = tracked();
    const claiming = attemptClaimGroup(other, [{ session: s, max: 5 }], 30, metrics);
    await holding;
    const [outcome] = await claiming;
    assert.deepEqual(seen, [false], 'the fast path missed');
    assert.ok(outcome?.ok);
    assert.deepEqual(outcome.claimed, [], 'a paused queue grants nothing');
    const [task] = await t.db.rows<{ state: string }>(sql`SELECT state FROM orbit_tasks WHERE task_id = ${Buffer.from(id, 'hex')}`);
    assert.equal(task?.state, 'WAITING');
    assert.deepEqual(await queueRow('paused'), { active_attempts: '0', pending_starts: '0', window_starts: 0 }, 'the rolled-back write left no trace');
    await assertCountersMatchRecount(t.db);
  });

  test('two processes racing for the same tasks: every task reserved once, counters exact', async () => {
    // Each round leaves its attempts held; the recount at the end counts them.
    for (let round = 0; round < 10; round++) {
      const ids = [await submit('raced'), await submit('raced')];
      const a = await session('raced', `n-a${round}`);
      const b = await session('raced', `n-b${round}`);
      const requests: Array<[Database, ClaimRequest]> = [
        [t.db, { session: a, max: 2 }],
        [other, { session: b, max: 2, start: true }],
      ];
      const outcomes = await Promise.all(requests.map(([db, r]) => attemptClaimGroup(db, [r], 30)));
      const claimed = outcomes.flatMap(([o]) => (o?.ok ? o.claimed : []));
      assert.deepEqual(claimed.map((c) => c.taskId.toString('hex')).sort(), ids.sort(), `round ${round}: each task once`);
    }
  });
});
