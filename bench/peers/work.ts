/**
 * The work per task of an Orbit phase, printed beside its throughput - the figures the
 * throughput work drives down (bench/RESULTS.md):
 *
 * - CPU per task of each process: each orbit-server, this process (the SDK worker sessions in a
 *   drain, the HTTP producers in an enqueue), MariaDB's threads serving this database's
 *   connections (their thread ids from information_schema.PROCESSLIST, their CPU from
 *   /proc/<mariadbd>/task/<tid>/stat) and mariadbd in all (its background threads too);
 * - what the server did per task, from its global status counters (the machine must be quiet):
 *   statements, rows written, updated and read by key at the handler level, redo log bytes,
 *   row lock waits and their average;
 * - per kind of work (orbit-server's `orbit_db_*` metrics, operation.ts): transactions, tasks
 *   per transaction, statements and round trips per transaction, and how long a transaction held
 *   its connection (p50 and p99 from the histogram's buckets: an upper bound of how long it held
 *   the application row it locks).
 */
import { readdirSync, readFileSync } from 'node:fs';
import type { Database } from '../../server/store/database/database.ts';
import { fmt } from '../common.ts';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

function threadCpuSeconds(pid: number, tid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

function allThreads(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).map(Number);
  } catch {
    return [];
  }
}

function processCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

const STATUS = [
  'Questions',
  'Handler_write',
  'Handler_update',
  'Handler_delete',
  'Handler_read_key',
  'Innodb_os_log_written',
  'Innodb_row_lock_waits',
  'Innodb_row_lock_time',
] as const;

async function globalStatus(db: Database): Promise<Map<string, number>> {
  const rows = await db.rows<{ Variable_name: string; Value: string }>(`SHOW GLOBAL STATUS WHERE Variable_name IN (${STATUS.map(() => '?').join(', ')})`, [
    ...STATUS,
  ]);
  return new Map(rows.map((r) => [r.Variable_name, Number(r.Value)]));
}

async function connectionThreads(db: Database, database: string): Promise<number[]> {
  const rows = await db.rows<{ tid: string }>('SELECT TID AS tid FROM information_schema.PROCESSLIST WHERE DB = ?', [database]);
  return rows.map((r) => Number(r.tid)).filter((tid) => tid > 0);
}

/** Orbit's `orbit_db_*` and task counters, summed over the servers: `name{labels}` → value. */
async function orbitCounters(urls: string[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const keep =
    /^((?:orbit_db_(?:statements_total|round_trips_total|transaction_held_seconds_(?:bucket|count|sum)))|orbit_claimed_attempts_total|orbit_completions_total|orbit_task_submissions_total|orbit_starts_total)(\{[^}]*\})? (\S+)$/;
  for (const url of urls) {
    const text = await (await fetch(`${url}/metrics`)).text();
    for (const line of text.split('\n')) {
      const m = keep.exec(line);
      if (!m) continue;
      const key = `${m[1]}${m[2] ?? ''}`;
      out.set(key, (out.get(key) ?? 0) + Number(m[3]));
    }
  }
  return out;
}

/** The sum of a counter's series whose labels match `labels` (a substring test of the label text). */
function total(counters: Map<string, number>, name: string, labels = ''): number {
  let sum = 0;
  for (const [key, value] of counters) if (key.startsWith(`${name}{`) || key === name) if (labels === '' || key.includes(labels)) sum += value;
  return sum;
}

/** A quantile from cumulative histogram buckets (`le` → count), as the upper bound of its bucket. */
function quantile(buckets: Array<{ le: number; count: number }>, q: number): number | null {
  const all = buckets.at(-1)?.count ?? 0;
  if (all === 0) return null;
  for (const b of buckets) if (b.count >= q * all) return b.le;
  return null;
}

const ms = (seconds: number | null) => (seconds === null ? '?' : seconds === Number.POSITIVE_INFINITY ? '>2000' : fmt(seconds * 1000, seconds < 0.01 ? 2 : 1));

/** Which kind of work moves tasks, and the counter that says how many. */
const TASK_COUNTERS: Record<string, { counter: string; labels?: string }> = {
  submit: { counter: 'orbit_task_submissions_total' },
  claim: { counter: 'orbit_claimed_attempts_total' },
  start: { counter: 'orbit_starts_total', labels: 'result="started"' },
  complete: { counter: 'orbit_completions_total' },
};

export interface WorkTarget {
  db: Database;
  /** The database Orbit uses (to find its connections' threads). */
  database: string;
  mariadbPid: number | null;
  servers: Array<{ pid: number; url: string }>;
}

