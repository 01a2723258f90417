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
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { startWorkerProcess, type WorkerProcess } from '../helpers/worker-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { connectWorker, onServer, privateDatabasePid, readiness, startPrivateDatabase, stopPrivateDatabaseAt, timedFetch } from '../helpers/outage.ts';
import { sqlToMillis } from '../../server/time.ts';

/** The servers' database timeout: what one request may wait on the database in all. */
const DB_TIMEOUT_MS = 1500;
/** What "bounded" means for a request during an outage: the timeout plus generous slack for a busy 2-core machine. */
const ANSWER_BOUND_MS = DB_TIMEOUT_MS * 2 + 2500;
/** A client gives up after this long: the request counts as a hang. */
const GIVE_UP_MS = ANSWER_BOUND_MS + 5000;
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

describe('database outage: killed and paused, two servers, submitters and workers', () => {
  const root = mkdtempSync(join(tmpdir(), 'orbit-outage-'));
  let serverUrl: string;
  let t: TestDatabase;
  let tenant: TestTenant;
  let servers: ServerProcess[] = [];
  const workers: WorkerProcess[] = [];
  let phase: Phase = 'normal';
  const outcomes: Outcome[] = [];

  before(async () => {
    serverUrl = await startPrivateDatabase(root);
    t = await onServer(serverUrl, () => freshDatabase('outage'));
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
      process.kill(privateDatabasePid(root), 'SIGCONT');
    } catch {
      // not stopped, or gone
    }
    await t?.db.close().catch(() => {});
    await stopPrivateDatabaseAt(root).catch(() => {});
    rmSync(root, { recursive: true, force: true });
  });

  /** One submission, timed; a request that does not answer within GIVE_UP_MS counts as a hang (status 0). */
  async function submit(server: ServerProcess, key: string): Promise<Outcome> {
    const at = phase;
    const answer = await timedFetch(
      `${server.url}/v1/queues/work/tasks`,
      {
        method: 'POST',
        headers: { Authorization: `Bearer ${tenant.token}`, 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: JSON.stringify({ payload: { key } }),
      },
      GIVE_UP_MS,
    );
    return {
      key,
      phase: at,
      status: answer.status,
      code: answer.body?.error?.code,
      taskId: answer.body?.data?.task?.task_id,
      ms: answer.ms,
      envelope: answer.envelope,
    };
  }

  /** Four submitters, alternating between the two servers, one request at a time each, until `stop` is set. */
  function startSubmitters(): { stop(): Promise<void> } {
    let stopping = false;
    let n = 0;
    const loops = [0, 1, 2, 3].map(async (i) => {
      while (!stopping) outcomes.push(await submit(servers[(i + n) % 2]!, `outage-${i}-${n++}`));
    });
    return {
      async stop() {
        stopping = true;
        await Promise.all(loops);
      },
    };
  }

  /** Waits until `count` more submissions of the current phase answered `status` (traffic, not time). */
  async function answersInPhase(status: number, count: number): Promise<void> {
    const p = phase;
    const seen = () => outcomes.filter((o) => o.phase === p && o.status === status).length;
    const target = seen() + count;
    await waitFor(async () => seen() >= target, 60_000);
  }

  /** During an outage: /readyz is 503 on both servers, a new worker connection is refused with the envelope, both within the bound. */
  async function assertOutageSeen(label: string): Promise<void> {
    for (const server of servers) {
      const ready = await waitFor(async () => {
        const r = await readiness(server, GIVE_UP_MS);
        return r.status === 503 ? r : null;
      }, 15_000);
      assert.ok(ready.ms < ANSWER_BOUND_MS, `${label}: /readyz took ${ready.ms} ms`);
      const refused = await waitFor(async () => {
        const r = await connectWorker(server, tenant.token, GIVE_UP_MS);
        assert.notEqual(r.status, 0, `${label}: a worker upgrade hung`);
        return r.status === 503 ? r : null;
      }, 15_000);
      assert.ok(refused.ms < ANSWER_BOUND_MS, `${label}: the refused upgrade took ${refused.ms} ms`);
      assert.equal(refused.body?.error?.code, 'UNAVAILABLE', `${label}: ${JSON.stringify(refused.body)}`);
      assert.equal(refused.body?.request_id, refused.requestId);
    }
  }

  async function assertReadyAgain(): Promise<void> {
    for (const server of servers) await waitFor(async () => (await readiness(server, GIVE_UP_MS)).status === 200, 60_000);
  }

  test('requests answer 503 within a bounded time during the outage; afterwards nothing is lost and counters equal a recount', async (context) => {
    const submitters = startSubmitters();
    await answersInPhase(200, 8);

    // 1. Killed and restarted.
    process.kill(privateDatabasePid(root), 'SIGKILL');
    phase = 'killed';
    await assertOutageSeen('killed');
    await answersInPhase(503, 4);
    const restartedUrl = await startPrivateDatabase(root);
    assert.equal(restartedUrl, serverUrl, 'the restarted database listens where it did');
    phase = 'restarted';
    await assertReadyAgain();
    await answersInPhase(200, 8);

    // 2. Paused: connections stay open, nothing answers.
    process.kill(privateDatabasePid(root), 'SIGSTOP');
    phase = 'stopped';
    await assertOutageSeen('stopped');
    await answersInPhase(503, 4);
    process.kill(privateDatabasePid(root), 'SIGCONT');
    phase = 'resumed';
    await assertReadyAgain();
    await answersInPhase(200, 8);
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
