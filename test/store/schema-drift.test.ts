/**
 * The migrations are the schema; `server/store/database/schema.ts` is its drizzle mirror. This test
 * migrates a fresh database and compares the two through information_schema: table set, every
 * column (order, SQL type incl. character set, nullability, default, auto-increment), primary
 * keys and indexes (columns in order, direction, uniqueness). It also checks the storage rules
 * of docs/storage.md: InnoDB + utf8mb4_bin, a Chinese COMMENT on every table and column,
 * `application_id` on every table, BINARY(16) ids, and no foreign keys.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Column, SQL, StringChunk, is } from 'drizzle-orm';
import { getTableConfig, type MySqlColumn, type MySqlTable } from 'drizzle-orm/mysql-core';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { allTables } from '../../server/store/database/schema.ts';

interface DbTable {
  TABLE_NAME: string;
  ENGINE: string;
  TABLE_COLLATION: string;
  TABLE_COMMENT: string;
}
interface DbColumn {
  TABLE_NAME: string;
  COLUMN_NAME: string;
  ORDINAL_POSITION: number;
  COLUMN_TYPE: string;
  IS_NULLABLE: 'YES' | 'NO';
  COLUMN_DEFAULT: string | null;
  EXTRA: string;
  COLLATION_NAME: string | null;
  COLUMN_COMMENT: string;
}
interface DbIndexColumn {
  TABLE_NAME: string;
  INDEX_NAME: string;
  NON_UNIQUE: number | string;
  SEQ_IN_INDEX: number;
  COLUMN_NAME: string;
  COLLATION: string | null;
  SUB_PART: number | null;
}

/** A table's keys, rendered comparably: `name` → `unique|index (col, col desc, …)`. */
type IndexMap = Map<string, string>;

const CJK = /\p{Script=Han}/u;

/**
 * `*_id` columns that are not Orbit identifiers: `node_id` is a free-form worker node name
 * supplied in the `hello` frame (VARCHAR(128)). Everything else named `*_id` — including
 * `request_id` — is a 16-byte id.
 */
const NON_BINARY_ID_COLUMNS = new Set(['orbit_worker_sessions.node_id']);

// ---------------------------------------------------------------------------------------------
// Normalisation
// ---------------------------------------------------------------------------------------------

/** The text of a drizzle SQL fragment: string chunks verbatim, columns by name. */
function sqlText(fragment: SQL): string {
  return fragment.queryChunks
    .map((chunk) => {
      if (is(chunk, StringChunk)) return chunk.value.join('');
      if (is(chunk, Column)) return chunk.name;
      if (is(chunk, SQL)) return sqlText(chunk);
      return '';
    })
    .join('');
}

/**
 * The database's column type as drizzle spells it: integer display widths dropped (MariaDB
 * still prints them; MySQL 8 does not) except `tinyint(1)`, and a character set that differs
 * from the table's appended.
 */
function dbColumnType(column: DbColumn, tableCollation: string): string {
  let type = column.COLUMN_TYPE.toLowerCase().trim();
  type = type.replace(/^(tinyint|smallint|mediumint|int|bigint)\((\d+)\)/, (whole, base: string, width: string) =>
    base === 'tinyint' && width === '1' ? whole : base,
  );
  if (column.COLLATION_NAME !== null && column.COLLATION_NAME !== tableCollation) {
    const charset = column.COLLATION_NAME.split('_')[0];
    type += ` character set ${charset} collate ${column.COLLATION_NAME}`;
  }
  return type.replace(/\s+/g, ' ');
}

function drizzleColumnType(column: MySqlColumn): string {
  const type = column.getSQLType().toLowerCase().replace(/\s+/g, ' ').trim();
  // drizzle's MySQL boolean is TINYINT(1).
  return type === 'boolean' ? 'tinyint(1)' : type;
}

/** Hex `x'…'` / `0x…` literals → the bytes as a latin1 string, so both sides compare as values. */
function hexLiteral(text: string): string | null {
  const match = /^(?:x'([0-9a-f]*)'|0x([0-9a-f]+))$/i.exec(text.trim());
  if (!match) return null;
  return Buffer.from(match[1] ?? match[2] ?? '', 'hex').toString('latin1');
}

/**
 * COLUMN_DEFAULT → the default value as text, or null for "no default / DEFAULT NULL".
 * MariaDB quotes string literals (`''`, `'\0\0…'`) and prints `NULL` for DEFAULT NULL; MySQL 8
 * prints strings bare and binary defaults as `0x…`.
 */
