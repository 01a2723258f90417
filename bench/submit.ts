/**
 * `npm run bench:submit`: accepted submissions per second and latency, with 1 and with 8
 * namespaces of ONE application (so every submission takes the same application quota row),
 * against real orbit-server processes; then the database's own hot-row ceiling at the same
 * client concurrency, measured in the same run.
 *
 * Options (environment): BENCH_SECONDS (default 8), BENCH_CONCURRENCY (default 32 requests in
 * flight), BENCH_SERVERS (default 2 server processes).
 */
import { benchDatabase, createPoster, fmt, hotRowCeiling, machine, percentile, PRODUCTION_BOUNDS } from './common.ts';
import { createTenant, type TestTenant } from '../test/helpers/tenants.ts';
import { startServerProcess } from '../test/helpers/server-process.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const SERVERS = Number(process.env.BENCH_SERVERS ?? 2);

const { post, close: closePoster } = createPoster(CONCURRENCY);

async function run(label: string, urls: string[], tenants: TestTenant[]): Promise<void> {
  const latencies: number[] = [];
  let accepted = 0;
  let refused = 0;
  const statuses = new Map<number, number>();
  let counter = 0;
  const end = Date.now() + SECONDS * 1000;
  const started = Date.now();
  const keyPrefix = label.replace(/[^a-z0-9]+/gi, '-');
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, client) => {
      while (Date.now() < end) {
        const n = counter++;
        const tenant = tenants[n % tenants.length] as TestTenant;
        const t0 = performance.now();
        const status = await post(urls[client % urls.length] as string, '/v1/queues/bench/tasks', tenant.token, `${keyPrefix}-${n}`, `{"payload":{"n":${n}}}`);
        latencies.push(performance.now() - t0);
        if (status === 200) accepted += 1;
        else {
          refused += 1;
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      }
    }),
  );
  const elapsed = (Date.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  console.log(
    `${label.padEnd(26)} ${fmt(accepted / elapsed).padStart(7)} accepted/s   p50 ${fmt(percentile(latencies, 50), 1).padStart(6)} ms   p99 ${fmt(percentile(latencies, 99), 1).padStart(6)} ms   (${fmt(accepted)} accepted, ${refused} refused${refused ? ` ${JSON.stringify(Object.fromEntries(statuses))}` : ''}, ${CONCURRENCY} in flight, ${urls.length} server process${urls.length > 1 ? 'es' : ''})`,
  );
}

const bench = await benchDatabase();
try {
  console.log(`machine: ${await machine(bench.db)}`);
  const tenants: TestTenant[] = [];
  tenants.push(await createTenant(bench.db, { namespace: 'ns-0', queues: ['bench'] }));
  for (let i = 1; i < 8; i++) tenants.push(await createTenant(bench.db, { applicationId: tenants[0]!.applicationId, namespace: `ns-${i}`, queues: ['bench'] }));
  const servers = await Promise.all(Array.from({ length: SERVERS }, () => startServerProcess(bench.url, { ORBIT_LOG_LEVEL: 'info', ...PRODUCTION_BOUNDS })));
  const urls = servers.map((s) => s.url);
  try {
    // Warm up connections and JIT.
    await Promise.all(
      Array.from({ length: 200 }, (_, i) => post(urls[i % urls.length] as string, '/v1/queues/bench/tasks', tenants[0]!.token, `warm-${i}`, '{"payload":{}}')),
    );
    await run('1 namespace', urls, tenants.slice(0, 1));
    await run('8 namespaces, 1 application', urls, tenants);
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
  const ceiling = await hotRowCeiling(bench.url, CONCURRENCY);
  console.log(`${'database ceiling'.padEnd(26)} ${fmt(ceiling).padStart(7)} single-row counter UPDATE commits/s at ${CONCURRENCY} connections`);
} finally {
  await bench.drop();
  closePoster();
}
