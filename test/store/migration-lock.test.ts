/**
 * The migration lock is a row of orbit_migration_lock (server/store/database/migrate.ts), so that it holds
 * across the nodes of a Galera cluster, where `GET_LOCK` is local to a node: two migrators started
 * at once on one empty database apply each migration once between them; a migrator waits while
 * another holds the lock, and goes on when it is released; a lock whose lease ran out (its holder
 * died) is taken over; no lock row is left behind.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { migrate, migrationStatus, readMigrationFiles } from '../../server/store/database/migrate.ts';
import { testServerUrl } from '../helpers/database.ts';
import { waitFor } from '../helpers/wait.ts';

const created: string[] = [];
function newDatabaseUrl(): string {
  const name = `orbit_migration_lock_${randomBytes(4).toString('hex')}`;
  created.push(name);
  return `${testServerUrl()}/${name}`;
}

async function onDatabase<T>(url: string, fn: (conn: mysql.Connection) => Promise<T>): Promise<T> {
  const conn = await mysql.createConnection({ uri: url, dateStrings: true });
  try {
    return await fn(conn);
  } finally {
    await conn.end();
  }
}

async function ledger(url: string): Promise<Array<{ version: number }>> {
  return onDatabase(url, async (conn) => (await conn.query('SELECT version FROM orbit_schema_migrations ORDER BY version'))[0] as Array<{ version: number }>);
}

async function locks(url: string): Promise<unknown[]> {
  return onDatabase(url, async (conn) => (await conn.query('SELECT lock_name FROM orbit_migration_lock'))[0] as unknown[]);
}

const versions = readMigrationFiles().map((file) => file.version);

describe('the migration lock (a row)', () => {
  after(async () => {
    const server = await mysql.createConnection({ uri: testServerUrl() });
    try {
      for (const name of created) await server.query(`DROP DATABASE IF EXISTS \`${name}\``);
    } finally {
      await server.end();
    }
  });

  test('two migrators at once on an empty database: each migration applied once, no lock left', async () => {
    const url = newDatabaseUrl();
    const [a, b] = await Promise.all([migrate(url), migrate(url)]);
    assert.equal(a.applied.length + b.applied.length, versions.length, 'every migration applied by exactly one of them');
    assert.deepEqual(
      (await ledger(url)).map((row) => row.version),
      versions,
      'the ledger holds the migrations',
    );
    assert.deepEqual(await locks(url), [], 'no lock left');
    const status = await onDatabase(url, (conn) => migrationStatus(async (sql) => (await conn.query(sql))[0] as never));
    assert.deepEqual(status, { pending: [], mismatch: null });
  });

  test('a migrator waits while the lock is held, and goes on when it is released', async () => {
    const url = newDatabaseUrl();
    await migrate(url);
    // Another holder, with a lease far from over.
    await onDatabase(url, (conn) =>
      conn.query("INSERT INTO orbit_migration_lock (lock_name, holder, expires_at) VALUES ('migrate', ?, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)", [
        'a'.repeat(64),
      ]),
    );
    const lines: string[] = [];
    const running = migrate(url, (line) => lines.push(line));
    await waitFor(async () => lines.includes('waiting for another migration to finish'));
    await onDatabase(url, (conn) => conn.query('DELETE FROM orbit_migration_lock'));
    assert.deepEqual((await running).applied, []);
    assert.deepEqual(
      (await ledger(url)).map((row) => row.version),
      versions,
    );
  });

  test('a lock whose lease ran out (its migrator died) is taken over', async () => {
    const url = newDatabaseUrl();
    await migrate(url);
    await onDatabase(url, (conn) =>
      conn.query("INSERT INTO orbit_migration_lock (lock_name, holder, expires_at) VALUES ('migrate', ?, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND)", [
        'b'.repeat(64),
      ]),
    );
    const lines: string[] = [];
    assert.deepEqual((await migrate(url, (line) => lines.push(line))).applied, []);
    assert.deepEqual(lines, [], 'it did not wait');
    assert.deepEqual(
      (await ledger(url)).map((row) => row.version),
      versions,
      'the dead holder row is gone',
    );
  });
});