function dbDefault(column: DbColumn): string | null {
  const raw = column.COLUMN_DEFAULT;
  if (raw === null || raw === 'NULL') return null;
  const quoted = /^'(.*)'$/s.exec(raw);
  if (quoted) {
    return (quoted[1] as string).replace(/''|\\(.)/gs, (all, escaped: string | undefined) => {
      if (all === "''") return "'";
      switch (escaped) {
        case '0':
          return '\0';
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case 'Z':
          return '\x1a';
        default:
          return escaped ?? '';
      }
    });
  }
  return hexLiteral(raw) ?? raw;
}

function drizzleDefault(column: MySqlColumn): string | null {
  const value = column.default;
  if (value === undefined || value === null) return null;
  if (is(value, SQL)) {
    const text = sqlText(value);
    return hexLiteral(text) ?? text;
  }
  if (typeof value === 'boolean') return value ? '1' : '0';
  return String(value);
}

const show = (value: unknown) => (value === null ? 'none' : JSON.stringify(value));

function drizzleIndexColumn(column: unknown): string {
  if (is(column, Column)) return column.name;
  if (is(column, SQL)) {
    const named = column.queryChunks.find((chunk) => is(chunk, Column)) as Column | undefined;
    const text = sqlText(column).trim();
    if (!named) return text;
    return /\bdesc\s*$/i.test(text) ? `${named.name} desc` : named.name;
  }
  return String(column);
}

function drizzleKeys(table: MySqlTable): { primary: string[]; indexes: IndexMap } {
  const config = getTableConfig(table);
  const primary = config.columns.filter((c) => c.primary).map((c) => c.name);
  for (const pk of config.primaryKeys) primary.push(...pk.columns.map((c) => c.name));
  const indexes: IndexMap = new Map();
  for (const idx of config.indexes) {
    indexes.set(idx.config.name, `${idx.config.unique ? 'unique' : 'index'} (${idx.config.columns.map(drizzleIndexColumn).join(', ')})`);
  }
  for (const uc of config.uniqueConstraints) indexes.set(uc.getName() ?? '(unnamed unique)', `unique (${uc.columns.map((c) => c.name).join(', ')})`);
  for (const column of config.columns) {
    if (column.isUnique) indexes.set(column.uniqueName ?? `${column.name}_unique`, `unique (${column.name})`);
  }
  return { primary, indexes };
}

function dbKeys(rows: DbIndexColumn[]): { primary: string[]; indexes: IndexMap } {
  const byName = new Map<string, DbIndexColumn[]>();
  for (const row of rows) byName.set(row.INDEX_NAME, [...(byName.get(row.INDEX_NAME) ?? []), row]);
  let primary: string[] = [];
  const indexes: IndexMap = new Map();
  for (const [name, parts] of byName) {
    parts.sort((a, b) => Number(a.SEQ_IN_INDEX) - Number(b.SEQ_IN_INDEX));
    const columns = parts.map((p) => `${p.COLUMN_NAME}${p.SUB_PART !== null ? `(${p.SUB_PART})` : ''}${p.COLLATION === 'D' ? ' desc' : ''}`);
    if (name === 'PRIMARY') primary = columns;
    else indexes.set(name, `${Number(parts[0]?.NON_UNIQUE) === 0 ? 'unique' : 'index'} (${columns.join(', ')})`);
  }
  return { primary, indexes };
}

function assertNoProblems(problems: string[], what: string): void {
  assert.equal(problems.length, 0, `${what}:\n  - ${problems.join('\n  - ')}`);
}

// ---------------------------------------------------------------------------------------------

