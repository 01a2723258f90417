import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  LOCK_LEVEL_OF_TABLE,
  LockOrderCheck,
  LockOrderViolation,
  isLockingRead,
  lockRows,
  lockedTables,
  splitStatements,
} from '../../server/store/database/lock-order.ts';
import { statementText } from '../../server/store/database/database.ts';
import { sql } from '../../server/store/database/sql.ts';

const app = Buffer.from('01', 'hex');
const q1 = Buffer.from('aa', 'hex');
const q2 = Buffer.from('bb', 'hex');
const t1 = Buffer.from('c1', 'hex');

test('statements are split at semicolons outside quotes', () => {
  assert.deepEqual(splitStatements("SELECT 1; UPDATE orbit_queues SET a = ';' WHERE x; COMMIT"), [
    'SELECT 1',
    "UPDATE orbit_queues SET a = ';' WHERE x",
    'COMMIT',
  ]);
});

test('which tables a statement locks: locking reads, updates, inserts into keyed tables, deletes', () => {
  assert.deepEqual(lockedTables('SELECT a FROM orbit_tasks t JOIN orbit_attempts a ON a.task_id = t.task_id WHERE x FOR UPDATE SKIP LOCKED'), [
    'orbit_tasks',
    'orbit_attempts',
  ]);
  assert.deepEqual(lockedTables('SELECT a FROM orbit_tasks WHERE x'), [], 'a plain read locks nothing');
  assert.deepEqual(lockedTables('UPDATE orbit_application_resources SET n = n + 1 WHERE application_id = ?'), ['orbit_application_resources']);
  assert.deepEqual(lockedTables('INSERT IGNORE INTO orbit_key_permits (a) VALUES (?)'), ['orbit_key_permits']);
  assert.deepEqual(lockedTables('INSERT INTO orbit_idempotency_receipts (a) SELECT ? FROM orbit_credentials'), ['orbit_idempotency_receipts']);
  assert.deepEqual(lockedTables('INSERT INTO orbit_tasks (a) VALUES (?)'), [], 'a fresh id locks nothing another transaction holds');
  assert.deepEqual(lockedTables('SELECT 1 FROM orbit_credentials c WHERE c.credential_id = ? LOCK IN SHARE MODE'), ['orbit_credentials']);
  for (const table of ['orbit_tasks', 'orbit_attempts', 'orbit_queues', 'orbit_application_resources', 'orbit_key_permits'])
    assert.ok(LOCK_LEVEL_OF_TABLE[table]);
});

test('levels in order pass; a lower level after a higher one fails', () => {
  const check = new LockOrderCheck();
  check.observe(
    'SELECT 1 FROM orbit_application_resources WHERE application_id = ? FOR UPDATE /* lock: application */; SELECT 1 FROM orbit_queues WHERE queue_id = ? FOR UPDATE /* lock: queue */',
    [app, q1],
  );
  check.observe('SELECT 1 FROM orbit_tasks WHERE task_id = ? FOR UPDATE /* lock: task */', [t1]);
  assert.throws(() => check.observe('UPDATE orbit_worker_sessions SET x = 1 WHERE session_id = ?', [Buffer.from('dd', 'hex')]), LockOrderViolation);
});

test('going back to rows already held (named by primary key, or returned by a locking read) is fine; other rows are not', () => {
  const check = new LockOrderCheck();
  check.observe(
    'SELECT 1 FROM orbit_application_resources WHERE application_id = ? FOR UPDATE /* lock: application */; SELECT 1 FROM orbit_queues WHERE queue_id IN (?, ?) FOR UPDATE /* lock: queue */',
    [app, q1, q2],
  );
  check.observe("SELECT task_id FROM orbit_tasks WHERE queue_id = ? AND state = 'WAITING' FOR UPDATE SKIP LOCKED /* lock: task */", [q1]);
  check.locked([[{ task_id: t1 }]]);
  check.observe('SELECT 1 FROM orbit_key_permits WHERE queue_id = ? AND resource_key = ? FOR UPDATE /* lock: permit */', [q1, 'k']);
  check.observe("UPDATE orbit_tasks SET state = 'LEASED', updated_at = ? WHERE task_id IN (?)", ['now', t1]);
  check.observe('UPDATE orbit_application_resources SET a = a + ? WHERE application_id = ?; UPDATE orbit_queues SET a = a + ? WHERE queue_id = ?', [
    1,
    app,
    1,
    q2,
  ]);
  assert.throws(() => check.observe('UPDATE orbit_queues SET a = 1 WHERE queue_id = ?', [Buffer.from('ee', 'hex')]), /queue rows locked after permit rows/);
  assert.throws(
    () => check.observe("UPDATE orbit_tasks SET state = 'X' WHERE queue_id = ?", [q1]),
    /task rows locked after/,
    'rows it cannot name are new rows',
  );
});

