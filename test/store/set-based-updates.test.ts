/**
 * `updateEachRow` (server/store/database/set-based.ts) - one UPDATE for many rows, each with
 * its own values - is the set-based form the hot paths use for queue counters, start windows,
 * sessions, attempts and keyed permits. Generated cases hold it to the one-row form applied row by
 * row (including a later assignment that reads a column an earlier one changed, as the start
 * window's do), for single and composite keys; EXPLAIN holds it to the primary key.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { updateEachRow, type RowChange } from '../../server/store/database/set-based.ts';
import { sql } from '../../server/store/database/sql.ts';

let t: TestDatabase;
before(async () => {
  t = await freshDatabase('set_based');
  for (const table of ['each_many', 'each_one']) {
    await t.db.exec(`CREATE TABLE ${table} (k BINARY(2) NOT NULL, name VARCHAR(8) NOT NULL, a INT NOT NULL, b INT NOT NULL, PRIMARY KEY (k, name))`);
  }
});
after(async () => {
  await assertCountersMatchRecount(t.db);
  await t.drop();
});

const keys = ['0001', '0002', '0003', '0004', '0005'];
const names = ['x', 'y', 'z'];

interface Case {
  composite: boolean;
  changes: Array<{ k: string; name: string; da: number; mode: 'plus' | 'reads-a' | 'constant' }>;
}

const cases: fc.Arbitrary<Case> = fc.record({
  composite: fc.boolean(),
  changes: fc.uniqueArray(
    fc.record({
      k: fc.constantFrom(...keys),
      name: fc.constantFrom(...names),
      da: fc.integer({ min: -5, max: 5 }),
      mode: fc.constantFrom<'plus' | 'reads-a' | 'constant'>('plus', 'reads-a', 'constant'),
    }),
    { minLength: 1, maxLength: 8, selector: (c) => `${c.k}/${c.name}` },
  ),
});

/** The value of b: a constant, b plus a delta, or b plus the NEW a (assigned just before it). */
const bValue = (c: Case['changes'][number]) => (c.mode === 'constant' ? sql`${c.da * 10}` : c.mode === 'plus' ? sql`b + ${c.da}` : sql`b + a`);

test('one statement for many rows writes what the one-row form writes row by row (generated, single and composite keys)', async () => {
  await fc.assert(
    fc.asyncProperty(cases, async (c) => {
      for (const table of ['each_many', 'each_one']) {
        await t.db.exec(`DELETE FROM ${table}`);
        await t.db.exec(
          `INSERT INTO ${table} (k, name, a, b) VALUES ${keys.flatMap((k, i) => names.map((n, j) => `(UNHEX('${k}'), '${n}', ${100 + i}, ${10 * j})`)).join(', ')}`,
        );
      }
      // With a single key, one name only: rows differ by k.
      const changes = c.composite ? c.changes : [...new Map(c.changes.map((x) => [x.k, { ...x, name: 'x' }])).values()];
      const rows: RowChange[] = changes
        .sort((x, y) => x.k.localeCompare(y.k) || x.name.localeCompare(y.name))
        .map((x) => ({ key: c.composite ? [Buffer.from(x.k, 'hex'), x.name] : [Buffer.from(x.k, 'hex')], values: [sql`a + ${x.da}`, bValue(x)] }));
      const key = c.composite ? ['k', 'name'] : ['k'];
      const extra = c.composite ? sql`` : sql` AND name = 'x'`;
      await t.db.exec(updateEachRow({ table: 'each_many', key, columns: ['a', 'b'], rows, extra }));
      for (const row of rows) await t.db.exec(updateEachRow({ table: 'each_one', key, columns: ['a', 'b'], rows: [row], extra }));
      const [many, one] = await Promise.all(
        ['each_many', 'each_one'].map((table) =>
          t.db.rows<{ k: string; name: string; a: number; b: number }>(`SELECT HEX(k) AS k, name, a, b FROM ${table} ORDER BY k, name`),
        ),
      );
      assert.deepEqual(many, one);
    }),
    { numRuns: 60, seed: 1717 },
  );
});

test('a statement for several queues and several permits looks at those rows only, by primary key', async () => {
  // Many queue and permit rows, so that a scan would show in the plan.
  await t.db.exec(`INSERT INTO orbit_queues (queue_id, application_id, namespace_id, name, created_at, updated_at)
    SELECT UNHEX(LPAD(HEX(seq), 32, '0')), UNHEX(REPEAT('1', 32)), UNHEX(REPEAT('2', 32)), CONCAT('q', seq), NOW(6), NOW(6) FROM seq_1_to_300`);
  await t.db.exec(`INSERT INTO orbit_key_permits (queue_id, resource_key, application_id, holders, updated_at)
    SELECT UNHEX(LPAD(HEX(seq DIV 10 + 1), 32, '0')), CONCAT('key-', seq MOD 10), UNHEX(REPEAT('1', 32)), 0, NOW(6) FROM seq_0_to_299`);
  await t.db.exec('ANALYZE TABLE orbit_queues, orbit_key_permits');
  const id = (n: number) => Buffer.from(n.toString(16).padStart(32, '0'), 'hex');
  try {
    const queues = updateEachRow({
      table: 'orbit_queues',
      key: ['queue_id'],
      columns: ['active_attempts'],
      rows: [3, 7, 9].map((n) => ({ key: [id(n)], values: [sql`active_attempts + ${n}`] })),
    });
    const permits = updateEachRow({
      table: 'orbit_key_permits',
      key: ['queue_id', 'resource_key'],
      columns: ['holders'],
      rows: [
        [2, 'key-1'],
        [2, 'key-4'],
        [5, 'key-3'],
      ].map(([q, k]) => ({ key: [id(q as number), k], values: [sql`holders + 1`] })),
    });
    for (const [statement, n] of [
      [queues, 3],
      [permits, 3],
    ] as const) {
      const plan = await t.db.rows<{ key: string; rows: number }>(sql`EXPLAIN ${statement}`);
      assert.equal(String(plan[0]?.key), 'PRIMARY', JSON.stringify(plan));
      assert.ok(Number(plan[0]?.rows) <= n, JSON.stringify(plan));
    }
    await t.db.exec(queues);
    await t.db.exec(permits);
    const changed = await t.db.rows<{ n: string }>(
      `SELECT (SELECT SUM(active_attempts) FROM orbit_queues) + (SELECT SUM(holders) FROM orbit_key_permits) * 1000 AS n`,
    );
    assert.equal(Number(changed[0]?.n), 3 + 7 + 9 + 3000);
  } finally {
    // Rows of no real application: removed before the recount.
    await t.db.exec('DELETE FROM orbit_key_permits');
    await t.db.exec('DELETE FROM orbit_queues');
  }
});
