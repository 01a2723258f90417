/**
 * Orbit in the peer comparison: real `orbit-server` processes (as bench/end-to-end.ts starts
 * them) on a private MariaDB database per scenario, one application with one namespace and the
 * queue `bench`. The queue's concurrency and rate limits are raised so they do not bind (as
 * end-to-end.ts does); the application's are the defaults (10,000 concurrent, 100,000 starts/s),
 * so both levels are enforced on every claim and start but neither decides.
 *
 * Enqueue phase: POST /v1/queues/bench/tasks with an Idempotency-Key from 16 producers over
 * keep-alive connections spread over the servers (or, bulk, POST …/tasks:batch of 1,000). Drain
 * phase: OrbitWorker sessions (sdk/worker.ts) with a no-op handler, spread over the servers.
 * After each scenario: every task SUCCEEDED with exactly one SUCCEEDED attempt (SQL), the
 * handler ran once per task, and every usage counter equals the recount (usage-recount.ts).
 */
import { Agent, request } from 'node:http';
import { createPoster, benchDatabase, fmt, percentile, PRODUCTION_BOUNDS } from '../common.ts';
import { createTenant, type TestTenant } from '../../test/helpers/tenants.ts';
import { startServerProcess, type ServerProcess } from '../../test/helpers/server-process.ts';
import { OrbitWorker } from '../../sdk/worker.ts';
import { formatDifference } from '../../server/cli/verify-report.ts';
import { countersVerify, tasksDisagreeingWithAttempts } from '../../server/store/quotas/usage-recount.ts';
import { sqlToMillis } from '../../server/time.ts';
import type { Database } from '../../server/store/database/database.ts';
import { setFloors } from '../../test/helpers/floors.ts';
import { cpuMeter, processIdOf } from './cpu.ts';
import { workMeter } from './work.ts';
import { chunks, phase, pooled, printRow, RunLedger, sleep, waitUntil, type Result, type Workload } from './shared.ts';

const QUEUE_LIMITS = { max_concurrency: 100_000, rate_per_second: 1_000_000 };

interface Orbit {
  db: Database;
  /** The database's name (its connections are found by it). */
  database: string;
  /** The MariaDB server's port (to tell its mariadbd from others on the machine). */
  port: string;
  tenant: TestTenant;
  servers: ServerProcess[];
  urls: string[];
  close(): Promise<void>;
}

/** ORBIT_BENCH_FLOORS=on: the runs with namespace floors configured (docs/quotas-and-locking.md#floors). */
const FLOORS = process.env.ORBIT_BENCH_FLOORS === 'on';
const BENCH_FLOORS = { reserved_unfinished_tasks: 1000, reserved_concurrency: 8, reserved_rate_per_second: 1000 };