test('set-based statements: a UNION of locking reads, a CASE update of queues, permits named as rows', () => {
  const check = new LockOrderCheck();
  check.observe('SELECT 1 FROM orbit_application_resources WHERE application_id = ? FOR UPDATE /* lock: application */', [app]);
  check.observe('SELECT 1 FROM orbit_queues WHERE queue_id IN (?, ?) FOR UPDATE /* lock: queue */', [q1, q2]);
  check.observe(
    '(SELECT task_id FROM orbit_tasks WHERE queue_id = ? LIMIT 2 FOR UPDATE SKIP LOCKED /* lock: task */) UNION ALL (SELECT task_id FROM orbit_tasks WHERE queue_id = ? LIMIT 2 FOR UPDATE SKIP LOCKED /* lock: task */)',
    [q1, q2],
  );
  check.locked([[{ task_id: t1 }]]);
  check.observe(
    'UPDATE orbit_key_permits SET holders = CASE WHEN (queue_id, resource_key) = (?, ?) THEN holders + 1 ELSE holders END WHERE (queue_id, resource_key) IN ((?, ?))',
    [q1, 'k', q1, 'k'],
  );
  // Back to rows held: the queues locked at the start, the task the UNION returned, the permit above.
  check.observe('UPDATE orbit_queues SET a = CASE queue_id WHEN ? THEN a + ? WHEN ? THEN a + ? ELSE a END WHERE queue_id IN (?, ?)', [q1, 1, q2, 2, q1, q2]);
  check.observe("UPDATE orbit_tasks SET state = 'LEASED' WHERE task_id IN (?)", [t1]);
  check.observe('UPDATE orbit_key_permits SET holders = holders - 1 WHERE (queue_id, resource_key) IN ((?, ?))', [q1, 'k']);
  assert.throws(
    () => check.observe('UPDATE orbit_queues SET a = CASE queue_id WHEN ? THEN a END WHERE queue_id IN (?, ?)', [q1, q1, Buffer.from('ee', 'hex')]),
    /queue rows locked after/,
  );
});

test('a locking read that never waits may take a lower level (SKIP LOCKED, NOWAIT)', () => {
  const check = new LockOrderCheck();
  check.observe('SELECT 1 FROM orbit_key_permits WHERE queue_id = ? AND resource_key = ? FOR UPDATE /* lock: permit */', [q1, 'k']);
  check.observe('SELECT task_id FROM orbit_tasks WHERE queue_id = ? FOR UPDATE SKIP LOCKED /* lock: task */', [q1]);
  assert.throws(() => check.observe('SELECT task_id FROM orbit_tasks WHERE queue_id = ? FOR UPDATE /* lock: task */', [q1]), LockOrderViolation);
});

test('every locking read names its level through lockRows(); none, or the wrong one, is a violation', () => {
  const [text] = statementText(sql`SELECT 1 FROM orbit_queues WHERE queue_id = ${q1} ${lockRows('queue')}`);
  assert.match(text, /FOR UPDATE \/\* lock: queue \*\//);
  assert.ok(isLockingRead(text));
  new LockOrderCheck().observe(text, [q1]);
  assert.throws(() => new LockOrderCheck().observe('SELECT 1 FROM orbit_queues WHERE queue_id = ? FOR UPDATE', [q1]), /must end with lockRows/);
  assert.throws(
    () => new LockOrderCheck().observe('SELECT 1 FROM orbit_queues WHERE queue_id = ? FOR UPDATE /* lock: task */', [q1]),
    /declared task, locks queue/,
  );
  assert.throws(
    () => new LockOrderCheck().observe('SELECT 1 FROM orbit_tasks t JOIN orbit_attempts a ON a.task_id = t.task_id FOR UPDATE /* lock: task */'),
    /locks task\+attempt/,
    'one locking read, one level',
  );
  assert.equal(statementText(lockRows('task', 'skip-locked'))[0], 'FOR UPDATE SKIP LOCKED /* lock: task */');
  assert.equal(statementText(lockRows('identity', 'share'))[0], 'LOCK IN SHARE MODE /* lock: identity */');
  assert.throws(() => lockRows('queue', 'share'), /identity rows/);
  assert.ok(!isLockingRead('UPDATE orbit_queues SET a = 1 WHERE queue_id = ?'));
});
