/**
 * The worker side of an attempt after its claim: the locking reads that Start
 * (attempt-start.ts), the result (attempt-complete.ts), release and recovery share, renew, and
 * the settlement engine.
 *
 * Every transaction here locks in lock order - application row → namespace rows → queue rows → task rows →
 * attempt rows (each set ascending) → permits - in ONE round trip of locking reads, decides in
 * JavaScript from what it read, and writes in a second round trip. Counter changes are derived
 * from the state change of the locked rows (an attempt that leaves RESERVED gives back one active
 * and one pending; one that leaves RUNNING gives back one active; a task that becomes terminal
 * gives back one unfinished), so each counter is released exactly once: a second settlement of
 * the same attempt finds it no longer active and changes nothing.
 */
import { idToHex as hex, type IdBytes } from '../../ids.ts';
import { isTerminal, type TaskFacts, type TaskState } from '../../domain/task-transitions.ts';
import { millisToSql, sqlToMillis, sqlToRfc3339 } from '../../time.ts';
import { sql, type SQL } from '../database/sql.ts';
import { leaseEndSql } from './lease-end.ts';
import { valueList, type BatchStatement, type Database, type Transaction } from '../database/database.ts';
import type { ApplicationResourcesRow, AttemptRow, QueueRow, TaskRow } from '../database/schema.ts';
import { permitHoldersStatement, usageDeltaStatements } from '../quotas/usage-writes.ts';
import { namespaceRowsByHex, namespaceRowsLockStatement, type NamespaceUsageRow } from '../quotas/namespace-resources.ts';
import { PermitTally } from '../../domain/permits.ts';
import { lockRows } from '../database/lock-order.ts';
import { rowsAsExpected } from './fast-path-guards.ts';
import { queueNamesOf } from '../quotas/queues.ts';
import { eventInsertStatement } from '../records/events.ts';
import { settlementEventType, taskEvent, taskEventsEnabled } from '../records/task-events.ts';

export interface AttemptRef {
  attemptId: IdBytes;
  taskId: IdBytes;
  queueId: IdBytes;
  /** The queue's namespace (its usage counts there too; a queue never moves). */
  namespaceId: IdBytes;
}

export type AttemptState = 'RESERVED' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'RELEASED' | 'EXPIRED';

/**
 * An attempt row as the settlement engine locks it. `state` is a VARCHAR column that holds only
 * the states Orbit writes there, hence the narrower type.
 */
export type LockedAttempt = Pick<
  AttemptRow,
  'attempt_id' | 'task_id' | 'queue_id' | 'session_id' | 'state' | 'resource_key' | 'lease_expires_at' | 'deadline_at' | 'claimed_at' | 'attempt_number'
> & { state: AttemptState };

/**
 * A task row as the settlement engine locks it. `state` and `on_unknown_outcome` are VARCHAR
 * columns that hold only the values Orbit writes there (task-transitions.ts), hence the
 * narrower types.
 */
export type LockedTaskRow = Pick<
  TaskRow,
  | 'task_id'
  | 'state'
  | 'attempts'
  | 'max_attempts'
  | 'on_unknown_outcome'
  | 'cancel_requested'
  | 'cancel_reason'
  | 'deadline_at'
  | 'current_attempt_id'
  | 'namespace_id'
  | 'queue_id'
  | 'schedule_id'
  | 'scheduled_for'
> & { state: TaskState; on_unknown_outcome: TaskFacts['onUnknownOutcome'] };

/** The start-window columns of the application row (the queue rows have the same). */
type WindowRow = Pick<
  ApplicationResourcesRow,
  'rate_per_second' | 'window_started_at' | 'window_starts' | 'reserved_rate_per_second' | 'window_reserved_starts'
>;
type QueueWindowRow = Pick<QueueRow, 'queue_id' | 'rate_per_second' | 'window_started_at' | 'window_starts'>;

export interface Locked {
  nowSql: string;
  nowMs: number;
  app: WindowRow;
  /** The namespace rows (floors and usage), by namespace id in hex. */
  namespaces: Map<string, NamespaceUsageRow>;
  queues: Map<string, QueueWindowRow>;
  tasks: Map<string, LockedTaskRow>;
  attempts: Map<string, LockedAttempt>;
}

const ascending = (ids: Buffer[]) => [...new Map(ids.map((id) => [hex(id), id])).values()].sort(Buffer.compare);

/**
 * The locking reads, in lock order, in one round trip. With `skipLockedApplication`, a busy
 * application row is passed over (recovery comes back later) and null is returned.
 */
