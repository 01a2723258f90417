/**
 * Graphile Worker 0.17 through its library API: the same workload as Orbit's - enqueue with 16
 * concurrent producers of single `addJob` calls (or, tuned, `addJobs` in bulk), then drain with
 * `run()` at concurrency 16 and a no-op task. The tuned variant uses the batching Graphile's own
 * performance page uses: `localQueue.size` 500 and batched completion
 * (`completeJobBatchDelay` / `failJobBatchDelay` 0 in preset.worker).
 *
 * Both variants get a pool of concurrency + 2 connections (Graphile's recommendation) for the
 * producers and another for the worker, and a logger that prints only errors (the default logs a line
 * per completed job). A fresh database per variant; the drain ends when the handler has run for
 * every job AND the jobs table is empty (a job is deleted when its completion commits).
 */
import { Logger, makeWorkerUtils, run, type AddJobsJobSpec } from 'graphile-worker';
import pg from 'pg';
import { fmt } from '../common.ts';
import { cpuMeter } from './cpu.ts';
import { pgBenchDatabase, type Postgres } from './postgres.ts';
import { chunks, phase, pooled, printRow, RunLedger, waitUntil, type Result, type Workload } from './shared.ts';

const quietLogger = new Logger(() => (level, message) => {
  if (level === 'error') console.error(`graphile-worker: ${message}`);
});

export async function benchGraphile(w: Workload, pgServer: Postgres, options: { bulk: boolean }): Promise<Result> {
  const system = options.bulk ? 'Graphile tuned' : 'Graphile default';
  const poolSize = w.concurrency + 2;
  const database = await pgBenchDatabase(pgServer, options.bulk ? 'gwb' : 'gw');
  const checker = new pg.Client({ connectionString: database.url });
  // Our own pools (of the size Graphile would make), so that they are certainly closed before the
  // database is dropped, and an idle client's error never goes unhandled.
  const pools: pg.Pool[] = [];
  const newPool = () => {
    const pool = new pg.Pool({ connectionString: database.url, max: poolSize });
    pool.on('error', () => {});
    pool.on('connect', (client) => client.on('error', () => {}));
    pools.push(pool);
    return pool;
  };
  let utils: Awaited<ReturnType<typeof makeWorkerUtils>> | null = null;
  try {
    utils = await makeWorkerUtils({ pgPool: newPool(), logger: quietLogger });
    const u = utils;
    await u.migrate();
    await checker.connect();

    let enqueueSeconds: number;
    const cpuEnqueue = cpuMeter({ names: ['postgres'] });
    if (options.bulk) {
      const batches = chunks(w.tasks, w.batchSize);
      enqueueSeconds = await pooled(batches.length, w.batchesInFlight, async (b) => {
        const [start, end] = batches[b]!;
        const specs: AddJobsJobSpec[] = [];
        for (let n = start; n < end; n++) specs.push({ identifier: 'noop', payload: { n } });
        await u.addJobs(specs);
      });
    } else {
      enqueueSeconds = await pooled(w.tasks, w.producers, async (n) => {
        await u.addJob('noop', { n });
      });
    }

    const enqueueCpu = cpuEnqueue.stop();
    const ledger = new RunLedger();
    const remaining = async () => Number((await checker.query<{ n: string }>('SELECT count(*) AS n FROM graphile_worker._private_jobs')).rows[0]!.n);
    const cpuDrain = cpuMeter({ names: ['postgres'] });
    const started = performance.now();
    const runner = await run({
      pgPool: newPool(),
      concurrency: w.concurrency,
      noHandleSignals: true,
      logger: quietLogger,
      crontab: '',
      taskList: {
        noop: async (payload) => {
          ledger.record((payload as { n: number }).n);
        },
      },
      ...(options.bulk ? { preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } } } : {}),
    });
    let drainSeconds = NaN;
    let left = -1;
    let drainCpu = '';
    try {
      const ran = await waitUntil(() => ledger.distinct >= w.tasks, w.phaseTimeoutMs);
      const emptied = ran && (await waitUntil(async () => (await remaining()) === 0, 30_000, 2));
      drainSeconds = (performance.now() - started) / 1000;
      if (!emptied) drainSeconds = NaN;
    } finally {
      drainCpu = cpuDrain.stop();
      await runner.stop();
      left = await remaining();
    }
    const label = options.bulk ? `addJobs ×${w.batchSize}, ${w.batchesInFlight} in flight` : `${w.producers} producers`;
    printRow(
      system,
      phase('enqueue', w.tasks, enqueueSeconds, `, ${label}`),
      Number.isNaN(drainSeconds)
        ? `drain TIMED OUT (${fmt(ledger.distinct)} run)`
        : phase('drain', w.tasks, drainSeconds, `, concurrency ${w.concurrency}${options.bulk ? ', localQueue 500, batched completion' : ''}`),
      enqueueCpu,
      drainCpu,
    );
    return {
      system: options.bulk
        ? 'Graphile Worker 0.17.x, addJobs bulk + localQueue size 500 + batched completion (completeJobBatchDelay / failJobBatchDelay 0 in preset.worker)'
        : 'Graphile Worker 0.17.x, defaults',
      enqueue: w.tasks / enqueueSeconds,
      drain: w.tasks / drainSeconds,
      checks: [`${system}: ${ledger.summary(w.tasks)}; ${left} jobs left in graphile_worker._private_jobs`],
    };
  } finally {
    await checker.end().catch(() => {});
    await utils?.release();
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await database.drop();
  }
}
