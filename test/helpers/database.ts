/**
 * Each test file gets a database of its own on the real server (ORBIT_TEST_DATABASE_URL, set by
 * `npm test`; default mysql://root@127.0.0.1:3306), migrated with the real migrations, dropped
 * at the end.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createDatabase, type Database } from '../../server/store/database/database.ts';
import { loadConfig, type ServerConfig } from '../../server/config.ts';
import { migrate } from '../../server/store/database/migrate.ts';

export function testServerUrl(): string {
  return (process.env.ORBIT_TEST_DATABASE_URL || 'mysql://root@127.0.0.1:3306').replace(/\/+$/, '');
}

/** `npm test` sets ORBIT_CHECK_LOCK_ORDER=1: every transaction of the tests and of the servers they start is checked against the lock order. */
export const CHECK_LOCK_ORDER = process.env.ORBIT_CHECK_LOCK_ORDER === '1';
/** `npm test` sets ORBIT_CHECK_SHARD_ROUTING=1: every statement of the tests' database and of the servers they start is checked to route by application_id. */
export const CHECK_SHARD_ROUTING = process.env.ORBIT_CHECK_SHARD_ROUTING === '1';

/**
 * The server settings of an in-process test server: the defaults, with the lock-order check as
 * `npm test` asks, and a generous database bound (slow is not down on a loaded test machine).
 */
export function testConfig(): ServerConfig {
  return loadConfig({
    ORBIT_CHECK_LOCK_ORDER: CHECK_LOCK_ORDER ? '1' : '0',
    ORBIT_CHECK_SHARD_ROUTING: CHECK_SHARD_ROUTING ? '1' : '0',
    ORBIT_DB_TIMEOUT_MS: '30000',
  });
}

export interface TestDatabase {
  name: string;
  url: string;
  db: Database;
  drop(): Promise<void>;
}

export async function freshDatabase(label = 'test'): Promise<TestDatabase> {
  const name = `orbit_${label.replace(/[^a-z0-9]/gi, '_').slice(0, 24)}_${randomBytes(4).toString('hex')}`;
  const url = `${testServerUrl()}/${name}`;
  await migrate(url);
  // Generous per-wait timeouts: the tests' own reads must not fail because the machine is busy.
  const db = createDatabase({ url, connectionLimit: 30, timeoutMs: 30_000, checkLockOrder: CHECK_LOCK_ORDER, checkShardRouting: CHECK_SHARD_ROUTING });
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
