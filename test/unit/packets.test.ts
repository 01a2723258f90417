/**
 * Batches split by their encoded size (server/store/database/packets.ts), on generated input:
 * values made of the characters mysql2 escapes (quotes, backslashes, NUL, newlines) and of
 * multi-byte characters, at sizes around the budget. The sizes are checked against what mysql2
 * really sends (`mysql.format`, the same client-side formatting `query` does): every round trip
 * fits, nothing is lost, reordered or duplicated, and a batch that fits goes as one.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import mysql from 'mysql2';
import { sql, type SQL } from '../../server/store/database/sql.ts';
import {
  encodedBytesBound,
  mergeResults,
  PacketLimit,
  PacketTooLarge,
  planRoundTrips,
  rowsStatement,
  valueBytesBound,
  type BatchStatement,
} from '../../server/store/database/packets.ts';

const RUNS = { seed: 0x9ac4e7, numRuns: 300 };

/** What mysql2 sends for a statement text and its parameters, in bytes. */
const sentBytes = (text: string, params: unknown[]) => Buffer.byteLength(mysql.format(text, params as never[]), 'utf8');

/** Strings heavy in what escaping doubles, and in characters of 2 to 4 bytes. */
const tenantString = (maxLength: number) =>
  fc.string({
    unit: fc.constantFrom('"', "'", '\\', '\0', '\n', '\r', '\x1a', '\t', '\b', 'a', 'é', '中', '😀'),
    maxLength,
  });
const value = fc.oneof(
  tenantString(400),
  fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constant(null),
  fc.boolean(),
);

test('a value never takes more than its bound once formatted', () => {
  fc.assert(
    fc.property(value, (v) => {
      assert.ok(sentBytes('?', [v]) <= valueBytesBound(v), `${JSON.stringify(v)}: ${sentBytes('?', [v])} > ${valueBytesBound(v)}`);
    }),
    RUNS,
  );
});

/** A generated batch: plain statements and multi-row inserts, each row tagged with where it came from. */
const batch = fc.array(
  fc.oneof(
    fc.record({ kind: fc.constant('plain' as const), values: fc.array(value, { maxLength: 4 }) }),
    fc.record({ kind: fc.constant('rows' as const), rows: fc.array(fc.array(value, { maxLength: 3 }), { minLength: 1, maxLength: 12 }), union: fc.boolean() }),
  ),
  { minLength: 1, maxLength: 8 },
);

function build(spec: fc.Arbitrary<unknown> extends never ? never : Array<any>): BatchStatement[] {
  return spec.map((s, slot) => {
    if (s.kind === 'plain')
      return sql`UPDATE t${sql.raw(String(slot))} SET v = ${sql.join([sql`${slot}`, ...s.values.map((v: unknown) => sql`${v}`)], sql`, `)}`;
    const rows: SQL[] = s.rows.map((values: unknown[], r: number) =>
      s.union
        ? sql`SELECT ${`row:${slot}:${r}`}${sql.join(
            values.map((v) => sql`, ${v}`),
            sql``,
          )}`
        : sql`(${`row:${slot}:${r}`}${sql.join(
            values.map((v) => sql`, ${v}`),
            sql``,
          )})`,
    );
    return s.union
      ? rowsStatement(sql`INSERT INTO r${sql.raw(String(slot))} `, rows, { separator: sql` UNION ALL ` })
      : rowsStatement(sql`INSERT INTO r${sql.raw(String(slot))} VALUES `, rows);
  });
}

/** The largest single row (or plain statement) of a batch, as formatted: no budget below it can work. */
function largestUnit(statements: BatchStatement[]): number {
  let largest = 0;
  for (const s of statements) {
    const parts = 'rows' in s ? s.rows.map((row) => sql`${s.head}${row}${s.tail}`) : [s];
    for (const part of parts) {
      largest = Math.max(largest, encodedBytesBound(part.text, [...part.params]));
    }
  }
  return largest;
}

