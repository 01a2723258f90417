import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ROUTABLE_KEY_COLUMNS,
  ROUTING_COLUMNS,
  SCATTER_EXCEPTIONS,
  ShardRoutingViolation,
  assertRoutable,
  routeOf,
} from '../../server/store/database/shard-routing.ts';

test('application_id and the lookup-vindex columns are the routable key columns', () => {
  for (const c of ['application_id', 'task_id', 'attempt_id', 'queue_id', 'session_id', 'credential_id', 'namespace_id'])
    assert.ok(ROUTABLE_KEY_COLUMNS.includes(c), c);
  for (const columns of Object.values(ROUTING_COLUMNS)) assert.equal(columns[0], 'application_id');
});

test('statements that compare a routing column with a value route', () => {
  const routable = [
    'SELECT * FROM orbit_application_resources WHERE application_id = ? FOR UPDATE',
    'UPDATE orbit_queues SET unfinished_tasks = unfinished_tasks + ? WHERE queue_id = ?',
    'SELECT task_id FROM orbit_tasks WHERE task_id IN (?, ?)',
    "UPDATE orbit_tasks SET state = 'RUNNING' WHERE (task_id, current_attempt_id) IN ((?, ?), (?, ?)) AND state = 'LEASED'",
    'SELECT c.credential_id FROM orbit_credentials c JOIN orbit_namespaces n ON n.namespace_id = c.namespace_id WHERE c.credential_id = ? LOCK IN SHARE MODE',
    'SELECT t.task_id FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id WHERE t.task_id = ? AND t.namespace_id = ?',
    'SELECT 1 FROM orbit_events WHERE namespace_id = ? AND sequence > ?',
    'SELECT application_id FROM orbit_applications WHERE name = ?',
    'SELECT queue_id FROM orbit_key_permits WHERE (queue_id, resource_key) IN ((?, ?))',
    'UPDATE orbit_application_resources SET window_starts = 1 WHERE application_id = @app',
    'INSERT INTO orbit_tasks (task_id, application_id, queue_id) VALUES (?, ?, ?)',
    'INSERT IGNORE INTO orbit_key_permits (queue_id, resource_key, application_id, holders) VALUES (?, ?, ?, 0)',
    'SELECT NOW(6) AS now',
    'SET @now = NOW(6)',
    'SELECT version FROM orbit_schema_migrations ORDER BY version',
  ];
  for (const sql of routable) assert.equal(routeOf(sql).routable, true, sql);
  assert.deepEqual(routeOf('SELECT 1 FROM orbit_attempts WHERE session_id = ? AND state = ?').by, ['orbit_attempts.session_id']);
});

test('statements that would scatter do not route', () => {
  const scatter = [
    "SELECT 1 FROM orbit_tasks WHERE state = 'WAITING'",
    'SELECT COUNT(*) FROM orbit_attempts',
    'UPDATE orbit_application_resources SET application_id = ? WHERE revision = 1', // a SET value is not a condition
    "SELECT 1 FROM orbit_attempts a JOIN orbit_queues q ON q.queue_id = a.queue_id WHERE q.name = 'x'", // name routes orbit_applications only
    'SELECT 1 FROM orbit_queues q WHERE q.session_id = ?', // not a routing column of orbit_queues
    'SELECT 1 FROM orbit_tasks WHERE queue_id IN (SELECT queue_id FROM orbit_queues)',
    'INSERT INTO orbit_tasks (task_id, queue_id) VALUES (?, ?)',
    'DELETE FROM orbit_key_permits',
    'SELECT 1 FROM orbit_tasks t WHERE t.task_id = t.current_attempt_id',
  ];
  for (const sql of scatter) assert.equal(routeOf(sql).routable, false, sql);
});

test('a named scatter marker is an exception; an unknown name is not', () => {
  assert.ok(Object.keys(SCATTER_EXCEPTIONS).length > 0);
  for (const [name, reason] of Object.entries(SCATTER_EXCEPTIONS)) {
    assert.ok(reason.length > 20, name);
    const route = routeOf(`SELECT /* scatter: ${name} */ application_id FROM orbit_tasks WHERE state = 'WAITING'`);
    assert.equal(route.routable, true);
    assert.equal(route.scatter, name);
  }
  const unknown = routeOf("SELECT /* scatter: whatever */ 1 FROM orbit_tasks WHERE state = 'WAITING'");
  assert.equal(unknown.routable, false);
  assert.match(unknown.problem ?? '', /unknown scatter exception "whatever"/);
});

test('assertRoutable checks every statement of a multi-statement text; statements written in test files are exempt', () => {
  assert.doesNotThrow(() => assertRoutable('SELECT 1 FROM orbit_tasks WHERE task_id = ?; UPDATE orbit_queues SET paused = 1 WHERE queue_id = ?'));
  // Sent from this test file: a test inspection, exempt (a store module sending it would get a ShardRoutingViolation).
  assert.doesNotThrow(() => assertRoutable("SELECT 1 FROM orbit_tasks WHERE task_id = ?; SELECT 1 FROM orbit_attempts WHERE state = 'RUNNING'"));
  assert.ok(new ShardRoutingViolation('x') instanceof Error);
});
