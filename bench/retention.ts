/**
 * `npm run bench:retention`: does pruning keep off the hot path? One application with
 * ORBIT_BENCH_HISTORY (1,000,000) finished tasks of two days ago - each with its attempt, its
 * receipt and three events (submitted, started, succeeded), as the service writes them - and a
 * policy of one day, so that all of it is due. Then, in alternating pairs (ORBIT_BENCH_PAIRS, 2):
 * two orbit-server processes with pruning off (ORBIT_PRUNE_INTERVAL_MS=0), then on (the
 * defaults), each time the benchmark's workload - 16 producers submitting 20,000 tasks one by
 * one (submit latency p50 / p99), then one worker session of capacity 16 draining them.
 *
 * Printed per phase: enqueue rate and submit p50 / p99, drain rate; with pruning on, the rows it
 * removed per second (from the servers' orbit_pruned_rows_total) against the rows the benchmark
 * itself wrote per second (tasks, attempts, receipts, events), and the history left. The
 * targets (issue): drain within 10 % of the drain without pruning, submit p99 not doubled,
 * pruning at least the benchmark's own rate.
 */
import { benchDatabase, createPoster, fmt, machine, percentile, PRODUCTION_BOUNDS } from './common.ts';
import { createTenant } from '../test/helpers/tenants.ts';
import { startServerProcess, type ServerProcess } from '../test/helpers/server-process.ts';
import { OrbitWorker } from '../sdk/worker.ts';
import { cpuMeter } from './peers/cpu.ts';
import { PruneLoop } from '../server/loops/prune.ts';
import { silentLogger } from '../server/log.ts';
import { retentionPoliciesList } from '../server/store/retention/retention-policies.ts';

const HISTORY = Number(process.env.ORBIT_BENCH_HISTORY ?? 1_000_000);
const PAIRS = Number(process.env.ORBIT_BENCH_PAIRS ?? 2);
const TASKS = Number(process.env.ORBIT_BENCH_TASKS ?? 20_000);
const PRODUCERS = 16;
/** Finished tasks pruned alone first (nothing else running): the work per pruned row. */
const ALONE = Number(process.env.ORBIT_BENCH_PRUNE_ALONE ?? 50_000);
const CHUNK = 100_000;