test('every round trip fits the budget; every statement and row is sent once, in order', () => {
  fc.assert(
    fc.property(batch, fc.integer({ min: 0, max: 100 }), (spec, slack) => {
      const statements = build(spec);
      // Budgets from the largest single unit (the smallest that can work) to a little above.
      const budget = largestUnit(statements) + slack * 40;
      const trips = planRoundTrips(statements, budget);
      const rowsSeen: string[] = [];
      const slots: number[] = [];
      for (const trip of trips) {
        assert.ok(sentBytes(trip.text, trip.params) <= budget, `a round trip of ${sentBytes(trip.text, trip.params)} bytes > ${budget}`);
        slots.push(...trip.slots);
        // Row tags, in the order they are sent.
        for (const tag of trip.params.filter((p): p is string => typeof p === 'string' && p.startsWith('row:'))) rowsSeen.push(tag);
      }
      const expectedRows = spec.flatMap((s, slot) => (s.kind === 'rows' ? s.rows.map((_: unknown, r: number) => `row:${slot}:${r}`) : []));
      assert.deepEqual(
        rowsSeen.filter((tag) => expectedRows.includes(tag)),
        expectedRows,
        'each row once, in order',
      );
      // Slots: every statement, in order; a split one on consecutive pieces.
      assert.deepEqual(
        [...new Set(slots)],
        spec.map((_, i) => i),
      );
      for (let i = 1; i < slots.length; i++) assert.ok((slots[i] as number) >= (slots[i - 1] as number));
    }),
    RUNS,
  );
});

test('a batch that fits goes in one round trip, exactly as the statements joined', () => {
  fc.assert(
    fc.property(batch, (spec) => {
      const statements = build(spec);
      const joined = sql.join(
        statements.map((s) => ('rows' in s ? s.toSql() : s)),
        sql.raw(';\n'),
      );
      const trips = planRoundTrips(statements, 64 * 1024 * 1024);
      assert.equal(trips.length, 1);
      assert.equal(trips[0]?.text, joined.text);
      assert.deepEqual(trips[0]?.params, joined.params);
    }),
    RUNS,
  );
});

test('the room a caller keeps (START TRANSACTION, COMMIT) is kept in every round trip', () => {
  const rows = Array.from({ length: 40 }, (_, i) => sql`(${i}, ${'"'.repeat(100)})`);
  const extra = 500;
  const trips = planRoundTrips([rowsStatement(sql`INSERT INTO t VALUES `, rows)], 3000, extra);
  assert.ok(trips.length > 1);
  for (const trip of trips) assert.ok(sentBytes(trip.text, trip.params) + extra <= 3000);
});

test('one statement (or one row) larger than the budget is refused before it is sent', () => {
  const big = '"'.repeat(2000);
  assert.throws(() => planRoundTrips([sql`SELECT ${big}`], 1000), PacketTooLarge);
  assert.throws(() => planRoundTrips([rowsStatement(sql`INSERT INTO t VALUES `, [sql`(${1})`, sql`(${big})`])], 1000), PacketTooLarge);
});

test('results of a split statement merge into one header; the others keep their place', () => {
  const merged = mergeResults(
    [0, 1, 1, 1, 2],
    [[{ a: 1 }], { affectedRows: 2, insertId: 7 }, { affectedRows: 3, insertId: 9 }, { affectedRows: 1 }, { affectedRows: 4 }],
    3,
  ) as any[];
  assert.deepEqual(merged[0], [{ a: 1 }]);
  assert.equal(merged[1].affectedRows, 6);
  assert.equal(merged[1].insertId, 7);
  assert.equal(merged[2].affectedRows, 4);
});

test('the packet limit: assumed small until the server says; the smallest value seen wins', () => {
  const limit = new PacketLimit();
  assert.equal(limit.maxPacketBytes, 1024 * 1024);
  limit.learn(16 * 1024 * 1024);
  assert.equal(limit.maxPacketBytes, 16 * 1024 * 1024);
  limit.learn(64 * 1024 * 1024);
  assert.equal(limit.maxPacketBytes, 16 * 1024 * 1024);
  limit.learn(Number.NaN);
  assert.equal(limit.maxPacketBytes, 16 * 1024 * 1024);
  assert.ok(limit.budgetBytes < limit.maxPacketBytes);
});
