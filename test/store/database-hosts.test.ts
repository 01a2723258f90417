/**
 * A database URL naming several hosts (server/store/database/database.ts, docs/scale-out.md):
 * the first host refuses connections, so the very first statement moves the pool to the next one
 * and is served there (nothing had been sent: it is taken again on the new host), the move is
 * told once, and later statements stay on the host that serves. The cluster test
 * (test/integration/galera-cluster.test.ts) covers a host lost under load and the move back.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { createDatabase } from '../../server/store/database/database.ts';
import { unusedPort } from '../helpers/programs.ts';

let t: TestDatabase;
before(async () => {
  t = await freshDatabase('database_hosts');
});
after(async () => {
  await assertCountersMatchRecount(t.db);
  await t.drop();
});

test('a first host that refuses: the pool moves to the next, the statement is served, the move is told once', async () => {
  const served = new URL(t.url);
  const deadPort = await unusedPort();
  const url = `mysql://${served.username}${served.password ? `:${served.password}` : ''}@127.0.0.1:${deadPort},${served.host}${served.pathname}`;
  const moves: string[] = [];
  const db = createDatabase({ url, connectionLimit: 2, timeoutMs: 5000, onHostChange: (to) => moves.push(to) });
  try {
    const [row] = await db.rows<{ one: number }>('SELECT 1 AS one');
    assert.equal(Number(row?.one), 1);
    for (let i = 0; i < 5; i++) await db.oneShot('UPDATE orbit_application_resources SET event_writes = event_writes WHERE 1 = 0');
    assert.equal(moves.length, 1, `moved ${moves.length} times: ${moves.join(', ')}`);
    assert.ok(moves[0]?.includes(served.host), moves[0]);
  } finally {
    await db.close();
  }
});
