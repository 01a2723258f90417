import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { LOOKUP_VINDEXES, ROUTING_COLUMNS, UNSHARDED_TABLES } from '../../server/store/database/shard-routing.ts';

const root = path.resolve(import.meta.dirname, '../..');
const vschema = JSON.parse(fs.readFileSync(path.join(root, 'deploy/vitess/vschema.json'), 'utf8')) as {
  sharded: boolean;
  vindexes: Record<string, { type: string; params?: Record<string, string>; owner?: string }>;
  tables: Record<string, { type?: string; column_vindexes?: Array<{ column: string; name: string }> }>;
};
const migrationTables = fs
  .readdirSync(path.join(root, 'migrations'))
  .filter((f) => f.endsWith('.sql'))
  .flatMap((f) => [...fs.readFileSync(path.join(root, 'migrations', f), 'utf8').matchAll(/CREATE TABLE (orbit_[a-z_]+)/g)].map((m) => m[1] as string));
const allTables = [...migrationTables, 'orbit_schema_migrations', 'orbit_migration_lock']; // the ledger and the lock are created by the migrator itself

test('every table of the migrations is in the VSchema, per-application tables with application_id as primary vindex', () => {
  assert.equal(vschema.sharded, true);
  assert.ok(migrationTables.length >= 12);
  for (const table of allTables) {
    const entry = vschema.tables[table];
    assert.ok(entry, `${table} missing from deploy/vitess/vschema.json`);
    if (UNSHARDED_TABLES.includes(table)) {
      assert.equal(entry.type, 'reference', table);
      continue;
    }
    const first = entry.column_vindexes?.[0];
    assert.equal(first?.column, 'application_id', table);
    assert.equal(vschema.vindexes[first!.name]?.type, 'xxhash', table);
  }
});

test("the VSchema and shard-routing.ts agree on every table's routing columns and on the lookup vindexes", () => {
  for (const table of migrationTables) {
    assert.deepEqual(
      vschema.tables[table]?.column_vindexes?.map((v) => v.column),
      ROUTING_COLUMNS[table],
      table,
    );
    for (const cv of vschema.tables[table]?.column_vindexes ?? []) assert.ok(vschema.vindexes[cv.name], `${table}.${cv.column}: vindex ${cv.name}`);
  }
  assert.deepEqual(Object.keys(ROUTING_COLUMNS).sort(), [...migrationTables].sort());
  const lookupSql = fs.readFileSync(path.join(root, 'deploy/vitess/lookup-tables.sql'), 'utf8');
  const lookupKeyspace = JSON.parse(fs.readFileSync(path.join(root, 'deploy/vitess/vschema-lookup.json'), 'utf8')) as {
    sharded: boolean;
    tables: Record<string, unknown>;
  };
  for (const [name, { owner, column }] of Object.entries(LOOKUP_VINDEXES)) {
    const vindex = vschema.vindexes[name];
    assert.equal(vindex?.type, 'consistent_lookup_unique', name);
    assert.equal(vindex?.owner, owner, name);
    assert.equal(vindex?.params?.from, column, name);
    assert.equal(vindex?.params?.table, `orbit_lookup.${name}`, name);
    assert.ok(ROUTING_COLUMNS[owner]?.includes(column), name);
    assert.match(lookupSql, new RegExp(`CREATE TABLE ${name} \\(`), name);
    assert.ok(name in lookupKeyspace.tables, name);
  }
});