const bench = await benchDatabase({ timeoutMs: 0 });
const { post, close: closePoster } = createPoster(PRODUCERS);
try {
  console.log(`machine: ${await machine(bench.db)}`);
  const tenant = await createTenant(bench.db, { namespace: 'bench', queues: ['bench'], resourceAccess: true });
  await bench.db.exec('UPDATE orbit_queues SET max_concurrency = 100000, rate_per_second = 1000000, max_unfinished_tasks = 10000000');
  await bench.db.exec('UPDATE orbit_application_resources SET max_unfinished_tasks = 10000000');
  const [ids] = await bench.db.rows<{ app: Buffer; ns: Buffer; queue: Buffer }>(
    'SELECT q.application_id AS app, q.namespace_id AS ns, q.queue_id AS queue FROM orbit_queues q WHERE q.name = ?',
    ['bench'],
  );
  const { app, ns, queue } = ids as { app: Buffer; ns: Buffer; queue: Buffer };

  // The history: finished two days ago, a second apart per 16 tasks; ids as the server makes them.
  const filled = Date.now();
  for (let from = 1; from <= HISTORY; from += CHUNK) {
    const to = Math.min(HISTORY, from + CHUNK - 1);
    const ago = `NOW(6) - INTERVAL 2 DAY - INTERVAL ((${HISTORY} - seq) DIV 16) SECOND`;
    const taskId = `UNHEX(CONCAT('00', LPAD(HEX(seq), 30, '0')))`;
    await bench.db.exec(
      `INSERT INTO orbit_tasks (task_id, application_id, namespace_id, queue_id, state, priority, payload, attempts, max_attempts, on_unknown_outcome, idempotency_key,
                                created_at, available_at, deadline_at, finished_at, updated_at)
       SELECT ${taskId}, ?, ?, ?, 'SUCCEEDED', 5, CONCAT('{"n":', seq, '}'), 1, 3, 'retry', CONCAT('old-', seq), ${ago}, ${ago}, ${ago} + INTERVAL 1 DAY, ${ago}, ${ago}
         FROM seq_${from}_to_${to}`,
      [app, ns, queue],
    );
    await bench.db.exec(
      `INSERT INTO orbit_attempts (attempt_id, application_id, namespace_id, queue_id, task_id, session_id, attempt_number, state, claimed_at, started_at, lease_expires_at, deadline_at, finished_at)
       SELECT UNHEX(CONCAT('01', LPAD(HEX(seq), 30, '0'))), ?, ?, ?, ${taskId}, UNHEX(REPEAT('ab', 16)), 1, 'SUCCEEDED', ${ago}, ${ago}, ${ago}, ${ago} + INTERVAL 1 DAY, ${ago}
         FROM seq_${from}_to_${to}`,
      [app, ns, queue],
    );
    await bench.db.exec(
      `INSERT INTO orbit_idempotency_receipts (namespace_id, idempotency_key, application_id, operation, request_sha256, resource_id, response, created_at)
       SELECT ?, CONCAT('old-', seq), ?, 'submitTask', UNHEX(SHA2(seq, 256)), ${taskId}, CONCAT('{"task":{"task_id":"', HEX(${taskId}), '"},"deduplicated":false}'), ${ago}
         FROM seq_${from}_to_${to}`,
      [ns, app],
    );
    await bench.db.exec(
      `INSERT INTO orbit_events (event_id, application_id, namespace_id, type, subject, data, occurred_at, queue_name)
       SELECT UNHEX(CONCAT(LPAD(HEX(k.n), 2, '0'), LPAD(HEX(seq), 30, '0'))), ?, ?, k.type, HEX(${taskId}), CONCAT('{"task_id":"', HEX(${taskId}), '","queue":"bench"}'), ${ago}, 'bench'
         FROM seq_${from}_to_${to} JOIN (SELECT 2 AS n, 'task.submitted' AS type UNION ALL SELECT 3, 'task.started' UNION ALL SELECT 4, 'task.succeeded') k
        ORDER BY seq, k.n`,
      [app, ns],
    );
  }
  await bench.db.exec('ANALYZE TABLE orbit_tasks, orbit_attempts, orbit_idempotency_receipts, orbit_events');
  console.log(`history: ${fmt(HISTORY)} finished tasks with attempts, receipts and 3 events each, written in ${fmt((Date.now() - filled) / 1000, 1)} s`);
  // What a task leaves behind, for sizing (InnoDB's figures after ANALYZE: data and indexes).
  const sizes = await bench.db.rows<{ name: string; bytes: string }>(
    `SELECT TABLE_NAME AS name, DATA_LENGTH + INDEX_LENGTH AS bytes FROM information_schema.TABLES
      WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('orbit_tasks', 'orbit_attempts', 'orbit_idempotency_receipts', 'orbit_events') ORDER BY TABLE_NAME`,
  );
  const total = sizes.reduce((n, r) => n + Number(r.bytes), 0);
  console.log(
    `bytes per finished task: ${fmt(total / HISTORY)} in all (${sizes.map((r) => `${r.name} ${fmt(Number(r.bytes) / HISTORY)}`).join(', ')}; a payload of ~10 bytes, no result)`,
  );
  // One day for finished tasks, events and receipts: the whole history is due, nothing of the run.
  await bench.db.exec(
    'UPDATE orbit_retention_policies SET finished_task_retention_seconds = 86400, event_retention_seconds = 86400, receipt_retention_seconds = 86400 WHERE application_id = ?',
    [app],
  );

  // Pruning alone: the loop's own statements, unthrottled, on an idle machine - what a pruned row costs.
  const status = async () =>
    Object.fromEntries(
      (
        await bench.db.rows<{ Variable_name: string; Value: string }>(
          "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_rows_deleted', 'Innodb_rows_read', 'Handler_read_key', 'Handler_read_next', 'Handler_read_rnd_next', 'Questions')",
        )
      ).map((r) => [r.Variable_name, Number(r.Value)]),
    );
  if (ALONE > 0) {
    const [{ policy } = { policy: null }] = await retentionPoliciesList(bench.db, app);
    if (!policy) throw new Error('no policy');
    const loop = new PruneLoop({ db: bench.db, log: silentLogger(), metrics: null, intervalMs: 1000, batchRows: 500, maxShare: 1 });
    const s0 = await status();
    const meter = cpuMeter({ names: ['mariadbd'] });
    const t0 = performance.now();
    let rows = 0;
    let tasks = 0;
    while (tasks < ALONE) {
      const turn = await loop.turn(app, policy);
      rows += Object.values(turn.counts).reduce((a, b) => a + b, 0);
      tasks += turn.counts.orbit_tasks;
      if (!turn.more) break;
    }
    const seconds = (performance.now() - t0) / 1000;
    const cores = meter.stop();
    const s1 = await status();
    const per = (k: string) => fmt(((s1[k] ?? 0) - (s0[k] ?? 0)) / rows, 2);
    const mariadb = Number(/mariadbd ([\d.]+)/.exec(cores)?.[1] ?? 0);
    console.log(
      `pruning alone: ${fmt(rows)} rows (${fmt(tasks)} tasks with theirs) in ${fmt(seconds, 1)} s = ${fmt(rows / seconds)} rows/s; MariaDB ${fmt(((mariadb * seconds) / rows) * 1e6)} µs of CPU per row; ` +
        `per row: rows read ${per('Innodb_rows_read')}, key lookups ${per('Handler_read_key')}, index next ${per('Handler_read_next')}, scans ${per('Handler_read_rnd_next')}, statements ${fmt(((s1.Questions ?? 0) - (s0.Questions ?? 0)) / rows, 3)} | ${cores}`,
    );
  }

  const historyLeft = async () => {
    const [row] = await bench.db.rows<{ n: string }>(
      'SELECT COUNT(*) AS n FROM orbit_tasks WHERE application_id = ? AND finished_at < NOW(6) - INTERVAL 1 DAY',
      [app],
    );
    return Number(row?.n);
  };
  const prunedBy = async (servers: ServerProcess[]) => {
    let n = 0;
    for (const s of servers) {
      const text = await (await fetch(`${s.url}/metrics`)).text();
      for (const m of text.matchAll(/^orbit_pruned_rows_total\{table="[a-z_]+"\} (\d+)$/gm)) n += Number(m[1]);
    }
    return n;
  };
  const rowsOf = async () => {
    const [row] = await bench.db.rows<Record<string, string>>(
      `SELECT (SELECT COUNT(*) FROM orbit_tasks WHERE finished_at IS NULL OR finished_at > NOW(6) - INTERVAL 1 DAY) AS tasks,
              (SELECT COUNT(*) FROM orbit_events WHERE occurred_at > NOW(6) - INTERVAL 1 DAY) AS events`,
    );
    return row;
  };

  let run = 0;
  const results: Array<{ pruning: boolean; enqueue: number; p50: number; p99: number; drain: number; pruned: number; written: number; seconds: number }> = [];
  for (let pair = 0; pair < PAIRS; pair++) {
    for (const pruning of [false, true]) {
      run += 1;
      const env = { ORBIT_LOG_LEVEL: 'info', ...PRODUCTION_BOUNDS, ORBIT_PRUNE_INTERVAL_MS: pruning ? '1000' : '0' };
      const servers = await Promise.all([startServerProcess(bench.url, env), startServerProcess(bench.url, env)]);
      const urls = servers.map((s) => s.url);
      const before = await historyLeft();
      const started = Date.now();
      // Enqueue: 16 producers, one task per request, each request's latency.
      const latencies: number[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: PRODUCERS }, async (_, client) => {
          for (let n = next++; n < TASKS; n = next++) {
            const t0 = performance.now();
            const status = await post(urls[client % urls.length] as string, '/v1/queues/bench/tasks', tenant.token, `run${run}-${n}`, `{"payload":{"n":${n}}}`);
            latencies.push(performance.now() - t0);
            if (status !== 200) throw new Error(`submit answered ${status}`);
          }
        }),
      );
      const enqueueSeconds = (Date.now() - started) / 1000;
      // Drain: one session of capacity 16.
      let completed = 0;
      const drainStarted = Date.now();
      const worker = new OrbitWorker({
        baseUrl: urls[0] as string,
        token: tenant.token,
        node_id: `bench-${run}`,
        queues: ['bench'],
        capacity: 16,
        maxPollIntervalMs: 20,
        handler: async () => undefined,
        onEvent(event) {
          if (event.type === 'completed') completed += 1;
        },
      });
      await worker.start();
      while (completed < TASKS) await new Promise((r) => setTimeout(r, 10));
      const drainSeconds = (Date.now() - drainStarted) / 1000;
      await worker.stop({ timeoutMs: 2000 });
      const seconds = (Date.now() - started) / 1000;
      const pruned = await prunedBy(servers);
      await Promise.all(servers.map((s) => s.stop()));
      const sorted = latencies.sort((a, b) => a - b);
      // What the benchmark wrote: a task, an attempt, a receipt and three events per task.
      const written = TASKS * 6;
      const result = {
        pruning,
        enqueue: TASKS / enqueueSeconds,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        drain: TASKS / drainSeconds,
        pruned,
        written,
        seconds,
      };
      results.push(result);
      const left = await historyLeft();
      console.log(
        `pair ${pair + 1} pruning ${pruning ? 'on ' : 'off'}  enqueue ${fmt(result.enqueue).padStart(6)}/s (submit p50 ${fmt(result.p50, 1)} ms, p99 ${fmt(result.p99, 1)} ms)  drain ${fmt(result.drain).padStart(6)}/s` +
          (pruning
            ? `  | pruned ${fmt(pruned)} rows in ${fmt(seconds, 1)} s = ${fmt(pruned / seconds)} rows/s against ${fmt(written / seconds)} rows/s written by the run; finished tasks due: ${fmt(before)} → ${fmt(left)}`
            : ''),
      );
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const off = results.filter((r) => !r.pruning);
  const on = results.filter((r) => r.pruning);
  console.log(
    `mean of ${PAIRS} pairs: drain ${fmt(mean(on.map((r) => r.drain)))} vs ${fmt(mean(off.map((r) => r.drain)))}/s (${fmt((mean(on.map((r) => r.drain)) / mean(off.map((r) => r.drain))) * 100, 1)} %), ` +
      `submit p99 ${fmt(mean(on.map((r) => r.p99)), 1)} vs ${fmt(mean(off.map((r) => r.p99)), 1)} ms, ` +
      `pruning ${fmt(mean(on.map((r) => r.pruned / r.seconds)))} rows/s vs ${fmt(mean(on.map((r) => r.written / r.seconds)))} rows/s written`,
  );
  const rows = await rowsOf();
  console.log(`left after the runs: ${JSON.stringify(rows)}`);
} finally {
  await bench.drop();
  closePoster();
}
