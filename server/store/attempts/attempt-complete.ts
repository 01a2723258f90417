/**
 * The authoritative result of a started attempt - its two paths and the choice between them,
 * in one place.
 *
 * - `finishFast`: one round trip for outcomes whose task state does not depend on the task's
 *   other facts (`resultStateWithoutFacts`, task-transitions.ts): counters on both levels, the
 *   task and attempt rows guarded by `ROW_COUNT()` (usage-writes.ts `rowCountGuard`), permits, events.
 * - `completeCareful`: locks in lock order, decides each item with `afterResult` (a duplicate
 *   result answers again, a lost lease or an unstarted reservation is refused), and writes
 *   through the settlement engine (attempts.ts), which releases each counter exactly once.
 * - `completeAttempts`: the fast path when every outcome allows it, else - or when it misses -
 *   the careful one. The differential test (test/integration/hot-path-differential.test.ts)
 *   runs both on generated scenarios and asserts the same answers and rows.
 */
import { idToHex as hex, type IdBytes } from '../../ids.ts';
import { afterResult, ATTEMPT_STATE_OF_OUTCOME, resultStateWithoutFacts, type AttemptOutcome, type TaskState } from '../../domain/task-transitions.ts';
import { errorAfterResult } from '../../domain/task-errors.ts';
import { sql, type SQL } from '../database/sql.ts';
import { countByQueue, permitHoldersStatement, rowCountGuard, usageDeltaStatements } from '../quotas/usage-writes.ts';
import { PermitTally } from '../../domain/permits.ts';
import type { Database } from '../database/database.ts';
import { taskEventsEnabled, taskEventsFromRows } from '../records/task-events.ts';
import { heldBySession, jsonOrNull, settleAttempts, type AttemptRef, type Settlement } from './attempts.ts';
import { facts } from './attempt-results.ts';
import { isFastPathMiss, rowsAsExpected, type KnownAttempt, type PathTaken } from './fast-path-guards.ts';

export interface CompleteItem extends AttemptRef {
  sessionId: IdBytes;
  outcome: AttemptOutcome;
  result?: unknown;
  error?: unknown;
  retryable: boolean;
  /**
   * The size of the frame that carried it: an upper bound of its result's and error's JSON. A
   * group of results is bounded by it (completionBytes), so that the one UPDATE of the fast path
   * that carries them all fits in one database packet.
   */
  frameBytes?: number;
}

/** What one result adds to its group's statements, at most: its JSON escaped, and the rest of its row. */
export function completionBytes(item: CompleteItem): number {
  const json = item.frameBytes ?? Buffer.byteLength(JSON.stringify([item.result ?? null, item.error ?? null]), 'utf8');
  return 2 * json + 1024;
}

export type CompleteAnswer = { kind: 'completed'; taskState: TaskState; duplicate: boolean } | { kind: 'lease_lost' } | { kind: 'not_started' };

/**
 * The authoritative result of a started attempt. A repeated `complete` of an attempt this
 * session already finished with the same outcome answers again and changes nothing.
 */
export async function completeCareful(db: Database, params: { applicationId: IdBytes; items: CompleteItem[] }) {
  const outcome = await settleAttempts<CompleteItem, CompleteAnswer>(db, {
    applicationId: params.applicationId,
    refs: params.items,
    decide(item, attempt, task, nowMs) {
      if (attempt && task && attempt.session_id.equals(item.sessionId) && attempt.state === ATTEMPT_STATE_OF_OUTCOME[item.outcome]) {
        return { answer: { kind: 'completed', taskState: task.state, duplicate: true } };
      }
      if (!heldBySession(attempt, item.sessionId, nowMs) || !task) return { answer: { kind: 'lease_lost' } };
      if (attempt.state === 'RESERVED') return { answer: { kind: 'not_started' } };
      if (attempt.state !== 'RUNNING') return { answer: { kind: 'lease_lost' } };
      const next = afterResult(facts(task), item.outcome, item.retryable, nowMs);
      const settlement: Settlement = {
        attemptState: ATTEMPT_STATE_OF_OUTCOME[item.outcome],
        taskState: next.state,
        availableAtMs: next.availableAtMs,
        error: errorAfterResult(next.state, item.error, task.cancel_reason),
      };
      if (item.result !== undefined) settlement.result = item.result;
      // A cancellation's error is the operator's reason; the worker's own words stay in the event.
      if (next.state === 'CANCELLED' && item.error !== undefined) settlement.workerError = item.error;
      return { answer: { kind: 'completed', taskState: next.state, duplicate: false }, settlement };
    },
  });
  return outcome as NonNullable<typeof outcome>;
}

/**
 * Completes a group of one application: the fast path when every result's task state is known
 * without the task's facts and nothing is unusual, else the careful one (`path: 'careful'` skips
 * the fast path - for the differential test). Answers in item order.
 */
