/**
 * Numbered SQL migrations (`migrations/NNNN_name.sql`), applied in order and recorded in
 * `orbit_schema_migrations` with a checksum: an applied file that changed afterwards is an error,
 * never silently skipped.
 *
 * Two migrators never run at once, on one server or on the nodes of a Galera cluster: the lock is
 * a row (`orbit_migration_lock`), inserted by the migrator that holds it and deleted when it is
 * done. A row replicates, where a named lock (`GET_LOCK`) is local to the node that grants it; two
 * migrators inserting it on two nodes at once are decided by certification (one gets a deadlock or
 * duplicate-key error, and waits). Its holder renews a lease on it (`LOCK_LEASE_SECONDS`); a
 * migrator that died holding it leaves a row whose lease soon runs out, and the next one takes it
 * over. The named lock is taken too, which is what older builds take.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import mysql from 'mysql2/promise';
import { causalRead, SQL_MODE } from './database.ts';
import { checkDatabaseUrl, databaseHostUrls } from '../../config.ts';

import { MIGRATIONS_DIR } from '../../paths.ts';

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

export const LEDGER_DDL = `CREATE TABLE IF NOT EXISTS orbit_schema_migrations (
  version INT UNSIGNED NOT NULL COMMENT '迁移编号（文件名前四位）',
  application_id BINARY(16) NOT NULL DEFAULT x'00000000000000000000000000000000' COMMENT '固定为全零：迁移记录不属于任何应用（保持每表都有应用标识的约定）',
  name VARCHAR(128) NOT NULL COMMENT '迁移文件名（不含编号和扩展名）',
  checksum CHAR(64) NOT NULL COMMENT '迁移文件内容的 SHA-256；已应用文件被修改时拒绝继续',
  applied_at DATETIME(6) NOT NULL COMMENT '应用时间（UTC）',
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='已应用的数据库迁移'`;

/** `mysql://user@host:port/db` → the database name and a URL of the server itself (of its first host, when it names several). */
export function splitDatabaseUrl(url: string): { serverUrl: string; database: string } {
  const parsed = new URL(databaseHostUrls(checkDatabaseUrl(url))[0] as string);
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  parsed.pathname = '/';
  return { serverUrl: parsed.toString(), database };
}

/** The database and this build do not go together (a migration this build does not know, or one it knows differently). */
export class MigrationMismatchError extends Error {}

/** `0002_tasks_and_workers`. */
export function migrationLabel(version: number, name: string): string {
  return `${String(version).padStart(4, '0')}_${name}`;
}

interface AppliedMigration {
  version: number;
  name: string;
  checksum: string;
}

/**
 * Why this build must not use a database with these applied migrations, or null when it may
 * (pending ones aside). `program` is what the operator should run a newer version of.
 */
export function mismatchProblem(applied: AppliedMigration[], files: MigrationFile[], program: string): string | null {
  const known = new Map(files.map((file) => [file.version, file]));
  const newest = files.at(-1);
  const upTo = newest ? `this build knows up to ${migrationLabel(newest.version, newest.name)}` : 'this build knows none';
  const unknown = applied.filter((row) => !known.has(Number(row.version))).map((row) => migrationLabel(Number(row.version), row.name));
  if (unknown.length > 0) {
    const which = unknown.length === 1 ? `migration ${unknown[0]}` : `migrations ${unknown.join(', ')}`;
    return `the database has ${which} that this build does not know (${upTo}); run a newer ${program}`;
  }
  for (const row of applied) {
    const file = known.get(Number(row.version));
    if (file && file.checksum !== row.checksum) {
      return `the database's migration ${migrationLabel(Number(row.version), row.name)} differs from this build's ${migrationLabel(file.version, file.name)} (checksum); the database and this build come from different versions, or the file was edited after it was applied (add a new migration instead)`;
    }
  }
  return null;
}

export interface MigrateResult {
  applied: string[];
  /** The newest migration of this build (`0002_tasks_and_workers`), now applied. */
  current: string;
}

/** How long the migration lock holds without renewal; its holder renews it every third of that. */
export const LOCK_LEASE_SECONDS = 30;
/** How long a migrator waits for another one's lock before it gives up. */
const LOCK_WAIT_MS = 120_000;

/**
 * The migration lock's table, created by the migrator (like the ledger): one row while a migrator
 * holds the lock. A table of its own, so that an older build reading the ledger during a migration
 * sees nothing it does not know.
 */
