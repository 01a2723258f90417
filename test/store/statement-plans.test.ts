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
import { PRUNE_BATCH } from '../../server/store/retention/prune.ts';
import { newestTaskIds } from '../../server/store/tasks/tasks.ts';

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

test('a prune batch looks up each row it deletes by its key: never a scan of the table', async () => {
  const app = Buffer.from('1'.repeat(32), 'hex');
  const namespace = Buffer.from('2'.repeat(32), 'hex');
  // Enough rows of each kind that a scan would show.
  await t.db.exec(
    `INSERT INTO orbit_idempotency_receipts (namespace_id, idempotency_key, application_id, operation, request_sha256, resource_id, response, created_at)
    SELECT ?, CONCAT('k', seq), ?, 'submitTask', UNHEX(SHA2(seq, 256)), NULL, '{}', NOW(6) - INTERVAL seq MINUTE FROM seq_1_to_500`,
    [namespace, app],
  );
  await t.db.exec(
    `INSERT INTO orbit_events (event_id, application_id, namespace_id, type, subject, data, occurred_at)
    SELECT UNHEX(LPAD(HEX(seq), 32, '0')), ?, ?, 'queue.configured', 'q', '{}', NOW(6) - INTERVAL (600 - seq) MINUTE FROM seq_1_to_500`,
    [app, namespace],
  );
  await t.db.exec(
    `INSERT INTO orbit_audit_events (audit_id, application_id, namespace_id, credential_id, action, resource_type, resource, reason, request_id, idempotency_key, created_at)
     SELECT UNHEX(LPAD(HEX(seq), 32, '0')), ?, ?, ?, 'queue.configure', 'queue', 'q', 'x', ?, 'k', NOW(6) - INTERVAL seq MINUTE FROM seq_1_to_500`,
    [app, namespace, namespace, namespace],
  );
  await t.db.exec(
    `INSERT INTO orbit_worker_sessions (session_id, application_id, namespace_id, credential_id, node_id, queues, capacity, state, connected_at, last_seen_at, closed_at)
     SELECT UNHEX(CONCAT('ee', LPAD(HEX(seq), 30, '0'))), ?, ?, ?, 'n', '[]', 1, 'CLOSED', NOW(6) - INTERVAL seq HOUR, NOW(6) - INTERVAL seq HOUR, NOW(6) - INTERVAL seq HOUR FROM seq_1_to_500`,
    [app, namespace, namespace],
  );
  await t.db.exec('ANALYZE TABLE orbit_idempotency_receipts, orbit_events, orbit_audit_events, orbit_worker_sessions');
  try {
    const policy = {
      finished_task_retention_seconds: 60,
      event_retention_seconds: 60,
      receipt_retention_seconds: 60,
      audit_retention_seconds: 60,
      subscription_max_lag_seconds: 60,
    };
    for (const statement of [
      PRUNE_BATCH.receipts(app, 60, 50),
      PRUNE_BATCH.audit(app, 60, 50),
      PRUNE_BATCH.sessions(app, 60, 50),
      PRUNE_BATCH.events(namespace, '400', policy, null, 50),
    ]) {
      const plan = await t.db.rows<{ table: string; type: string; key: string | null; rows: number }>(sql`EXPLAIN ${statement}`);
      // The deleted table (alias x) is joined by its primary key; nothing reads a whole table.
      const target = plan.find((p) => p.table === 'x');
      assert.ok(target && target.type === 'eq_ref' && target.key === 'PRIMARY', JSON.stringify(plan));
      assert.ok(
        plan.every((p) => p.type !== 'ALL' || String(p.table).startsWith('<derived')),
        JSON.stringify(plan),
      );
    }
  } finally {
    for (const table of ['orbit_idempotency_receipts', 'orbit_events', 'orbit_audit_events', 'orbit_worker_sessions']) await t.db.exec(`DELETE FROM ${table}`);
  }
});

test('GET /v1/tasks across queues merges index-only ranges: no task row is read to choose the page', async () => {
  const app = Buffer.from('1'.repeat(32), 'hex');
  const namespace = Buffer.from('2'.repeat(32), 'hex');
  const queues = [5, 6, 7].map((n) => Buffer.from(String(n).repeat(32), 'hex'));
  // 300 tasks in each of three queues, most SUCCEEDED, some FAILED, with payloads that a merge of whole rows would carry.
  for (const [i, queue] of queues.entries()) {
    await t.db.exec(
      `INSERT INTO orbit_tasks (task_id, application_id, namespace_id, queue_id, state, priority, payload, attempts, max_attempts, on_unknown_outcome,
                                idempotency_key, created_at, available_at, deadline_at, updated_at)
      SELECT UNHEX(LPAD(HEX(${i + 1} * 1000 + seq), 32, '0')), ?, ?, ?, IF(seq % 10 = 0, 'FAILED', 'SUCCEEDED'), 5, REPEAT('x', 2000), 1, 3, 'retry',
             CONCAT('k', seq), NOW(6), NOW(6), NOW(6) + INTERVAL 1 DAY, NOW(6) FROM seq_1_to_300`,
      [app, namespace, queue],
    );
  }
  await t.db.exec('ANALYZE TABLE orbit_tasks');
  for (const state of ['FAILED', undefined] as const) {
    const plan = await t.db.rows<{ table: string; key: string | null; Extra: string | null }>(sql`EXPLAIN ${newestTaskIds(queues, state, null, 26)}`);
    const ranges = plan.filter((row) => row.table === 't');
    assert.equal(ranges.length, 3, JSON.stringify(plan));
    for (const row of ranges) {
      assert.equal(row.key, state === undefined ? 'ix_orbit_tasks_queue' : 'ix_orbit_tasks_queue_state', JSON.stringify(plan));
      assert.match(String(row.Extra), /Using index/, `index-only: ${JSON.stringify(plan)}`);
    }
  }
  await t.db.exec('DELETE FROM orbit_tasks');
});