export async function completeAttempts(
  db: Database,
  params: { applicationId: IdBytes; items: Array<CompleteItem & KnownAttempt> },
  options: { path?: 'choose' | 'careful' } = {},
): Promise<{ answers: CompleteAnswer[]; path: PathTaken }> {
  const known = options.path === 'careful' ? null : knownResults(params.items);
  if (known && (await finishFast(db, { applicationId: params.applicationId, items: known }))) {
    return { answers: known.map((i): CompleteAnswer => ({ kind: 'completed', taskState: i.taskState, duplicate: false })), path: 'fast' };
  }
  return { answers: (await completeCareful(db, params)).answers, path: 'careful' };
}

/** The results with their task state known without the task's facts; null if any is not. */
function knownResults(items: Array<CompleteItem & KnownAttempt>): KnownResult[] | null {
  const known: KnownResult[] = [];
  for (const item of items) {
    const taskState = resultStateWithoutFacts(item.outcome, item.retryable);
    if (taskState === null) return null;
    known.push({ ...item, taskState, attemptState: ATTEMPT_STATE_OF_OUTCOME[item.outcome] });
  }
  return known;
}

export interface KnownResult extends KnownAttempt {
  taskState: Extract<TaskState, 'SUCCEEDED' | 'FAILED' | 'CANCELLED'>;
  attemptState: 'SUCCEEDED' | 'FAILED' | 'CANCELLED';
  result?: unknown;
  error?: unknown;
}
/**
 * Finishes every item with a terminal task state (a success, or a failure that is not to be
 * retried - the outcomes that do not depend on the task's other facts), or nothing. True when
 * done; false when the careful path must decide.
 *
 * A cancellation is always left to the careful path: the task's error is then the reason saved
 * with the cancel intent (task-errors.ts), which is on the task row - read by the careful path's
 * locking read, unknown here. Cancellations are rare; the common results keep one round trip.
 */
export async function finishFast(db: Database, params: { applicationId: IdBytes; items: KnownResult[] }): Promise<boolean> {
  const { items, applicationId } = params;
  if (items.some((i) => i.taskState === 'CANCELLED')) return false;
  if (new Set(items.map((i) => hex(i.attemptId))).size !== items.length) return false;
  const s: SQL[] = [
    sql`SET @now = NOW(6)`,
    // A counter that would go below zero fails its unsigned column: the careful path decides.
    ...usageDeltaStatements(
      applicationId,
      countByQueue(items).map((q) => ({ ...q, delta: { unfinished: -q.count, active: -q.count } })),
    ),
  ];
  const byTask = [...items].sort((a, b) => Buffer.compare(a.taskId, b.taskId));
  /** `CASE task_id WHEN ? THEN ? … END`: each task's own value. */
  const perTask = (value: (i: KnownResult) => unknown) =>
    sql`CASE task_id ${sql.join(
      byTask.map((i) => sql`WHEN ${i.taskId} THEN ${value(i)}`),
      sql` `,
    )} END`;
  s.push(
    sql`UPDATE orbit_tasks
        SET state = ${perTask((i) => i.taskState)}, current_attempt_id = NULL, finished_at = @now, updated_at = @now,
            result = COALESCE(${perTask((i) => jsonOrNull(i.result))}, result), error = ${perTask((i) => errorColumn(i))}
      WHERE ${rowsAsExpected(
        'task_id',
        'current_attempt_id',
        byTask.map((i) => [i.taskId, i.attemptId] as const),
      )} AND state = 'RUNNING'`,
    rowCountGuard(items.length, applicationId),
  );
  const byAttempt = [...items].sort((a, b) => Buffer.compare(a.attemptId, b.attemptId));
  s.push(
    sql`UPDATE orbit_attempts SET state = CASE attempt_id ${sql.join(
      byAttempt.map((i) => sql`WHEN ${i.attemptId} THEN ${i.attemptState}`),
      sql` `,
    )} END, finished_at = @now
      WHERE ${rowsAsExpected(
        'attempt_id',
        'session_id',
        byAttempt.map((i) => [i.attemptId, i.sessionId] as const),
      )} AND state = 'RUNNING' AND lease_expires_at > @now`,
    rowCountGuard(items.length, applicationId),
  );
  const permits = permitHoldersStatement(
    PermitTally.countOf(items, (i) => (i.resourceKey === null ? null : { queue: hex(i.queueId), resourceKey: i.resourceKey })).negated(),
    sql`@now`,
  );
  if (permits !== null) s.push(permits);
  if (taskEventsEnabled()) {
    s.push(
      taskEventsFromRows(
        applicationId,
        byTask.map((i) => i.taskId),
        sql`CASE t.state WHEN 'SUCCEEDED' THEN 'task.succeeded' WHEN 'FAILED' THEN 'task.failed' WHEN 'CANCELLED' THEN 'task.cancelled' ELSE NULL END`,
        sql`JSON_OBJECT('attempt_number', t.attempts)`,
      ),
    );
  }
  try {
    await db.oneShot(s, undefined, { retries: 2 });
    return true;
  } catch (error) {
    if (isFastPathMiss(error)) return false;
    throw error;
  }
}
function errorColumn(item: KnownResult): string | null {
  const error = errorAfterResult(item.taskState, item.error, null);
  return error === null ? null : JSON.stringify(error);
}
