/**
 * Submit, Start and the result each have a one-round-trip path and a careful one (admission.ts,
 * attempt-start.ts, attempt-complete.ts). This test holds them together: generated scenarios - a start window
 * near full at either level, a lease that ran out, a duplicate Start or result, a cancelled
 * reservation, a cancel intent, keyed permits, retryable and final failures; for submit a full
 * application or queue, a replay, a key used with other content, the same key twice in one
 * batch - are built the same
 * way in two fresh databases. In A the operation takes its chosen path (fast, falling back to
 * careful), in B always the careful one; both must give the same answers, leave the same rows
 * (tasks, attempts, counters, permits, lifecycle events) and a clean recount. A scenario with
 * nothing unusual must take the fast path.
 *
 * Times differ between the two databases by the moments the steps ran, so what is compared is
 * what a user sees: states, counts, results, errors, event types and data; a lease or retry time
 * as "in the future".
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { testApp } from '../helpers/app.ts';
import { credentialAuthenticate } from '../../server/store/tenancy/credentials.ts';
import { sessionOpen, type SessionInfo } from '../../server/store/workers/worker-sessions.ts';
import { attemptClaimGroup, type ClaimedAttemptInfo } from '../../server/store/attempts/claims.ts';
import { startAttempts, type StartAnswer } from '../../server/store/attempts/attempt-start.ts';
import { completeAttempts, type CompleteAnswer, type CompleteItem } from '../../server/store/attempts/attempt-complete.ts';
import { attemptReleaseBatch } from '../../server/store/attempts/attempt-results.ts';
import type { KnownAttempt, PathTaken } from '../../server/store/attempts/fast-path-guards.ts';
import type { AttemptOutcome } from '../../server/domain/task-transitions.ts';
import { idToHex } from '../../server/ids.ts';
import type { Database } from '../../server/store/database/database.ts';
import { taskSubmitBatch, type SubmitItem, type SubmitOutcome } from '../../server/store/tasks/admission.ts';
import { receiptIdentity } from '../../server/http/handlers/receipt-identity.ts';
import { TASK_DEFAULTS } from '../../server/domain/limits.ts';
import { DatabaseClock } from '../../server/store/database/clock.ts';

const LEASE_SECONDS = 30;
const RUNS = 60;

interface Scenario {
  tasks: Array<{ key: string | null; maxAttempts: number }>;
  keyConcurrency: number;
  /** Start room left in a window that stays open through the test, or null for no limit. */
  applicationStartRoom: number | null;
  queueStartRoom: number | null;
  /** Per task: released before the Start (a cancelled reservation), lease run out before the Start, Start sent twice. */
  released: boolean[];
  expiredBeforeStart: boolean[];
  duplicateStart: boolean[];
  /** Per task: the result the worker sends, whether it is sent twice, whether a cancel intent comes first, whether the lease ran out first. */
  outcomes: Array<{ outcome: AttemptOutcome; retryable: boolean; result: unknown; error?: unknown }>;
  duplicateResult: boolean[];
  cancelFirst: boolean[];
  expiredBeforeResult: boolean[];
}

const flags = (n: number, p: number) =>
  fc.array(
    fc.nat({ max: 99 }).map((x) => x < p),
    { minLength: n, maxLength: n },
  );

