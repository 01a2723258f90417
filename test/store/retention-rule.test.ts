/**
 * "Never prune what is still needed", as a property: generated histories - tasks in every state
 * with their attempts, receipts of finished and unfinished tasks and of other resources, inside
 * and outside their window, audit records, open and closed worker sessions (some still holding
 * an attempt), events of two namespaces and ACTIVE and PAUSED subscriptions at every position -
 * under generated policies (each duration absent, or shorter or longer than the history's ages).
 * After pruning, the rows left are exactly those `mayPrune` (server/domain/retention.ts) keeps,
 * the attempts left are exactly those of the tasks left, and a subscription is marked exactly when
 * an event after its position was pruned.
 *
 * Seeded, by case count. Ages are far from every cutoff (10 s, 30 min, 90 min, 3 h against 60 s,
 * 1 h, 2 h), so the milliseconds between writing the history and pruning it decide nothing.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { mayPrune, type RetentionPolicy } from '../../server/domain/retention.ts';
import { PruneLoop } from '../../server/loops/prune.ts';
import { silentLogger } from '../../server/log.ts';
import { newId } from '../../server/ids.ts';

const STATES = ['WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED'] as const;
const FINISHED = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED']);
/** Ages in seconds, none near a duration below. */
const AGES = [10, 1800, 5400, 10800];
const DURATIONS = [null, 60, 3600, 7200];

interface History {
  policy: RetentionPolicy;
  tasks: Array<{ state: (typeof STATES)[number]; age: number; attempts: number; session: number | null }>;
  receipts: Array<{ task: number | null; age: number }>;
  audit: number[];
  sessions: Array<{ closed: boolean; age: number }>;
  /** Events in the order they happened (oldest first), each of namespace 0 or 1. */
  events: Array<{ namespace: 0 | 1 }>;
  subscriptions: Array<{ namespace: 0 | 1; active: boolean; position: number }>;
}

const duration = fc.constantFrom(...DURATIONS);
const age = fc.constantFrom(...AGES);
const histories: fc.Arbitrary<History> = fc.record({
  policy: fc.record({
    finished_task_retention_seconds: duration,
    event_retention_seconds: duration,
    receipt_retention_seconds: duration,
    audit_retention_seconds: duration,
    subscription_max_lag_seconds: duration,
  }),
  tasks: fc.array(
    fc.record({
      state: fc.constantFrom(...STATES),
      age,
      attempts: fc.integer({ min: 0, max: 2 }),
      session: fc.option(fc.integer({ min: 0, max: 2 }), { nil: null }),
    }),
    { maxLength: 12 },
  ),
  receipts: fc.array(fc.record({ task: fc.option(fc.integer({ min: 0, max: 11 }), { nil: null }), age }), { maxLength: 10 }),
  audit: fc.array(age, { maxLength: 5 }),
  sessions: fc.array(fc.record({ closed: fc.boolean(), age }), { minLength: 3, maxLength: 3 }),
  events: fc.array(fc.record({ namespace: fc.constantFrom<0 | 1>(0, 1) }), { maxLength: 14 }),
  subscriptions: fc.array(fc.record({ namespace: fc.constantFrom<0 | 1>(0, 1), active: fc.boolean(), position: fc.integer({ min: 0, max: 14 }) }), {
    maxLength: 4,
  }),
});

let t: TestDatabase;
let tenant: TestTenant;
let other: TestTenant;
before(async () => {
  t = await freshDatabase('retention_rule');
  tenant = await createTenant(t.db, { namespace: 'a', queues: ['jobs'] });
  other = await createTenant(t.db, { applicationId: tenant.applicationId, namespace: 'b', queues: ['jobs'] });
});
after(async () => {
  await assertCountersMatchRecount(t.db);
  await t.drop();
});

const hex = (b: Buffer) => b.toString('hex');