export const LOCK_DDL = `CREATE TABLE IF NOT EXISTS orbit_migration_lock (
  lock_name VARCHAR(32) NOT NULL COMMENT '锁名（固定为 migrate）',
  application_id BINARY(16) NOT NULL DEFAULT x'00000000000000000000000000000000' COMMENT '固定为全零：迁移锁不属于任何应用（保持每表都有应用标识的约定）',
  holder CHAR(64) NOT NULL COMMENT '持有锁的迁移进程的随机令牌',
  expires_at DATETIME(6) NOT NULL COMMENT '租约到期时间（UTC）；持有者定期续期，过期的锁可被接管',
  PRIMARY KEY (lock_name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='迁移锁：一行即持有；行会复制到集群的每个节点，GET_LOCK 只在一个节点有效'`;

type Connection = mysql.Connection;

/** A causal read on a Galera node (it waits for what the cluster committed first); a plain read elsewhere. */
async function causalRows<T>(conn: Connection, text: string, params: unknown[] = []): Promise<T[]> {
  try {
    return (await conn.query(causalRead(text), params))[0] as T[];
  } catch (error) {
    // Not a Galera build (1193: no such variable) or not MariaDB (1064: no SET STATEMENT).
    const errno = (error as { errno?: number }).errno;
    if (errno !== 1193 && errno !== 1064) throw error;
    return (await conn.query(text, params))[0] as T[];
  }
}