// How often each unusual thing happens is itself generated (never, sometimes, often), so that
// both the plain groups the fast paths take and the odd ones the careful paths decide come up.
const scenarios: fc.Arbitrary<Scenario> = fc.tuple(fc.integer({ min: 1, max: 6 }), fc.constantFrom(0, 0, 10, 30)).chain(([n, p]) =>
  fc.record({
    tasks: fc.array(fc.record({ key: fc.constantFrom(null, null, 'k1', 'k2'), maxAttempts: fc.integer({ min: 1, max: 3 }) }), { minLength: n, maxLength: n }),
    keyConcurrency: fc.integer({ min: 1, max: 3 }),
    applicationStartRoom: fc.option(fc.integer({ min: 0, max: 6 }), { freq: 2 }),
    queueStartRoom: fc.option(fc.integer({ min: 0, max: 6 }), { freq: 2 }),
    released: flags(n, p),
    expiredBeforeStart: flags(n, p),
    duplicateStart: flags(n, p),
    outcomes: fc.array(
      fc.record({
        outcome:
          p === 0
            ? fc.constantFrom<AttemptOutcome>('succeeded', 'succeeded', 'succeeded', 'failed')
            : fc.constantFrom<AttemptOutcome>('succeeded', 'failed', 'cancelled'),
        retryable: p === 0 ? fc.constant(false) : fc.boolean(),
        result: fc.option(fc.record({ ok: fc.boolean(), note: fc.string({ maxLength: 8 }) }), { nil: undefined }),
        error: fc.option(fc.record({ message: fc.string({ maxLength: 8 }) }), { nil: undefined }),
      }),
      { minLength: n, maxLength: n },
    ),
    duplicateResult: flags(n, p),
    cancelFirst: flags(n, p),
    expiredBeforeResult: flags(n, p),
  }),
);

/** Nothing unusual: every task keyless-or-free, room everywhere, no duplicates, no lost leases. */
function plain(n: number): Scenario {
  const no = Array.from({ length: n }, () => false);
  return {
    tasks: Array.from({ length: n }, () => ({ key: null, maxAttempts: 1 })),
    keyConcurrency: 1,
    applicationStartRoom: null,
    queueStartRoom: null,
    released: no,
    expiredBeforeStart: no,
    duplicateStart: no,
    outcomes: Array.from({ length: n }, (_, i) => ({ outcome: 'succeeded' as const, retryable: false, result: { i } })),
    duplicateResult: no,
    cancelFirst: no,
    expiredBeforeResult: no,
  };
}

interface Side {
  t: TestDatabase;
  mode: 'choose' | 'careful';
}