/** Starts measuring a phase; `stop(tasks)` returns the per-task lines. */
export async function workMeter(target: WorkTarget): Promise<{ stop(tasks: number): Promise<string[]> }> {
  const status0 = await globalStatus(target.db);
  const counters0 = await orbitCounters(target.servers.map((s) => s.url));
  const self0 = process.cpuUsage();
  const servers0 = target.servers.map((s) => processCpuSeconds(s.pid));
  const mariadb0 = target.mariadbPid === null ? 0 : processCpuSeconds(target.mariadbPid);
  // Every thread of mariadbd now: a connection opened during the phase may run on a thread taken
  // from the server's thread cache, whose CPU so far belongs to earlier connections.
  const threads0 = new Map<number, number>();
  if (target.mariadbPid !== null) {
    for (const tid of allThreads(target.mariadbPid)) threads0.set(tid, threadCpuSeconds(target.mariadbPid, tid) ?? 0);
  }
  return {
    async stop(tasks: number) {
      const per = (x: number) => (tasks > 0 ? x / tasks : Number.NaN);
      const self = process.cpuUsage(self0);
      const servers = target.servers.map((s, i) => processCpuSeconds(s.pid) - (servers0[i] ?? 0));
      const mariadb = target.mariadbPid === null ? 0 : processCpuSeconds(target.mariadbPid) - mariadb0;
      // Threads serving our connections at the end (the pools keep them open through a phase);
      // a thread created during the phase counts from zero.
      let connections = 0;
      if (target.mariadbPid !== null) {
        for (const tid of await connectionThreads(target.db, target.database)) {
          const now = threadCpuSeconds(target.mariadbPid, tid);
          if (now !== null) connections += now - (threads0.get(tid) ?? 0);
        }
      }
      const status1 = await globalStatus(target.db);
      const counters1 = await orbitCounters(target.servers.map((s) => s.url));
      const s = (name: string) => (status1.get(name) ?? 0) - (status0.get(name) ?? 0);
      const c = (name: string, labels = '') => total(counters1, name, labels) - total(counters0, name, labels);
      const cpuMs = (seconds: number) => fmt(per(seconds) * 1000, 3);
      const orbitCpu = servers.reduce((a, b) => a + b, 0);
      const selfCpu = (self.user + self.system) / 1e6;
      const lines = [
        `work per task: CPU ${cpuMs(orbitCpu + selfCpu + connections)} ms (orbit-server ${servers.map(cpuMs).join('+')}, bench/worker ${cpuMs(selfCpu)}, ` +
          `mariadbd connections ${cpuMs(connections)}; mariadbd in all ${cpuMs(mariadb)}) | ` +
          `statements ${fmt(per(s('Questions')), 2)}, rows written ${fmt(per(s('Handler_write')), 2)}, updated ${fmt(per(s('Handler_update')), 2)}, deleted ${fmt(per(s('Handler_delete')), 2)}, ` +
          `read by key ${fmt(per(s('Handler_read_key')), 2)}, redo ${fmt(per(s('Innodb_os_log_written')), 0)} B; ` +
          `row lock waits ${fmt(per(s('Innodb_row_lock_waits')), 3)} (avg ${s('Innodb_row_lock_waits') > 0 ? fmt(s('Innodb_row_lock_time') / s('Innodb_row_lock_waits'), 1) : '0'} ms)`,
      ];
      // Per kind of work: its transactions (each one counted by its connection hold).
      const kinds: string[] = [];
      for (const key of counters1.keys()) {
        const m = /^orbit_db_transaction_held_seconds_count\{operation="([^"]+)"\}$/.exec(key);
        if (!m) continue;
        const op = m[1] as string;
        const label = `operation="${op}"`;
        const transactions = c('orbit_db_transaction_held_seconds_count', label);
        if (transactions <= 0) continue;
        const buckets: Array<{ le: number; count: number }> = [];
        for (const k of counters1.keys()) {
          if (!k.startsWith('orbit_db_transaction_held_seconds_bucket{') || !k.includes(label)) continue;
          const le = /le="([^"]+)"/.exec(k)?.[1];
          if (le !== undefined) buckets.push({ le: le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le), count: c(k) });
        }
        buckets.sort((x, y) => x.le - y.le);
        const moved = TASK_COUNTERS[op];
        const tasksPerTx = moved ? `${fmt(c(moved.counter, moved.labels) / transactions, 1)} tasks/tx, ` : '';
        kinds.push(
          `${op} ${fmt(transactions)} tx: ${tasksPerTx}${fmt(c('orbit_db_statements_total', label) / transactions, 1)} statements/tx, ` +
            `${fmt(c('orbit_db_round_trips_total', label) / transactions, 1)} round trips/tx, held p50 ≤ ${ms(quantile(buckets, 0.5))} ms p99 ≤ ${ms(quantile(buckets, 0.99))} ms`,
        );
      }
      if (kinds.length > 0) lines.push(`transactions: ${kinds.join('; ')}`);
      return lines;
    },
  };
}
