/**
 * The store's `sql` template (server/store/database/sql.ts) against drizzle-orm's, which it
 * replaced for speed and whose API it keeps: on generated statements - nested templates, joins
 * with and without separators, raw text, arrays, values of every kind the store binds - both give
 * the same text and the same parameters in the same order.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { sql as drizzleSql, type SQL as DrizzleSQL } from 'drizzle-orm';
import { MySqlDialect } from 'drizzle-orm/mysql-core';
import { sql, type SQL } from '../../server/store/database/sql.ts';

const dialect = new MySqlDialect();

type Node =
  | { kind: 'value'; value: unknown }
  | { kind: 'raw'; text: string }
  | { kind: 'array'; items: Node[] }
  | { kind: 'template'; strings: string[]; parts: Node[] }
  | { kind: 'join'; parts: Node[]; separator: Node | null };

const text = fc.string({ unit: fc.constantFrom('a', 'b', ' ', ',', '(', ')', '?', "'", '\n', 'é'), maxLength: 6 });
const value = fc.oneof(
  fc.string({ maxLength: 5 }),
  fc.integer(),
  fc.constant(null),
  fc.boolean(),
  fc.uint8Array({ maxLength: 4 }).map((a) => Buffer.from(a)),
);

const { node } = fc.letrec<{ node: Node }>((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    value.map((v): Node => ({ kind: 'value', value: v })),
    text.map((t): Node => ({ kind: 'raw', text: t })),
    fc
      .array(
        value.map((v): Node => ({ kind: 'value', value: v })),
        { minLength: 1, maxLength: 3 },
      )
      .map((items): Node => ({ kind: 'array', items })),
    fc
      .array(tie('node'), { maxLength: 3 })
      .chain((parts) =>
        fc.array(text, { minLength: parts.length + 1, maxLength: parts.length + 1 }).map((strings): Node => ({ kind: 'template', strings, parts })),
      ),
    fc.record({ parts: fc.array(tie('node'), { maxLength: 3 }), separator: fc.option(tie('node'), { nil: null }) }).map((r): Node => ({ kind: 'join', ...r })),
  ),
}));

const strings = (list: string[]) => Object.assign([...list], { raw: [...list] }) as unknown as TemplateStringsArray;

/** The same statement with either template: `asSql` for parts that must be statements (joins). */
function buildOurs(n: Node): unknown {
  switch (n.kind) {
    case 'value':
      return n.value;
    case 'raw':
      return sql.raw(n.text);
    case 'array':
      return n.items.map(buildOurs);
    case 'template':
      return sql(strings(n.strings), ...n.parts.map(buildOurs));
    case 'join':
      return sql.join(
        n.parts.map((p) => asOurs(p)),
        n.separator === null ? undefined : asOurs(n.separator),
      );
  }
}
const asOurs = (n: Node): SQL => {
  const built = buildOurs(n);
  return built instanceof Object && 'text' in (built as object) ? (built as SQL) : sql`${built}`;
};

function buildDrizzle(n: Node): unknown {
  switch (n.kind) {
    case 'value':
      return n.value;
    case 'raw':
      return drizzleSql.raw(n.text);
    case 'array':
      return n.items.map(buildDrizzle);
    case 'template':
      return drizzleSql(strings(n.strings), ...n.parts.map(buildDrizzle));
    case 'join':
      return drizzleSql.join(
        n.parts.map((p) => asDrizzle(p)),
        n.separator === null ? undefined : asDrizzle(n.separator),
      );
  }
}
const asDrizzle = (n: Node): DrizzleSQL => {
  const built = buildDrizzle(n);
  return built instanceof Object && 'queryChunks' in (built as object) ? (built as DrizzleSQL) : drizzleSql`${built}`;
};

test("generated statements: the same text and parameters as drizzle-orm's sql", () => {
  fc.assert(
    fc.property(node, (n) => {
      const ours = asOurs(n);
      const theirs = dialect.sqlToQuery(asDrizzle(n));
      assert.equal(ours.text, theirs.sql);
      assert.deepEqual(ours.params, theirs.params);
    }),
    { seed: 0x5a17e, numRuns: 1000 },
  );
});

test('values are bound where they stand, never written into the text', () => {
  const id = Buffer.from('00ff', 'hex');
  const statement = sql`SELECT * FROM orbit_tasks WHERE task_id = ${id} AND state IN (${sql.join([sql`${'WAITING'}`, sql`${"'; DROP TABLE x; --"}`], sql`, `)}) ${sql.raw('LIMIT 1')}`;
  assert.equal(statement.text, 'SELECT * FROM orbit_tasks WHERE task_id = ? AND state IN (?, ?) LIMIT 1');
  assert.deepEqual(statement.params, [id, 'WAITING', "'; DROP TABLE x; --"]);
});
