/**
 * `npm run bench:galera`: Orbit on a three-node MariaDB Galera cluster (scripts/galera.mjs, started
 * here under .local/bench-galera on ports of its own) in the two deployment shapes of
 * docs/scale-out.md, beside Orbit on the single MariaDB server in the same run:
 *
 *   single    three orbit-server processes on the one MariaDB server (127.0.0.1:3306, or
 *             ORBIT_BENCH_DATABASE_URL)
 *   single-split  the same, with every statement a command of its own (ORBIT_SINGLE_STATEMENTS=1,
 *             as Orbit does on a cluster): what the splitting alone costs
 *   one-node  three servers, all writing through node 1 (URL node1,node2,node3: nodes 2 and 3 are
 *             standbys they move to only when node 1 is lost)
 *   spread    server i writing through node i
 *
 * Each shape, in alternating order over the rounds (single, one-node, spread, then the reverse):
 * a fresh database, an enqueue phase (ORBIT_BENCH_TASKS single submissions, 16 producers over
 * the three servers, no worker) and a drain phase (three worker sessions, one per server,
 * capacity 16 each, no-op handler). Printed per shape: enqueue/s, drain/s, the transactions the
 * servers ran, how many failed with a deadlock - on a cluster, a certification failure or a
 * brute-force abort - and were retried whole (`orbit_db_transaction_retries_total`), how many gave
 * up (answered 503), and the ratios against `single`. After each run: every task SUCCEEDED and every
 * counter equals a recount (on every node).
 *
 * Options (environment): ORBIT_BENCH_TASKS (4000), ORBIT_BENCH_ROUNDS (2), ORBIT_BENCH_DATABASE_URL.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createPoster, fmt, machine, PRODUCTION_BOUNDS } from './common.ts';
import { migrate } from '../server/store/database/migrate.ts';
import { createDatabase, type Database } from '../server/store/database/database.ts';
import { createTenant } from '../test/helpers/tenants.ts';
import { startServerProcess, type ServerProcess } from '../test/helpers/server-process.ts';
import { assertCountersMatchRecount } from '../test/helpers/recount.ts';
import { OrbitWorker } from '../sdk/worker.ts';
// @ts-expect-error - a plain ES module of the repository's scripts, no type declarations
import { freeClusterPorts, galeraRequirements, startCluster, stopCluster } from '../scripts/galera.mjs';

const TASKS = Number(process.env.ORBIT_BENCH_TASKS ?? 4000);
const ROUNDS = Number(process.env.ORBIT_BENCH_ROUNDS ?? 2);
const PRODUCERS = 16;
const SESSIONS = 3;
const CAPACITY = 16;
const SERVERS = 3;

type Shape = 'single' | 'single-split' | 'one-node' | 'spread';

interface Run {
  shape: Shape;
  enqueuePerSecond: number;
  drainPerSecond: number;
  transactions: number;
  retried: number;
  gaveUp: number;
  refused: number;
}

const requirements = galeraRequirements();
if (!requirements.ok) {
  console.log(`bench:galera: no Galera cluster on this machine: ${requirements.reason}`);
  process.exit(0);
}

const singleServer = (process.env.ORBIT_BENCH_DATABASE_URL ?? process.env.ORBIT_TEST_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306').replace(/\/+$/, '');
mkdirSync(join(process.cwd(), '.local'), { recursive: true });
const dir = mkdtempSync(join(process.cwd(), '.local', 'bench-galera-'));
const cluster = await startCluster({ dir, ports: await freeClusterPorts(), log: () => {} });
const nodePorts: string[] = cluster.nodes.map((node: { url: string }) => new URL(node.url).port);

/** The URLs server 0, 1, 2 get in a shape, for a database named `name`. */
function serverUrls(shape: Shape, name: string): string[] {
  const hosts = (order: number[]) => order.map((i) => `127.0.0.1:${nodePorts[i]}`).join(',');
  if (shape === 'single' || shape === 'single-split') return Array.from({ length: SERVERS }, () => `${singleServer}/${name}`);
  if (shape === 'one-node') return Array.from({ length: SERVERS }, () => `mysql://root@${hosts([0, 1, 2])}/${name}`);
  return Array.from({ length: SERVERS }, (_, i) => `mysql://root@${hosts([i, (i + 1) % 3, (i + 2) % 3])}/${name}`);
}

