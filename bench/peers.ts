/**
 * `npm run bench:peers`: Orbit beside durable peers on the same machine, in one run - Graphile
 * Worker 0.17 (defaults, and bulk + localQueue + batched completion), pg-boss 10 and BullMQ 5
 * (Redis, not durable) - with the same workload for each: ORBIT_BENCH_TASKS no-op tasks (20,000),
 * an enqueue phase of 16 concurrent producers of single submissions, then a drain phase with
 * worker concurrency 16. enqueue/s = tasks / enqueue wall time; drain/s = tasks / time from
 * worker start until all are done. Then the hot-row commit ceilings of MariaDB and PostgreSQL
 * (single-row counter UPDATEs, one commit each, from N connections) and Orbit's submit → start
 * latency at half its peak single-submit rate.
 *
 * Each system gets a private database (or Redis key prefix) that is removed afterwards. A
 * service that does not answer skips its peers with one line.
 *
 * Options (environment): ORBIT_BENCH_TASKS (20000), ORBIT_BENCH_PRODUCERS (16),
 * ORBIT_BENCH_CONCURRENCY (16), ORBIT_BENCH_HIGH_CAPACITY (256: the slots per session of the 4-session high-capacity shape), ORBIT_BENCH_BATCH (1000 items per bulk request),
 * ORBIT_BENCH_BATCHES_IN_FLIGHT (4), ORBIT_BENCH_SERVERS (2 orbit-server processes),
 * ORBIT_BENCH_LATENCY_SECONDS (10), ORBIT_BENCH_LATENCY_RATE (submissions/s offered in the latency
 * run; default half the peak single-submit rate measured before it), ORBIT_BENCH_CEILING_CONNECTIONS (16),
 * ORBIT_BENCH_CEILING_SECONDS (5), ORBIT_BENCH_TIMEOUT_SECONDS (300 per phase),
 * ORBIT_BENCH_ONLY (comma list of orbit, events, bulk, latency, graphile, graphile-bulk, pg-boss,
 * bullmq, ceilings; `events` runs Orbit 1×16 and 4×16 again with ORBIT_TASK_EVENTS=off), ORBIT_BENCH_DATABASE_URL (MariaDB server, as bench/common.ts),
 * ORBIT_BENCH_PG_URL (postgres://user@host:port), ORBIT_BENCH_REDIS_HOST / _PORT, ORBIT_BENCH_FLOORS (on: the
 * bench namespace and a second, idle one each with floors of 1,000 unfinished tasks, 8 attempts
 * and 1,000 starts/s, docs/quotas-and-locking.md#floors).
 */
import os from 'node:os';
import { benchDatabase, fmt, hotRowCeiling, machine } from './common.ts';
import { benchOrbit, orbitLatency } from './peers/orbit.ts';
import { benchGraphile } from './peers/graphile.ts';
import { benchPgBoss } from './peers/pg-boss.ts';
import { benchBullmq, describeRedis, redisUnreachable } from './peers/bullmq.ts';
import { findPostgres, pgBenchDatabase, pgHotRowCeiling, type Postgres } from './peers/postgres.ts';
import { skippedResult, wanted, workloadFromEnv, type Result } from './peers/shared.ts';

const w = workloadFromEnv();
const loadavg = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const started = Date.now();

/** Runs one scenario; a failure becomes a row that says so, and the run goes on. */
async function attempt(system: string, run: () => Promise<Result>): Promise<Result> {
  try {
    return await run();
  } catch (error) {
    const message = (error as Error).stack ?? String(error);
    console.error(`${system}: FAILED: ${message}`);
    return skippedResult(system, `failed: ${(error as Error).message}`);
  }
}

function cell(value: number | null, skipped: string | undefined): string {
  if (value === null) return skipped?.startsWith('failed') ? 'failed' : 'skipped';
  if (!Number.isFinite(value)) return 'timed out';
  return fmt(value);
}

function ratio(a: number | null, b: number | null): string {
  if (a === null || b === null || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) return '-';
  return `${fmt(a / b, 2)}×`;
}

