/**
 * The hot paths' statements keep to the primary key whatever else the table holds: MariaDB's
 * plan for a row-constructor IN with one pair is a range over a secondary index (for attempts,
 * every RUNNING attempt of every application), so the fast paths name their rows by primary key
 * too (rowsAsExpected, fast-path-guards.ts). Checked with EXPLAIN on a table with 500 running
 * attempts, for one pair and for several.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { rowsAsExpected } from '../../server/store/attempts/fast-path-guards.ts';
import { sql } from '../../server/store/database/sql.ts';

let t: TestDatabase;
before(async () => {
  t = await freshDatabase('plans');
  // 500 attempts, all RUNNING with a live lease, of one session; ids 1 … 500.
  await t.db.exec(`INSERT INTO orbit_attempts (attempt_id, application_id, namespace_id, queue_id, task_id, session_id, attempt_number, state, claimed_at, lease_expires_at, deadline_at)
    SELECT UNHEX(LPAD(HEX(seq), 32, '0')), UNHEX(REPEAT('1', 32)), UNHEX(REPEAT('2', 32)), UNHEX(REPEAT('3', 32)), UNHEX(LPAD(HEX(seq), 32, '0')),
           UNHEX(REPEAT('a', 32)), 1, 'RUNNING', NOW(6), NOW(6) + INTERVAL 1 HOUR, NOW(6) + INTERVAL 1 HOUR FROM seq_1_to_500`);
  await t.db.exec('ANALYZE TABLE orbit_attempts');
});
after(async () => {
  // Rows of no real task: removed before the recount, which would rightly object to them.
  await t.db.exec('DELETE FROM orbit_attempts');
  await assertCountersMatchRecount(t.db);
  await t.drop();
});

const id = (n: number) => Buffer.from(n.toString(16).padStart(32, '0'), 'hex');
const session = Buffer.from('a'.repeat(32), 'hex');

for (const n of [1, 2, 16]) {
  test(`finishing ${n} attempt${n > 1 ? 's' : ''} looks at ${n} row${n > 1 ? 's' : ''}, not at every running one`, async () => {
    const pairs = Array.from({ length: n }, (_, i) => [id(400 + i), session] as const);
    const plan = await t.db.rows<{ key: string; rows: number }>(
      sql`EXPLAIN UPDATE orbit_attempts SET finished_at = NOW(6) WHERE ${rowsAsExpected('attempt_id', 'session_id', pairs)} AND state = 'RUNNING' AND lease_expires_at > NOW(6)`,
    );
    // By primary key, or by (session_id, state) - whose entries end with the primary key, so
    // that the pairs are exact lookups there too; never the lease index's range of every RUNNING attempt.
    assert.ok(['PRIMARY', 'ix_orbit_attempts_session'].includes(String(plan[0]?.key)), JSON.stringify(plan));
    assert.ok(Number(plan[0]?.rows) <= n, JSON.stringify(plan));
  });
}
