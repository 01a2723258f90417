/**
 * Each test file gets a database of its own on the real server (ORBIT_TEST_DATABASE_URL, set by
 * `npm test`; default mysql://root@127.0.0.1:3306), dropped at the end. Its tables are copies
 * (`CREATE TABLE … LIKE`) of a template database that the real migrations built once for
 * these migration files (named by their checksum, built by the first test process that needs
 * it, under a server lock): the same schema as migrating it, without running nine migrations
 * per file. `freshDatabase(label, { migrate: true })` runs the migrations themselves (the
 * schema-drift test, which is about what they build).
 */
import { createHash, randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createDatabase, type Database } from '../../server/store/database/database.ts';
import { loadConfig, type ServerConfig } from '../../server/config.ts';
import { migrate, readMigrationFiles } from '../../server/store/database/migrate.ts';

export function testServerUrl(): string {
  return (process.env.ORBIT_TEST_DATABASE_URL || 'mysql://root@127.0.0.1:3306').replace(/\/+$/, '');
}

/** `npm test` sets ORBIT_CHECK_LOCK_ORDER=1: every transaction of the tests and of the servers they start is checked against the lock order. */
export const CHECK_LOCK_ORDER = process.env.ORBIT_CHECK_LOCK_ORDER === '1';
/** `npm test` sets ORBIT_CHECK_SHARD_ROUTING=1: every statement of the tests' database and of the servers they start is checked to route by application_id. */
export const CHECK_SHARD_ROUTING = process.env.ORBIT_CHECK_SHARD_ROUTING === '1';
/** ORBIT_SINGLE_STATEMENTS=1: the tests' own database handles send one statement per command too (as on a cluster). */
function singleStatementsFromEnv(): { singleStatements?: boolean } {
  return process.env.ORBIT_SINGLE_STATEMENTS === '1' ? { singleStatements: true } : {};
}

/**
 * The server settings of an in-process test server: the defaults, with the lock-order check as
 * `npm test` asks, and a generous database bound (slow is not down on a loaded test machine).
 */
export function testConfig(): ServerConfig {
  return loadConfig({
    ORBIT_CHECK_LOCK_ORDER: CHECK_LOCK_ORDER ? '1' : '0',
    ORBIT_CHECK_SHARD_ROUTING: CHECK_SHARD_ROUTING ? '1' : '0',
    ...(process.env.ORBIT_SINGLE_STATEMENTS ? { ORBIT_SINGLE_STATEMENTS: process.env.ORBIT_SINGLE_STATEMENTS } : {}),
    ORBIT_DB_TIMEOUT_MS: '30000',
  });
}

export interface TestDatabase {
  name: string;
  url: string;
  db: Database;
  drop(): Promise<void>;
}

/** The template's name: one per set of migration files (their names and contents, as migrate reads them). */
function templateName(): string {
  const hash = createHash('sha256');
  for (const file of readMigrationFiles()) hash.update(`${file.version} ${file.name} ${file.checksum}\n`);
  return `orbit_template_${hash.digest('hex').slice(0, 16)}`;
}

let template: Promise<string> | null = null;

/** The template database, migrated once (by whichever test process gets the server lock first). */
function ensureTemplate(): Promise<string> {
  template ??= (async () => {
    const name = templateName();
    const server = await mysql.createConnection({ uri: testServerUrl() });
    try {
      await server.query("SELECT GET_LOCK('orbit_test_template', 300)");
      // Complete: the ledger lists every migration (a process killed while migrating leaves fewer).
      const files = readMigrationFiles().length;
      const [ledger] = (await server.query('SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE table_schema = ? AND table_name = ?', [
        name,
        'orbit_schema_migrations',
      ])) as unknown as [Array<{ n: number }>];
      let complete = Number(ledger[0]?.n) === 1;
      if (complete) {
        const [applied] = (await server.query(`SELECT COUNT(*) AS n FROM \`${name}\`.orbit_schema_migrations`)) as unknown as [Array<{ n: number }>];
        complete = Number(applied[0]?.n) === files;
      }
      if (!complete) {
        // Templates of other migration files, left by earlier checkouts more than a day ago, are
        // dropped (a newer one may be in use by another checkout's run right now).
        const [old] = (await server.query(
          "SELECT table_schema AS name FROM information_schema.TABLES WHERE table_schema LIKE 'orbit\\_template\\_%' AND table_schema <> ? GROUP BY table_schema HAVING MAX(create_time) < NOW() - INTERVAL 1 DAY",
          [name],
        )) as unknown as [Array<{ name: string }>];
        for (const { name: stale } of old) await server.query(`DROP DATABASE IF EXISTS \`${stale}\``);
        await migrate(`${testServerUrl()}/${name}`);
      }
      return name;
    } finally {
      await server.query("SELECT RELEASE_LOCK('orbit_test_template')").catch(() => undefined);
      await server.end();
    }
  })();
  return template;
}

/** A new database with the template's tables and rows (only the migration ledger has rows). */
async function cloneTemplate(name: string): Promise<void> {
  const source = await ensureTemplate();
  const server = await mysql.createConnection({ uri: testServerUrl(), multipleStatements: true });
  try {
    const [tables] = (await server.query('SELECT table_name AS t FROM information_schema.TABLES WHERE table_schema = ? ORDER BY table_name', [
      source,
    ])) as unknown as [Array<{ t: string }>];
    const statements = [`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`];
    for (const { t } of tables) {
      statements.push(`CREATE TABLE \`${name}\`.\`${t}\` LIKE \`${source}\`.\`${t}\``);
      statements.push(`INSERT INTO \`${name}\`.\`${t}\` SELECT * FROM \`${source}\`.\`${t}\``);
    }
    await server.query(statements.join(';\n'));
  } finally {
    await server.end();
  }
}

export async function freshDatabase(label = 'test', options: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const name = `orbit_${label.replace(/[^a-z0-9]/gi, '_').slice(0, 24)}_${randomBytes(4).toString('hex')}`;
  const url = `${testServerUrl()}/${name}`;
  if (options.migrate) await migrate(url);
  else await cloneTemplate(name);
  // Generous per-wait timeouts: the tests' own reads must not fail because the machine is busy.
  const db = createDatabase({
    url,
    connectionLimit: 30,
    timeoutMs: 30_000,
    checkLockOrder: CHECK_LOCK_ORDER,
    checkShardRouting: CHECK_SHARD_ROUTING,
    ...singleStatementsFromEnv(),
  });
  return {
    name,
    url,
    db,
    async drop() {
      await db.close();
      const server = await mysql.createConnection({ uri: testServerUrl() });
      try {
        await server.query(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await server.end();
      }
    },
  };
}