/** One scenario, run on one database: what was answered and which paths were taken. */
async function run(side: Side, s: Scenario) {
  const db = side.t.db;
  const tenant: TestTenant = await createTenant(db, { queues: ['jobs'] });
  const app = await testApp(db);
  const applicationId = Buffer.from(tenant.applicationId, 'hex');
  const http = async (method: string, path: string, body: unknown, key?: string) => {
    const r = await app.request(method, path, { token: tenant.token, body, ...(key === undefined ? {} : { key }) });
    assert.equal(r.status, 200, `${method} ${path}: ${r.text}`);
    return r.body.data;
  };
  const taskIds: string[] = [];
  for (const [i, task] of s.tasks.entries()) {
    const body = { payload: { i }, max_attempts: task.maxAttempts, ...(task.key === null ? {} : { resource_key: task.key }) };
    taskIds.push((await http('POST', '/v1/queues/jobs/tasks', body, `task-${i}`)).task.task_id);
  }
  const indexOf = new Map(taskIds.map((id, i) => [id, i]));
  await db.exec('UPDATE orbit_queues SET key_concurrency = ? WHERE application_id = UNHEX(?)', [s.keyConcurrency, tenant.applicationId]);
  const principal = await credentialAuthenticate(db, tenant.token);
  const session: SessionInfo = await sessionOpen(db, { principal, nodeId: 'differential', queues: ['jobs'], capacity: 16 });
  // Claimable now by the database's clock, whatever the process's estimate of it (DatabaseClock,
  // which never runs ahead of it but may lag by a round trip) gave each task.
  await db.exec('UPDATE orbit_tasks SET available_at = NOW(6) - INTERVAL 1 SECOND WHERE application_id = UNHEX(?)', [tenant.applicationId]);
  const [claim] = await attemptClaimGroup(db, [{ session, max: 16 }], LEASE_SECONDS);
  assert.ok(claim?.ok);
  // All of them but those a full key holds back (key_concurrency), so never none.
  assert.ok(claim.claimed.length > 0, 'the claim reserved tasks');
  // Claim order is priority, then age: map each reservation to its task's index.
  const held = new Map<number, ClaimedAttemptInfo>(claim.claimed.map((c) => [indexOf.get(idToHex(c.taskId)) as number, c]));
  const known = (c: ClaimedAttemptInfo): KnownAttempt => ({
    attemptId: c.attemptId,
    taskId: c.taskId,
    queueId: c.queueId,
    namespaceId: session.principal.namespaceId,
    sessionId: session.sessionId,
    resourceKey: c.resourceKey,
    deadlineAtMs: c.deadlineAtMs,
  });
  const indices = [...held.keys()].sort((a, b) => a - b);

  // Before the Start: windows near full (opened an hour from now, so that they stay open for
  // the whole test on any machine), cancelled reservations, leases run out.
  const startRoom = async (table: 'orbit_application_resources' | 'orbit_queues', room: number | null) => {
    if (room === null) return;
    await db.exec(`UPDATE ${table} SET rate_per_second = 6, window_started_at = NOW(6) + INTERVAL 1 HOUR, window_starts = ? WHERE application_id = UNHEX(?)`, [
      6 - room,
      tenant.applicationId,
    ]);
  };
  await startRoom('orbit_application_resources', s.applicationStartRoom);
  await startRoom('orbit_queues', s.queueStartRoom);
  const released = indices.filter((i) => s.released[i]);
  if (released.length > 0) await attemptReleaseBatch(db, { applicationId, items: released.map((i) => ({ ...known(held.get(i) as ClaimedAttemptInfo) })) });
  const expire = async (is: number[]) => {
    if (is.length === 0) return;
    const ids = is.map((i) => idToHex((held.get(i) as ClaimedAttemptInfo).attemptId));
    await db.exec(`UPDATE orbit_attempts SET lease_expires_at = NOW(6) - INTERVAL 1 SECOND WHERE attempt_id IN (${ids.map(() => 'UNHEX(?)').join(', ')})`, ids);
  };
  await expire(indices.filter((i) => s.expiredBeforeStart[i]));

  const startItems = indices.flatMap((i) => (s.duplicateStart[i] ? [i, i] : [i]));
  const started = await startAttempts(
    db,
    { applicationId, items: startItems.map((i) => known(held.get(i) as ClaimedAttemptInfo)), leaseSeconds: LEASE_SECONDS },
    { path: side.mode },
  );

  // Before the result: cancel intents, leases run out.
  for (const i of indices.filter((i) => s.cancelFirst[i])) await http('POST', `/v1/tasks/${taskIds[i]}:cancel`, { reason: `stop ${i}` }, `cancel-${i}`);
  await expire(indices.filter((i) => s.expiredBeforeResult[i]));
  const resultItems = indices.flatMap((i) => (s.duplicateResult[i] ? [i, i] : [i]));
  const completed = await completeAttempts(
    db,
    {
      applicationId,
      items: resultItems.map((i): CompleteItem & KnownAttempt => {
        const o = s.outcomes[i] as Scenario['outcomes'][number];
        return {
          ...known(held.get(i) as ClaimedAttemptInfo),
          outcome: o.outcome,
          retryable: o.retryable,
          ...(o.result === undefined ? {} : { result: o.result }),
          ...(o.error === undefined ? {} : { error: o.error }),
        };
      }),
    },
    { path: side.mode },
  );
  return {
    answers: { start: started.answers.map(normaliseStart), complete: completed.answers.map(normaliseComplete) },
    paths: { start: started.path, complete: completed.path } as { start: PathTaken; complete: PathTaken },
    rows: await rowsOf(db, tenant, indexOf),
  };
}

function normaliseStart(a: StartAnswer) {
  if (a.kind === 'started') return { kind: a.kind, duplicate: a.duplicate, leaseInFuture: a.leaseExpiresAtMs > Date.now() - 60_000 };
  if (a.kind === 'rate_limited') return { kind: a.kind, retryLater: a.retryAfterMs > 0 };
  return a;
}