async function startOrbit(w: Workload, options: { taskEvents?: boolean } = {}): Promise<Orbit> {
  const bench = await benchDatabase();
  try {
    const tenant = await createTenant(bench.db, { namespace: 'bench', queues: ['bench', 'warmup'] });
    await bench.db.exec('UPDATE orbit_queues SET max_concurrency = ?, rate_per_second = ?', [QUEUE_LIMITS.max_concurrency, QUEUE_LIMITS.rate_per_second]);
    if (FLOORS) {
      // Floors on the bench namespace and on a second, idle one: every admission, claim and Start
      // then keeps idle floors exact, and the fast paths' guards count the other's idle floor.
      const other = await createTenant(bench.db, { applicationId: tenant.applicationId, namespace: 'other', queues: ['other'] });
      for (const t of [tenant, other]) await setFloors(bench.db, t, BENCH_FLOORS);
    }
    const servers = await Promise.all(
      Array.from({ length: w.servers }, () =>
        startServerProcess(bench.url, { ORBIT_LOG_LEVEL: 'info', ORBIT_TASK_EVENTS: options.taskEvents === false ? 'off' : 'on', ...PRODUCTION_BOUNDS }),
      ),
    );
    return {
      db: bench.db,
      database: new URL(bench.url).pathname.replace(/^\//, ''),
      port: new URL(bench.url).port || '3306',
      tenant,
      servers,
      urls: servers.map((s) => s.url),
      async close() {
        await Promise.all(servers.map((s) => s.stop()));
        await bench.drop();
      },
    };
  } catch (error) {
    await bench.drop();
    throw error;
  }
}

/** The limits in force, for the run line: `application 1,000,000 unfinished / 10,000 concurrent / 100,000 starts/s; queue …`. */
/** `sessions` worker SDK sessions spread over the servers, each recording the tasks it ran; at most 5 problems are kept. */
function benchWorkers(
  orbit: { urls: string[]; tenant: { token: string } },
  options: { sessions: number; capacity: number; nodePrefix: string; ledger: RunLedger; problems: string[] },
  onCompleted: () => void,
): OrbitWorker[] {
  return Array.from(
    { length: options.sessions },
    (_, i) =>
      new OrbitWorker({
        baseUrl: orbit.urls[i % orbit.urls.length]!,
        token: orbit.tenant.token,
        node_id: `${options.nodePrefix}-${i}`,
        queues: ['bench'],
        capacity: options.capacity,
        maxPollIntervalMs: 20,
        handler: async (task) => {
          options.ledger.record(task.task_id);
          return undefined;
        },
        onEvent(event) {
          if (event.type === 'completed') onCompleted();
          else if ((event.type === 'attempt_dropped' || event.type === 'protocol_error') && options.problems.length < 5)
            options.problems.push(JSON.stringify(event));
        },
      }),
  );
}

export async function orbitLimits(db: Database): Promise<string> {
  const [a] = await db.rows<Record<string, string>>(
    'SELECT max_unfinished_tasks AS u, max_concurrency AS c, rate_per_second AS r FROM orbit_application_resources LIMIT 1',
  );
  const [q] = await db.rows<Record<string, string>>(
    "SELECT max_unfinished_tasks AS u, max_concurrency AS c, rate_per_second AS r FROM orbit_queues WHERE name = 'bench' LIMIT 1",
  );
  const f = (x: Record<string, string> | undefined) => `${fmt(Number(x?.u))} unfinished / ${fmt(Number(x?.c))} concurrent / ${fmt(Number(x?.r))} starts/s`;
  return `application ${f(a)}; queue ${f(q)}`;
}

/** Prometheus samples of all servers, summed by `name{labels}`. */
async function scrape(urls: string[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const url of urls) {
    const text = await (await fetch(`${url}/metrics`)).text();
    for (const line of text.split('\n')) {
      const m = /^(orbit_(?:db_transaction_seconds_(?:sum|count)|claims_total|claimed_attempts_total|fast_path_total|starts_total)(?:\{[^}]*\})?) (\S+)$/.exec(
        line,
      );
      if (m) out.set(m[1]!, (out.get(m[1]!) ?? 0) + Number(m[2]));
    }
  }
  return out;
}

/** `submit 40 tx avg 12.3 ms, claim …; claims 16.2 attempts each, 56 empty; fast-path misses …` (transactions of all servers) */
function describeMetrics(before: Map<string, number>, after: Map<string, number>): string {
  const d = (key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0);
  const ops: string[] = [];
  for (const key of after.keys()) {
    const m = /^orbit_db_transaction_seconds_count\{operation="(\w+)"\}$/.exec(key);
    if (!m) continue;
    const count = d(key);
    if (count <= 0) continue;
    const sum = d(`orbit_db_transaction_seconds_sum{operation="${m[1]}"}`);
    ops.push(`${m[1]} ${fmt(count)} tx avg ${fmt((sum / count) * 1000, 1)} ms`);
  }
  const granted = d('orbit_claims_total{result="granted"}');
  const empty = d('orbit_claims_total{result="empty"}');
  const claimed = d('orbit_claimed_attempts_total');
  const misses: string[] = [];
  for (const key of after.keys()) {
    const m = /^orbit_fast_path_total\{operation="(\w+)",result="miss"\}$/.exec(key);
    if (m && d(key) > 0) misses.push(`${m[1]} ${fmt(d(key))}`);
  }
  const rateLimited = d('orbit_starts_total{result="rate_limited"}');
  return [
    ops.join(', ') || 'no transactions',
    granted + empty > 0 ? `claims ${fmt(claimed / Math.max(granted, 1), 1)} attempts each, ${fmt(empty)} empty` : '',
    misses.length ? `fast-path misses ${misses.join(', ')}` : '',
    rateLimited ? `${fmt(rateLimited)} starts RATE_LIMITED` : '',
  ]
    .filter(Boolean)
    .join('; ');
}

