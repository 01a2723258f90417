/**
 * `npm run bench:capacity`: the product's capacity checks for one busy application, on this
 * machine, with two orbit-server processes (production bounds) on a private MariaDB database.
 *
 * 1. Renewal at scale: ORBIT_CAPACITY_SESSIONS (1,000) worker sessions - raw WebSocket frames,
 *    spread over the servers - each holding one running attempt, all renewing at once, for
 *    ORBIT_CAPACITY_ROUNDS (5) rounds: each renew's latency (frame sent → `renewed`), p50 / p99 /
 *    max, and renewals per second. A renew touches only its attempt row, never the application
 *    row, so it should not queue behind the others.
 * 2. Recovery at scale: ORBIT_CAPACITY_EXPIRED (10,000) running attempts whose leases all end at
 *    once (their sessions stay open and silent, as workers that hang): how long until the recovery
 *    loops of both servers have moved every task on (WAITING, claimable again after its retry
 *    backoff of 1 s), the per-task delay from lease expiry to the recovery's write (p50 / p99 /
 *    max, from the database's own times), and the counters against a recount.
 *
 * The drain's application-row lock wait and hold are in `npm run bench:peers` (the per-operation
 * transaction lines).
 */
import { benchDatabase, fmt, percentile, PRODUCTION_BOUNDS } from './common.ts';
import { createTenant } from '../test/helpers/tenants.ts';
import { startServerProcess, type ServerProcess } from '../test/helpers/server-process.ts';
import { connectRaw, type RawSession } from '../test/helpers/ws-session.ts';
import { formatDifference } from '../server/cli/verify-report.ts';
import { countersVerify, tasksDisagreeingWithAttempts } from '../server/store/quotas/usage-recount.ts';
import { sqlToMillis } from '../server/time.ts';
import type { Database } from '../server/store/database/database.ts';

const SESSIONS = Number(process.env.ORBIT_CAPACITY_SESSIONS ?? 1000);
const ROUNDS = Number(process.env.ORBIT_CAPACITY_ROUNDS ?? 5);
const EXPIRED = Number(process.env.ORBIT_CAPACITY_EXPIRED ?? 10_000);
const CLAIM_MAX = 1000;

