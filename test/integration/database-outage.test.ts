/**
 * Database faults, with real processes: a private MariaDB of this test's own (so it can be
 * killed), two orbit-server processes, concurrent submitters and two worker processes.
 *  1. mariadbd is SIGKILLed and restarted (crash recovery included);
 *  2. mariadbd is SIGSTOPped - it stops answering without closing its connections - and
 *     SIGCONTed.
 * During each outage every request answers 503 UNAVAILABLE in the envelope within a bounded
 * time (never a 500, never a hang), `/readyz` says not ready, and a new worker connection is
 * refused with the envelope. Afterwards worker sessions carry on, every submission that got
 * 200 exists and succeeds (and so does every 503'd one, resent with its key - the documented
 * client behaviour), no task ran twice without its earlier attempt expiring first, and every
 * counter equals a recount.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { startWorkerProcess, type WorkerProcess } from '../helpers/worker-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { sqlToMillis } from '../../server/time.ts';
// @ts-expect-error - a plain ES module of the repository's scripts, no type declarations
import { ensureDatabase, stopPrivateDatabase } from '../../scripts/local-db.mjs';

/** The servers' database timeout: a statement, a connect or a pool wait longer than this fails. */
const DB_TIMEOUT_MS = 1500;
/** What "bounded" means for a request during an outage: the timeout plus generous slack for a busy 2-core machine. */
const ANSWER_BOUND_MS = DB_TIMEOUT_MS * 2 + 2500;
const SERVER_ENV = {
  ORBIT_LEASE_SECONDS: '3',
  ORBIT_RECOVERY_INTERVAL_MS: '200',
  // Every request asks the database, so an outage is seen by every request.
  ORBIT_AUTH_CACHE_MS: '0',
  ORBIT_DB_TIMEOUT_MS: String(DB_TIMEOUT_MS),
};

type Phase = 'normal' | 'killed' | 'restarted' | 'stopped' | 'resumed';

interface Outcome {
  key: string;
  phase: Phase;
  status: number;
  code?: string;
  taskId?: string;
  ms: number;
  envelope: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('database outage: killed and paused, two servers, submitters and workers', () => {
  const root = mkdtempSync(join(tmpdir(), 'orbit-outage-'));
  let serverUrl: string;
  let t: TestDatabase;
  let tenant: TestTenant;
  let servers: ServerProcess[] = [];
  const workers: WorkerProcess[] = [];
  let phase: Phase = 'normal';
  const outcomes: Outcome[] = [];

  async function startDatabase(): Promise<string> {
    // The private server of scripts/local-db.mjs, under this test's own folder.
    const saved = { force: process.env.ORBIT_LOCAL_DB, url: process.env.ORBIT_DATABASE_URL };
    process.env.ORBIT_LOCAL_DB = 'force';
    delete process.env.ORBIT_DATABASE_URL;
    try {
      return (await ensureDatabase({ root, log: () => {} })).url as string;
    } finally {
      if (saved.force === undefined) delete process.env.ORBIT_LOCAL_DB;
      else process.env.ORBIT_LOCAL_DB = saved.force;
      if (saved.url !== undefined) process.env.ORBIT_DATABASE_URL = saved.url;
    }
  }
  const databasePid = () => Number(readFileSync(join(root, '.local', 'mariadb', 'mariadb.pid'), 'utf8').trim());

  before(async () => {
    serverUrl = await startDatabase();
    const saved = process.env.ORBIT_TEST_DATABASE_URL;
    process.env.ORBIT_TEST_DATABASE_URL = serverUrl;
    try {
      t = await freshDatabase('outage');
    } finally {
      if (saved === undefined) delete process.env.ORBIT_TEST_DATABASE_URL;
      else process.env.ORBIT_TEST_DATABASE_URL = saved;
    }
    tenant = await createTenant(t.db, { namespace: 'outage', queues: ['work'], resourceAccess: true });
    servers = await Promise.all([0, 1].map(() => startServerProcess(t.url, SERVER_ENV)));
    for (const [i, server] of servers.entries()) {
      workers.push(startWorkerProcess({ url: server.url, token: tenant.token, queues: ['work'], capacity: 4, node: `node-${i}`, workMs: [5, 30] }));
    }
  });

  after(async () => {
    await Promise.all(workers.map((w) => w.stop()));
    await Promise.all(servers.map((s) => s.stop()));
    try {
      process.kill(databasePid(), 'SIGCONT');
    } catch {
      // not stopped, or gone
    }
    await t?.db.close().catch(() => {});
    await stopPrivateDatabase({ root }).catch(() => {});
    rmSync(root, { recursive: true, force: true });
  });

  /** One submission, timed; a request that does not answer within the bound counts as a hang (status 0). */
  async function submit(server: ServerProcess, key: string): Promise<Outcome> {
    const started = Date.now();
    const at = phase;
    try {
      const response = await fetch(`${server.url}/v1/queues/work/tasks`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${tenant.token}`, 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: JSON.stringify({ payload: { key } }),
        signal: AbortSignal.timeout(ANSWER_BOUND_MS + 5000),
      });
      const body = (await response.json()) as any;
      const envelope =
        typeof body?.request_id === 'string' &&
        body.request_id === response.headers.get('x-request-id') &&
        (body.data !== undefined || typeof body.error?.code === 'string');
      return { key, phase: at, status: response.status, code: body?.error?.code, taskId: body?.data?.task?.task_id, ms: Date.now() - started, envelope };
    } catch {
      return { key, phase: at, status: 0, ms: Date.now() - started, envelope: false };
    }
  }

  /** Four submitters, alternating between the two servers, until `stop` is set. */
  function startSubmitters(): { stop(): Promise<void> } {
    let stopping = false;
    let n = 0;
    const loops = [0, 1, 2, 3].map(async (i) => {
      while (!stopping) {
        outcomes.push(await submit(servers[(i + n) % 2]!, `outage-${i}-${n++}`));
        await sleep(15);
      }
    });
    return {
      async stop() {
        stopping = true;
        await Promise.all(loops);
      },
    };
  }

  async function readiness(server: ServerProcess): Promise<{ status: number; ms: number }> {
    const started = Date.now();
    try {
      const response = await fetch(`${server.url}/readyz`, { signal: AbortSignal.timeout(ANSWER_BOUND_MS + 5000) });
      await response.text();
      return { status: response.status, ms: Date.now() - started };
    } catch {
      return { status: 0, ms: Date.now() - started };
    }
  }

  /** A new worker connection: the HTTP status of a refused upgrade and its body, or 101. */
  async function connectWorker(server: ServerProcess): Promise<{ status: number; body: any; requestId: string | undefined; ms: number }> {
    const started = Date.now();
    return new Promise((resolve) => {
      const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/workers/connect`, { headers: { Authorization: `Bearer ${tenant.token}` } });
      const timer = setTimeout(() => {
        socket.terminate();
        resolve({ status: 0, body: null, requestId: undefined, ms: Date.now() - started });
      }, ANSWER_BOUND_MS + 5000);
      socket.on('open', () => {
        clearTimeout(timer);
        socket.close();
        resolve({ status: 101, body: null, requestId: undefined, ms: Date.now() - started });
      });
      socket.on('unexpected-response', (_request, response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => (text += chunk.toString()));
        response.on('end', () => {
          clearTimeout(timer);
          let body: any = null;
          try {
            body = JSON.parse(text);
          } catch {
            // not JSON: the assertion below reports it
          }
          resolve({ status: response.statusCode ?? 0, body, requestId: response.headers['x-request-id'] as string | undefined, ms: Date.now() - started });
        });
      });
      socket.on('error', () => {});
    });
  }