function normaliseComplete(a: CompleteAnswer) {
  return a;
}

/** Everything that differs only by ids and times, taken out of an event's data. */
function withoutIdsAndTimes(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutIdsAndTimes);
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>)
        .filter(([k]) => !/(_id|_at)$/.test(k))
        .map(([k, v]) => [k, withoutIdsAndTimes(v)]),
    );
  return value;
}

/** The rows a user could see, keyed by task index instead of ids. */
async function rowsOf(db: Database, tenant: TestTenant, indexOf: Map<string, number>) {
  const index = (hexId: string) => indexOf.get(hexId.toLowerCase()) as number;
  // `later`: waiting for a retry (available after its last change), compared within the row so
  // that a slow machine between the write and this read changes nothing.
  const tasks = await db.rows<{ id: string } & Record<string, unknown>>(
    `SELECT HEX(task_id) AS id, state, attempts, result, error, cancel_requested, current_attempt_id IS NULL AS no_attempt,
            available_at > updated_at AS later, finished_at IS NULL AS unfinished
       FROM orbit_tasks WHERE application_id = UNHEX(?)`,
    [tenant.applicationId],
  );
  const attempts = await db.rows<{ id: string } & Record<string, unknown>>(
    `SELECT HEX(task_id) AS id, attempt_number, state, started_at IS NULL AS unstarted, finished_at IS NULL AS unfinished, lease_expires_at > NOW(6) AS leased
       FROM orbit_attempts WHERE application_id = UNHEX(?)`,
    [tenant.applicationId],
  );
  const events = await db.rows<{ subject: string; type: string; data: string }>(
    'SELECT subject, type, data FROM orbit_events WHERE application_id = UNHEX(?) ORDER BY sequence',
    [tenant.applicationId],
  );
  const counters = await db.rows(
    `SELECT 'application' AS level, unfinished_tasks, active_attempts, pending_starts, window_starts FROM orbit_application_resources WHERE application_id = UNHEX(?)
     UNION ALL SELECT 'queue', unfinished_tasks, active_attempts, pending_starts, window_starts FROM orbit_queues WHERE application_id = UNHEX(?)`,
    [tenant.applicationId, tenant.applicationId],
  );
  const permits = await db.rows('SELECT resource_key, holders FROM orbit_key_permits WHERE application_id = UNHEX(?) ORDER BY resource_key', [
    tenant.applicationId,
  ]);
  const byIndex = <T extends { id: unknown }>(rows: T[]) =>
    rows.map(({ id, ...rest }) => ({ task: index(String(id)), ...rest })).sort((a, b) => a.task - b.task || JSON.stringify(a).localeCompare(JSON.stringify(b)));
  const subjectIndex = (subject: string) => {
    const hex = /([0-9a-f]{32})/i.exec(subject)?.[1];
    return hex === undefined ? -1 : index(hex);
  };
  return {
    tasks: byIndex(tasks),
    attempts: byIndex(attempts),
    // Per task, its events in feed order (the feed's order across tasks of one group may differ).
    events: events.map((e) => ({ task: subjectIndex(e.subject), type: e.type, data: withoutIdsAndTimes(JSON.parse(e.data)) })).sort((a, b) => a.task - b.task),
    counters,
    permits,
  };
}

let a: Side;
let b: Side;
before(async () => {
  a = { t: await freshDatabase('differential_a'), mode: 'choose' };
  b = { t: await freshDatabase('differential_b'), mode: 'careful' };
});
after(async () => {
  await a?.t.drop();
  await b?.t.drop();
});

test('the common case takes the one-round-trip path for Start and for the result, and ends as the careful path does', async () => {
  const fast = await run(a, plain(5));
  const careful = await run(b, plain(5));
  assert.deepEqual(fast.paths, { start: 'fast', complete: 'fast' });
  assert.deepEqual(careful.paths, { start: 'careful', complete: 'careful' });
  assert.deepEqual(fast.answers, careful.answers);
  assert.deepEqual(fast.rows, careful.rows);
  await assertCountersMatchRecount(a.t.db);
  await assertCountersMatchRecount(b.t.db);
});