/** Sums of the servers' transaction and retry counters. */
async function counters(urls: string[]): Promise<{ transactions: number; retried: number; gaveUp: number }> {
  const out = { transactions: 0, retried: 0, gaveUp: 0 };
  for (const url of urls) {
    for (const line of (await (await fetch(`${url}/metrics`)).text()).split('\n')) {
      const tx = /^orbit_db_transaction_seconds_count\{[^}]*\} (\S+)$/.exec(line);
      if (tx) out.transactions += Number(tx[1]);
      const retry = /^orbit_db_transaction_retries_total\{[^}]*reason="deadlock"[^}]*outcome="(retried|gave_up)"[^}]*\} (\S+)$/.exec(line);
      if (retry) out[retry[1] === 'retried' ? 'retried' : 'gaveUp'] += Number(retry[2]);
    }
  }
  return out;
}

async function runShape(shape: Shape): Promise<Run> {
  const name = `orbit_bench_galera_${randomBytes(4).toString('hex')}`;
  const urls = serverUrls(shape, name);
  await migrate(urls[0] as string);
  const onSingle = shape === 'single' || shape === 'single-split';
  const checkUrls = onSingle ? [urls[0] as string] : nodePorts.map((port) => `mysql://root@127.0.0.1:${port}/${name}`);
  const dbs: Database[] = checkUrls.map((url) => createDatabase({ url, connectionLimit: 4, timeoutMs: 0 }));
  const servers: ServerProcess[] = [];
  const { post, close } = createPoster(PRODUCERS);
  try {
    const tenant = await createTenant(dbs[0] as Database, { namespace: 'bench', queues: ['bench'] });
    await (dbs[0] as Database).exec('UPDATE orbit_queues SET max_concurrency = 100000, rate_per_second = 1000000');
    servers.push(
      ...(await Promise.all(
        urls.map((url) =>
          startServerProcess(url, { ORBIT_LOG_LEVEL: 'info', ...PRODUCTION_BOUNDS, ...(shape === 'single-split' ? { ORBIT_SINGLE_STATEMENTS: '1' } : {}) }),
        ),
      )),
    );
    const http = servers.map((s) => s.url);
    const before = await counters(http);

    let next = 0;
    let refused = 0;
    const enqueueStarted = performance.now();
    await Promise.all(
      Array.from({ length: PRODUCERS }, async (_, producer) => {
        for (let n = next++; n < TASKS; n = next++) {
          // A 503 (its outcome unknown) is retried with the same key, as a client must.
          for (;;) {
            const status = await post(http[producer % SERVERS] as string, '/v1/queues/bench/tasks', tenant.token, `g-${n}`, `{"payload":{"n":${n}}}`);
            if (status === 503) continue;
            if (status !== 200) refused += 1;
            break;
          }
        }
      }),
    );
    const enqueueSeconds = (performance.now() - enqueueStarted) / 1000;

    let completed = 0;
    const drainStarted = performance.now();
    const workers = Array.from(
      { length: SESSIONS },
      (_, i) =>
        new OrbitWorker({
          baseUrl: http[i % SERVERS] as string,
          token: tenant.token,
          node_id: `bench-${i}`,
          queues: ['bench'],
          capacity: CAPACITY,
          maxPollIntervalMs: 20,
          handler: async () => undefined,
          onEvent(event) {
            if (event.type === 'completed') completed += 1;
          },
        }),
    );
    await Promise.all(workers.map((w) => w.start()));
    const deadline = Date.now() + 300_000;
    while (completed < TASKS - refused && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    const drainSeconds = (performance.now() - drainStarted) / 1000;
    await Promise.all(workers.map((w) => w.stop({ timeoutMs: 5000 })));
    const after = await counters(http);

    for (const db of dbs) {
      const [row] = await db.rows<{ succeeded: string; total: string }>("SELECT SUM(state = 'SUCCEEDED') AS succeeded, COUNT(*) AS total FROM orbit_tasks");
      if (Number(row?.succeeded) !== TASKS - refused || Number(row?.total) !== TASKS - refused)
        throw new Error(`${shape}: ${JSON.stringify(row)} of ${TASKS - refused}`);
      await assertCountersMatchRecount(db);
    }
    return {
      shape,
      enqueuePerSecond: (TASKS - refused) / enqueueSeconds,
      drainPerSecond: completed / drainSeconds,
      transactions: after.transactions - before.transactions,
      retried: after.retried - before.retried,
      gaveUp: after.gaveUp - before.gaveUp,
      refused,
    };
  } finally {
    close();
    await Promise.all(servers.map((s) => s.stop()));
    await Promise.all(dbs.map((db) => db.close()));
    const conn = await mysql.createConnection({ uri: onSingle ? singleServer : `mysql://root@127.0.0.1:${nodePorts[0]}` });
    await conn.query(`DROP DATABASE IF EXISTS \`${name}\``);
    await conn.end();
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

try {
  const probe = createDatabase({ url: `${singleServer}/mysql`, connectionLimit: 1 });
  console.log(`machine: ${await machine(probe)}`);
  await probe.close();
  console.log(
    `run: ${fmt(TASKS)} tasks per shape, ${SERVERS} orbit-server processes, ${PRODUCERS} producers, ${SESSIONS} worker sessions × capacity ${CAPACITY}; Galera cluster of 3 nodes on this machine (ports ${nodePorts.join(', ')}); ${ROUNDS} rounds, alternating order`,
  );
  const runs: Run[] = [];
  const order: Shape[] = ['single', 'single-split', 'one-node', 'spread'];
  for (let round = 0; round < ROUNDS; round++) {
    for (const shape of round % 2 === 0 ? order : [...order].reverse()) {
      const run = await runShape(shape);
      runs.push(run);
      console.log(
        `round ${round + 1}  ${shape.padEnd(12)}  enqueue ${fmt(run.enqueuePerSecond).padStart(6)}/s  drain ${fmt(run.drainPerSecond).padStart(6)}/s  ${fmt(run.transactions)} transactions, ${fmt(run.retried)} retried after a deadlock/certification failure (${fmt((100 * run.retried) / Math.max(1, run.transactions), 2)}%), ${run.gaveUp} gave up (503)${run.refused ? `, ${run.refused} refused` : ''}`,
      );
    }
  }
  console.log('\nmedians over the rounds (ratio against single in the same run):');
  const base = runs.filter((r) => r.shape === 'single');
  for (const shape of order) {
    const mine = runs.filter((r) => r.shape === shape);
    const enqueue = median(mine.map((r) => r.enqueuePerSecond));
    const drain = median(mine.map((r) => r.drainPerSecond));
    const failures =
      mine.reduce((s, r) => s + r.retried + r.gaveUp, 0) /
      Math.max(
        1,
        mine.reduce((s, r) => s + r.transactions, 0),
      );
    console.log(
      `${shape.padEnd(12)}  enqueue ${fmt(enqueue).padStart(6)}/s (${fmt(enqueue / median(base.map((r) => r.enqueuePerSecond)), 2)}×)  drain ${fmt(drain).padStart(6)}/s (${fmt(drain / median(base.map((r) => r.drainPerSecond)), 2)}×)  certification failures ${fmt(100 * failures, 2)}% of transactions`,
    );
  }
} finally {
  await stopCluster({ dir });
  rmSync(dir, { recursive: true, force: true });
}