/** The mariadbd this run's database lives on: the one started with its port, or the only one on 3306. */
function oursMariadb(orbit: Orbit) {
  return (cmdline: string) =>
    cmdline.includes('--port=') ? cmdline.includes(`--port=${orbit.port} `) || cmdline.endsWith(`--port=${orbit.port}`) : orbit.port === '3306';
}

function cpuOf(orbit: Orbit) {
  return cpuMeter({ names: ['mariadbd'], filters: { mariadbd: oursMariadb(orbit) }, pids: { 'orbit-server': orbit.servers.map((s) => s.child.pid ?? 0) } });
}

/** The per-task work of a phase (work.ts). */
function workOf(orbit: Orbit) {
  return workMeter({
    db: orbit.db,
    database: orbit.database,
    mariadbPid: processIdOf('mariadbd', oursMariadb(orbit)),
    servers: orbit.servers.map((s, i) => ({ pid: s.child.pid ?? 0, url: orbit.urls[i] as string })),
  });
}

/** POST with a JSON answer (for the bulk endpoint). */
function createJsonPoster(sockets: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: sockets });
  return {
    post(url: string, path: string, token: string, body: string): Promise<{ status: number; body: string }> {
      return new Promise((resolve, reject) => {
        const req = request(`${url}${path}`, {
          method: 'POST',
          agent,
          headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
        });
        req.on('response', (res) => {
          const parts: Buffer[] = [];
          res.on('data', (c: Buffer) => parts.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString() }));
        });
        req.on('error', reject);
        req.end(body);
      });
    },
    close: () => agent.destroy(),
  };
}

async function warmUp(orbit: Orbit): Promise<void> {
  const { post, close } = createPoster(8);
  try {
    await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        post(orbit.urls[i % orbit.urls.length]!, '/v1/queues/warmup/tasks', orbit.tenant.token, `warm-${i}`, `{"payload":{"warm":${i}}}`),
      ),
    );
  } finally {
    close();
  }
}

interface Drain {
  seconds: number;
  completed: number;
  ledger: RunLedger;
  problems: string[];
  workers: OrbitWorker[];
}

/** Starts `sessions` workers of `capacity`; resolves when `expected` completions were reported (or the timeout). */
async function drain(w: Workload, orbit: Orbit, sessions: number, capacity: number, expected: number, keepRunning = false): Promise<Drain> {
  const ledger = new RunLedger();
  const problems: string[] = [];
  let completed = 0;
  let last = 0;
  const t0 = performance.now();
  const workers = benchWorkers(orbit, { sessions, capacity, nodePrefix: 'bench', ledger, problems }, () => {
    completed += 1;
    last = performance.now();
  });
  await Promise.all(workers.map((wk) => wk.start()));
  const done = await waitUntil(() => completed >= expected, w.phaseTimeoutMs);
  if (!keepRunning) await Promise.all(workers.map((wk) => wk.stop({ timeoutMs: 5000 })));
  return { seconds: done && expected > 0 ? (last - t0) / 1000 : NaN, completed, ledger, problems, workers };
}