test('generated scenarios: the chosen path and the careful one give the same answers and rows, and a clean recount', async () => {
  let fastStarts = 0;
  let fastResults = 0;
  await fc.assert(
    fc.asyncProperty(scenarios, async (s) => {
      const chosen = await run(a, s);
      const careful = await run(b, s);
      assert.deepEqual(chosen.answers, careful.answers, 'answers');
      assert.deepEqual(chosen.rows, careful.rows, 'rows');
      if (chosen.paths.start === 'fast') fastStarts++;
      if (chosen.paths.complete === 'fast') fastResults++;
    }),
    { seed: 0xd1ff, numRuns: RUNS },
  );
  // The generator reaches both paths of both operations (else it tests nothing of one of them).
  assert.ok(fastStarts > 0 && fastStarts < RUNS, `fast Starts in ${fastStarts} of ${RUNS} scenarios`);
  assert.ok(fastResults > 0 && fastResults < RUNS, `fast results in ${fastResults} of ${RUNS} scenarios`);
  await assertCountersMatchRecount(a.t.db);
  await assertCountersMatchRecount(b.t.db);
});

// ---------------------------------------------------------------------------------------------
// Submit (admission.ts): the guarded one-round-trip batch, or the careful decision item by item.

interface SubmitScenario {
  /** Tasks already accepted before the batch: key and content variant. */
  earlier: Array<{ key: string; variant: number; queue: 'a' | 'b' }>;
  /** The batch: key (a small pool, so keys repeat), content variant, queue. */
  batch: Array<{ key: string; variant: number; queue: 'a' | 'b' }>;
  /** Unfinished-task room left at each level when the batch comes (null: plenty). */
  applicationRoom: number | null;
  queueRoom: number | null;
}

const submissionOf = fc.record({
  key: fc.constantFrom('k0', 'k1', 'k2', 'k3', 'k4', 'k5'),
  variant: fc.integer({ min: 0, max: 1 }),
  queue: fc.constantFrom<'a' | 'b'>('a', 'b'),
});
const submitScenarios: fc.Arbitrary<SubmitScenario> = fc.record({
  earlier: fc.array(submissionOf, { maxLength: 3 }),
  batch: fc.array(submissionOf, { minLength: 1, maxLength: 8 }),
  applicationRoom: fc.option(fc.integer({ min: 0, max: 8 }), { freq: 2 }),
  queueRoom: fc.option(fc.integer({ min: 0, max: 8 }), { freq: 2 }),
});