describe('schema drift: migrations vs server/store/database/schema.ts', () => {
  let t: TestDatabase;
  let dbTables: Map<string, DbTable>;
  let dbColumns: Map<string, DbColumn[]>;
  let dbIndexes: Map<string, DbIndexColumn[]>;
  const drizzleTables = new Map(allTables.map((table) => [getTableConfig(table).name, table as MySqlTable]));

  before(async () => {
    t = await freshDatabase('drift', { migrate: true });
    const tables = await t.db.rows<DbTable>(
      "SELECT TABLE_NAME, ENGINE, TABLE_COLLATION, TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE'",
      [t.name],
    );
    dbTables = new Map(tables.map((row) => [row.TABLE_NAME, row]));
    const columns = await t.db.rows<DbColumn>(
      `SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, COLLATION_NAME, COLUMN_COMMENT
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, ORDINAL_POSITION`,
      [t.name],
    );
    dbColumns = new Map();
    for (const row of columns) dbColumns.set(row.TABLE_NAME, [...(dbColumns.get(row.TABLE_NAME) ?? []), row]);
    const indexes = await t.db.rows<DbIndexColumn>(
      `SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME, COLLATION, SUB_PART
         FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX`,
      [t.name],
    );
    dbIndexes = new Map();
    for (const row of indexes) dbIndexes.set(row.TABLE_NAME, [...(dbIndexes.get(row.TABLE_NAME) ?? []), row]);
  });

  after(async () => {
    if (!t) return;
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  test('the same set of tables', () => {
    const inDb = [...dbTables.keys()].sort();
    const inDrizzle = [...drizzleTables.keys()].sort();
    const missing = inDb.filter((name) => !drizzleTables.has(name));
    const extra = inDrizzle.filter((name) => !dbTables.has(name));
    assertNoProblems(
      [
        ...missing.map((name) => `table ${name} exists in the migrated database but has no mysqlTable in server/store/database/schema.ts (and allTables)`),
        ...extra.map((name) => `table ${name} is defined in server/store/database/schema.ts but no migration creates it`),
      ],
      'table sets differ',
    );
    assert.ok(inDb.length >= 13, `expected the full schema, found ${inDb.join(', ')}`);
  });

  test('every column: order, SQL type, nullability, default, auto-increment', () => {
    const problems: string[] = [];
    for (const [tableName, table] of drizzleTables) {
      const info = dbTables.get(tableName);
      if (!info) continue; // reported by the table-set test
      const actual = dbColumns.get(tableName) ?? [];
      const expected = getTableConfig(table).columns;
      const actualNames = actual.map((c) => c.COLUMN_NAME);
      const expectedNames = expected.map((c) => c.name);
      for (const name of actualNames.filter((n) => !expectedNames.includes(n))) problems.push(`${tableName}.${name}: in the database, missing from schema.ts`);
      for (const name of expectedNames.filter((n) => !actualNames.includes(n)))
        problems.push(`${tableName}.${name}: in schema.ts, no such column in the database`);
      const common = actualNames.filter((n) => expectedNames.includes(n));
      const expectedOrder = expectedNames.filter((n) => actualNames.includes(n));
      if (common.join(',') !== expectedOrder.join(',')) {
        problems.push(`${tableName}: column order differs\n      database:  ${common.join(', ')}\n      schema.ts: ${expectedOrder.join(', ')}`);
      }
      for (const column of expected) {
        const db = actual.find((c) => c.COLUMN_NAME === column.name);
        if (!db) continue;
        const where = `${tableName}.${column.name}`;
        const dbType = dbColumnType(db, info.TABLE_COLLATION);
        const drizzleType = drizzleColumnType(column);
        if (dbType !== drizzleType)
          problems.push(`${where}: type is ${dbType} (COLUMN_TYPE ${db.COLUMN_TYPE}) in the database but ${drizzleType} in schema.ts`);
        const dbNullable = db.IS_NULLABLE === 'YES';
        if (dbNullable === column.notNull)
          problems.push(`${where}: ${dbNullable ? 'NULL' : 'NOT NULL'} in the database but ${column.notNull ? 'NOT NULL' : 'NULL'} in schema.ts`);
        const dbDefaultValue = dbDefault(db);
        const drizzleDefaultValue = drizzleDefault(column);
        if (dbDefaultValue !== drizzleDefaultValue) {
          problems.push(`${where}: default is ${show(dbDefaultValue)} in the database but ${show(drizzleDefaultValue)} in schema.ts`);
        }
        const dbAuto = /\bauto_increment\b/i.test(db.EXTRA);
        const drizzleAuto = Boolean((column as unknown as { autoIncrement?: boolean }).autoIncrement);
        if (dbAuto !== drizzleAuto) problems.push(`${where}: AUTO_INCREMENT is ${dbAuto} in the database but ${drizzleAuto} in schema.ts`);
      }
    }
    assertNoProblems(problems, 'columns drifted between the migrations and server/store/database/schema.ts');
  });

  test('primary keys and indexes: same names, uniqueness, columns in order and direction', () => {
    const problems: string[] = [];
    for (const [tableName, table] of drizzleTables) {
      if (!dbTables.has(tableName)) continue;
      const db = dbKeys(dbIndexes.get(tableName) ?? []);
      const drizzle = drizzleKeys(table);
      if (db.primary.join(', ') !== drizzle.primary.join(', ')) {
        problems.push(`${tableName}: PRIMARY KEY is (${db.primary.join(', ')}) in the database but (${drizzle.primary.join(', ')}) in schema.ts`);
      }
      for (const [name, shape] of db.indexes) {
        const mirrored = drizzle.indexes.get(name);
        if (mirrored === undefined) problems.push(`${tableName}: index ${name} ${shape} is in the database but not in schema.ts`);
        else if (mirrored !== shape) problems.push(`${tableName}: index ${name} is ${shape} in the database but ${mirrored} in schema.ts`);
      }
      for (const [name, shape] of drizzle.indexes) {
        if (!db.indexes.has(name)) problems.push(`${tableName}: index ${name} ${shape} is in schema.ts but not in the database`);
      }
    }
    assertNoProblems(problems, 'keys drifted between the migrations and server/store/database/schema.ts');
  });

  test('every table is InnoDB, utf8mb4_bin, and has a Chinese COMMENT', () => {
    const problems: string[] = [];
    for (const [name, info] of dbTables) {
      if (info.ENGINE !== 'InnoDB') problems.push(`${name}: engine ${info.ENGINE}, expected InnoDB`);
      if (info.TABLE_COLLATION !== 'utf8mb4_bin') problems.push(`${name}: collation ${info.TABLE_COLLATION}, expected utf8mb4_bin`);
      if (!info.TABLE_COMMENT.trim() || !CJK.test(info.TABLE_COMMENT))
        problems.push(`${name}: table COMMENT ${JSON.stringify(info.TABLE_COMMENT)} is not a Chinese comment`);
      if (!name.startsWith('orbit_')) problems.push(`${name}: table names must start with orbit_`);
    }
    assertNoProblems(problems, 'table storage rules (docs/storage.md)');
  });

  test('every column has a Chinese COMMENT', () => {
    const problems: string[] = [];
    for (const [tableName, columns] of dbColumns) {
      for (const column of columns) {
        if (!column.COLUMN_COMMENT.trim() || !CJK.test(column.COLUMN_COMMENT)) {
          problems.push(`${tableName}.${column.COLUMN_NAME}: COMMENT ${JSON.stringify(column.COLUMN_COMMENT)} is not a Chinese comment`);
        }
      }
    }
    assertNoProblems(problems, 'column comments (docs/storage.md)');
  });

  test('every table has a NOT NULL BINARY(16) application_id', () => {
    const problems: string[] = [];
    for (const tableName of dbTables.keys()) {
      const column = dbColumns.get(tableName)?.find((c) => c.COLUMN_NAME === 'application_id');
      if (!column) problems.push(`${tableName}: no application_id column`);
      else if (column.COLUMN_TYPE.toLowerCase() !== 'binary(16)' || column.IS_NULLABLE !== 'NO') {
        problems.push(`${tableName}.application_id: ${column.COLUMN_TYPE} ${column.IS_NULLABLE === 'YES' ? 'NULL' : 'NOT NULL'}, expected binary(16) NOT NULL`);
      }
    }
    assertNoProblems(problems, 'application_id on every table (docs/storage.md)');
  });

  test('every *_id column is BINARY(16) (request_id included; node_id is a free-form worker name)', () => {
    const problems: string[] = [];
    const seenExemptions = new Set<string>();
    for (const [tableName, columns] of dbColumns) {
      for (const column of columns.filter((c) => c.COLUMN_NAME.endsWith('_id'))) {
        const where = `${tableName}.${column.COLUMN_NAME}`;
        if (NON_BINARY_ID_COLUMNS.has(where)) {
          seenExemptions.add(where);
          continue;
        }
        if (column.COLUMN_TYPE.toLowerCase() !== 'binary(16)') problems.push(`${where}: ${column.COLUMN_TYPE}, expected binary(16)`);
      }
    }
    for (const exemption of NON_BINARY_ID_COLUMNS) {
      if (!seenExemptions.has(exemption)) problems.push(`${exemption}: listed as a non-binary *_id column but no longer exists; remove it from the list`);
    }
    assertNoProblems(problems, 'id columns (docs/storage.md)');
  });

  test('no foreign keys', async () => {
    const constraints = await t.db.rows<{ TABLE_NAME: string; CONSTRAINT_NAME: string; REFERENCED_TABLE_NAME: string }>(
      'SELECT TABLE_NAME, CONSTRAINT_NAME, REFERENCED_TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ?',
      [t.name],
    );
    assertNoProblems(
      constraints.map((c) => `${c.TABLE_NAME}: foreign key ${c.CONSTRAINT_NAME} → ${c.REFERENCED_TABLE_NAME}`),
      'foreign keys are not allowed (docs/storage.md)',
    );
    for (const table of drizzleTables.values()) {
      const config = getTableConfig(table);
      assert.equal(config.foreignKeys.length, 0, `${config.name}: schema.ts declares foreign keys`);
    }
  });
});
