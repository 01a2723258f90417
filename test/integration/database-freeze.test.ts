/**
 * Every wait is bounded: the database is frozen (SIGSTOP - its connections stay open and nothing
 * answers) for 20 s, four times longer than the bound, under 16 submitters on two server
 * processes with the default settings. Throughout the freeze:
 *  - every request is answered within 5 s (ORBIT_DB_TIMEOUT_MS, 4 s by default, and the time
 *    to answer), with 503 UNAVAILABLE in the envelope - never only after the database is back;
 *  - `/readyz` answers 503 within 1 s (a Kubernetes probe's default timeout);
 *  - a new worker connection is refused with the envelope within the same 5 s;
 *  - a frame of an open worker session (a claim) is answered with an `error` UNAVAILABLE
 *    within the same 5 s.
 * Afterwards both servers serve again, every submission that got 200 exists, every 503'd one,
 * resent with its key, is accepted (or replayed), and every counter equals a recount.
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
import { connectRaw, type RawSession } from '../helpers/ws-session.ts';
import { waitFor } from '../helpers/wait.ts';
import {
  connectWorker,
  onServer,
  privateDatabasePid,
  readiness,
  startPrivateDatabase,
  stopPrivateDatabaseAt,
  timedFetch,
  type TimedAnswer,
} from '../helpers/outage.ts';
import { DEFAULT_DATABASE_TIMEOUT_MS } from '../../server/config.ts';

/** The documented bound (docs/operations.md): the default database bound and a second to answer. */
const ANSWER_BOUND_MS = DEFAULT_DATABASE_TIMEOUT_MS + 1000;
/** What a Kubernetes readiness probe waits by default. */
const READY_BOUND_MS = 1000;
/**
 * What a loaded test machine may add to an answer on its way to the client (the event loops of
 * two busy processes): the readiness bound itself is held to the server's own time for the
 * answer (its access log), the client's wait to that plus this.
 */
const LOADED_MACHINE_SLACK_MS = 1000;
/** How long the database stays frozen: well past the bound. */
const FREEZE_MS = 20_000;
const SUBMITTERS = 16;
/** A client gives up on a request after this long: it counts as a hang (status 0). */
const GIVE_UP_MS = 30_000;

type Phase = 'before' | 'frozen' | 'after';
interface Outcome extends TimedAnswer {
  key: string;
  phase: Phase;
}

