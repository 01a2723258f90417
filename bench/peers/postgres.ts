/**
 * PostgreSQL for the Postgres-based peers (Graphile Worker, pg-boss): finding the server, one
 * private database per scenario (created and dropped), the server's settings for the machine
 * line, and its hot-row commit ceiling - the PostgreSQL twin of bench/common.ts hotRowCeiling.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** `postgres://user@host:port` without a database; ORBIT_BENCH_PG_URL overrides the search. */
const CANDIDATES = process.env.ORBIT_BENCH_PG_URL
  ? [process.env.ORBIT_BENCH_PG_URL.replace(/\/+$/, '')]
  : ['postgres://postgres@127.0.0.1:5432', 'postgres://root@127.0.0.1:5432'];
/** Databases to connect to for CREATE/DROP DATABASE. */
const MAINTENANCE_DATABASES = ['test', 'postgres'];

export interface Postgres {
  /** The server URL (no database). */
  serverUrl: string;
  /** Where CREATE / DROP DATABASE are sent. */
  adminUrl: string;
  /** `PostgreSQL 15.20 (synchronous_commit=on, fsync=on, shared_buffers 128MB)` */
  description: string;
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}

/** The first candidate that answers, or the reason none did. */
export async function findPostgres(): Promise<Postgres | { unreachable: string }> {
  let lastError = 'no candidate';
  for (const serverUrl of CANDIDATES) {
    for (const database of MAINTENANCE_DATABASES) {
      const adminUrl = `${serverUrl}/${database}`;
      const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 3000 });
      try {
        await client.connect();
        const { rows } = await client.query<{ v: string; sc: string; fsync: string; sb: string }>(
          "SELECT current_setting('server_version') AS v, current_setting('synchronous_commit') AS sc, current_setting('fsync') AS fsync, current_setting('shared_buffers') AS sb",
        );
        const r = rows[0]!;
        return { serverUrl, adminUrl, description: `PostgreSQL ${r.v} (synchronous_commit=${r.sc}, fsync=${r.fsync}, shared_buffers ${r.sb})` };
      } catch (error) {
        lastError = (error as Error).message;
      } finally {
        await client.end().catch(() => {});
      }
    }
  }
  return { unreachable: `PostgreSQL not reachable at ${CANDIDATES.map(redact).join(' or ')} (${lastError})` };
}

async function admin(pgServer: Postgres, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: pgServer.adminUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** A fresh database for one scenario; `drop()` removes it (terminating leftover connections). */
export async function pgBenchDatabase(pgServer: Postgres, tag: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `orbit_bench_${tag}_${randomBytes(4).toString('hex')}`.replace(/[^a-z0-9_]/g, '_');
  await admin(pgServer, `CREATE DATABASE "${name}"`);
  return {
    url: `${pgServer.serverUrl}/${name}`,
    async drop() {
      await admin(pgServer, `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    },
  };
}

/**
 * PostgreSQL's ceiling for a hot row: `concurrency` connections each committing single-row
 * counter UPDATEs (autocommit, so one commit per statement) on one shared row, as fast as they
 * can, for `seconds` - the same measurement as bench/common.ts hotRowCeiling does on MariaDB.
 */
export async function pgHotRowCeiling(url: string, concurrency: number, seconds = 5): Promise<number> {
  const clients = Array.from({ length: concurrency }, () => new pg.Client({ connectionString: url }));
  await Promise.all(clients.map((c) => c.connect()));
  try {
    await clients[0]!.query('CREATE TABLE IF NOT EXISTS bench_hot_row (id INT PRIMARY KEY, n BIGINT NOT NULL)');
    await clients[0]!.query('INSERT INTO bench_hot_row VALUES (1, 0) ON CONFLICT DO NOTHING');
    let commits = 0;
    const end = Date.now() + seconds * 1000;
    await Promise.all(
      clients.map(async (client) => {
        while (Date.now() < end) {
          await client.query('UPDATE bench_hot_row SET n = n + 1 WHERE id = 1');
          commits += 1;
        }
      }),
    );
    await clients[0]!.query('DROP TABLE bench_hot_row');
    return commits / seconds;
  } finally {
    await Promise.all(clients.map((c) => c.end().catch(() => {})));
  }
}
