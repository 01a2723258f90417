/**
 * The database layer's two ways of sending a multi-statement round trip (server/store/database/database.ts):
 * as one command (a single server) and as commands that never put a write after another
 * statement of the transaction (`singleStatements`, what Orbit does on a Galera cluster,
 * single-statements.ts). Generated sequences of statements - writes, plain and locking reads,
 * `SELECT … INTO` a variable and a read of it - run in a transaction both ways on twin tables give
 * the same results, statement by statement, and leave the same rows; a failing statement stops the
 * rest and rolls back in both; and the split form sends one command per write.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { createDatabase, type Database } from '../../server/store/database/database.ts';
import { sql, type SQL } from '../../server/store/database/sql.ts';

let t: TestDatabase;
/** Both ways, without the lock-order check: the generated statements lock rows of tables of their own. */
let whole: Database;
let split: Database;
let roundTrips = 0;
before(async () => {
  t = await freshDatabase('single_statements');
  whole = createDatabase({ url: t.url, connectionLimit: 4, timeoutMs: 30_000, singleStatements: false });
  split = createDatabase({
    url: t.url,
    connectionLimit: 4,
    timeoutMs: 30_000,
    singleStatements: true,
    observer: { roundTrip: () => void (roundTrips += 1), transactionHeld: () => {} },
  });
  for (const table of ['twin_a', 'twin_b']) await t.db.exec(`CREATE TABLE ${table} (id INT NOT NULL PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB`);
});
after(async () => {
  await split.close();
  await whole.close();
  await assertCountersMatchRecount(t.db);
  await t.drop();
});

type Step = { kind: 'update' | 'insert' | 'read' | 'lock' | 'into' | 'var'; id: number; n: number };

function statement(table: string, step: Step): SQL {
  const tbl = sql.raw(table);
  switch (step.kind) {
    case 'update':
      return sql`UPDATE ${tbl} SET n = n + ${step.n} WHERE id = ${step.id}`;
    case 'insert':
      return sql`INSERT INTO ${tbl} (id, n) VALUES (${100 + step.id * 10 + step.n}, ${step.n}) ON DUPLICATE KEY UPDATE n = n + 1`;
    case 'read':
      return sql`SELECT id, n FROM ${tbl} WHERE id <= ${step.id} ORDER BY id`;
    case 'lock':
      return sql`SELECT id, n FROM ${tbl} WHERE id = ${step.id} FOR UPDATE`;
    case 'into':
      return sql`SELECT COALESCE(SUM(n), 0) INTO @twin_sum FROM ${tbl} WHERE id <= ${step.id}`;
    case 'var':
      return sql`SELECT @twin_sum + ${step.n} AS total`;
  }
}

/** What a result says, without the parts that differ by connection (the header's info text, insert ids). */
function shape(result: unknown): unknown {
  if (Array.isArray(result)) return result.map((row) => ({ ...row }));
  const header = result as { affectedRows: number; changedRows?: number };
  return { affectedRows: header.affectedRows };
}

async function reset(db: Database, table: string): Promise<void> {
  await db.exec(`DELETE FROM ${table}`);
  await db.exec(`INSERT INTO ${table} (id, n) VALUES (1, 10), (2, 20), (3, 30)`);
}

const steps = fc.array(
  fc.record({
    kind: fc.constantFrom<Step['kind']>('update', 'insert', 'read', 'lock', 'into', 'var'),
    id: fc.integer({ min: 1, max: 3 }),
    n: fc.integer({ min: 1, max: 9 }),
  }),
  { minLength: 1, maxLength: 12 },
);

test('generated transactions: the same results and rows sent as one command and split', async () => {
  await fc.assert(
    fc.asyncProperty(steps, fc.boolean(), async (sequence, fail) => {
      const run = async (db: Database, table: string) => {
        await reset(db, table);
        const list = sequence.map((step) => statement(table, step));
        // A failing statement at the end: nothing of the transaction may stay.
        if (fail) list.push(sql`INSERT INTO ${sql.raw(table)} (id, n) VALUES (1, 0)`);
        const outcome = await db
          .oneShot(list)
          .then((results) => ({ results: results.map(shape) }))
          .catch((error: { errno?: number }) => ({ errno: error.errno }));
        return { outcome, rows: await db.rows(`SELECT id, n FROM ${table} ORDER BY id`) };
      };
      const one = await run(whole, 'twin_a');
      const apart = await run(split, 'twin_b');
      assert.deepEqual(apart, one);
    }),
    { numRuns: 60, seed: 22 },
  );
});

test('split, a transaction sends one command per write, reads riding with the write before them', async () => {
  await reset(split, 'twin_b');
  roundTrips = 0;
  await split.oneShot([
    sql`SELECT n FROM twin_b WHERE id = 1 FOR UPDATE`,
    sql`UPDATE twin_b SET n = n + 1 WHERE id = 1`,
    sql`SELECT n FROM twin_b WHERE id = 1`,
    sql`UPDATE twin_b SET n = n + 1 WHERE id = 2`,
  ]);
  // START TRANSACTION + the locking read, the first UPDATE + the read, the second UPDATE, COMMIT.
  assert.equal(roundTrips, 4);
});