/** The checks after a scenario, one line. */
async function checkOrbit(db: Database, label: string, ledger: RunLedger, accepted: number, problems: string[]): Promise<string> {
  const [row] = await db.rows<Record<string, string | null>>(`
    SELECT COUNT(*) AS tasks, SUM(t.state = 'SUCCEEDED') AS succeeded, SUM(x.ok = 1) AS exactly_one, SUM(x.n) AS attempts
      FROM orbit_tasks t
      JOIN orbit_queues q ON q.queue_id = t.queue_id AND q.name = 'bench'
      LEFT JOIN (SELECT task_id, COUNT(*) AS n, SUM(state = 'SUCCEEDED') AS ok FROM orbit_attempts GROUP BY task_id) x ON x.task_id = t.task_id`);
  const tasks = Number(row?.tasks ?? 0);
  const succeeded = Number(row?.succeeded ?? 0);
  const exactlyOne = Number(row?.exactly_one ?? 0);
  const attempts = Number(row?.attempts ?? 0);
  const report = await countersVerify(db);
  const disagree = await tasksDisagreeingWithAttempts(db);
  const sqlOk = tasks === accepted && succeeded === tasks && exactlyOne === tasks;
  const countersOk = report.differences.length === 0 && disagree === 0;
  const ledgerOk = ledger.distinct === tasks && ledger.duplicates === 0;
  const ok = sqlOk && countersOk && ledgerOk;
  return (
    `${label}: ${fmt(succeeded)}/${fmt(tasks)} tasks SUCCEEDED, ${fmt(exactlyOne)} with exactly one SUCCEEDED attempt (${fmt(attempts)} attempts); ` +
    `handler ran ${fmt(ledger.runs)} times, ${ledger.duplicates} duplicates; ` +
    `counters = recount (${report.applications} application, ${report.queues} queues, ${report.permits} permits: ${report.differences.length} differences, ${disagree} task/attempt disagreements) - ${ok ? 'ok' : 'MISMATCH'}` +
    (report.differences.length ? `\n    ${report.differences.slice(0, 10).map(formatDifference).join('\n    ')}` : '') +
    (problems.length ? `\n    worker events: ${problems.join(' ')}` : '')
  );
}

async function queueTaskCount(db: Database): Promise<number> {
  const [row] = await db.rows<{ n: string }>("SELECT COUNT(*) AS n FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id AND q.name = 'bench'");
  return Number(row?.n ?? 0);
}

export interface OrbitRun extends Result {
  /** For the latency line: the single-submit rate it measured. */
  enqueueRate: number;
}