test('pruning keeps exactly what the rule keeps (generated histories and policies)', async () => {
  const app = Buffer.from(tenant.applicationId, 'hex');
  const namespaces = [Buffer.from(tenant.namespaceId, 'hex'), Buffer.from(other.namespaceId, 'hex')];
  const [queue] = await t.db.rows<{ queue_id: Buffer }>('SELECT queue_id FROM orbit_queues WHERE namespace_id = ?', [namespaces[0]]);
  const queueId = queue?.queue_id as Buffer;
  const [credential] = await t.db.rows<{ credential_id: Buffer }>('SELECT credential_id FROM orbit_credentials WHERE namespace_id = ?', [namespaces[0]]);
  const loop = new PruneLoop({ db: t.db, log: silentLogger(), metrics: null, intervalMs: 1000, batchRows: 3, maxShare: 1 });
  let cases = 0;

  await fc.assert(
    fc.asyncProperty(histories, async (h) => {
      cases += 1;
      const [{ now } = { now: '' }] = await t.db.rows<{ now: string }>('SELECT NOW(6) AS now');
      const nowMs = Date.parse(`${now.replace(' ', 'T')}Z`);
      const at = (seconds: number) => `'${now}' - INTERVAL ${seconds} SECOND`;
      // Sessions: an open one, and closed ones of some age.
      const sessionIds = h.sessions.map(() => newId());
      for (const [i, s] of h.sessions.entries()) {
        await t.db.exec(
          `INSERT INTO orbit_worker_sessions (session_id, application_id, namespace_id, credential_id, node_id, queues, capacity, state, connected_at, last_seen_at, closed_at)
           VALUES (?, ?, ?, ?, 'n', '[]', 4, ?, ${at(s.age + 10)}, ${at(s.age)}, ${s.closed ? at(s.age) : 'NULL'})`,
          [sessionIds[i], app, namespaces[0], credential?.credential_id, s.closed ? 'CLOSED' : 'OPEN'],
        );
      }
      // Tasks with their attempts: finished ones only finished attempts; LEASED/RUNNING one active attempt.
      const taskIds = h.tasks.map(() => newId());
      const holding = new Set<number>();
      const attemptsOf = new Map<string, Buffer[]>();
      for (const [i, task] of h.tasks.entries()) {
        const finished = FINISHED.has(task.state);
        await t.db.exec(
          `INSERT INTO orbit_tasks (task_id, application_id, namespace_id, queue_id, state, priority, payload, max_attempts, on_unknown_outcome, idempotency_key, created_at, available_at, deadline_at, finished_at, updated_at)
           VALUES (?, ?, ?, ?, ?, 5, '{}', 3, 'retry', ?, ${at(task.age + 60)}, ${at(task.age + 60)}, ${at(-86400)}, ${finished ? at(task.age) : 'NULL'}, ${at(task.age)})`,
          [taskIds[i], app, namespaces[0], queueId, task.state, `k${i}`],
        );
        const ids: Buffer[] = [];
        const active = task.state === 'LEASED' || task.state === 'RUNNING';
        const count = active ? Math.max(1, task.attempts) : task.attempts;
        for (let n = 0; n < count; n++) {
          const last = n === count - 1;
          const state = active && last ? (task.state === 'LEASED' ? 'RESERVED' : 'RUNNING') : 'FAILED';
          const session = task.session ?? 0;
          if (state === 'RESERVED' || state === 'RUNNING') holding.add(session);
          const attemptId = newId();
          ids.push(attemptId);
          await t.db.exec(
            `INSERT INTO orbit_attempts (attempt_id, application_id, namespace_id, queue_id, task_id, session_id, attempt_number, state, claimed_at, lease_expires_at, deadline_at, finished_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ${at(task.age + 30)}, ${at(-60)}, ${at(-86400)}, ${state === 'FAILED' ? at(task.age + 20) : 'NULL'})`,
            [attemptId, app, namespaces[0], queueId, taskIds[i], sessionIds[session], n + 1, state],
          );
        }
        attemptsOf.set(hex(taskIds[i] as Buffer), ids);
      }
      for (const [i, r] of h.receipts.entries()) {
        const resource = r.task !== null && r.task < taskIds.length ? taskIds[r.task] : app;
        await t.db.exec(
          `INSERT INTO orbit_idempotency_receipts (namespace_id, idempotency_key, application_id, operation, request_sha256, resource_id, response, created_at)
           VALUES (?, ?, ?, 'submitTask', ?, ?, '{}', ${at(r.age)})`,
          [namespaces[0], `case${cases}-r${i}`, app, Buffer.alloc(32), resource],
        );
      }
      for (const a of h.audit) {
        await t.db.exec(
          `INSERT INTO orbit_audit_events (audit_id, application_id, namespace_id, credential_id, action, resource_type, resource, reason, request_id, idempotency_key, created_at)
           VALUES (?, ?, ?, ?, 'queue.configure', 'queue', 'jobs', 'x', ?, 'k', ${at(a)})`,
          [newId(), app, namespaces[0], credential?.credential_id, newId()],
        );
      }
      // Events oldest first, strictly later one after another (3 h ago to 10 s ago).
      const sequences: Array<{ sequence: bigint; namespace: 0 | 1; ageSeconds: number }> = [];
      for (const [i, e] of h.events.entries()) {
        const ageSeconds = AGES[Math.min(AGES.length - 1, Math.floor(((h.events.length - 1 - i) * AGES.length) / Math.max(1, h.events.length)))] as number;
        const r = await t.db.exec(
          `INSERT INTO orbit_events (event_id, application_id, namespace_id, type, subject, data, occurred_at) VALUES (?, ?, ?, 'queue.configured', 'jobs', '{}', ${at(ageSeconds)} + INTERVAL ${i} MICROSECOND)`,
          [newId(), app, namespaces[e.namespace]],
        );
        sequences.push({ sequence: BigInt(r.insertId), namespace: e.namespace, ageSeconds });
      }
      const subscriptionIds = h.subscriptions.map(() => newId());
      const positions = h.subscriptions.map((s) => {
        const own = sequences.filter((e) => e.namespace === s.namespace);
        return s.position === 0 || own.length === 0 ? 0n : (own[Math.min(own.length, s.position) - 1]?.sequence ?? 0n);
      });
      for (const [i, s] of h.subscriptions.entries()) {
        await t.db.exec(
          `INSERT INTO orbit_subscriptions (subscription_id, application_id, namespace_id, name, state, acked_sequence, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, ?, NOW(6), NOW(6))`,
          [subscriptionIds[i], app, namespaces[s.namespace], `s${i}`, s.active ? 'ACTIVE' : 'PAUSED', String(positions[i])],
        );
      }

      // Prune: the whole turn, again and again until nothing is left to do.
      for (let more = true; more; ) more = (await loop.turn(app, h.policy)).more;

      // What the rule keeps.
      const ms = (seconds: number) => nowMs - seconds * 1000;
      const taskKept = h.tasks.map(
        (task) => !mayPrune({ kind: 'task', state: task.state, finishedAtMs: FINISHED.has(task.state) ? ms(task.age) : null }, h.policy, nowMs),
      );
      const left = async (sqlText: string) => (await t.db.rows<{ id: string }>(sqlText, [app])).map((r) => r.id).sort();
      assert.deepEqual(
        await left('SELECT HEX(task_id) AS id FROM orbit_tasks WHERE application_id = ?'),
        taskIds
          .filter((_, i) => taskKept[i])
          .map((b) => hex(b).toUpperCase())
          .sort(),
      );
      assert.deepEqual(
        await left('SELECT HEX(attempt_id) AS id FROM orbit_attempts WHERE application_id = ?'),
        taskIds
          .flatMap((id, i) => (taskKept[i] ? (attemptsOf.get(hex(id)) ?? []) : []))
          .map((b) => hex(b).toUpperCase())
          .sort(),
      );
      const receiptKept = h.receipts.map((r, i) => {
        const unfinished = r.task !== null && r.task < taskIds.length && !FINISHED.has(h.tasks[r.task]?.state as string);
        return !mayPrune({ kind: 'receipt', createdAtMs: ms(r.age), taskUnfinished: unfinished }, h.policy, nowMs) ? `case${cases}-r${i}` : null;
      });
      assert.deepEqual(
        await left('SELECT idempotency_key AS id FROM orbit_idempotency_receipts WHERE application_id = ? AND idempotency_key LIKE "case%"'),
        receiptKept.filter((k) => k !== null).sort(),
      );
      const [audit] = await t.db.rows<{ n: string }>('SELECT COUNT(*) AS n FROM orbit_audit_events WHERE application_id = ?', [app]);
      assert.equal(Number(audit?.n), h.audit.filter((a) => !mayPrune({ kind: 'audit', createdAtMs: ms(a) }, h.policy, nowMs)).length);
      const sessionKept = h.sessions.map(
        (s, i) =>
          !mayPrune(
            { kind: 'session', state: s.closed ? 'CLOSED' : 'OPEN', closedAtMs: s.closed ? ms(s.age) : null, holdsAttempt: holding.has(i) },
            h.policy,
            nowMs,
          ),
      );
      assert.deepEqual(
        await left('SELECT HEX(session_id) AS id FROM orbit_worker_sessions WHERE application_id = ?'),
        sessionIds
          .filter((_, i) => sessionKept[i])
          .map((b) => hex(b).toUpperCase())
          .sort(),
      );
      const activePositions = (namespace: 0 | 1) => h.subscriptions.flatMap((s, i) => (s.active && s.namespace === namespace ? [positions[i] as bigint] : []));
      const eventKept = sequences.filter(
        (e) =>
          !mayPrune({ kind: 'event', sequence: e.sequence, occurredAtMs: ms(e.ageSeconds), activePositions: activePositions(e.namespace) }, h.policy, nowMs),
      );
      assert.deepEqual(
        (await t.db.rows<{ sequence: string }>('SELECT sequence FROM orbit_events WHERE application_id = ? ORDER BY sequence', [app])).map((r) =>
          BigInt(r.sequence),
        ),
        eventKept.map((e) => e.sequence),
      );
      // A subscription is marked exactly when an event of its namespace after its position went.
      const marks = await t.db.rows<{ subscription_id: Buffer; pruned_through: string }>(
        'SELECT subscription_id, pruned_through FROM orbit_subscriptions WHERE application_id = ?',
        [app],
      );
      for (const [i, s] of h.subscriptions.entries()) {
        const gone = sequences.filter((e) => e.namespace === s.namespace && !eventKept.includes(e)).map((e) => e.sequence);
        // biome-ignore lint/complexity/useMathMinMax: bigints (Math.max takes numbers)
        const highest = gone.length === 0 ? 0n : gone.reduce((a, b) => (a > b ? a : b));
        const expected = highest > (positions[i] as bigint) ? highest : 0n;
        const mark = marks.find((m) => m.subscription_id.equals(subscriptionIds[i] as Buffer));
        assert.equal(BigInt(mark?.pruned_through ?? -1), expected, `subscription ${i} (${s.active ? 'ACTIVE' : 'PAUSED'} at ${positions[i]})`);
      }

      // The case's history goes, so that the next starts clean and the counters stay untouched.
      for (const table of [
        'orbit_attempts',
        'orbit_tasks',
        'orbit_idempotency_receipts',
        'orbit_audit_events',
        'orbit_events',
        'orbit_subscriptions',
        'orbit_worker_sessions',
      ]) {
        await t.db.exec(`DELETE FROM ${table} WHERE application_id = ?`, [app]);
      }
    }),
    { numRuns: 40, seed: 20261202 },
  );
  assert.equal(cases, 40);
});