/** Takes the migration lock, waiting while another migrator holds it (see the top). */
async function takeMigrationLock(conn: Connection, token: string, log: (line: string) => void): Promise<void> {
  const waitUntil = Date.now() + LOCK_WAIT_MS;
  let said = false;
  for (;;) {
    try {
      // A lease that ran out is taken over in the same statement. (MySQL assigns left to right:
      // the second IF sees the holder the first one wrote, so only a takeover moves the lease.)
      await conn.query(
        `INSERT INTO orbit_migration_lock (lock_name, holder, expires_at)
         VALUES ('migrate', ?, UTC_TIMESTAMP(6) + INTERVAL ? SECOND)
         ON DUPLICATE KEY UPDATE
           holder = IF(expires_at < UTC_TIMESTAMP(6), VALUES(holder), holder),
           expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at)`,
        [token, LOCK_LEASE_SECONDS],
      );
      const [row] = await causalRows<{ holder: string }>(conn, "SELECT holder FROM orbit_migration_lock WHERE lock_name = 'migrate'");
      if (row?.holder === token) return;
    } catch (error) {
      // Two migrators inserting it on two nodes at once: certification lets one through.
      const errno = (error as { errno?: number }).errno;
      if (errno !== 1213 && errno !== 1062) throw error;
    }
    if (Date.now() > waitUntil) throw new Error('another migration holds the migration lock (orbit_migration_lock) and did not finish within 120 s');
    if (!said) log('waiting for another migration to finish');
    said = true;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/**
 * Renews the lease every third of it, on a connection of its own (the migrator's may be busy with
 * a long statement); `lost()` says whether a renewal found the lock taken over or failed.
 */
async function keepMigrationLock(url: string, token: string): Promise<{ lost(): string | null; stop(): Promise<void> }> {
  const conn = await mysql.createConnection({ uri: url });
  let lost: string | null = null;
  let renewing: Promise<void> = Promise.resolve();
  const timer = setInterval(
    () => {
      renewing = (async () => {
        try {
          const [result] = (await conn.query(
            "UPDATE orbit_migration_lock SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? SECOND WHERE lock_name = 'migrate' AND holder = ?",
            [LOCK_LEASE_SECONDS, token],
          )) as unknown as [{ affectedRows: number }];
          if (result.affectedRows !== 1) lost ??= 'its lease ran out and another migrator took it';
        } catch (error) {
          lost ??= `renewing it failed: ${(error as Error).message}`;
        }
      })();
    },
    (LOCK_LEASE_SECONDS * 1000) / 3,
  );
  return {
    lost: () => lost,
    async stop() {
      clearInterval(timer);
      await renewing;
      await conn.end().catch(() => {});
    },
  };
}

/**
 * Creates the database when missing and applies pending migrations. With several hosts in the
 * URL, on the first that answers.
 */
export async function migrate(url: string, log: (line: string) => void = () => {}): Promise<MigrateResult> {
  let lastError: unknown;
  for (const hostUrl of databaseHostUrls(checkDatabaseUrl(url))) {
    try {
      return await migrateHost(hostUrl, log);
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code !== 'ECONNREFUSED' && code !== 'ETIMEDOUT' && code !== 'EHOSTUNREACH' && code !== 'ENOTFOUND' && (error as { errno?: number }).errno !== 1047)
        throw error;
      lastError = error;
    }
  }
  throw lastError;
}

async function migrateHost(url: string, log: (line: string) => void): Promise<MigrateResult> {
  const { serverUrl, database } = splitDatabaseUrl(url);
  const server = await mysql.createConnection({ uri: serverUrl });
  try {
    await server.query(`CREATE DATABASE IF NOT EXISTS \`${database}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`);
  } finally {
    await server.end();
  }
  const conn = await mysql.createConnection({ uri: url, multipleStatements: true, timezone: 'Z', dateStrings: true });
  try {
    await conn.query("SET SESSION time_zone = '+00:00'");
    await conn.query(`SET SESSION sql_mode = '${SQL_MODE}'`);
    // Also the named lock older builds take: on one server, an older migrator and this one exclude each other.
    const [[named]] = (await conn.query("SELECT GET_LOCK('orbit:migrate', 120) AS got")) as unknown as [[{ got: number }]];
    if (named?.got !== 1) throw new Error('another migration holds the orbit:migrate lock');
    await conn.query(LEDGER_DDL);
    await conn.query(LOCK_DDL);
    const token = randomBytes(32).toString('hex');
    await takeMigrationLock(conn, token, log);
    const lease = await keepMigrationLock(url, token);
    const stillHeld = () => {
      const lost = lease.lost();
      if (lost) throw new Error(`the migration lock was lost (${lost}); run the migration again`);
    };
    try {
      // Causal: on a cluster, what a migrator on another node applied before it let go is seen.
      const applied = await causalRows<{ version: number; name: string; checksum: string }>(
        conn,
        'SELECT version, name, checksum FROM orbit_schema_migrations ORDER BY version',
      );
      const files = readMigrationFiles();
      const mismatch = mismatchProblem(applied, files, 'orbit-admin');
      if (mismatch) throw new MigrationMismatchError(mismatch);
      const done = new Map(applied.map((row) => [row.version, row]));
      const newlyApplied: string[] = [];
      for (const file of files) {
        const previous = done.get(file.version);
        // (a changed checksum was refused by mismatchProblem above)
        if (previous) continue;
        stillHeld();
        log(`applying migration ${migrationLabel(file.version, file.name)}`);
        await conn.query(file.sql);
        await conn.query('INSERT INTO orbit_schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6))', [
          file.version,
          file.name,
          file.checksum,
        ]);
        newlyApplied.push(migrationLabel(file.version, file.name));
      }
      stillHeld();
      const newest = files.at(-1);
      return { applied: newlyApplied, current: newest ? migrationLabel(newest.version, newest.name) : 'none' };
    } finally {
      await lease.stop();
      await conn.query("DELETE FROM orbit_migration_lock WHERE lock_name = 'migrate' AND holder = ?", [token]);
      await conn.query("SELECT RELEASE_LOCK('orbit:migrate')");
    }
  } finally {
    await conn.end();
  }
}

export interface MigrationStatus {
  /** On disk, not applied: `orbit-admin migrate` applies them. */
  pending: string[];
  /** Why this build must not run against the database at all (see mismatchProblem), or null. */
  mismatch: string | null;
}

/** This build's migrations against the database's ledger (no ledger: nothing applied). */
export async function migrationStatus(
  rows: (sql: string) => Promise<AppliedMigration[]>,
  files: MigrationFile[] = readMigrationFiles(),
  program = 'orbit-server',
): Promise<MigrationStatus> {
  let applied: AppliedMigration[];
  try {
    applied = await rows('SELECT version, name, checksum FROM orbit_schema_migrations ORDER BY version');
  } catch (error) {
    if ((error as { errno?: number }).errno === 1146) applied = [];
    else throw error;
  }
  const appliedVersions = new Set(applied.map((r) => Number(r.version)));
  return {
    pending: files.filter((file) => !appliedVersions.has(file.version)).map((file) => migrationLabel(file.version, file.name)),
    mismatch: mismatchProblem(applied, files, program),
  };
}