/** One Orbit row: `sessions × capacity`, single submissions (or bulk). Returns null-figure rows with `skipped` when bulk is missing. */
export async function benchOrbit(
  w: Workload,
  options: { sessions: number; capacity: number; bulk?: boolean; taskEvents?: boolean; onLimits?: (line: string) => void },
): Promise<OrbitRun> {
  const shape = `${options.sessions}×${options.capacity}`;
  const quiet = options.taskEvents === false ? ' no events' : '';
  const system = options.bulk ? `Orbit bulk ${shape}${quiet}` : `Orbit ${shape}${quiet}`;
  const tableName = options.bulk
    ? `Orbit, bulk submit (POST /v1/queues/{queue}/tasks:batch, up to ${fmt(w.batchSize)} items), ${options.sessions} sessions × capacity ${options.capacity}`
    : `Orbit, ${options.sessions} worker session${options.sessions > 1 ? 's' : ''} × capacity ${options.capacity}${options.taskEvents === false ? ', task lifecycle events off (ORBIT_TASK_EVENTS=off)' : ''}`;
  const orbit = await startOrbit(w, { taskEvents: options.taskEvents });
  try {
    options.onLimits?.(await orbitLimits(orbit.db));
    await warmUp(orbit);
    const m0 = await scrape(orbit.urls);
    const workEnqueue = await workOf(orbit);
    const cpuEnqueue = cpuOf(orbit);
    const statuses = new Map<string, number>();
    let enqueueSeconds: number;
    let enqueueNote: string;
    if (options.bulk) {
      const { post, close } = createJsonPoster(w.batchesInFlight);
      try {
        const batches = chunks(w.tasks, w.batchSize);
        const body = (b: number) => {
          const [start, end] = batches[b]!;
          const tasks: string[] = [];
          for (let n = start; n < end; n++) tasks.push(`{"idempotency_key":"task-${n}","payload":{"n":${n}}}`);
          return `{"tasks":[${tasks.join(',')}]}`;
        };
        // The first batch alone: it tells whether this build has the endpoint at all.
        const t0 = performance.now();
        const probe = await post(orbit.urls[0]!, '/v1/queues/bench/tasks:batch', orbit.tenant.token, body(0));
        if (probe.status === 404 || probe.status === 405) {
          const reason = `skipped: bulk submit not available in this build (POST /v1/queues/bench/tasks:batch answered ${probe.status})`;
          console.log(`${system.padEnd(34)} ${reason}`);
          return { system: tableName, enqueue: null, drain: null, skipped: reason, checks: [], enqueueRate: NaN };
        }
        const tally = (answer: { status: number; body: string }) => {
          if (answer.status !== 200) {
            statuses.set(`HTTP ${answer.status}`, (statuses.get(`HTTP ${answer.status}`) ?? 0) + 1);
            if (statuses.size === 1 && (statuses.get(`HTTP ${answer.status}`) ?? 0) === 1)
              console.error(`bulk submit answered ${answer.status}: ${answer.body.slice(0, 300)}`);
            return;
          }
          // { data: { results: [{ idempotency_key, status: accepted|replayed|refused, error? }], accepted, replayed, refused } }
          const parsed = JSON.parse(answer.body) as { data?: { results?: unknown }; results?: unknown };
          const results = ((parsed.data ?? parsed).results ?? []) as Array<{ status?: unknown; error?: { code?: unknown } }>;
          for (const r of results) {
            if (r.status === 'accepted') continue;
            const key = `${String(r.status ?? 'item')}${r.error?.code ? ` ${String(r.error.code)}` : ''}`;
            statuses.set(key, (statuses.get(key) ?? 0) + 1);
          }
        };
        tally(probe);
        await pooled(batches.length - 1, w.batchesInFlight, async (i, lane) => {
          tally(await post(orbit.urls[lane % orbit.urls.length]!, '/v1/queues/bench/tasks:batch', orbit.tenant.token, body(i + 1)));
        });
        enqueueSeconds = (performance.now() - t0) / 1000;
        enqueueNote = `, batches of ${fmt(w.batchSize)}, ${w.batchesInFlight} in flight`;
      } finally {
        close();
      }
    } else {
      const { post, close } = createPoster(w.producers);
      try {
        enqueueSeconds = await pooled(w.tasks, w.producers, async (n, lane) => {
          const status = await post(orbit.urls[lane % orbit.urls.length]!, '/v1/queues/bench/tasks', orbit.tenant.token, `task-${n}`, `{"payload":{"n":${n}}}`);
          if (status !== 200) statuses.set(`HTTP ${status}`, (statuses.get(`HTTP ${status}`) ?? 0) + 1);
        });
      } finally {
        close();
      }
      enqueueNote = `, ${w.producers} producers`;
    }
    const enqueueCpu = cpuEnqueue.stop();
    const m1 = await scrape(orbit.urls);
    const accepted = await queueTaskCount(orbit.db);
    const enqueueWork = await workEnqueue.stop(accepted);
    const refused = statuses.size ? `, not accepted ${JSON.stringify(Object.fromEntries(statuses))}` : '';

    const workDrain = await workOf(orbit);
    const cpuDrain = cpuOf(orbit);
    const d = await drain(w, orbit, options.sessions, options.capacity, accepted);
    const drainCpu = cpuDrain.stop();
    const m2 = await scrape(orbit.urls);
    const drainWork = await workDrain.stop(accepted);
    printRow(
      system,
      phase('enqueue', accepted, enqueueSeconds, `${enqueueNote}${refused}`),
      Number.isNaN(d.seconds)
        ? `drain TIMED OUT (${fmt(d.completed)} of ${fmt(accepted)} completed)`
        : phase('drain', accepted, d.seconds, `, ${options.sessions} session${options.sessions > 1 ? 's' : ''} × capacity ${options.capacity}`),
      `${describeMetrics(m0, m1)} | ${enqueueCpu}`,
      `${describeMetrics(m1, m2)} | ${drainCpu}`,
    );
    for (const [name, lines] of [
      ['enqueue', enqueueWork],
      ['drain', drainWork],
    ] as const) {
      for (const line of lines) console.log(`${''.padEnd(22)} ${name.padEnd(7)} ${line}`);
    }
    const check = await checkOrbit(orbit.db, system, d.ledger, accepted, d.problems);
    return {
      system: tableName,
      enqueue: accepted / enqueueSeconds,
      drain: accepted / d.seconds,
      checks: [check + (accepted !== w.tasks ? ` (only ${fmt(accepted)} of ${fmt(w.tasks)} submissions accepted)` : '')],
      enqueueRate: accepted / enqueueSeconds,
    };
  } finally {
    await orbit.close();
  }
}

