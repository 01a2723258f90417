import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from '../../server/store/database/sql.ts';
import { statementText } from '../../server/store/database/database.ts';

test('an sql template carries each value where it appears; text plus parameters passes through', () => {
  const ids = [Buffer.from('aa', 'hex'), Buffer.from('bb', 'hex')];
  assert.deepEqual(
    statementText(
      sql`SELECT a FROM orbit_tasks WHERE task_id IN (${sql.join(
        ids.map((id) => sql`${id}`),
        sql`, `,
      )}) AND state = ${'WAITING'} LIMIT ${5}`,
    ),
    ['SELECT a FROM orbit_tasks WHERE task_id IN (?, ?) AND state = ? LIMIT ?', [...ids, 'WAITING', 5]],
  );
  assert.deepEqual(statementText(sql.join([sql`UPDATE orbit_queues SET a = ${1}`, sql`UPDATE orbit_tasks SET b = ${2}`], sql`;\n`)), [
    'UPDATE orbit_queues SET a = ?;\nUPDATE orbit_tasks SET b = ?',
    [1, 2],
  ]);
  assert.deepEqual(statementText('SELECT ?', [1]), ['SELECT ?', [1]]);
  assert.throws(() => statementText(sql`SELECT ${1}`, [2]), /carries its own parameters/);
});