describe('a frozen database: every wait is bounded, two servers, 16 submitters, default settings', () => {
  const root = mkdtempSync(join(tmpdir(), 'orbit-freeze-'));
  let t: TestDatabase;
  let tenant: TestTenant;
  let servers: ServerProcess[] = [];
  let phase: Phase = 'before';
  const outcomes: Outcome[] = [];

  before(async () => {
    const serverUrl = await startPrivateDatabase(root);
    t = await onServer(serverUrl, () => freshDatabase('freeze'));
    tenant = await createTenant(t.db, { namespace: 'freeze', queues: ['work'], resourceAccess: true });
    // Every request asks the database (no cached authentication), so every request meets the freeze.
    // The production default bound (the test helpers' servers have a generous one otherwise).
    servers = await Promise.all([0, 1].map(() => startServerProcess(t.url, { ORBIT_AUTH_CACHE_MS: '0', ORBIT_DB_TIMEOUT_MS: '' })));
  });

  after(async () => {
    try {
      process.kill(privateDatabasePid(root), 'SIGCONT');
    } catch {
      // not stopped, or gone
    }
    await Promise.all(servers.map((s) => s.stop()));
    await t?.db.close().catch(() => {});
    await stopPrivateDatabaseAt(root).catch(() => {});
    rmSync(root, { recursive: true, force: true });
  });

  function submit(server: ServerProcess, key: string): Promise<TimedAnswer> {
    return timedFetch(
      `${server.url}/v1/queues/work/tasks`,
      {
        method: 'POST',
        headers: { Authorization: `Bearer ${tenant.token}`, 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: JSON.stringify({ payload: { key } }),
      },
      GIVE_UP_MS,
    );
  }

  /** Submitters alternating between the servers, one request at a time each, until stopped. */
  function startSubmitters(): { stop(): Promise<void> } {
    let stopping = false;
    const loops = Array.from({ length: SUBMITTERS }, async (_, i) => {
      for (let n = 0; !stopping; n++) {
        const key = `freeze-${i}-${n}`;
        const at = phase;
        const answer = await submit(servers[(i + n) % 2] as ServerProcess, key);
        outcomes.push({ ...answer, key, phase: at });
      }
    });
    return {
      async stop() {
        stopping = true;
        await Promise.all(loops);
      },
    };
  }

  const answered = (p: Phase, status: number) => outcomes.filter((o) => o.phase === p && o.status === status).length;

  test('answers within the bound while frozen for 20 s; afterwards nothing is lost and counters equal a recount', async (context) => {
    // A worker session opened before the freeze: its frames must be bounded too.
    const session: RawSession = await connectRaw(servers[0]!.url, tenant.token);
    assert.equal((await session.request({ type: 'hello', node_id: 'freeze-node', queues: ['work'], capacity: 1 })).type, 'welcome');

    const submitters = startSubmitters();
    await waitFor(async () => answered('before', 200) >= 2 * SUBMITTERS, 30_000);

    const pid = privateDatabasePid(root);
    process.kill(pid, 'SIGSTOP');
    const frozenAt = Date.now();
    phase = 'frozen';
    const probes: Array<{ what: string; answer: TimedAnswer; server?: ServerProcess; logFrom?: number }> = [];
    const frames: Array<{ ms: number; frame: any }> = [];
    let round = 0;
    // Probe the whole time the database is frozen (readiness, a new worker, a frame of the open session).
    while (Date.now() - frozenAt < FREEZE_MS) {
      const server = servers[round % 2] as ServerProcess;
      // Its line of the access log is the first one for /readyz after this point (probes are one at a time).
      const logFrom = server.logs.length;
      probes.push({ what: `readyz ${round % 2}`, answer: await readiness(server, GIVE_UP_MS), server, logFrom });
      probes.push({ what: `worker ${round % 2}`, answer: await connectWorker(server, tenant.token, GIVE_UP_MS) });
      const started = Date.now();
      const claimId = `freeze-claim-${round}`;
      const frame = await session.request({ type: 'claim', claim_id: claimId, max: 1 }, GIVE_UP_MS).catch(() => null);
      frames.push({ ms: Date.now() - started, frame });
      round += 1;
    }
    const frozenFor = Date.now() - frozenAt;
    process.kill(pid, 'SIGCONT');
    phase = 'after';
    for (const server of servers) await waitFor(async () => (await readiness(server, GIVE_UP_MS)).status === 200, 60_000);
    await waitFor(async () => answered('after', 200) >= 2 * SUBMITTERS, 60_000);
    await submitters.stop();

    // Throughout the freeze: answered, in the envelope, 503 UNAVAILABLE, within the bound.
    const frozen = outcomes.filter((o) => o.phase === 'frozen');
    assert.ok(frozen.length >= SUBMITTERS * 2, `submissions kept being answered during the freeze (${frozen.length})`);
    // The bound is held to the server's own time for each answer (its access log); the client's
    // wait to that and a loaded machine's slack, as for /readyz below.
    const serverMs = new Map<string, number>();
    // The access log reaches this process through a pipe: wait for the lines of the last answers too.
    await waitFor(async () => {
      for (const s of servers) for (const line of s.logs) if (line.msg === 'request') serverMs.set(String(line.request_id), Number(line.duration_ms));
      return outcomes.every((o) => o.requestId === undefined || serverMs.has(o.requestId));
    });
    const late = outcomes.filter(
      (o) =>
        o.status === 0 ||
        o.ms > ANSWER_BOUND_MS + LOADED_MACHINE_SLACK_MS ||
        !(o.requestId !== undefined && (serverMs.get(o.requestId) ?? Number.POSITIVE_INFINITY) <= ANSWER_BOUND_MS),
    );
    assert.deepEqual(
      late.map((o) => ({ key: o.key, phase: o.phase, status: o.status, ms: o.ms, serverMs: o.requestId === undefined ? null : serverMs.get(o.requestId) })),
      [],
      `every request answered within ${ANSWER_BOUND_MS} ms in the server (and ${ANSWER_BOUND_MS + LOADED_MACHINE_SLACK_MS} ms at the client)`,
    );
    const notEnvelope = outcomes.filter((o) => !o.envelope || (o.status !== 200 && o.status !== 503));
    assert.deepEqual(notEnvelope, [], 'only 200 and 503 answers, each in the envelope');
    for (const o of outcomes.filter((x) => x.status === 503)) assert.equal(o.body?.error?.code, 'UNAVAILABLE');
    assert.ok(frozen.some((o) => o.status === 503));

    for (const { what, answer, server, logFrom } of probes) {
      if (what.startsWith('readyz')) {
        assert.equal(answer.status, 503, `${what} during the freeze: ${JSON.stringify(answer.body)}`);
        const logged = server?.logs.slice(logFrom).find((line) => line.msg === 'request' && line.route === '/readyz');
        assert.ok(logged, `${what}: the access log has its answer`);
        assert.ok(Number(logged.duration_ms) <= READY_BOUND_MS, `${what} took ${logged.duration_ms} ms in the server`);
        assert.ok(answer.ms <= READY_BOUND_MS + LOADED_MACHINE_SLACK_MS, `${what} took ${answer.ms} ms to reach the client`);
      } else {
        assert.equal(answer.status, 503, `${what}: a new worker during the freeze is refused`);
        assert.ok(answer.envelope, `${what}: the refusal is the envelope`);
        assert.equal(answer.body?.error?.code, 'UNAVAILABLE');
        assert.ok(answer.ms <= ANSWER_BOUND_MS, `${what} took ${answer.ms} ms`);
      }
    }
    for (const { ms, frame } of frames) {
      assert.ok(frame !== null, 'a claim during the freeze is answered');
      assert.equal(frame.type, 'error', `a claim during the freeze: ${JSON.stringify(frame)}`);
      assert.equal(frame.code, 'UNAVAILABLE');
      assert.ok(ms <= ANSWER_BOUND_MS, `the claim's error took ${ms} ms`);
    }
    const slowest = (list: number[]) => Math.max(0, ...list);
    const median = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)] ?? 0;
    context.diagnostic(
      `frozen ${frozenFor} ms: ${frozen.length} submissions answered (p50 ${median(frozen.map((o) => o.ms))} ms, slowest ${slowest(frozen.map((o) => o.ms))} ms); ` +
        `readyz slowest ${slowest(probes.filter((p) => p.what.startsWith('readyz')).map((p) => p.answer.ms))} ms; ` +
        `worker refusals slowest ${slowest(probes.filter((p) => p.what.startsWith('worker')).map((p) => p.answer.ms))} ms; ` +
        `claim errors slowest ${slowest(frames.map((f) => f.ms))} ms`,
    );

    // The open session carries on once the database is back.
    const claimed = await waitFor(async () => {
      const frame = await session.request({ type: 'claim', claim_id: `after-${Date.now()}`, max: 1 }, GIVE_UP_MS);
      return frame.type === 'claimed' ? frame : null;
    }, 30_000);
    for (const a of claimed.attempts) assert.equal((await session.request({ type: 'release', attempt_id: a.attempt_id })).type, 'released');
    await session.close();

    // A 503 left the outcome unknown: resent with the same key, each is accepted now or replayed.
    const accepted = new Map(outcomes.filter((o) => o.status === 200).map((o) => [o.key, o.body.data.task.task_id as string]));
    for (const o of outcomes.filter((x) => x.status === 503)) {
      const again = await submit(servers[0]!, o.key);
      assert.equal(again.status, 200, `resending ${o.key}: ${JSON.stringify(again.body)}`);
      accepted.set(o.key, again.body.data.task.task_id as string);
    }
    for (const o of outcomes.filter((x) => x.status === 200)) assert.equal(accepted.get(o.key), o.body.data.task.task_id, 'a replay names the original task');
    const [{ total }] = (await t.db.rows<{ total: string }>('SELECT COUNT(*) AS total FROM orbit_tasks')) as [{ total: string }];
    assert.equal(Number(total), accepted.size, 'every accepted submission is a task, and no task exists that no answer named');
    await assertCountersMatchRecount(t.db);
  });
});
