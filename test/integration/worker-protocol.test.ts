/**
 * The worker protocol with raw WebSocket frames against a real server: every frame, strict
 * validation, windows, leases, results, cancellation and recovery.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue as configureQueueVia } from '../helpers/server-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { endLeases } from '../helpers/leases.ts';
import { connectRaw, type RawSession } from '../helpers/ws-session.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';
import { credentialRevoke } from '../../server/store/tenancy/credentials.ts';
import { applicationSetEnabled, namespaceSetEnabled } from '../../server/store/tenancy/tenancy.ts';

/** `promise`, or a failure naming `what` if it has not settled within `ms` (a bound, not a pause). */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Long enough that no lease runs out on its own between a test's steps on a loaded machine; the
 * tests about expiry end leases in the database (helpers/leases.ts) and wait for recovery.
 */
const LEASE_SECONDS = 600;

describe('worker protocol', () => {
  let t: TestDatabase;
  let server: RunningServer;
  let tenant: TestTenant;
  let keyCounter = 0;

  before(async () => {
    t = await freshDatabase('worker');
    tenant = await createTenant(t.db, {
      namespace: 'w',
      queues: ['jobs', 'other', 'keyed', 'paused', 'rated', 'prio', 'shared', 'shared-keyed', 'started'],
      resourceAccess: true,
    });
    server = await startServer(
      { ...testConfig(), databaseUrl: t.url, listenPort: 0, leaseSeconds: LEASE_SECONDS, recoveryIntervalMs: 100 },
      { log: silentLogger() },
    );
  });
  after(async () => {
    await server.close();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const http = (method: string, path: string, body?: unknown) =>
    call(server.url, method, path, { token: tenant.token, key: method === 'POST' ? `k-${++keyCounter}` : undefined, body });
  async function submit(queue: string, body: Record<string, unknown> = {}) {
    const r = await http('POST', `/v1/queues/${queue}/tasks`, { payload: { n: keyCounter }, ...body });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.task;
  }
  const task = async (id: string) => (await http('GET', `/v1/tasks/${id}`)).body.data;
  const resources = async () => (await http('GET', '/v1/application/resources')).body.data;
  const queue = async (name: string) => (await http('GET', `/v1/queues/${name}`)).body.data;
  const configureQueue = (name: string, patch: Record<string, unknown>) => configureQueueVia(server.url, tenant.token, name, patch);
  async function open(queues: string[], capacity = 10, nodeId = 'node-1'): Promise<RawSession> {
    const s = await connectRaw(server.url, tenant.token);
    const welcome = await s.request({ type: 'hello', node_id: nodeId, queues, capacity });
    assert.equal(welcome.type, 'welcome', JSON.stringify(welcome));
    assert.equal(welcome.lease_seconds, LEASE_SECONDS);
    return s;
  }
  let claimCounter = 0;
  const claim = async (s: RawSession, max: number) => {
    const answer = await s.request({ type: 'claim', claim_id: `c${++claimCounter}`, max });
    assert.equal(answer.type, 'claimed', JSON.stringify(answer));
    return answer.attempts as any[];
  };

  test('the upgrade is authenticated like HTTP', async () => {
    await assert.rejects(connectRaw(server.url, null), (e: any) => e.status === 401);
    await assert.rejects(connectRaw(server.url, 'orbit_nope'), (e: any) => e.status === 401);
    const noConsume = await createCredential(t.db, tenant, ['tasks:read']);
    await assert.rejects(connectRaw(server.url, noConsume), (e: any) => e.status === 403);
    const plain = await fetch(`${server.url}/v1/workers/connect`, { headers: { Authorization: `Bearer ${tenant.token}` } });
    assert.equal(plain.status, 400);
    assert.equal(((await plain.json()) as any).error.details.field, 'Upgrade');
  });

  test('bad frames get an error frame naming the field, and the session stays open', async () => {
    const s = await connectRaw(server.url, tenant.token);
    const cases: Array<[string, string]> = [
      ['not json', 'frame'],
      ['[]', 'frame'],
      ['{"node_id":"x"}', 'type'],
      ['{"type":"bogus"}', 'type'],
      ['{"type":"hello","node_id":"n","queues":["jobs"],"capacity":1,"extra":1}', 'extra'],
      ['{"type":"hello","node_id":"n","queues":["jobs"],"Capacity":1}', 'Capacity'],
      ['{"type":"hello","node_id":"n","queues":["jobs"],"capacity":null}', 'capacity'],
      ['{"type":"hello","node_id":"n","queues":["jobs"],"capacity":0}', 'capacity'],
      ['{"type":"hello","node_id":"n","queues":["jobs"],"capacity":1,"capacity":2}', 'capacity'],
      ['{"type":"hello","node_id":"n","queues":["Jobs"],"capacity":1}', 'queues[0]'],
      ['{"type":"claim","claim_id":"c","max":1}', 'STATE_CONFLICT'],
      ['{"type":"hello","node_id":"n","queues":["missing"],"capacity":1}', 'queues[0]'],
    ];
    for (const [text, field] of cases) {
      s.sendText(text);
      const frame = await s.next();
      assert.equal(frame.type, 'error', text);
      if (field === 'STATE_CONFLICT') assert.equal(frame.code, 'STATE_CONFLICT', text);
      else {
        assert.ok(frame.code === 'INVALID_ARGUMENT' || frame.code === 'NOT_FOUND', `${text}: ${JSON.stringify(frame)}`);
        assert.equal(frame.details?.field, field, `${text}: ${JSON.stringify(frame)}`);
      }
    }
    const welcome = await s.request({ type: 'hello', node_id: 'n', queues: ['jobs'], capacity: 1 });
    assert.equal(welcome.type, 'welcome');
    const again = await s.request({ type: 'hello', node_id: 'n', queues: ['jobs'], capacity: 1 });
    assert.equal(again.code, 'STATE_CONFLICT');
    const unknownAttempt = await s.request({ type: 'start', attempt_id: '0'.repeat(32) });
    assert.equal(unknownAttempt.code, 'LEASE_LOST');
    assert.equal(unknownAttempt.attempt_id, '0'.repeat(32));
    await s.close();
  });

  test('claim → start → renew → complete, with counters at both levels', async () => {
    const submitted = await submit('jobs', { payload: { hello: 'world' } });
    const s = await open(['jobs']);
    const [attempt, ...rest] = await claim(s, 5);
    assert.equal(rest.length, 0);
    assert.equal(attempt.task_id, submitted.task_id);
    assert.deepEqual(attempt.payload, { hello: 'world' });
    assert.equal(attempt.attempt_number, 1);
    assert.equal((await task(submitted.task_id)).state, 'LEASED');
    assert.equal((await task(submitted.task_id)).attempts, 0, 'a reservation is not an attempt');
    let r = await resources();
    assert.deepEqual([r.active_attempts, r.pending_starts], ['1', '1']);
    let q = await queue('jobs');
    assert.deepEqual([q.active_attempts, q.pending_starts], ['1', '1']);

    const started = await s.request({ type: 'start', attempt_id: attempt.attempt_id });
    assert.equal(started.type, 'started');
    const [windowBefore] = await t.db.rows<{ window_starts: number }>('SELECT window_starts FROM orbit_application_resources');
    const duplicate = await s.request({ type: 'start', attempt_id: attempt.attempt_id });
    assert.equal(duplicate.type, 'started', 'a repeated Start answers again');
    assert.equal(duplicate.lease_expires_at, started.lease_expires_at);
    const [windowAfter] = await t.db.rows<{ window_starts: number }>('SELECT window_starts FROM orbit_application_resources');
    assert.equal(windowAfter?.window_starts, windowBefore?.window_starts, 'and is not counted');
    assert.equal((await task(submitted.task_id)).state, 'RUNNING');
    assert.equal((await task(submitted.task_id)).attempts, 1);
    r = await resources();
    assert.deepEqual([r.active_attempts, r.pending_starts], ['1', '0']);

    await new Promise((res) => setTimeout(res, 50));
    const renewed = await s.request({ type: 'renew', attempt_id: attempt.attempt_id });
    assert.equal(renewed.type, 'renewed');
    assert.ok(Date.parse(renewed.lease_expires_at) > Date.parse(started.lease_expires_at));

    const completed = await s.request({ type: 'complete', attempt_id: attempt.attempt_id, outcome: 'succeeded', result: { answer: 42, nested: { n: null } } });
    assert.deepEqual(completed, { type: 'completed', attempt_id: attempt.attempt_id, task_state: 'SUCCEEDED' });
    const done = await task(submitted.task_id);
    assert.equal(done.state, 'SUCCEEDED');
    assert.deepEqual(done.result, { answer: 42, nested: { n: null } });
    assert.ok(done.finished_at);
    r = await resources();
    assert.deepEqual([r.unfinished_tasks, r.active_attempts, r.pending_starts], ['0', '0', '0']);
    q = await queue('jobs');
    assert.deepEqual([q.unfinished_tasks, q.active_attempts, q.pending_starts], ['0', '0', '0']);
    // A repeated result (its answer was lost) gets the same answer and changes nothing; another
    // outcome for a finished attempt is refused.
    const again = await s.request({ type: 'complete', attempt_id: attempt.attempt_id, outcome: 'succeeded' });
    assert.deepEqual(again, completed);
    const other = await s.request({ type: 'complete', attempt_id: attempt.attempt_id, outcome: 'failed' });
    assert.equal(other.code, 'LEASE_LOST', 'the attempt is no longer held');
    await s.close();
    await assertCountersMatchRecount(t.db);
  });

  test('complete before start is refused; release gives the reservation back without counting an attempt', async () => {
    const submitted = await submit('jobs');
    const s = await open(['jobs']);
    const [attempt] = await claim(s, 1);
    const early = await s.request({ type: 'complete', attempt_id: attempt.attempt_id, outcome: 'succeeded' });
    assert.equal(early.code, 'STATE_CONFLICT');
    const released = await s.request({ type: 'release', attempt_id: attempt.attempt_id });
    assert.deepEqual(released, { type: 'released', attempt_id: attempt.attempt_id });
    const back = await task(submitted.task_id);
    assert.equal(back.state, 'WAITING');
    assert.equal(back.attempts, 0);
    const [again] = await claim(s, 1);
    assert.equal(again.task_id, submitted.task_id);
    assert.equal(again.attempt_number, 1, 'the released reservation was not an attempt');
    await s.request({ type: 'start', attempt_id: again.attempt_id });
    const lateRelease = await s.request({ type: 'release', attempt_id: again.attempt_id });
    assert.equal(lateRelease.code, 'STATE_CONFLICT');
    await s.request({ type: 'complete', attempt_id: again.attempt_id, outcome: 'succeeded' });
    await s.close();
  });

  test('a retryable failure waits with backoff and runs again; a non-retryable one fails', async () => {
    const retried = await submit('jobs', { max_attempts: 2 });
    const s = await open(['jobs']);
    const [first] = await claim(s, 1);
    await s.request({ type: 'start', attempt_id: first.attempt_id });
    const beforeResult = Date.now();
    const failed = await s.request({ type: 'complete', attempt_id: first.attempt_id, outcome: 'failed', error: { message: 'boom' }, retryable: true });
    assert.equal(failed.task_state, 'WAITING');
    const waiting = await task(retried.task_id);
    assert.equal(waiting.attempts, 1);
    assert.deepEqual(waiting.error, { message: 'boom' });
    // Exponential backoff: the first retry waits a second from the result (some slack for the clocks).
    assert.ok(Date.parse(waiting.available_at) >= beforeResult + 900, `available_at ${waiting.available_at} is about a second after the result`);
    assert.deepEqual(await claim(s, 1), [], 'not claimable during backoff');
    // Claimable once the backoff is over, in database time.
    const [second] = await waitFor(async () => {
      const got = await claim(s, 1);
      return got.length > 0 ? got : null;
    });
    assert.ok(Date.now() >= Date.parse(waiting.available_at) - 100, 'not before available_at');
    assert.equal(second.task_id, retried.task_id);
    assert.equal(second.attempt_number, 2);
    await s.request({ type: 'start', attempt_id: second.attempt_id });
    const last = await s.request({ type: 'complete', attempt_id: second.attempt_id, outcome: 'failed', retryable: true });
    assert.equal(last.task_state, 'FAILED', 'no attempts left');
    const r = await resources();
    assert.deepEqual([r.unfinished_tasks, r.active_attempts], ['0', '0']);
    await s.close();
  });

  test('cancellation: WAITING and LEASED at once; RUNNING records the intent, tells the worker, and releases on the result', async () => {
    const s = await open(['jobs']);
    const waiting = await submit('jobs', { delay_seconds: 60 });
    const c1 = await http('POST', `/v1/tasks/${waiting.task_id}:cancel`, { reason: 'not needed' });
    assert.equal(c1.body.data.task.state, 'CANCELLED');

    const leased = await submit('jobs');
    const [reservation] = await claim(s, 1);
    assert.equal(reservation.task_id, leased.task_id);
    const c2 = await http('POST', `/v1/tasks/${leased.task_id}:cancel`, { reason: 'not needed' });
    assert.equal(c2.body.data.task.state, 'CANCELLED');
    const lost = await s.request({ type: 'start', attempt_id: reservation.attempt_id });
    assert.equal(lost.code, 'LEASE_LOST');
    let r = await resources();
    assert.deepEqual([r.active_attempts, r.pending_starts], ['0', '0']);

    const running = await submit('jobs');
    const [attempt] = await claim(s, 1);
    await s.request({ type: 'start', attempt_id: attempt.attempt_id });
    const c3 = await http('POST', `/v1/tasks/${running.task_id}:cancel`, { reason: 'stop it' });
    assert.equal(c3.body.data.task.state, 'RUNNING');
    assert.equal(c3.body.data.task.cancel_requested, true);
    const notice = await s.next((f) => f.type === 'cancel_requested');
    assert.equal(notice.attempt_id, attempt.attempt_id);
    r = await resources();
    assert.equal(r.active_attempts, '1', 'concurrency is held until the authoritative result');
    const done = await s.request({ type: 'complete', attempt_id: attempt.attempt_id, outcome: 'cancelled', error: { message: 'stopped' } });
    assert.equal(done.task_state, 'CANCELLED');
    r = await resources();
    assert.deepEqual([r.unfinished_tasks, r.active_attempts, r.pending_starts], ['0', '0', '0']);
    const terminal = await http('POST', `/v1/tasks/${running.task_id}:cancel`, { reason: 'again' });
    assert.equal(terminal.status, 409);
    assert.equal(terminal.body.error.code, 'STATE_CONFLICT');
    await s.close();
  });

  test('lease expiry of a running attempt with a cancel intent → NEEDS_REVIEW (still unfinished) → resolve', async () => {
    const submitted = await submit('jobs');
    const s = await open(['jobs']);
    const [attempt] = await claim(s, 1);
    await s.request({ type: 'start', attempt_id: attempt.attempt_id });
    await http('POST', `/v1/tasks/${submitted.task_id}:cancel`, { reason: 'stop it' });
    assert.equal((await s.next((f) => f.type === 'cancel_requested')).attempt_id, attempt.attempt_id);
    // The worker goes silent: no renew, no result, until its lease runs out.
    await endLeases(t.db, [attempt.attempt_id]);
    const review = await waitFor(async () => {
      const current = await task(submitted.task_id);
      return current.state === 'NEEDS_REVIEW' ? current : null;
    });
    assert.equal(review.cancel_requested, true);
    const r = await resources();
    assert.deepEqual([r.unfinished_tasks, r.active_attempts], ['1', '0'], 'review keeps its unfinished slot; the attempt is released');
    const late = await s.request({ type: 'complete', attempt_id: attempt.attempt_id, outcome: 'succeeded' });
    assert.equal(late.code, 'LEASE_LOST');
    const resolved = await http('POST', `/v1/tasks/${submitted.task_id}:resolve`, {
      outcome: 'succeeded',
      reason: 'checked by hand',
      result: { verified: true },
    });
    assert.equal(resolved.status, 200, JSON.stringify(resolved.body));
    assert.equal(resolved.body.data.task.state, 'SUCCEEDED');
    assert.equal((await resources()).unfinished_tasks, '0');
    await s.close();
  });

  test('lease expiry of a running attempt with on_unknown_outcome=retry waits again; an expired reservation is not an attempt', async () => {
    const submitted = await submit('jobs');
    const s = await open(['jobs']);
    const [attempt] = await claim(s, 1);
    // Reservation expires unstarted.
    await endLeases(t.db, [attempt.attempt_id]);
    const back = await waitFor(async () => ((await task(submitted.task_id)).state === 'WAITING' ? true : null));
    assert.equal(back, true);
    assert.equal((await task(submitted.task_id)).attempts, 0);
    assert.equal((await s.request({ type: 'start', attempt_id: attempt.attempt_id })).code, 'LEASE_LOST');
    const [second] = await claim(s, 1);
    assert.equal(second.attempt_number, 1);
    await s.request({ type: 'start', attempt_id: second.attempt_id });
    await endLeases(t.db, [second.attempt_id]);
    const retried = await waitFor(async () => {
      const current = await task(submitted.task_id);
      return current.state === 'WAITING' ? current : null;
    });
    assert.equal(retried.attempts, 1);
    assert.equal(retried.error.code, 'LEASE_EXPIRED');
    await http('POST', `/v1/tasks/${submitted.task_id}:cancel`, { reason: 'cleanup' });
    await s.close();
  });

  test('deadlines: a WAITING task past its deadline expires', async () => {
    const submitted = await submit('other', { deadline_seconds: 1 });
    const expired = await waitFor(async () => {
      const current = await task(submitted.task_id);
      return current.state === 'EXPIRED' ? current : null;
    });
    assert.equal(expired.error.code, 'DEADLINE_EXCEEDED');
    assert.equal((await queue('other')).unfinished_tasks, '0');
  });

  test('start windows: after lowering the rate, a reservation gets RATE_LIMITED with retry_after_ms, then starts in a later window', async () => {
    await configureQueue('rated', { rate_per_second: 2 });
    await submit('rated');
    await submit('rated');
    await submit('rated');
    const s = await open(['rated']);
    const attempts = await claim(s, 3);
    assert.equal(attempts.length, 2, 'pending starts hold window room: a claim reserves at most the rate');
    assert.equal((await s.request({ type: 'start', attempt_id: attempts[0].attempt_id })).type, 'started');
    const windowOf = async () =>
      ((await t.db.rows<{ w: string }>("SELECT window_started_at AS w FROM orbit_queues WHERE name = 'rated'"))[0] as { w: string }).w;
    const firstWindow = await windowOf();
    await configureQueue('rated', { rate_per_second: 1 });
    const limited = await s.request({ type: 'start', attempt_id: attempts[1].attempt_id });
    if (limited.type === 'started') {
      // Only when this machine was so slow that the first start's window had ended: a new one has room.
      assert.notEqual(await windowOf(), firstWindow, 'started past the lowered rate only in a new window');
    } else {
      assert.equal(limited.type, 'error');
      assert.equal(limited.code, 'RATE_LIMITED');
      assert.equal(limited.attempt_id, attempts[1].attempt_id);
      assert.ok(limited.retry_after_ms > 0 && limited.retry_after_ms <= 1000);
      assert.equal((await queue('rated')).pending_starts, '1', 'the reservation stays');
      // In a later window (the SDK's way: wait retry_after_ms, try again, while refused).
      await waitFor(async () => (await s.request({ type: 'start', attempt_id: attempts[1].attempt_id })).type === 'started');
    }
    for (const a of attempts) await s.request({ type: 'complete', attempt_id: a.attempt_id, outcome: 'succeeded' });
    const [third] = await waitFor(async () => {
      const got = await claim(s, 3);
      return got.length > 0 ? got : null;
    });
    await s.request({ type: 'start', attempt_id: third.attempt_id });
    await s.request({ type: 'complete', attempt_id: third.attempt_id, outcome: 'succeeded' });
    await s.close();
  });

  test('claims respect session capacity, queue concurrency, pause, keyed permits and priority', async () => {
    for (let i = 0; i < 4; i++) await submit('prio', { priority: Math.min(i * 3, 9) });
    const s = await open(['prio'], 2);
    const firstTwo = await claim(s, 10);
    assert.equal(firstTwo.length, 2, 'session capacity');
    assert.deepEqual(
      firstTwo.map((a) => a.priority),
      [9, 6],
      'highest priority first',
    );
    assert.deepEqual(await claim(s, 10), [], 'capacity used up');
    for (const a of firstTwo) await s.request({ type: 'release', attempt_id: a.attempt_id });

    await configureQueue('prio', { max_concurrency: 1 });
    const s2 = await open(['prio'], 10);
    assert.equal((await claim(s2, 10)).length, 1, 'queue max_concurrency');
    await configureQueue('prio', { paused: true, max_concurrency: 10 });
    assert.deepEqual(await claim(s2, 10), [], 'a paused queue gives nothing');
    const accepted = await http('POST', '/v1/queues/prio/tasks', { payload: {} });
    assert.equal(accepted.status, 200, 'a paused queue still accepts submissions');
    await configureQueue('prio', { paused: false });
    await s2.close();
    await s.close();
    // Closing the sessions gave their reservations back.
    await waitFor(async () => ((await queue('prio')).active_attempts === '0' ? true : null));

    await submit('keyed', { resource_key: 'customer-1' });
    await submit('keyed', { resource_key: 'customer-1' });
    await submit('keyed', { resource_key: 'customer-2' });
    await submit('keyed');
    const k = await open(['keyed'], 10);
    const keyed = await claim(k, 10);
    assert.equal(keyed.length, 3, 'one of the two customer-1 tasks waits for the permit');
    assert.equal(keyed.filter((a) => a.resource_key === 'customer-1').length, 1);
    const holder = keyed.find((a) => a.resource_key === 'customer-1');
    await k.request({ type: 'start', attempt_id: holder.attempt_id });
    await k.request({ type: 'complete', attempt_id: holder.attempt_id, outcome: 'succeeded' });
    const next = await claim(k, 10);
    assert.equal(next.length, 1);
    assert.equal(next[0].resource_key, 'customer-1');
    await k.close();
  });

  test('claims that arrive together share scarce room: each waiting node gets its fair share, the total never exceeds the limit', async () => {
    for (let i = 0; i < 12; i++) await submit('shared');
    // Three nodes wait for room first (the queue has none), so all three count as waiting.
    await configureQueue('shared', { max_concurrency: 1 });
    const holder = await open(['shared'], 1, 'node-holder');
    assert.equal((await claim(holder, 1)).length, 1);
    const sessions = await Promise.all(['node-a', 'node-b', 'node-c'].map((node) => open(['shared'], 10, node)));
    for (const s of sessions) assert.deepEqual(await claim(s, 10), [], 'no room yet');
    // Room for 6 more: claimed at the same moment, decided in one group or several, each node
    // takes ceil(6 / 3) = 2 and together they take exactly the room.
    await configureQueue('shared', { max_concurrency: 7 });
    const granted = await Promise.all(sessions.map((s) => claim(s, 10)));
    assert.deepEqual(
      granted.map((g) => g.length),
      [2, 2, 2],
    );
    assert.equal(new Set(granted.flat().map((a) => a.task_id)).size, 6, 'no task reserved twice');
    assert.equal((await queue('shared')).active_attempts, '7');
    // Released, the reservations are room again.
    for (const [i, s] of sessions.entries()) for (const a of granted[i] as any[]) await s.request({ type: 'release', attempt_id: a.attempt_id });
    const [a, b] = sessions as [RawSession, RawSession];
    const again = await Promise.all([claim(a, 10), claim(b, 10), claim(a, 10)]);
    assert.ok(again.flat().length <= 6, 'never more than the room');
    assert.equal(new Set(again.flat().map((x) => x.task_id)).size, again.flat().length);
    for (const s of [...sessions, holder]) await s.close();
    await waitFor(async () => ((await queue('shared')).active_attempts === '0' ? true : null));
  });

  test('claims of several sessions in one group: keyed permits and session capacity hold across the group', async () => {
    await configureQueue('shared-keyed', { key_concurrency: 1 });
    for (let i = 0; i < 4; i++) await submit('shared-keyed', { resource_key: 'k1' });
    for (let i = 0; i < 2; i++) await submit('shared-keyed', { resource_key: 'k2' });
    await submit('shared-keyed');
    const sessions = await Promise.all(['g1', 'g2', 'g3'].map((node) => open(['shared-keyed'], 2, node)));
    const granted = (await Promise.all(sessions.map((s) => claim(s, 5)))).flat();
    // One attempt per key at a time, whichever session got it; the unkeyed task too.
    assert.deepEqual(granted.map((x) => x.resource_key ?? '-').sort(), ['-', 'k1', 'k2']);
    for (const s of sessions) await s.close();
    await waitFor(async () => ((await queue('shared-keyed')).active_attempts === '0' ? true : null));
  });

  test('claim with start: reserve and start in one step, counted in both start windows at once, never pending', async () => {
    await configureQueue('started', { rate_per_second: 2 });
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(await submit('started'));
    const s = await open(['started'], 10, 'node-start');
    const answer = await s.request({ type: 'claim', claim_id: 'start-1', max: 5, start: true });
    assert.equal(answer.type, 'claimed');
    const granted = answer.attempts as any[];
    assert.equal(granted.length, 2, 'the start window of the queue (2 per second) limits the claim');
    assert.ok(granted.every((a) => a.started === true));
    const q = await queue('started');
    assert.deepEqual([q.active_attempts, q.pending_starts], ['2', '0'], 'active, not pending');
    for (const a of granted) {
      const current = await task(a.task_id);
      assert.equal(current.state, 'RUNNING');
      assert.equal(current.attempts, 1);
    }
    // The window is full: nothing more in it, with or without start. (On a slow machine the
    // second may be over by now: then the claim may take from a new window, and only from one.)
    const windowOf = async () =>
      ((await t.db.rows<{ w: string }>("SELECT window_started_at AS w FROM orbit_queues WHERE name = 'started'"))[0] as { w: string }).w;
    const windowBefore = await windowOf();
    const more = (await s.request({ type: 'claim', claim_id: 'start-2', max: 5, start: true })).attempts as any[];
    if (more.length > 0) assert.notEqual(await windowOf(), windowBefore, 'granted past a full window only because a new one began');
    // A start frame for a started attempt answers started again and counts nothing.
    const again = await s.request({ type: 'start', attempt_id: granted[0].attempt_id });
    assert.equal(again.type, 'started');
    for (const a of [...granted, ...more])
      assert.equal((await s.request({ type: 'complete', attempt_id: a.attempt_id, outcome: 'succeeded' })).task_state, 'SUCCEEDED');
    // A plain claim still reserves without starting (no `started` field).
    if (more.length > 0) ids.push(await submit('started'));
    const plain = await waitFor(async () => {
      const r = await s.request({ type: 'claim', claim_id: `plain-${Date.now()}`, max: 1 });
      return r.attempts.length > 0 ? r.attempts : null;
    });
    assert.equal(plain[0].started, undefined);
    await s.request({ type: 'release', attempt_id: plain[0].attempt_id });
    assert.equal((await task(plain[0].task_id)).attempts, 0, 'a released reservation is not an attempt');
    assert.ok(ids.length >= 3);
    await s.close();
    await configureQueue('started', { rate_per_second: 10000 });
  });

  test('lowering concurrency below usage stops new claims; running attempts keep their lease', async () => {
    for (let i = 0; i < 3; i++) await submit('other');
    const s = await open(['other'], 10);
    const attempts = await claim(s, 2);
    for (const a of attempts) await s.request({ type: 'start', attempt_id: a.attempt_id });
    const before = await resources();
    const lowered = await http('POST', '/v1/application/resources:configure', {
      expected_revision: before.revision,
      reason: 'lower below usage',
      max_unfinished_tasks: before.max_unfinished_tasks,
      max_concurrency: 1,
      rate_per_second: before.rate_per_second,
    });
    assert.equal(lowered.status, 200);
    assert.deepEqual(await claim(s, 5), [], 'no new claims while active attempts exceed the limit');
    for (const a of attempts) assert.equal((await s.request({ type: 'renew', attempt_id: a.attempt_id })).type, 'renewed');
    for (const a of attempts) await s.request({ type: 'complete', attempt_id: a.attempt_id, outcome: 'succeeded' });
    const drained = await claim(s, 5);
    assert.equal(drained.length, 1, 'claims resume once usage drained below the new limit');
    await s.request({ type: 'release', attempt_id: drained[0].attempt_id });
    const restored = await resources();
    await http('POST', '/v1/application/resources:configure', {
      expected_revision: restored.revision,
      reason: 'restore',
      max_unfinished_tasks: restored.max_unfinished_tasks,
      max_concurrency: 10000,
      rate_per_second: restored.rate_per_second,
    });
    const leftovers = await http('GET', '/v1/queues/other/tasks?state=WAITING');
    for (const w of leftovers.body.data.tasks) await http('POST', `/v1/tasks/${w.task_id}:cancel`, { reason: 'cleanup' });
    await s.close();
  });

  test('/metrics shows what happened, in Prometheus text format', async () => {
    const response = await fetch(`${server.url}/metrics`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /text\/plain/);
    const text = await response.text();
    for (const pattern of [
      /^orbit_task_submissions_total\{result="accepted"\} [1-9]/m,
      /^orbit_claims_total\{result="granted"\} [1-9]/m,
      /^orbit_starts_total\{result="rate_limited"\} [1-9]/m,
      /^orbit_starts_total\{result="started"\} [1-9]/m,
      /^orbit_completions_total\{outcome="succeeded",task_state="SUCCEEDED"\} [1-9]/m,
      /^orbit_recoveries_total\{kind="expired_lease"\} [1-9]/m,
      /^orbit_lease_age_seconds_count [1-9]/m,
      /^orbit_db_transaction_seconds_count\{operation="claim"\} [1-9]/m,
      /^orbit_worker_sessions \d/m,
    ]) {
      assert.match(text, pattern);
    }
  });

  test('a revoked or expired credential, a disabled namespace or application ends open sessions without waiting for a frame', async () => {
    const otherNamespace = await createTenant(t.db, { applicationId: tenant.applicationId, namespace: 'w-disabled', queues: ['jobs'] });
    const otherApplication = await createTenant(t.db, { namespace: 'w-alone', queues: ['jobs'] });
    const credentialOf = (token: string) => Buffer.from(token.slice(6, 38), 'hex');
    const cases: Array<{ token: string; act: () => Promise<unknown>; cause: string; reserve?: boolean }> = [];
    const revoked = await createCredential(t.db, tenant, ['workers:consume']);
    cases.push({ token: revoked, act: () => credentialRevoke(t.db, credentialOf(revoked)), cause: 'the credential was revoked', reserve: true });
    const expiring = await createCredential(t.db, tenant, ['workers:consume']);
    cases.push({
      token: expiring,
      act: () => t.db.exec('UPDATE orbit_credentials SET expires_at = NOW(6) WHERE credential_id = ?', [credentialOf(expiring)]),
      cause: 'the credential has expired',
    });
    cases.push({
      token: otherNamespace.token,
      act: () => namespaceSetEnabled(t.db, Buffer.from(otherNamespace.namespaceId, 'hex'), false),
      cause: 'the namespace is disabled',
    });
    cases.push({
      token: otherApplication.token,
      act: () => applicationSetEnabled(t.db, Buffer.from(otherApplication.applicationId, 'hex'), false),
      cause: 'the application is disabled',
    });
    for (const c of cases) {
      const s = await connectRaw(server.url, c.token);
      const welcome = await s.request({ type: 'hello', node_id: 'doomed', queues: ['jobs'], capacity: 1 });
      assert.equal(welcome.type, 'welcome', JSON.stringify(welcome));
      let reservation: any;
      if (c.reserve) {
        const submitted = await submit('jobs');
        [reservation] = await claim(s, 1);
        assert.equal(reservation?.task_id, submitted.task_id);
      }
      await c.act();
      // The worker sends nothing more: the gateway's credential check ends the session.
      const closed = await within(s.closed, 10_000, `${c.cause}: the session was not closed`);
      assert.equal(closed.code, 4401, c.cause);
      // The error frame came first (it is already queued when the close arrives), with the precise cause.
      const frame = await s.next((f) => f.type === 'error', 0);
      assert.deepEqual([frame.code, frame.message], ['UNAUTHENTICATED', c.cause]);
      const [row] = await t.db.rows<{ state: string }>('SELECT state FROM orbit_worker_sessions WHERE session_id = ?', [
        Buffer.from(welcome.session_id, 'hex'),
      ]);
      assert.equal(row?.state, 'CLOSED', c.cause);
      if (reservation) {
        // Given back at once, as on a disconnect: released, not left to expire.
        const [attempt] = await t.db.rows<{ state: string }>('SELECT state FROM orbit_attempts WHERE attempt_id = ?', [
          Buffer.from(reservation.attempt_id, 'hex'),
        ]);
        assert.equal(attempt?.state, 'RELEASED');
        assert.equal((await task(reservation.task_id)).state, 'WAITING');
      }
    }
    const leftovers = await http('GET', '/v1/queues/jobs/tasks?state=WAITING');
    for (const w of leftovers.body.data.tasks) await http('POST', `/v1/tasks/${w.task_id}:cancel`, { reason: 'cleanup' });
  });
});