export async function lockForAttempts(
  tx: Transaction,
  applicationId: IdBytes,
  refs: AttemptRef[],
  options: { skipLockedApplication?: boolean } = {},
): Promise<Locked | null> {
  const queueIds = ascending(refs.map((r) => r.queueId));
  const namespaceIds = ascending(refs.map((r) => r.namespaceId));
  const taskIds = ascending(refs.map((r) => r.taskId));
  const attemptIds = ascending(refs.map((r) => r.attemptId));
  const appSql = sql`SELECT NOW(6) AS now, rate_per_second, window_started_at, window_starts, reserved_rate_per_second, window_reserved_starts
       FROM orbit_application_resources WHERE application_id = ${applicationId} ${lockRows('application')}`;
  const restSql = [
    namespaceRowsLockStatement(namespaceIds) as SQL,
    sql`SELECT queue_id, rate_per_second, window_started_at, window_starts
       FROM orbit_queues WHERE queue_id IN (${valueList(queueIds)}) ORDER BY queue_id ${lockRows('queue')}`,
    sql`SELECT task_id, state, attempts, max_attempts, on_unknown_outcome, cancel_requested, cancel_reason, deadline_at, current_attempt_id,
              namespace_id, queue_id, schedule_id, scheduled_for
       FROM orbit_tasks WHERE task_id IN (${valueList(taskIds)}) ORDER BY task_id ${lockRows('task')}`,
    sql`SELECT attempt_id, task_id, queue_id, session_id, state, resource_key, lease_expires_at, deadline_at, claimed_at, attempt_number
       FROM orbit_attempts WHERE attempt_id IN (${valueList(attemptIds)}) ORDER BY attempt_id ${lockRows('attempt')}`,
  ];
  let appRows: Array<WindowRow & { now: string }>;
  let namespaceRows: NamespaceUsageRow[];
  let queueRows: QueueWindowRow[];
  let taskRows: LockedTaskRow[];
  let attemptRows: LockedAttempt[];
  if (options.skipLockedApplication) {
    // Alone first: when the application row is busy, nothing else gets locked (or waited for).
    appRows = await tx.rows(sql`${appSql} SKIP LOCKED`);
    if (!appRows[0]) return null;
    [namespaceRows, queueRows, taskRows, attemptRows] = (await tx.batch(restSql)) as [NamespaceUsageRow[], QueueWindowRow[], LockedTaskRow[], LockedAttempt[]];
  } else {
    [appRows, namespaceRows, queueRows, taskRows, attemptRows] = (await tx.batch([appSql, ...restSql])) as [
      typeof appRows,
      NamespaceUsageRow[],
      QueueWindowRow[],
      LockedTaskRow[],
      LockedAttempt[],
    ];
  }
  const app = appRows[0];
  if (!app) return null;
  return {
    nowSql: app.now,
    nowMs: sqlToMillis(app.now),
    app,
    namespaces: namespaceRowsByHex(namespaceRows, namespaceIds.length),
    queues: new Map(queueRows.map((q) => [hex(q.queue_id), q])),
    tasks: new Map(taskRows.map((t) => [hex(t.task_id), t])),
    attempts: new Map(attemptRows.map((a) => [hex(a.attempt_id), a])),
  };
}

class ApplicationBusy extends Error {}

// ---------------------------------------------------------------------------------------------
// Settlement: an active attempt (RESERVED or RUNNING) ends, and its task moves on.

export interface Settlement {
  attemptState: Exclude<AttemptState, 'RESERVED' | 'RUNNING'>;
  taskState: TaskState;
  /** For WAITING: when it may be claimed again (default: unchanged). */
  availableAtMs?: number;
  result?: unknown;
  /** The task's error after this (task-errors.ts): a value, null for none, or absent to keep the one it has. */
  error?: unknown;
  /** What the worker reported when the task's error says something else (a cancellation): kept in the event. */
  workerError?: unknown;
}

export interface SettleDecision<T> {
  answer: T;
  settlement?: Settlement;
}

export type Decide<R, T> = (ref: R, attempt: LockedAttempt | undefined, task: LockedTaskRow | undefined, nowMs: number) => SettleDecision<T>;

