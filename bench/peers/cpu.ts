/**
 * Where the two cores went during a phase: CPU time of processes by command name (mariadbd,
 * postgres, redis-server), of given pids (orbit-server children) and of this process, read
 * from /proc, and of the whole machine - the difference is someone else's (Linux only).
 */
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

function cpuSecondsOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is field 3 (state): utime is field 14, stime field 15.
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

/** Busy CPU seconds of the whole machine so far (all cores), from /proc/stat. */
function machineBusySeconds(): number | null {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
    return (total - (fields[3] ?? 0) - (fields[4] ?? 0)) / TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

function pidsNamed(names: readonly string[], filters: Record<string, (cmdline: string) => boolean> = {}): Map<number, string> {
  const out = new Map<number, string>();
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
      if (!names.includes(comm)) continue;
      const filter = filters[comm];
      if (filter && !filter(readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' '))) continue;
      out.set(Number(entry), comm);
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** The one process of that command name whose command line passes `filter` (null when none, or several). */
export function processIdOf(name: string, filter?: (cmdline: string) => boolean): number | null {
  const found = [...pidsNamed([name], filter ? { [name]: filter } : {}).keys()];
  return found.length === 1 ? (found[0] as number) : null;
}

export interface CpuGroups {
  /** Command names summed per name, e.g. ['mariadbd'] or ['postgres']. */
  names?: readonly string[];
  /** Only the processes of that name whose command line passes (e.g. the mariadbd on our port). */
  filters?: Record<string, (cmdline: string) => boolean>;
  /** Labelled pids, e.g. { 'orbit-server': [pid1, pid2] }. */
  pids?: Record<string, number[]>;
}

/** Starts measuring; `stop()` returns `label cores, …` (CPU seconds per wall second). */
export function cpuMeter(groups: CpuGroups): { stop(): string } {
  const started = performance.now();
  const selfStart = process.cpuUsage();
  const machineStart = machineBusySeconds();
  const named = pidsNamed(groups.names ?? [], groups.filters);
  const before = new Map<number, number>();
  for (const pid of named.keys()) before.set(pid, cpuSecondsOf(pid) ?? 0);
  for (const list of Object.values(groups.pids ?? {})) for (const pid of list) before.set(pid, cpuSecondsOf(pid) ?? 0);
  return {
    stop() {
      const wall = (performance.now() - started) / 1000;
      const parts: string[] = [];
      const self = process.cpuUsage(selfStart);
      parts.push(`bench ${((self.user + self.system) / 1e6 / wall).toFixed(2)}`);
      for (const [label, list] of Object.entries(groups.pids ?? {})) {
        const each = list.map((pid) => ((cpuSecondsOf(pid) ?? before.get(pid) ?? 0) - (before.get(pid) ?? 0)) / wall);
        parts.push(`${label} ${each.map((c) => c.toFixed(2)).join('+')}`);
      }
      // Processes of those names now (new backends count from 0, exited ones are lost).
      const totals = new Map<string, number>();
      for (const [pid, name] of pidsNamed(groups.names ?? [], groups.filters)) {
        const now = cpuSecondsOf(pid);
        if (now === null) continue;
        totals.set(name, (totals.get(name) ?? 0) + (now - (before.get(pid) ?? 0)) / wall);
      }
      for (const name of groups.names ?? []) parts.push(`${name} ${(totals.get(name) ?? 0).toFixed(2)}`);
      const machineNow = machineBusySeconds();
      const whole = machineStart !== null && machineNow !== null ? ` (machine ${((machineNow - machineStart) / wall).toFixed(2)} of ${os.cpus().length})` : '';
      return `cores: ${parts.join(', ')}${whole}`;
    },
  };
}