  /** During an outage: /readyz is 503 on both servers, a new worker connection is refused with the envelope, both within the bound. */
  async function assertOutageSeen(label: string): Promise<void> {
    for (const server of servers) {
      const ready = await waitFor(async () => {
        const r = await readiness(server);
        return r.status === 503 ? r : null;
      }, 15_000);
      assert.ok(ready.ms < ANSWER_BOUND_MS, `${label}: /readyz took ${ready.ms} ms`);
      const refused = await waitFor(async () => {
        const r = await connectWorker(server);
        assert.notEqual(r.status, 0, `${label}: a worker upgrade hung`);
        return r.status === 503 ? r : null;
      }, 15_000);
      assert.ok(refused.ms < ANSWER_BOUND_MS, `${label}: the refused upgrade took ${refused.ms} ms`);
      assert.equal(refused.body?.error?.code, 'UNAVAILABLE', `${label}: ${JSON.stringify(refused.body)}`);
      assert.equal(refused.body?.request_id, refused.requestId);
    }
  }

  async function assertReadyAgain(): Promise<void> {
    for (const server of servers) await waitFor(async () => (await readiness(server)).status === 200, 60_000);
  }

  test('requests answer 503 within a bounded time during the outage; afterwards nothing is lost and counters equal a recount', async (context) => {
    const submitters = startSubmitters();
    await sleep(2500);

    // 1. Killed and restarted.
    const pid = databasePid();
    process.kill(pid, 'SIGKILL');
    phase = 'killed';
    await assertOutageSeen('killed');
    await sleep(1500);
    const restartedUrl = await startDatabase();
    assert.equal(restartedUrl, serverUrl, 'the restarted database listens where it did');
    phase = 'restarted';
    await assertReadyAgain();
    await sleep(2500);

    // 2. Paused: connections stay open, nothing answers.
    process.kill(databasePid(), 'SIGSTOP');
    phase = 'stopped';
    await assertOutageSeen('stopped');
    await sleep(2000);
    process.kill(databasePid(), 'SIGCONT');
    phase = 'resumed';
    await assertReadyAgain();
    await sleep(2500);
    await submitters.stop();

    // Every answer was the envelope; no 500s, no hangs, each within the bound.
    const bad = outcomes.filter((o) => o.status === 0 || (o.status >= 500 && o.status !== 503) || !o.envelope);
    assert.deepEqual(bad, [], 'no request hung, failed with a 500 or answered outside the envelope');
    const slow = outcomes.filter((o) => o.ms > ANSWER_BOUND_MS);
    assert.deepEqual(slow, [], `every request answered within ${ANSWER_BOUND_MS} ms`);
    for (const o of outcomes.filter((x) => x.status === 503)) assert.equal(o.code, 'UNAVAILABLE');
    for (const p of ['killed', 'stopped'] as const) {
      assert.ok(
        outcomes.some((o) => o.phase === p && o.status === 503),
        `some submissions saw the database ${p}`,
      );
    }
    for (const p of ['normal', 'restarted', 'resumed'] as const) {
      assert.ok(
        outcomes.some((o) => o.phase === p && o.status === 200),
        `submissions were accepted while ${p}`,
      );
    }
    const summary = (['normal', 'killed', 'restarted', 'stopped', 'resumed'] as const).map((p) => {
      const mine = outcomes.filter((o) => o.phase === p);
      return `${p}: ${mine.filter((o) => o.status === 200).length} accepted, ${mine.filter((o) => o.status === 503).length} unavailable, slowest ${Math.max(0, ...mine.map((o) => o.ms))} ms`;
    });
    context.diagnostic(summary.join('; '));
    const unexpected = outcomes.filter((o) => o.status !== 200 && o.status !== 503);
    assert.deepEqual(unexpected, [], 'only 200 and 503 answers');

    // A 503 left the outcome unknown: resent with the same key, each is accepted now or replayed.
    const accepted = new Map(outcomes.filter((o) => o.status === 200).map((o) => [o.key, o.taskId as string]));
    for (const o of outcomes.filter((x) => x.status === 503)) {
      const again = await submit(servers[0]!, o.key);
      assert.equal(again.status, 200, `resending ${o.key}`);
      accepted.set(o.key, again.taskId as string);
    }
    for (const o of outcomes.filter((x) => x.status === 200)) assert.equal(accepted.get(o.key), o.taskId, 'a replay names the original task');

    // Workers carried on through both outages: every accepted task succeeds exactly once.
    const ids = [...accepted.values()];
    await waitFor(async () => {
      const [row] = await t.db.rows<{ done: string }>(
        `SELECT COUNT(*) AS done FROM orbit_tasks WHERE state = 'SUCCEEDED' AND task_id IN (${ids.map(() => 'UNHEX(?)').join(', ')})`,
        ids,
      );
      return Number(row?.done) === ids.length;
    }, 90_000);
    const [{ total }] = (await t.db.rows<{ total: string }>('SELECT COUNT(*) AS total FROM orbit_tasks')) as [{ total: string }];
    assert.equal(Number(total), ids.length, 'no task exists that no answer named');

    const attempts = await t.db.rows<{ task_id: Buffer; state: string; started_at: string | null; lease_expires_at: string }>(
      'SELECT task_id, state, started_at, lease_expires_at FROM orbit_attempts ORDER BY task_id, claimed_at',
    );
    const byTask = new Map<string, typeof attempts>();
    for (const a of attempts) byTask.set(a.task_id.toString('hex'), [...(byTask.get(a.task_id.toString('hex')) ?? []), a]);
    let reruns = 0;
    for (const [taskId, list] of byTask) {
      assert.equal(list.filter((a) => a.state === 'SUCCEEDED').length, 1, `task ${taskId} succeeded once`);
      reruns += Math.max(0, list.filter((a) => a.started_at !== null).length - 1);
      const started = list.filter((a) => a.started_at !== null);
      for (let i = 0; i + 1 < started.length; i++) {
        assert.equal(started[i]!.state, 'EXPIRED', `task ${taskId}: an earlier run ended ${started[i]!.state}, not by expiry`);
        assert.ok(
          sqlToMillis(started[i]!.lease_expires_at) <= sqlToMillis(started[i + 1]!.started_at!),
          `task ${taskId}: ran again before the earlier lease expired`,
        );
      }
    }
    context.diagnostic(`${ids.length} tasks, ${reruns} reruns after an expired attempt, ${attempts.length} attempts`);
    // The worker processes are still there, and they kept working: tasks accepted after the last outage succeeded too.
    for (const w of workers) assert.equal(w.child.exitCode, null, 'the worker process is alive');
    assert.ok(outcomes.some((o) => o.phase === 'resumed' && o.status === 200));
    await assertCountersMatchRecount(t.db);
  });
});
