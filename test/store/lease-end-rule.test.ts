/**
 * The lease rule written twice - `leaseEndMs` (server/domain/leases.ts) for the paths that decide
 * in the process, `leaseEndSql` (server/store/attempts/lease-end.ts) for the statements that set
 * a lease in database time - evaluated side by side on generated times: MariaDB computes the SQL
 * form, and it must equal the TypeScript form to the millisecond. Seeded, by case count.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { leaseEndMs } from '../../server/domain/leases.ts';
import { leaseEndSql } from '../../server/store/attempts/lease-end.ts';
import { sql } from '../../server/store/database/sql.ts';
import { millisToSql, sqlToMillis } from '../../server/time.ts';

let t: TestDatabase;
before(async () => {
  t = await freshDatabase('lease_rule');
});
after(async () => {
  await assertCountersMatchRecount(t.db);
  await t.drop();
});

test('leaseEndSql in MariaDB equals leaseEndMs, for leases ending before, at and after the deadline', async () => {
  const cases = fc.sample(
    fc.record({
      // Whole milliseconds (DATETIME(6) keeps microseconds; the API shows milliseconds).
      nowMs: fc.integer({ min: Date.UTC(2020, 0, 1), max: Date.UTC(2040, 0, 1) }),
      leaseSeconds: fc.integer({ min: 1, max: 3600 }),
      // The deadline from an hour before to two hours after now, and exactly at now + lease.
      deadlineOffsetMs: fc.oneof(fc.integer({ min: -3_600_000, max: 7_200_000 }), fc.constant(null)),
    }),
    { numRuns: 300, seed: 20261203 },
  );
  for (const c of cases) {
    const deadlineAtMs = c.nowMs + (c.deadlineOffsetMs ?? c.leaseSeconds * 1000);
    const [row] = await t.db.rows<{ lease_end: string }>(
      sql`SELECT ${leaseEndSql(sql`CAST(${millisToSql(c.nowMs)} AS DATETIME(6))`, c.leaseSeconds, sql`CAST(${millisToSql(deadlineAtMs)} AS DATETIME(6))`)} AS lease_end`,
    );
    assert.equal(
      sqlToMillis(String(row?.lease_end)),
      leaseEndMs(c.nowMs, c.leaseSeconds, deadlineAtMs),
      JSON.stringify({ ...c, deadlineAtMs, sql: row?.lease_end }),
    );
  }
});