/** Locks, decides item by item (later items see earlier decisions), writes. Null when the application row was busy and `skipLockedApplication` was asked. */
export async function settleAttempts<R extends AttemptRef, T>(
  db: Database,
  params: { applicationId: IdBytes; refs: R[]; decide: Decide<R, T>; skipLockedApplication?: boolean },
): Promise<{ answers: T[]; settled: Array<{ attempt: LockedAttempt; settlement: Settlement; nowMs: number }> } | null> {
  if (params.refs.length === 0) return { answers: [], settled: [] };
  try {
    return await db.transaction(async (tx) => {
      const locked = await lockForAttempts(tx, params.applicationId, params.refs, { skipLockedApplication: params.skipLockedApplication });
      if (!locked) throw new ApplicationBusy();
      const answers: T[] = [];
      const settled: Array<{ attempt: LockedAttempt; settlement: Settlement; nowMs: number }> = [];
      const writes = new SettlementWrites(params.applicationId, locked.nowSql);
      for (const ref of params.refs) {
        const attempt = locked.attempts.get(hex(ref.attemptId));
        const task = attempt ? locked.tasks.get(hex(attempt.task_id)) : undefined;
        const { answer, settlement } = params.decide(ref, attempt, task, locked.nowMs);
        answers.push(answer);
        if (settlement && attempt && task) {
          writes.add(attempt, task, settlement);
          settled.push({ attempt: { ...attempt }, settlement, nowMs: locked.nowMs });
          // Later items in this batch see the new states.
          attempt.state = settlement.attemptState;
          task.state = settlement.taskState;
        }
      }
      await writes.flush(tx);
      return { answers, settled };
    });
  } catch (error) {
    if (error instanceof ApplicationBusy) return null;
    throw error;
  }
}

/** A JSON column's value: the text, or NULL for nothing (`COALESCE(…, column)` then keeps what is there). */
export const jsonOrNull = (value: unknown) => (value === undefined ? null : JSON.stringify(value));

/** What one settlement writes to its task row. */
interface TaskWrite {
  taskId: IdBytes;
  state: TaskState;
  availableAt: string | null;
  terminal: boolean;
  result: string | null;
  error: string | null | undefined;
}

class SettlementWrites {
  private attemptsTo: Array<{ attemptId: IdBytes; state: Settlement['attemptState'] }> = [];
  private tasksTo: TaskWrite[] = [];
  private queues = new Map<string, { namespaceId: IdBytes; delta: { unfinished: number; active: number; pending: number } }>();
  private permits = new PermitTally();
  /** The lifecycle events of the settlements, in order; their queue names are filled in at flush. */
  private events: Array<{ type: string; task: LockedTaskRow; more: Record<string, unknown> }> = [];

  constructor(
    private readonly applicationId: IdBytes,
    private readonly nowSql: string,
  ) {}

  add(attempt: LockedAttempt, task: LockedTaskRow, s: Settlement): void {
    if (attempt.state !== 'RESERVED' && attempt.state !== 'RUNNING') throw new Error('only an active attempt can be settled');
    const terminal = isTerminal(s.taskState);
    const availableAt = s.availableAtMs === undefined ? null : millisToSql(s.availableAtMs);
    this.attemptsTo.push({ attemptId: attempt.attempt_id, state: s.attemptState });
    this.tasksTo.push({
      taskId: task.task_id,
      state: s.taskState,
      availableAt,
      terminal,
      result: jsonOrNull(s.result),
      // Absent: the task keeps the error it has; null clears it.
      error: s.error === undefined ? undefined : s.error === null ? null : JSON.stringify(s.error),
    });
    const entry = this.queues.get(hex(attempt.queue_id)) ?? { namespaceId: task.namespace_id, delta: { unfinished: 0, active: 0, pending: 0 } };
    const q = entry.delta;
    q.active -= 1;
    if (attempt.state === 'RESERVED') q.pending -= 1;
    if (terminal) q.unfinished -= 1;
    this.queues.set(hex(attempt.queue_id), entry);
    if (attempt.resource_key !== null) this.permits.add({ queue: hex(attempt.queue_id), resourceKey: attempt.resource_key }, 1);
    const type = taskEventsEnabled() ? settlementEventType(attempt.state === 'RUNNING', s.taskState) : null;
    if (type !== null) {
      const more: Record<string, unknown> = {};
      if (attempt.state === 'RUNNING') more.attempt_number = attempt.attempt_number;
      if (type === 'task.retry_scheduled' && availableAt !== null) more.available_at = sqlToRfc3339(availableAt);
      if (s.workerError !== undefined) more.worker_error = s.workerError;
      this.events.push({ type, task, more });
    }
  }

