/**
 * `npm run bench`: the whole path - submit → claim → start → complete - with real server
 * processes and worker sessions (the worker SDK), for ONE application. Prints tasks per second
 * end to end (first submission to last completion), p50/p99 submit-to-start latency (from the
 * database's own timestamps), and the database's hot-row ceiling measured in the same run.
 *
 * Options (environment): BENCH_TASKS (default 20000), BENCH_SERVERS (2), BENCH_WORKERS (4
 * sessions), BENCH_CAPACITY (64 per session), BENCH_SUBMITTERS (32 requests in flight).
 */
import { benchDatabase, createPoster, fmt, hotRowCeiling, machine, percentile, PRODUCTION_BOUNDS } from './common.ts';
import { createTenant } from '../test/helpers/tenants.ts';
import { startServerProcess } from '../test/helpers/server-process.ts';
import { OrbitWorker } from '../sdk/worker.ts';
import { sqlToMillis } from '../server/time.ts';

const TASKS = Number(process.env.BENCH_TASKS ?? 20000);
const SERVERS = Number(process.env.BENCH_SERVERS ?? 2);
const WORKERS = Number(process.env.BENCH_WORKERS ?? 4);
const CAPACITY = Number(process.env.BENCH_CAPACITY ?? 64);
const SUBMITTERS = Number(process.env.BENCH_SUBMITTERS ?? 32);

const { post, close: closePoster } = createPoster(SUBMITTERS);

const bench = await benchDatabase();
try {
  console.log(`machine: ${await machine(bench.db)}`);
  console.log(
    `run: ${fmt(TASKS)} tasks, ${SERVERS} server processes, ${WORKERS} worker sessions × capacity ${CAPACITY}, ${SUBMITTERS} submissions in flight, one application`,
  );
  const tenant = await createTenant(bench.db, { namespace: 'bench', queues: ['bench'] });
  // Room for the whole run at the queue level (defaults: 1000 concurrent, 10000 starts/s).
  await bench.db.exec('UPDATE orbit_queues SET max_concurrency = 100000, rate_per_second = 1000000');
  const servers = await Promise.all(Array.from({ length: SERVERS }, () => startServerProcess(bench.url, { ORBIT_LOG_LEVEL: 'info', ...PRODUCTION_BOUNDS })));
  const urls = servers.map((s) => s.url);
  let completed = 0;
  let lastCompletion = 0;
  const workers = Array.from(
    { length: WORKERS },
    (_, i) =>
      new OrbitWorker({
        baseUrl: urls[i % urls.length] as string,
        token: tenant.token,
        node_id: `bench-${i}`,
        queues: ['bench'],
        capacity: CAPACITY,
        maxPollIntervalMs: 20,
        handler: async () => undefined,
        onEvent(event) {
          if (event.type === 'completed') {
            completed += 1;
            lastCompletion = Date.now();
          } else if (event.type === 'attempt_dropped' || event.type === 'protocol_error') console.error(JSON.stringify(event));
        },
      }),
  );
  try {
    await Promise.all(workers.map((w) => w.start()));
    const started = Date.now();
    let next = 0;
    let refused = 0;
    await Promise.all(
      Array.from({ length: SUBMITTERS }, async (_, client) => {
        for (let n = next++; n < TASKS; n = next++) {
          const status = await post(urls[client % urls.length] as string, '/v1/queues/bench/tasks', tenant.token, `e2e-${n}`, `{"payload":{"n":${n}}}`);
          if (status !== 200) refused += 1;
        }
      }),
    );
    const submittedAt = Date.now();
    while (completed < TASKS - refused && Date.now() - submittedAt < 120_000) await new Promise((r) => setTimeout(r, 20));
    const elapsed = (lastCompletion - started) / 1000;
    const rows = await bench.db.rows<{ created_at: string; started_at: string }>(
      "SELECT t.created_at, a.started_at FROM orbit_tasks t JOIN orbit_attempts a ON a.task_id = t.task_id WHERE a.state = 'SUCCEEDED'",
    );
    const latencies = rows.map((r) => sqlToMillis(r.started_at) - sqlToMillis(r.created_at)).sort((a, b) => a - b);
    const [states] = await bench.db.rows<{ succeeded: string }>("SELECT SUM(state = 'SUCCEEDED') AS succeeded FROM orbit_tasks");
    console.log(
      `end to end                ${fmt(completed / elapsed).padStart(7)} tasks/s   (${fmt(completed)} completed in ${fmt(elapsed, 2)} s; submissions alone took ${fmt((submittedAt - started) / 1000, 2)} s = ${fmt(TASKS / ((submittedAt - started) / 1000))}/s; ${refused} refused; ${states?.succeeded} SUCCEEDED in the database)`,
    );
    console.log(`submit → start latency   p50 ${fmt(percentile(latencies, 50), 1)} ms   p99 ${fmt(percentile(latencies, 99), 1)} ms`);
    if (process.env.BENCH_VERBOSE) {
      for (const url of urls) {
        const metrics = await (await fetch(`${url}/metrics`)).text();
        const sums = new Map<string, { sum: number; count: number }>();
        for (const line of metrics.split('\n')) {
          const m = /^orbit_db_transaction_seconds_(sum|count)\{operation="(\w+)"\} (\S+)/.exec(line);
          if (!m) continue;
          const entry = sums.get(m[2] as string) ?? { sum: 0, count: 0 };
          entry[m[1] as 'sum' | 'count'] = Number(m[3]);
          sums.set(m[2] as string, entry);
        }
        console.log(url, [...sums].map(([op, e]) => `${op}: ${e.count} tx, avg ${fmt((e.sum / e.count) * 1000, 1)} ms`).join('; '));
      }
    }
  } finally {
    await Promise.all(workers.map((w) => w.stop({ timeoutMs: 2000 })));
    await Promise.all(servers.map((s) => s.stop()));
  }
  const ceiling = await hotRowCeiling(bench.url, SUBMITTERS);
  console.log(`database ceiling          ${fmt(ceiling).padStart(7)} single-row counter UPDATE commits/s at ${SUBMITTERS} connections`);
} finally {
  await bench.drop();
  closePoster();
}