const main = await benchDatabase();
try {
  console.log(`machine: ${await machine(main.db)}`);
  const pgFound = await findPostgres();
  const pgServer: Postgres | null = 'unreachable' in pgFound ? null : pgFound;
  const pgSkip = 'unreachable' in pgFound ? `skipped: ${pgFound.unreachable}` : null;
  const redisReason = await redisUnreachable();
  const redisSkip = redisReason ? `skipped: ${redisReason}` : null;
  console.log(
    `peers:   ${pgServer ? pgServer.description : `${pgSkip} (set ORBIT_BENCH_PG_URL=postgres://user@host:port)`}; ${redisSkip ? `${redisSkip} (set ORBIT_BENCH_REDIS_HOST / _PORT)` : await describeRedis()}; on the same machine`,
  );
  console.log(
    `run:     ${fmt(w.tasks)} no-op tasks per system; enqueue with ${w.producers} concurrent producers of single submissions, then drain with worker concurrency ${w.concurrency}; ` +
      `Orbit: ${w.servers} orbit-server processes, one application${process.env.ORBIT_BENCH_FLOORS === 'on' ? ', namespace floors configured (ORBIT_BENCH_FLOORS=on)' : ''}; load average ${loadavg()} at the start`,
  );
  console.log('');

  const results: Result[] = [];
  const orbitRows: Result[] = [];
  let peakSingle = NaN;

  if (wanted(w, 'orbit')) {
    const shapes: Array<[number, number]> = [
      [1, w.concurrency],
      [4, Math.max(1, Math.round(w.concurrency / 4))],
      [4, w.concurrency],
      // The high-capacity shape: large claim and result groups (4 sessions × 256 slots).
      [4, w.highCapacity],
    ];
    let limitsPrinted = false;
    for (const [sessions, capacity] of shapes) {
      const r = await attempt(`Orbit ${sessions}×${capacity}`, () =>
        benchOrbit(w, {
          sessions,
          capacity,
          onLimits(line) {
            if (!limitsPrinted) console.log(`Orbit limits (both levels enforced, neither binds): ${line}`);
            limitsPrinted = true;
          },
        }),
      );
      results.push(r);
      orbitRows.push(r);
      if (r.enqueue !== null && Number.isFinite(r.enqueue)) peakSingle = Number.isNaN(peakSingle) ? r.enqueue : Math.max(peakSingle, r.enqueue);
    }
  }
  // What task lifecycle events cost: each shape with them on (the default), then at once with
  // ORBIT_TASK_EVENTS=off, on the same machine in the same run.
  const eventCost: string[] = [];
  if (wanted(w, 'events')) {
    for (const [sessions, capacity] of [
      [1, w.concurrency],
      [4, w.concurrency],
    ] as Array<[number, number]>) {
      const on = await attempt(`Orbit ${sessions}×${capacity}`, () => benchOrbit(w, { sessions, capacity }));
      const off = await attempt(`Orbit ${sessions}×${capacity} no events`, () => benchOrbit(w, { sessions, capacity, taskEvents: false }));
      results.push(on, off);
      orbitRows.push(on, off);
      if (on.drain !== null && off.drain !== null) {
        eventCost.push(
          `Orbit ${sessions}×${capacity}: drain with lifecycle events ${fmt(on.drain)}/s, without ${fmt(off.drain)}/s → ${((on.drain / off.drain) * 100).toFixed(0)} % (enqueue ${fmt(on.enqueue ?? 0)}/s vs ${fmt(off.enqueue ?? 0)}/s)`,
        );
      }
    }
  }
  if (wanted(w, 'bulk')) {
    const r = await attempt('Orbit bulk submit', () => benchOrbit(w, { sessions: 4, capacity: w.concurrency, bulk: true }));
    results.push(r);
    orbitRows.push(r);
  }
  let latencyCheck: string | null = null;
  if (wanted(w, 'latency')) {
    const given = Number(process.env.ORBIT_BENCH_LATENCY_RATE ?? 0);
    const rate = given || (Number.isFinite(peakSingle) ? peakSingle / 2 : 500);
    const source = given
      ? 'ORBIT_BENCH_LATENCY_RATE'
      : Number.isFinite(peakSingle)
        ? '~50% of the peak single-submit rate'
        : 'a default rate (no single-submit run)';
    try {
      const { line, check } = await orbitLatency(w, Math.max(1, Math.round(rate)), 4, w.concurrency, source);
      latencyCheck = check;
      console.log(line);
    } catch (error) {
      // Said where the figure would have been, so a failed run is not mistaken for a missing one.
      console.log(`Orbit submit → start latency: FAILED: ${(error as Error).message}`);
      console.error((error as Error).stack);
    }
  }

  const peerRows: Result[] = [];
  const peer = async (key: string, system: string, skip: string | null, run: () => Promise<Result>) => {
    if (!wanted(w, key)) return;
    let r: Result;
    if (skip) {
      console.log(`${system}: ${skip}`);
      r = skippedResult(system, skip);
    } else r = await attempt(system, run);
    results.push(r);
    peerRows.push(r);
  };
  await peer('graphile', 'Graphile Worker 0.17.x, defaults', pgSkip, () => benchGraphile(w, pgServer!, { bulk: false }));
  await peer(
    'graphile-bulk',
    'Graphile Worker 0.17.x, addJobs bulk + localQueue size 500 + batched completion (completeJobBatchDelay / failJobBatchDelay 0 in preset.worker)',
    pgSkip,
    () => benchGraphile(w, pgServer!, { bulk: true }),
  );
  await peer('pg-boss', 'pg-boss 10', pgSkip, () => benchPgBoss(w, pgServer!));
  await peer('bullmq', 'BullMQ 5 (Redis, not durable)', redisSkip, () => benchBullmq(w));

  const ceilings: string[] = [];
  if (wanted(w, 'ceilings')) {
    const n = w.ceilingConnections;
    try {
      ceilings.push(
        `MariaDB hot-row ceiling      ${fmt(await hotRowCeiling(main.url, n, w.ceilingSeconds)).padStart(7)} single-row counter UPDATE commits/s at ${n} connections`,
      );
    } catch (error) {
      ceilings.push(`MariaDB hot-row ceiling: FAILED: ${(error as Error).message}`);
    }
    if (pgServer) {
      try {
        const database = await pgBenchDatabase(pgServer, 'ceiling');
        try {
          ceilings.push(
            `PostgreSQL hot-row ceiling   ${fmt(await pgHotRowCeiling(database.url, n, w.ceilingSeconds)).padStart(7)} single-row counter UPDATE commits/s at ${n} connections`,
          );
        } finally {
          await database.drop();
        }
      } catch (error) {
        ceilings.push(`PostgreSQL hot-row ceiling: FAILED: ${(error as Error).message}`);
      }
    } else ceilings.push(`PostgreSQL hot-row ceiling: ${pgSkip}`);
    for (const line of ceilings) console.log(line);
  }

  // The summary.
  console.log('');
  console.log('| system | enqueue/s | drain/s |');
  console.log('| --- | ---: | ---: |');
  for (const r of results) console.log(`| ${r.system} | ${cell(r.enqueue, r.skipped)} | ${cell(r.drain, r.skipped)} |`);

  const measuredOrbit = orbitRows.filter((r) => r.enqueue !== null);
  const measuredPeers = peerRows.filter((r) => r.enqueue !== null);
  if (measuredOrbit.length && measuredPeers.length) {
    const short = (s: string) =>
      s
        .replace(/^Orbit, (\d+) worker sessions? × capacity (\d+)$/, 'Orbit $1×$2')
        .replace(/^Orbit, bulk submit.*, (\d+) sessions × capacity (\d+)$/, 'Orbit bulk $1×$2')
        .replace(/^Graphile Worker 0\.17\.x, defaults$/, 'Graphile default')
        .replace(/^Graphile Worker 0\.17\.x, addJobs.*$/, 'Graphile tuned')
        .replace(/^BullMQ 5.*$/, 'BullMQ');
    console.log('\nOrbit ÷ peer, enqueue / drain (above 1× Orbit is faster):\n');
    console.log(`| | ${measuredPeers.map((p) => short(p.system)).join(' | ')} |`);
    console.log(`| --- |${measuredPeers.map(() => ' ---: |').join('')}`);
    for (const o of measuredOrbit)
      console.log(`| ${short(o.system)} | ${measuredPeers.map((p) => `${ratio(o.enqueue, p.enqueue)} / ${ratio(o.drain, p.drain)}`).join(' | ')} |`);
    const first = measuredOrbit[0]!;
    const gw = measuredPeers[0]!;
    console.log(`\n(e.g. ${short(first.system)} drain / ${short(gw.system)} drain = ${ratio(first.drain, gw.drain)})`);
  }

  if (eventCost.length > 0) {
    console.log('\nTask lifecycle events (on by default) against ORBIT_TASK_EVENTS=off, same run:');
    for (const line of eventCost) console.log(`- ${line}`);
  }

  console.log('\nchecks:');
  for (const r of results) for (const c of r.checks) console.log(`- ${c}`);
  if (latencyCheck) console.log(`- ${latencyCheck}`);
  for (const r of results) if (r.skipped) console.log(`- ${r.system}: ${r.skipped.startsWith('skipped') ? r.skipped : `not measured (${r.skipped})`}`);
  console.log(`\nwhole run ${fmt((Date.now() - started) / 1000)} s; load average ${loadavg()} at the end`);
} finally {
  await main.drop();
}