/**
 * Submit → start latency at a given offered rate: a paced producer (open loop: submissions are
 * sent on schedule whether or not earlier ones have answered, up to `producers` connections)
 * while `sessions` × `capacity` workers drain. Latency = the attempt's started_at minus the
 * task's created_at, both from the database.
 */
export async function orbitLatency(
  w: Workload,
  rate: number,
  sessions: number,
  capacity: number,
  rateSource = '~50% of the peak single-submit rate',
): Promise<{ line: string; check: string }> {
  const orbit = await startOrbit(w);
  const { post, close } = createPoster(w.producers);
  try {
    await warmUp(orbit);
    const total = Math.max(1, Math.round(rate * w.latencySeconds));
    const ledger = new RunLedger();
    let completed = 0;
    const problems: string[] = [];
    const workers = benchWorkers(orbit, { sessions, capacity, nodePrefix: 'latency', ledger, problems }, () => {
      completed += 1;
    });
    await Promise.all(workers.map((wk) => wk.start()));
    const httpLatencies: number[] = [];
    let refused = 0;
    const inFlight = new Set<Promise<void>>();
    const t0 = performance.now();
    let sent = 0;
    while (sent < total) {
      const due = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * rate) + 1);
      while (sent < due) {
        const n = sent++;
        const s0 = performance.now();
        const p: Promise<void> = post(
          orbit.urls[n % orbit.urls.length]!,
          '/v1/queues/bench/tasks',
          orbit.tenant.token,
          `paced-${n}`,
          `{"payload":{"n":${n}}}`,
        ).then((status) => {
          httpLatencies.push(performance.now() - s0);
          if (status !== 200) refused += 1;
          inFlight.delete(p);
        });
        inFlight.add(p);
      }
      await sleep(1);
    }
    await Promise.all(inFlight);
    const submitSeconds = (performance.now() - t0) / 1000;
    const accepted = total - refused;
    await waitUntil(() => completed >= accepted, w.phaseTimeoutMs);
    await Promise.all(workers.map((wk) => wk.stop({ timeoutMs: 5000 })));
    const rows = await orbit.db.rows<{ created_at: string; started_at: string }>(`
      SELECT t.created_at, a.started_at FROM orbit_tasks t
        JOIN orbit_queues q ON q.queue_id = t.queue_id AND q.name = 'bench'
        JOIN orbit_attempts a ON a.task_id = t.task_id AND a.state = 'SUCCEEDED'`);
    const latencies = rows.map((r) => sqlToMillis(r.started_at) - sqlToMillis(r.created_at)).sort((a, b) => a - b);
    httpLatencies.sort((a, b) => a - b);
    const line =
      `Orbit submit → start latency at ${rateSource}: p50 ${fmt(percentile(latencies, 50), 1)} ms   p99 ${fmt(percentile(latencies, 99), 1)} ms ` +
      `(${fmt(rate)}/s offered for ${w.latencySeconds} s, ${fmt(accepted / submitSeconds)}/s accepted, ${fmt(latencies.length)} tasks, ${sessions} sessions × capacity ${capacity} draining; ` +
      `the submit request itself p50 ${fmt(percentile(httpLatencies, 50), 1)} ms p99 ${fmt(percentile(httpLatencies, 99), 1)} ms)`;
    const check = await checkOrbit(orbit.db, 'Orbit latency run', ledger, accepted, problems);
    return { line, check };
  } finally {
    close();
    await orbit.close();
  }
}
