/**
 * pg-boss 10: enqueue with 16 concurrent producers of single `send` calls, then drain with ONE
 * `work()` of batchSize 16 (v10 has no teamSize: a worker fetches up to batchSize jobs, the
 * handler runs them at once, and they are completed together), so 16 jobs run at a time.
 *
 * A v10 worker waits for its polling interval (at least 0.5 s) after EVERY fetch, even a full
 * one - 16 jobs per 0.5 s at most. So the handler calls `notifyWorker` (public API) after a
 * batch, which makes the worker fetch again at once while there is work; an empty fetch still
 * waits 0.5 s. A pool of concurrency + 2 connections, a fresh database; the drain ends when the
 * handler has run for every job AND no job of the queue is still not `completed` (pg-boss
 * completes a batch without awaiting it).
 */
import PgBoss from 'pg-boss';
import pg from 'pg';
import { fmt } from '../common.ts';
import { cpuMeter } from './cpu.ts';
import { pgBenchDatabase, type Postgres } from './postgres.ts';
import { phase, pooled, printRow, RunLedger, waitUntil, type Result, type Workload } from './shared.ts';

const QUEUE = 'orbit_bench';

export async function benchPgBoss(w: Workload, pgServer: Postgres): Promise<Result> {
  const system = 'pg-boss 10';
  const database = await pgBenchDatabase(pgServer, 'pgboss');
  const checker = new pg.Client({ connectionString: database.url });
  const boss = new PgBoss({ connectionString: database.url, max: w.concurrency + 2 });
  const errors: string[] = [];
  boss.on('error', (error: Error) => {
    if (errors.length < 5) errors.push(error.message);
  });
  let started = false;
  try {
    await boss.start();
    started = true;
    await boss.createQueue(QUEUE);
    await checker.connect();

    const cpuEnqueue = cpuMeter({ names: ['postgres'] });
    const enqueueSeconds = await pooled(w.tasks, w.producers, async (n) => {
      await boss.send(QUEUE, { n });
    });

    const enqueueCpu = cpuEnqueue.stop();
    const ledger = new RunLedger();
    const unfinished = async () =>
      Number((await checker.query<{ n: string }>("SELECT count(*) AS n FROM pgboss.job WHERE name = $1 AND state <> 'completed'", [QUEUE])).rows[0]!.n);
    const cpuDrain = cpuMeter({ names: ['postgres'] });
    const t0 = performance.now();
    let workerId: string | undefined;
    workerId = await boss.work<{ n: number }>(QUEUE, { batchSize: w.concurrency, pollingIntervalSeconds: 0.5 }, async (jobs) => {
      await Promise.all(
        jobs.map(async (job) => {
          ledger.record(job.data.n);
        }),
      );
      if (jobs.length > 0 && workerId !== undefined) boss.notifyWorker(workerId);
    });
    let drainSeconds = NaN;
    let left = -1;
    let drainCpu = '';
    try {
      const ran = await waitUntil(() => ledger.distinct >= w.tasks, w.phaseTimeoutMs);
      const finished = ran && (await waitUntil(async () => (await unfinished()) === 0, 30_000, 2));
      drainSeconds = finished ? (performance.now() - t0) / 1000 : NaN;
    } finally {
      drainCpu = cpuDrain.stop();
      await boss.offWork(QUEUE);
      left = await unfinished();
    }
    printRow(
      system,
      phase('enqueue', w.tasks, enqueueSeconds, `, ${w.producers} producers`),
      Number.isNaN(drainSeconds)
        ? `drain TIMED OUT (${fmt(ledger.distinct)} run)`
        : phase('drain', w.tasks, drainSeconds, `, batchSize ${w.concurrency} + notifyWorker`),
      enqueueCpu,
      drainCpu,
    );
    return {
      system: 'pg-boss 10',
      enqueue: w.tasks / enqueueSeconds,
      drain: w.tasks / drainSeconds,
      checks: [`${system}: ${ledger.summary(w.tasks)}; ${left} jobs not completed${errors.length ? `; errors: ${errors.join(' | ')}` : ''}`],
    };
  } finally {
    if (started) await boss.stop({ graceful: true, wait: true, timeout: 5000 }).catch(() => {});
    await checker.end().catch(() => {});
    await database.drop();
  }
}