  /**
   * The attempt and task rows, one UPDATE per distinct outcome rather than per row: recovery's
   * hundreds of expired leases share a handful of outcomes (the state, the retry time, the
   * error), so a round costs a few statements whatever its size. Every row is locked already
   * (lockForAttempts), and each is settled at most once per transaction (a second settlement of
   * an attempt finds it no longer active), so no two groups name the same row.
   */
  private *rowStatements(): Generator<BatchStatement> {
    const byState = new Map<string, IdBytes[]>();
    for (const a of this.attemptsTo) {
      const ids = byState.get(a.state);
      if (ids) ids.push(a.attemptId);
      else byState.set(a.state, [a.attemptId]);
    }
    for (const [state, ids] of byState) {
      yield sql`UPDATE orbit_attempts SET state = ${state}, finished_at = ${this.nowSql} WHERE attempt_id IN (${valueList(ids)})`;
    }
    const byOutcome = new Map<string, { write: TaskWrite; ids: IdBytes[] }>();
    for (const t of this.tasksTo) {
      const key = JSON.stringify([t.state, t.availableAt, t.terminal, t.result, t.error === undefined ? 0 : 1, t.error ?? null]);
      const group = byOutcome.get(key);
      if (group) group.ids.push(t.taskId);
      else byOutcome.set(key, { write: t, ids: [t.taskId] });
    }
    for (const { write: t, ids } of byOutcome.values()) {
      const error = t.error === undefined ? sql`error` : sql`${t.error}`;
      yield sql`UPDATE orbit_tasks
          SET state = ${t.state}, current_attempt_id = NULL, available_at = COALESCE(${t.availableAt}, available_at), finished_at = ${t.terminal ? this.nowSql : null},
              result = COALESCE(${t.result}, result), error = ${error}, updated_at = ${this.nowSql}
        WHERE task_id IN (${valueList(ids)})`;
    }
  }

  /** The writes and the COMMIT, in one round trip (more only when they would not fit in one packet: results carry tenant JSON). */
  async flush(tx: Transaction): Promise<void> {
    if (this.attemptsTo.length === 0) return;
    const s: BatchStatement[] = [...this.rowStatements()];
    s.push(
      ...usageDeltaStatements(
        this.applicationId,
        [...this.queues].map(([queueHex, { namespaceId, delta }]) => ({ queueId: Buffer.from(queueHex, 'hex'), namespaceId, delta })),
      ),
    );
    const permits = permitHoldersStatement(this.permits.negated(), sql`${this.nowSql}`);
    if (permits !== null) s.push(permits);
    if (this.events.length > 0) {
      // Records last, under the application row this transaction holds (the feed's ordering rule).
      const names = await queueNamesOf(
        tx,
        this.events.map((e) => e.task.queue_id),
      );
      s.push(
        eventInsertStatement(
          this.events.map((e) =>
            taskEvent(
              e.type,
              {
                applicationId: this.applicationId,
                namespaceId: e.task.namespace_id,
                taskId: e.task.task_id,
                queue: names.get(hex(e.task.queue_id)) ?? '',
                scheduleId: e.task.schedule_id,
                scheduledFor: e.task.scheduled_for,
              },
              e.more,
            ),
          ),
        ),
      );
    }
    await tx.finish(s);
  }
}

/** The attempt is this session's and its lease has not run out. */
export function heldBySession(attempt: LockedAttempt | undefined, sessionId: IdBytes, nowMs: number): attempt is LockedAttempt {
  return attempt !== undefined && attempt.session_id.equals(sessionId) && sqlToMillis(attempt.lease_expires_at) > nowMs;
}

// ---------------------------------------------------------------------------------------------
// Renew: extend leases, never past the task's deadline. Touches only the attempt rows.

/**
 * Renews leases, many in one transaction of one round trip: the group commit of renewals that
 * arrive together (a thousand sessions renewing at once cost a thousand commits otherwise). Each
 * is extended to min(now + lease, deadline) when its session still holds it; answers, in item
 * order, the new lease end, or null when the lease was lost.
 */
export async function attemptRenewBatch(
  db: Database,
  params: { items: Array<{ sessionId: IdBytes; attemptId: IdBytes }>; leaseSeconds: number },
): Promise<Array<number | null>> {
  const pairs = params.items.map((i) => [i.attemptId, i.sessionId] as const);
  const held = sql`${rowsAsExpected('attempt_id', 'session_id', pairs)} AND state IN ('RESERVED', 'RUNNING') AND lease_expires_at > @now`;
  const results = await db.oneShot([
    sql`SET @now = NOW(6)`,
    sql`UPDATE orbit_attempts SET lease_expires_at = ${leaseEndSql(sql.raw('@now'), params.leaseSeconds)} WHERE ${held}`,
    // The same rows, after the UPDATE in this transaction: those it extended (a lease it did not
    // touch was not live, and is not live now).
    sql`SELECT attempt_id, session_id, lease_expires_at FROM orbit_attempts WHERE ${held}`,
  ]);
  const rows = results[2] as Array<Pick<AttemptRow, 'attempt_id' | 'session_id' | 'lease_expires_at'>>;
  const leaseOf = new Map(rows.map((r) => [`${hex(r.attempt_id)}/${hex(r.session_id)}`, sqlToMillis(r.lease_expires_at)]));
  return params.items.map((i) => leaseOf.get(`${hex(i.attemptId)}/${hex(i.sessionId)}`) ?? null);
}
