/**
 * Shared pieces of the benchmarks: a private database per run (created and dropped), real
 * orbit-server processes, latency percentiles, and the database's own ceiling measured in the
 * same run for comparison.
 */
import { randomBytes } from 'node:crypto';
import { Agent, request } from 'node:http';
import os from 'node:os';
import mysql from 'mysql2/promise';
import { migrate } from '../server/store/database/migrate.ts';
import { createDatabase, type Database } from '../server/store/database/database.ts';

/**
 * The servers of a benchmark run with the production defaults of their bounds (the tests' server
 * helper gives them a generous database bound instead): an empty variable means the default.
 */
export const PRODUCTION_BOUNDS = { ORBIT_DB_TIMEOUT_MS: '' } as const;

/** A private database for one run; `timeoutMs: 0` for a run whose statements may take minutes (bulk fills, index builds). */
export async function benchDatabase(options: { timeoutMs?: number } = {}): Promise<{ url: string; db: Database; drop(): Promise<void> }> {
  let serverUrl = process.env.ORBIT_BENCH_DATABASE_URL ?? process.env.ORBIT_TEST_DATABASE_URL;
  if (!serverUrl) {
    // @ts-expect-error - a plain .mjs module without type declarations
    const { ensureDatabase } = (await import('../scripts/local-db.mjs')) as { ensureDatabase: (o?: object) => Promise<{ url: string }> };
    serverUrl = (await ensureDatabase()).url;
  }
  const name = `orbit_bench_${randomBytes(4).toString('hex')}`;
  const url = `${serverUrl.replace(/\/+$/, '')}/${name}`;
  await migrate(url);
  const db = createDatabase({ url, connectionLimit: 8, ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}) });
  return {
    url,
    db,
    async drop() {
      await db.close();
      const conn = await mysql.createConnection({ uri: serverUrl });
      await conn.query(`DROP DATABASE IF EXISTS \`${name}\``);
      await conn.end();
    },
  };
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

/**
 * The database's ceiling for what Orbit's hot path must do at least once per transaction:
 * `concurrency` connections each committing single-row counter UPDATEs on one shared row, as
 * fast as they can, for `seconds`.
 */
export async function hotRowCeiling(url: string, concurrency: number, seconds = 5): Promise<number> {
  const conns = await Promise.all(Array.from({ length: concurrency }, () => mysql.createConnection({ uri: url })));
  await conns[0]!.query('CREATE TABLE IF NOT EXISTS bench_hot_row (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB');
  await conns[0]!.query('INSERT IGNORE INTO bench_hot_row VALUES (1, 0)');
  let commits = 0;
  const end = Date.now() + seconds * 1000;
  await Promise.all(
    conns.map(async (conn) => {
      while (Date.now() < end) {
        await conn.query('UPDATE bench_hot_row SET n = n + 1 WHERE id = 1');
        commits += 1;
      }
    }),
  );
  await conns[0]!.query('DROP TABLE bench_hot_row');
  await Promise.all(conns.map((c) => c.end()));
  return commits / seconds;
}

export async function machine(db: Database): Promise<string> {
  const [row] = await db.rows<{ v: string; flush: number; pool: string }>(
    'SELECT VERSION() AS v, @@innodb_flush_log_at_trx_commit AS flush, @@innodb_buffer_pool_size AS pool',
  );
  const cpus = os.cpus();
  return `${cpus.length} × ${cpus[0]?.model.trim()}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, MariaDB ${row?.v} (innodb_flush_log_at_trx_commit=${row?.flush}, buffer pool ${Math.round(Number(row?.pool) / 2 ** 20)} MiB), all on one machine`;
}

export function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

/** POSTs over keep-alive connections (at most `sockets` at once); resolves with the status. */
export function createPoster(sockets: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: sockets });
  return {
    post(url: string, path: string, token: string, key: string, body: string): Promise<number> {
      return new Promise((resolve, reject) => {
        const req = request(`${url}${path}`, {
          method: 'POST',
          agent,
          headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', 'Idempotency-Key': key, 'Content-Length': Buffer.byteLength(body) },
        });
        req.on('response', (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', reject);
        req.end(body);
      });
    },
    close: () => agent.destroy(),
  };
}
