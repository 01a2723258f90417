/**
 * Each test file gets a database of its own on the real server (ORBIT_TEST_DATABASE_URL, set by
 * `npm test`; default mysql://root@127.0.0.1:3306), migrated with the real migrations, dropped
 * at the end.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createDatabase, type Database } from '../../server/store/database/database.ts';
import { migrate } from '../../server/store/database/migrate.ts';

export function testServerUrl(): string {
  return (process.env.ORBIT_TEST_DATABASE_URL || 'mysql://root@127.0.0.1:3306').replace(/\/+$/, '');
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
  const db = createDatabase({ url, connectionLimit: 30 });
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
