/**
 * Load against Orbit servers on a database cluster (test/integration/galera-cluster.test.ts):
 * submitters that keep submitting until stopped, each answer recorded (status, time, which server,
 * when), and a sampler that reads the usage levels from the rows themselves throughout, so that a
 * level over its limit at any moment is seen, not only at the end.
 */
import type { Database } from '../../server/store/database/database.ts';
import { call } from './server-process.ts';

export interface Answer {
  server: number;
  status: number;
  code?: string;
  ms: number;
  at: number;
  key: string;
}

export interface Submitters {
  answers: Answer[];
  /** Idempotency key → the task id its 200 answers named (each of them: they must agree). */
  accepted: Map<string, Set<string>>;
  /** 200 answers per server at or after `since` (Date.now()). */
  acceptedSince(since: number, server?: number): number;
  stop(): Promise<void>;
}

/**
 * `count` submitters, submitter i through server i % urls.length, to queues in turn. A 503 is
 * retried with the same key (its outcome is unknown: that is the contract); a 429 (a limit) moves
 * on to a new key after a pause; a thrown request (no answer at all) is recorded as status 0.
 */
export function startSubmitters(urls: readonly string[], token: string, queues: readonly string[], count: number, label: string): Submitters {
  const answers: Answer[] = [];
  const accepted = new Map<string, Set<string>>();
  let running = true;
  const loops = Array.from({ length: count }, async (_, s) => {
    const server = s % urls.length;
    let n = 0;
    let key = `${label}-${s}-${n}`;
    while (running) {
      const started = Date.now();
      let status = 0;
      let code: string | undefined;
      try {
        const r = await call(urls[server] as string, 'POST', `/v1/queues/${queues[n % queues.length]}/tasks`, {
          token,
          key,
          body: { payload: { s, n }, max_attempts: 20 },
        });
        status = r.status;
        code = r.body?.error?.code;
        if (status === 200) {
          const ids = accepted.get(key) ?? new Set<string>();
          ids.add(r.body.data.task.task_id as string);
          accepted.set(key, ids);
        }
      } catch {
        status = 0;
      }
      answers.push({ server, status, code, ms: Date.now() - started, at: started, key });
      if (status === 503) continue;
      n += 1;
      key = `${label}-${s}-${n}`;
      // A limit (or anything else): a short pause, so the refusals do not crowd out the rest.
      if (status !== 200) await new Promise((r) => setTimeout(r, 20));
    }
  });
  return {
    answers,
    accepted,
    acceptedSince(since, server) {
      return answers.filter((a) => a.status === 200 && a.at >= since && (server === undefined || a.server === server)).length;
    },
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

export interface Levels {
  unfinished: number;
  /** Active (RESERVED or RUNNING) attempts of the application. */
  active: number;
  /** Active attempts per queue name. */
  activeByQueue: Record<string, number>;
  succeeded: number;
}

/** The application's levels as the rows say (one namespace's queues; a causal read on a cluster node). */
export async function readLevels(db: Database): Promise<Levels> {
  const [tasks] = await db.rows<{ unfinished: string | null; succeeded: string | null }>(
    `SELECT SUM(state IN ('WAITING','LEASED','RUNNING','NEEDS_REVIEW')) AS unfinished, SUM(state = 'SUCCEEDED') AS succeeded FROM orbit_tasks`,
  );
  const byQueue = await db.rows<{ name: string; n: string }>(
    `SELECT q.name, COUNT(*) AS n FROM orbit_attempts a JOIN orbit_queues q ON q.queue_id = a.queue_id WHERE a.state IN ('RESERVED', 'RUNNING') GROUP BY q.name`,
  );
  const activeByQueue = Object.fromEntries(byQueue.map((r) => [r.name, Number(r.n)]));
  return {
    unfinished: Number(tasks?.unfinished ?? 0),
    active: Object.values(activeByQueue).reduce((a, b) => a + b, 0),
    activeByQueue,
    succeeded: Number(tasks?.succeeded ?? 0),
  };
}

export interface Sampler {
  /** The highest of each level seen so far, and how many samples. */
  peak: Levels;
  samples: number;
  last: Levels | null;
  stop(): Promise<void>;
}

/**
 * Reads the levels again and again until stopped, through `pick()` (the database of a node that
 * is up: the sampler follows the test's choice when it kills one). A read that fails (the node just
 * went away) is skipped.
 */
export function startSampler(pick: () => Database): Sampler {
  const state: Sampler = {
    peak: { unfinished: 0, active: 0, activeByQueue: {}, succeeded: 0 },
    samples: 0,
    last: null,
    stop: async () => {},
  };
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        const levels = await readLevels(pick());
        state.last = levels;
        state.samples += 1;
        state.peak.unfinished = Math.max(state.peak.unfinished, levels.unfinished);
        state.peak.active = Math.max(state.peak.active, levels.active);
        state.peak.succeeded = Math.max(state.peak.succeeded, levels.succeeded);
        for (const [queue, n] of Object.entries(levels.activeByQueue)) state.peak.activeByQueue[queue] = Math.max(state.peak.activeByQueue[queue] ?? 0, n);
      } catch {
        // the node being read went away between pick() and the read
      }
      await new Promise((r) => setTimeout(r, 15));
    }
  })();
  state.stop = async () => {
    running = false;
    await loop;
  };
  return state;
}

/** The `orbit_db_transaction_retries_total` samples of a server's /metrics, summed by outcome. */
export async function transactionRetries(url: string): Promise<{ retried: number; gave_up: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = { retried: 0, gave_up: 0 };
  for (const line of text.split('\n')) {
    const m = /^orbit_db_transaction_retries_total\{[^}]*outcome="(retried|gave_up)"[^}]*\} (\d+)/.exec(line);
    if (m) out[m[1] as 'retried' | 'gave_up'] += Number(m[2]);
  }
  return out;
}
