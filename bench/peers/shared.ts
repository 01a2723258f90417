/**
 * What every system's module in bench/peers/ shares: the workload's settings (from the
 * environment), the result of one row of the table, a pool of concurrent producers and waiting.
 */
import { fmt } from '../common.ts';

function envInt(name: string, fallback: number, min = 1): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  return value;
}

export interface Workload {
  /** No-op tasks per scenario. */
  tasks: number;
  /** Concurrent producers of single submissions in the enqueue phase. */
  producers: number;
  /** Worker concurrency in the drain phase (per system; Orbit: sessions × capacity). */
  concurrency: number;
  /** Slots per session of Orbit's high-capacity shape (4 sessions). */
  highCapacity: number;
  /** Items per bulk request (Orbit's tasks:batch, Graphile's addJobs). */
  batchSize: number;
  /** Bulk requests in flight at once. */
  batchesInFlight: number;
  /** orbit-server processes. */
  servers: number;
  /** Seconds of paced submissions for the latency line. */
  latencySeconds: number;
  /** Connections and seconds of the hot-row ceilings. */
  ceilingConnections: number;
  ceilingSeconds: number;
  /** Longest a drain (or an enqueue phase) may take before the scenario is reported as timed out. */
  phaseTimeoutMs: number;
  /** Only these systems (comma-separated keys: orbit, bulk, latency, graphile, graphile-bulk, pg-boss, bullmq, ceilings); all when unset. */
  only: Set<string> | null;
}

export function workloadFromEnv(): Workload {
  const only = process.env.ORBIT_BENCH_ONLY?.trim();
  return {
    tasks: envInt('ORBIT_BENCH_TASKS', 20_000),
    producers: envInt('ORBIT_BENCH_PRODUCERS', 16),
    concurrency: envInt('ORBIT_BENCH_CONCURRENCY', 16),
    highCapacity: envInt('ORBIT_BENCH_HIGH_CAPACITY', 256),
    batchSize: envInt('ORBIT_BENCH_BATCH', 1000),
    batchesInFlight: envInt('ORBIT_BENCH_BATCHES_IN_FLIGHT', 4),
    servers: envInt('ORBIT_BENCH_SERVERS', 2),
    latencySeconds: envInt('ORBIT_BENCH_LATENCY_SECONDS', 10),
    ceilingConnections: envInt('ORBIT_BENCH_CEILING_CONNECTIONS', 16),
    ceilingSeconds: envInt('ORBIT_BENCH_CEILING_SECONDS', 5),
    phaseTimeoutMs: envInt('ORBIT_BENCH_TIMEOUT_SECONDS', 300) * 1000,
    only: only
      ? new Set(
          only
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean),
        )
      : null,
  };
}

export function wanted(w: Workload, key: string): boolean {
  return w.only === null || w.only.has(key);
}

/** One row of the final table. */
export interface Result {
  system: string;
  /** Tasks per second of the enqueue phase; null when not measured. */
  enqueue: number | null;
  drain: number | null;
  /** Why the row has no figures. */
  skipped?: string;
  /** The correctness checks, one line each, printed after the table. */
  checks: string[];
}

export function skippedResult(system: string, reason: string): Result {
  return { system, enqueue: null, drain: null, skipped: reason, checks: [] };
}

/**
 * Runs `work(i)` for i = 0 … total-1 with `concurrency` loops taking the next index as they
 * go; resolves with the wall time in seconds. A failed `work` stops that loop's caller with the
 * error (after the others finish their current item).
 */
export async function pooled(total: number, concurrency: number, work: (i: number, lane: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(concurrency, total) }, async (_, lane) => {
      for (let i = next++; i < total; i = next++) await work(i, lane);
    }),
  );
  return (performance.now() - started) / 1000;
}

/** Chunks of `size` of 0 … total-1, as [start, end) pairs. */
export function chunks(total: number, size: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let start = 0; start < total; start += size) out.push([start, Math.min(total, start + size)]);
  return out;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `done` every `intervalMs` until it is true; false when `timeoutMs` passed first. */
export async function waitUntil(done: () => boolean | Promise<boolean>, timeoutMs: number, intervalMs = 5): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > end) return false;
    await sleep(intervalMs);
  }
  return true;
}

export function perSecond(n: number, seconds: number): number {
  return seconds > 0 ? n / seconds : NaN;
}

/** `enqueue   1,234/s (20,000 in 16.20 s, …)` */
export function phase(label: string, n: number, seconds: number, extra = ''): string {
  return `${label.padEnd(7)} ${fmt(perSecond(n, seconds)).padStart(6)}/s (${fmt(n)} in ${fmt(seconds, 2)} s${extra})`;
}

/** Two lines per system: the enqueue phase and the drain phase, each with what it cost. */
export function printRow(system: string, enqueue: string, drain: string, enqueueDetail = '', drainDetail = ''): void {
  console.log(`${system.padEnd(22)} ${enqueue}${enqueueDetail ? ` | ${enqueueDetail}` : ''}`);
  console.log(`${''.padEnd(22)} ${drain}${drainDetail ? ` | ${drainDetail}` : ''}`);
}

/** What the handlers saw: runs per task (a task run twice is a duplicate). */
export class RunLedger {
  private readonly seen = new Set<string | number>();
  runs = 0;
  duplicates = 0;
  record(id: string | number): void {
    this.runs += 1;
    if (this.seen.has(id)) this.duplicates += 1;
    else this.seen.add(id);
  }
  get distinct(): number {
    return this.seen.size;
  }
  summary(expected: number): string {
    const ok = this.distinct === expected && this.duplicates === 0;
    return `handler ran ${fmt(this.runs)} times for ${fmt(this.distinct)}/${fmt(expected)} tasks, ${this.duplicates} duplicates - ${ok ? 'ok' : 'MISMATCH'}`;
  }
}
