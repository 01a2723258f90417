/**
 * What a Galera cluster needs of the schema and the SQL (docs/scale-out.md#galera-cluster),
 * checked on the text: every table Orbit creates - the migrations and the two tables the migrator
 * creates itself - is InnoDB (Galera replicates InnoDB only) and has a primary key (rows without
 * one replicate badly, and certification keys are built from it); and no statement anywhere
 * under server/ or migrations/ is one Galera does not replicate or that would not hold across
 * nodes: `LOCK TABLES`, temporary tables, `GET_LOCK` (a node-local lock; only the migrator takes
 * one, beside its replicated lock row, for older builds), a storage engine other than InnoDB.
 * The cluster test checks the same of the live schema on a node.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LEDGER_DDL, LOCK_DDL, readMigrationFiles } from '../../server/store/database/migrate.ts';
import { splitStatements } from '../../server/store/database/lock-order.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) sourceFiles(full, out);
    else if (/\.(ts|sql)$/.test(entry.name)) out.push(full);
  }
  return out;
}

/** The CREATE TABLE statements Orbit runs, with where they come from. */
function createTables(): Array<{ from: string; statement: string }> {
  const out = [
    { from: 'migrate.ts LEDGER_DDL', statement: LEDGER_DDL },
    { from: 'migrate.ts LOCK_DDL', statement: LOCK_DDL },
  ];
  for (const file of readMigrationFiles()) {
    const text = file.sql.replace(/^\s*--.*$/gm, '');
    for (const statement of splitStatements(text)) if (/^\s*CREATE\s+TABLE/i.test(statement)) out.push({ from: `migration ${file.version}`, statement });
  }
  return out;
}

test('every table Orbit creates is InnoDB and has a primary key', () => {
  const tables = createTables();
  assert.ok(tables.length >= 15, `found ${tables.length} CREATE TABLE statements`);
  for (const { from, statement } of tables) {
    const name = /CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?`?(\w+)`?/i.exec(statement)?.[1];
    assert.match(statement, /\bPRIMARY\s+KEY\s*\(/i, `${name} (${from}) has no primary key`);
    assert.match(statement, /\)\s*ENGINE\s*=\s*InnoDB\b/i, `${name} (${from}) is not InnoDB`);
  }
});

test('no statement Galera does not replicate, or a lock that holds on one node only', () => {
  const offenders: string[] = [];
  for (const file of [...sourceFiles(join(ROOT, 'server')), ...sourceFiles(join(ROOT, 'migrations'))]) {
    const where = relative(ROOT, file);
    const text = readFileSync(file, 'utf8');
    for (const [pattern, what] of [
      [/\bLOCK\s+TABLES?\b/i, 'LOCK TABLES'],
      [/\bCREATE\s+TEMPORARY\b/i, 'a temporary table'],
      [/\bENGINE\s*=\s*(?!InnoDB\b)\w+/i, 'a storage engine other than InnoDB'],
      [/\bGET_LOCK\s*\(/i, 'GET_LOCK'],
    ] as const) {
      const lines = text.split('\n').filter((line) => pattern.test(line) && !/^\s*(\*|\/\/|--)/.test(line));
      // The migrator's named lock, taken beside its replicated lock row for older builds.
      if (what === 'GET_LOCK' && where === join('server', 'store', 'database', 'migrate.ts') && lines.length === 1) continue;
      for (const line of lines) offenders.push(`${where}: ${what}: ${line.trim()}`);
    }
  }
  assert.deepEqual(offenders, []);
});