async function submitMany(url: string, token: string, queue: string, n: number, prefix: string): Promise<void> {
  for (let start = 0; start < n; start += 1000) {
    const tasks = Array.from({ length: Math.min(1000, n - start) }, (_, i) => ({ idempotency_key: `${prefix}-${start + i}`, payload: { n: start + i } }));
    const res = await fetch(`${url}/v1/queues/${queue}/tasks:batch`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ tasks }),
    });
    if (res.status !== 200) throw new Error(`bulk submit answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
  }
}

async function openSession(url: string, token: string, queue: string, nodeId: string, capacity: number): Promise<RawSession> {
  const s = await connectRaw(url, token);
  const welcome = await s.request({ type: 'hello', node_id: nodeId, queues: [queue], capacity });
  if (welcome.type !== 'welcome') throw new Error(`hello answered ${JSON.stringify(welcome)}`);
  return s;
}

const stats = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return `p50 ${fmt(percentile(sorted, 50), 1)} ms, p99 ${fmt(percentile(sorted, 99), 1)} ms, max ${fmt(sorted.at(-1) ?? NaN, 1)} ms`;
};

async function recount(db: Database): Promise<string> {
  const report = await countersVerify(db);
  const disagree = await tasksDisagreeingWithAttempts(db);
  const ok = report.differences.length === 0 && disagree === 0;
  return `counters = recount: ${report.differences.length} differences, ${disagree} task/attempt disagreements - ${ok ? 'ok' : 'MISMATCH'}${report.differences.length ? `\n    ${report.differences.slice(0, 5).map(formatDifference).join('\n    ')}` : ''}`;
}

async function renewal(_db: Database, urls: string[], token: string): Promise<void> {
  await submitMany(urls[0] as string, token, 'renew', SESSIONS, 'renew');
  const sessions: RawSession[] = [];
  const held: string[] = [];
  // Opened a hundred at a time (each a WebSocket upgrade, a hello and a claim).
  for (let start = 0; start < SESSIONS; start += 100) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(100, SESSIONS - start) }, async (_, i) => {
        const n = start + i;
        const s = await openSession(urls[n % urls.length] as string, token, 'renew', `renewer-${n}`, 1);
        let attemptId: string | undefined;
        for (let tries = 0; attemptId === undefined && tries < 50; tries++) {
          const claimed = await s.request({ type: 'claim', claim_id: `c${n}-${tries}`, max: 1, start: true });
          attemptId = claimed.attempts?.[0]?.attempt_id;
        }
        if (attemptId === undefined) throw new Error(`session ${n} got no attempt to hold`);
        return { s, attemptId };
      }),
    );
    for (const { s, attemptId } of batch) {
      sessions.push(s);
      held.push(attemptId);
    }
  }
  console.log(`renewal: ${fmt(sessions.length)} sessions over ${urls.length} servers, each holding one running attempt`);
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      const t0 = performance.now();
      const latencies = await Promise.all(
        sessions.map(async (s, i) => {
          const sent = performance.now();
          const answer = await s.request({ type: 'renew', attempt_id: held[i] });
          if (answer.type !== 'renewed') throw new Error(`renew answered ${JSON.stringify(answer)}`);
          return performance.now() - sent;
        }),
      );
      const wall = (performance.now() - t0) / 1000;
      console.log(`  round ${round}: ${fmt(latencies.length)} renewals in ${fmt(wall, 2)} s (${fmt(latencies.length / wall)}/s); latency ${stats(latencies)}`);
    }
  } finally {
    await Promise.all(sessions.map((s) => s.close()));
  }
}

async function recovery(db: Database, urls: string[], token: string): Promise<void> {
  await submitMany(urls[0] as string, token, 'recover', EXPIRED, 'recover');
  const sessions: RawSession[] = [];
  let claimed = 0;
  for (let n = 0; claimed < EXPIRED; n++) {
    const s = await openSession(urls[n % urls.length] as string, token, 'recover', `hung-${n}`, CLAIM_MAX);
    sessions.push(s);
    const answer = await s.request({ type: 'claim', claim_id: `c${n}`, max: Math.min(CLAIM_MAX, EXPIRED - claimed), start: true });
    claimed += answer.attempts?.length ?? 0;
    if (n > EXPIRED) throw new Error('claims are not getting the tasks');
  }
  try {
    // Every lease ends now; the sessions stay open and send nothing (workers that hang).
    const [{ now }] = (await db.rows('SELECT NOW(6) AS now')) as [{ now: string }];
    await db.exec(
      "UPDATE orbit_attempts a JOIN orbit_queues q ON q.queue_id = a.queue_id AND q.name = 'recover' SET a.lease_expires_at = ? WHERE a.state = 'RUNNING'",
      [now],
    );
    const expiredAt = sqlToMillis(now);
    const t0 = performance.now();
    let waiting = 0;
    while (waiting < EXPIRED) {
      const [row] = await db.rows<{ n: string }>(
        "SELECT COUNT(*) AS n FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id AND q.name = 'recover' WHERE t.state = 'WAITING'",
      );
      waiting = Number(row?.n ?? 0);
      if (performance.now() - t0 > 300_000) throw new Error(`recovery: only ${waiting} of ${EXPIRED} back after 300 s`);
      if (waiting < EXPIRED) await new Promise((r) => setTimeout(r, 20));
    }
    const wall = (performance.now() - t0) / 1000;
    const rows = await db.rows<{ updated_at: string; available_at: string }>(
      "SELECT t.updated_at, t.available_at FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id AND q.name = 'recover'",
    );
    const delays = rows.map((r) => sqlToMillis(r.updated_at) - expiredAt);
    const claimable = rows.map((r) => sqlToMillis(r.available_at) - expiredAt);
    console.log(
      `recovery: ${fmt(EXPIRED)} running attempts' leases ended at once (${sessions.length} silent sessions): all tasks WAITING again within ${fmt(wall, 2)} s ` +
        `(${fmt(EXPIRED / wall)} tasks/s through recovery)\n  lease expiry → recovery's write: ${stats(delays)}\n  lease expiry → claimable (after the 1 s retry backoff): ${stats(claimable)}`,
    );
  } finally {
    await Promise.all(sessions.map((s) => s.close()));
  }
}

const bench = await benchDatabase();
let servers: ServerProcess[] = [];
try {
  const tenant = await createTenant(bench.db, { namespace: 'capacity', queues: ['renew', 'recover'] });
  await bench.db.exec('UPDATE orbit_queues SET max_concurrency = 100000, rate_per_second = 1000000');
  servers = await Promise.all([0, 1].map(() => startServerProcess(bench.url, PRODUCTION_BOUNDS)));
  const urls = servers.map((s) => s.url);
  await renewal(bench.db, urls, tenant.token);
  await recovery(bench.db, urls, tenant.token);
  // The sessions are closed: every reservation and lease is settled before the recount.
  console.log(await recount(bench.db));
} finally {
  await Promise.all(servers.map((s) => s.stop()));
  await bench.drop();
}