async function runSubmit(side: Side, s: SubmitScenario) {
  const db = side.t.db;
  const tenant = await createTenant(db, { queues: ['a', 'b'] });
  const principal = await credentialAuthenticate(db, tenant.token);
  const clock = new DatabaseClock(db);
  await clock.sample();
  const queues = new Map(
    (await db.rows<{ name: string; queue_id: Buffer }>('SELECT name, queue_id FROM orbit_queues WHERE application_id = UNHEX(?)', [tenant.applicationId])).map(
      (q) => [q.name, q.queue_id],
    ),
  );
  const item = (x: SubmitScenario['batch'][number]): SubmitItem => {
    const payload = { key: x.key, variant: x.variant };
    const normalized = { ...TASK_DEFAULTS, payload, resource_key: null };
    return {
      principal,
      queueId: queues.get(x.queue) as Buffer,
      queueName: x.queue,
      receipt: receiptIdentity(principal, x.key, 'submitTask', { queue: x.queue }, normalized),
      request: {
        payload,
        payloadJson: JSON.stringify(payload),
        priority: TASK_DEFAULTS.priority,
        resourceKey: null,
        maxAttempts: TASK_DEFAULTS.max_attempts,
        deadlineSeconds: TASK_DEFAULTS.deadline_seconds,
        delaySeconds: TASK_DEFAULTS.delay_seconds,
        onUnknownOutcome: TASK_DEFAULTS.on_unknown_outcome,
      },
    };
  };
  // Earlier submissions, one by one (the same in both databases).
  for (const x of s.earlier) await taskSubmitBatch(db, clock, [item(x)]);
  const room = async (table: 'orbit_application_resources' | 'orbit_queues', left: number | null) => {
    if (left !== null)
      await db.exec(`UPDATE ${table} SET max_unfinished_tasks = unfinished_tasks + ? WHERE application_id = UNHEX(?)`, [left, tenant.applicationId]);
  };
  await room('orbit_application_resources', s.applicationRoom);
  await room('orbit_queues', s.queueRoom);
  let path: PathTaken | null = null;
  const outcomes = await taskSubmitBatch(db, clock, s.batch.map(item), { path: side.mode, onPath: (p) => (path = p) });
  const tasks = await db.rows<{ payload: string; queue: string; state: string }>(
    `SELECT t.payload, q.name AS queue, t.state FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id
      WHERE t.application_id = UNHEX(?) ORDER BY t.payload, q.name`,
    [tenant.applicationId],
  );
  const receipts = await db.rows('SELECT idempotency_key, operation FROM orbit_idempotency_receipts WHERE namespace_id = UNHEX(?) ORDER BY idempotency_key', [
    tenant.namespaceId,
  ]);
  const counters = await db.rows(
    `SELECT 'application' AS level, unfinished_tasks FROM orbit_application_resources WHERE application_id = UNHEX(?)
     UNION ALL SELECT name, unfinished_tasks FROM orbit_queues WHERE application_id = UNHEX(?) ORDER BY level`,
    [tenant.applicationId, tenant.applicationId],
  );
  const events = await db.rows<{ type: string; data: string }>('SELECT type, data FROM orbit_events WHERE application_id = UNHEX(?) ORDER BY sequence', [
    tenant.applicationId,
  ]);
  return {
    path: path as PathTaken | null,
    outcomes: outcomes.map(normaliseSubmit),
    rows: { tasks, receipts, counters, events: events.map((e) => ({ type: e.type, data: withoutIdsAndTimes(JSON.parse(e.data)) })) },
  };
}

function normaliseSubmit(o: SubmitOutcome) {
  if (!o.ok) return { ok: false, code: o.error.code, message: o.error.message };
  const { queue, state, priority, payload, max_attempts, attempts } = o.task as unknown as Record<string, unknown>;
  return { ok: true, deduplicated: o.deduplicated, task: { queue, state, priority, payload, max_attempts, attempts } };
}

test('submit: a plain batch takes the one-round-trip path; generated batches answer and write the same on both paths', async () => {
  const plainBatch: SubmitScenario = {
    earlier: [],
    batch: [
      { key: 'p0', variant: 0, queue: 'a' },
      { key: 'p1', variant: 0, queue: 'b' },
    ],
    applicationRoom: null,
    queueRoom: null,
  };
  const plainA = await runSubmit(a, plainBatch);
  const plainB = await runSubmit(b, plainBatch);
  assert.equal(plainA.path, 'fast');
  assert.equal(plainB.path, 'careful');
  assert.deepEqual(plainA.outcomes, plainB.outcomes);
  assert.deepEqual(plainA.rows, plainB.rows);
  let fast = 0;
  await fc.assert(
    fc.asyncProperty(submitScenarios, async (s) => {
      const chosen = await runSubmit(a, s);
      const careful = await runSubmit(b, s);
      assert.deepEqual(chosen.outcomes, careful.outcomes, 'answers');
      assert.deepEqual(chosen.rows, careful.rows, 'rows');
      if (chosen.path === 'fast') fast++;
    }),
    { seed: 0x5b17, numRuns: RUNS },
  );
  assert.ok(fast > 0 && fast < RUNS, `fast submissions in ${fast} of ${RUNS} scenarios`);
  await assertCountersMatchRecount(a.t.db);
  await assertCountersMatchRecount(b.t.db);
});
