/**
 * Numbered SQL migrations (`migrations/NNNN_name.sql`), applied in order and recorded in
 * `orbit_schema_migrations` with a checksum: an applied file that changed afterwards is an error,
 * never silently skipped. A named lock (`GET_LOCK`) keeps two migrators from racing.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import mysql from 'mysql2/promise';
import { SQL_MODE } from './database.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));

export interface MigrationFile {
  version: number;
  name: string;
  sql: string;
  checksum: string;
}

export function readMigrationFiles(dir: string = MIGRATIONS_DIR): MigrationFile[] {
  return readdirSync(dir)
    .filter((file) => /^\d{4}_[a-z0-9_]+\.sql$/.test(file))
    .sort()
    .map((file) => {
      const sql = readFileSync(`${dir}/${file}`, 'utf8');
      return {
        version: Number(file.slice(0, 4)),
        name: file.slice(5, -4),
        sql,
        checksum: createHash('sha256').update(sql).digest('hex'),
      };
    });
}

const LEDGER_DDL = `CREATE TABLE IF NOT EXISTS orbit_schema_migrations (
  version INT UNSIGNED NOT NULL COMMENT '迁移编号（文件名前四位）',
  application_id BINARY(16) NOT NULL DEFAULT x'00000000000000000000000000000000' COMMENT '固定为全零：迁移记录不属于任何应用（保持每表都有应用标识的约定）',
  name VARCHAR(128) NOT NULL COMMENT '迁移文件名（不含编号和扩展名）',
  checksum CHAR(64) NOT NULL COMMENT '迁移文件内容的 SHA-256；已应用文件被修改时拒绝继续',
  applied_at DATETIME(6) NOT NULL COMMENT '应用时间（UTC）',
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='已应用的数据库迁移'`;

/** `mysql://user@host:port/db` → the database name and a URL of the server itself. */
export function splitDatabaseUrl(url: string): { serverUrl: string; database: string } {
  const parsed = new URL(url);
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  if (!/^[A-Za-z0-9_]+$/.test(database)) throw new Error(`ORBIT_DATABASE_URL must name a database ([A-Za-z0-9_]+): ${url}`);
  parsed.pathname = '/';
  return { serverUrl: parsed.toString(), database };
}

export interface MigrateResult {
  applied: string[];
  current: number;
}

/** Creates the database when missing and applies pending migrations. */
export async function migrate(url: string, log: (line: string) => void = () => {}): Promise<MigrateResult> {
  const { serverUrl, database } = splitDatabaseUrl(url);
  const server = await mysql.createConnection({ uri: serverUrl });
  try {
    await server.query(`CREATE DATABASE IF NOT EXISTS \`${database}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`);
  } finally {
    await server.end();
  }
  const conn = await mysql.createConnection({ uri: url, multipleStatements: true, timezone: 'Z', dateStrings: true });
  try {
    await conn.query(`SET SESSION time_zone = '+00:00'; SET SESSION sql_mode = '${SQL_MODE}'`);
    const [[lock]] = (await conn.query("SELECT GET_LOCK('orbit:migrate', 120) AS got")) as unknown as [[{ got: number }]];
    if (lock?.got !== 1) throw new Error('another migration holds the orbit:migrate lock');
    try {
      await conn.query(LEDGER_DDL);
      const [applied] = (await conn.query('SELECT version, name, checksum FROM orbit_schema_migrations ORDER BY version')) as unknown as [
        { version: number; name: string; checksum: string }[],
      ];
      const files = readMigrationFiles();
      const done = new Map(applied.map((row) => [row.version, row]));
      const newlyApplied: string[] = [];
      for (const file of files) {
        const previous = done.get(file.version);
        if (previous) {
          if (previous.checksum !== file.checksum) {
            throw new Error(`migration ${file.version}_${file.name} was edited after it was applied (checksum differs); add a new migration instead`);
          }
          continue;
        }
        log(`applying migration ${String(file.version).padStart(4, '0')}_${file.name}`);
        await conn.query(file.sql);
        await conn.query('INSERT INTO orbit_schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6))', [
          file.version,
          file.name,
          file.checksum,
        ]);
        newlyApplied.push(`${file.version}_${file.name}`);
      }
      return { applied: newlyApplied, current: files.at(-1)?.version ?? 0 };
    } finally {
      await conn.query("SELECT RELEASE_LOCK('orbit:migrate')");
    }
  } finally {
    await conn.end();
  }
}

/** Migrations present on disk but not applied to the database (what `orbit-server` refuses to start with). */
export async function pendingMigrations(
  rows: (sql: string) => Promise<{ version: number }[]>,
  files: MigrationFile[] = readMigrationFiles(),
): Promise<string[]> {
  let appliedVersions: Set<number>;
  try {
    appliedVersions = new Set((await rows('SELECT version FROM orbit_schema_migrations')).map((r) => Number(r.version)));
  } catch (error) {
    if ((error as { errno?: number }).errno === 1146) appliedVersions = new Set();
    else throw error;
  }
  return files
    .filter((file) => !appliedVersions.has(file.version))
    .map((file) => `${String(file.version).padStart(4, '0')}_${file.name}`);
}
