/**
 * One-round-trip versions of Start and of the authoritative result, for the common case only.
 * The session knows what the database should say (the attempt is RESERVED or RUNNING in this
 * session with a valid lease, the task is LEASED or RUNNING with this attempt, which queue and
 * resource key it has). Each statement carries that expectation in its WHERE clause and the
 * next statement checks it with a guard (`IF(ROW_COUNT() = n, …, NULL)` on a NOT NULL column):
 * if anything differs - a lease ran out, a duplicate Start, a full start window, a cancelled
 * reservation - the server stops before COMMIT, the transaction rolls back untouched, and the
 * caller runs the careful two-round-trip path (attempts.ts), which decides item by item.
 *
 * Locks are taken in lock order - application row, queue rows, task rows, attempt rows,
 * permits - and, since the statements and the COMMIT travel together, the application row is
 * never held across a round trip to this process.
 */
import { idToHex as hex, type IdBytes } from '../../ids.ts';
import type { TaskState } from '../../domain/task-transitions.ts';
import { errorAfterResult } from '../../domain/task-errors.ts';
import { sqlToMillis } from '../../time.ts';
import { sql, type SQL } from '../database/sql.ts';
import { isRetryableTransactionError, type Database } from '../database/database.ts';
import { jsonOrNull, type AttemptRef } from './attempts.ts';
import { taskEventsEnabled, taskEventsFromRows } from '../records/task-events.ts';

export interface KnownAttempt extends AttemptRef {
  sessionId: IdBytes;
  resourceKey: string | null;
  deadlineAtMs: number;
}

/** How many items per key; items whose key is null are not counted. */
export function countBy<T>(items: T[], key: (item: T) => string | null): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) {
    const k = key(item);
    if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return counts;
}

/** A guard: fails the transaction unless the previous statement changed exactly `n` rows. */
function guard(n: number, applicationId: IdBytes): SQL {
  return sql`UPDATE orbit_application_resources SET active_attempts = IF(ROW_COUNT() = ${n}, active_attempts, NULL) WHERE application_id = ${applicationId}`;
}

/** The rows whose start window a Start advances: the table and its key column (constant SQL text). */
const WINDOW_ROWS = {
  application: { table: 'orbit_application_resources', key: 'application_id' },
  queue: { table: 'orbit_queues', key: 'queue_id' },
} as const;

/**
 * Starts every item, or nothing. Both windows are checked and advanced in SQL exactly as
 * start-window.ts does: a window that has ended is replaced by one opened now; the starts must
 * fit under rate_per_second. Returns the database time of the start, or null when the careful
 * path must decide.
 */
export async function attemptStartFast(db: Database, params: { applicationId: IdBytes; items: KnownAttempt[]; leaseSeconds: number }): Promise<number | null> {
  const { items, applicationId } = params;
  if (new Set(items.map((i) => hex(i.attemptId))).size !== items.length) return null;
  // One timestamp for the whole transaction: windows, started_at and leases agree exactly.
  const s: SQL[] = [sql`SET @now = NOW(6)`, sql`SELECT @now AS now`];
  /** Advances one row's window by `n` starts (and gives back `n` pending starts). */
  const window = (rows: keyof typeof WINDOW_ROWS, id: IdBytes, n: number) => sql`UPDATE ${sql.raw(WINDOW_ROWS[rows].table)}
      SET window_starts = IF(window_started_at IS NULL OR window_started_at + INTERVAL 1 SECOND <= @now,
                             IF(${n} <= rate_per_second, ${n}, NULL),
                             IF(window_starts + ${n} <= rate_per_second, window_starts + ${n}, NULL)),
          window_started_at = IF(window_started_at IS NULL OR window_started_at + INTERVAL 1 SECOND <= @now, @now, window_started_at),
          pending_starts = pending_starts - ${n}
    WHERE ${sql.raw(WINDOW_ROWS[rows].key)} = ${id}`;
  s.push(window('application', applicationId, items.length));
  const perQueue = [...countBy(items, (i) => hex(i.queueId))].sort(([a], [b]) => a.localeCompare(b));
  for (const [queueHex, n] of perQueue) s.push(window('queue', Buffer.from(queueHex, 'hex'), n));
  const byTask = [...items].sort((a, b) => Buffer.compare(a.taskId, b.taskId));
  s.push(
    sql`UPDATE orbit_tasks SET state = 'RUNNING', attempts = attempts + 1, updated_at = @now
      WHERE (task_id, current_attempt_id) IN (${sql.join(
        byTask.map((i) => sql`(${i.taskId}, ${i.attemptId})`),
        sql`, `,
      )}) AND state = 'LEASED'`,
    guard(items.length, applicationId),
  );
  const byAttempt = [...items].sort((a, b) => Buffer.compare(a.attemptId, b.attemptId));
  s.push(
    sql`UPDATE orbit_attempts SET state = 'RUNNING', started_at = @now, lease_expires_at = LEAST(@now + INTERVAL ${params.leaseSeconds} SECOND, deadline_at)
      WHERE (attempt_id, session_id) IN (${sql.join(
        byAttempt.map((i) => sql`(${i.attemptId}, ${i.sessionId})`),
        sql`, `,
      )}) AND state = 'RESERVED' AND lease_expires_at > @now`,
    guard(items.length, applicationId),
  );
  if (taskEventsEnabled())
    s.push(
      taskEventsFromRows(
        applicationId,
        byTask.map((i) => i.taskId),
        sql`'task.started'`,
        sql`JSON_OBJECT('attempt_number', t.attempts)`,
      ),
    );
  try {
    const results = await db.oneShot(s, undefined, { retries: 2 });
    const [row] = results[1] as Array<{ now: string }>;
    return sqlToMillis((row as { now: string }).now);
  } catch (error) {
    if (isFastPathMiss(error)) return null;
    throw error;
  }
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
export async function attemptFinishFast(db: Database, params: { applicationId: IdBytes; items: KnownResult[] }): Promise<boolean> {
  const { items, applicationId } = params;
  if (items.some((i) => i.taskState === 'CANCELLED')) return false;
  if (new Set(items.map((i) => hex(i.attemptId))).size !== items.length) return false;
  const s: SQL[] = [
    sql`SET @now = NOW(6)`,
    sql`UPDATE orbit_application_resources SET unfinished_tasks = unfinished_tasks - ${items.length}, active_attempts = active_attempts - ${items.length} WHERE application_id = ${applicationId}`,
  ];
  const perQueue = [...countBy(items, (i) => hex(i.queueId))].sort(([a], [b]) => a.localeCompare(b));
  for (const [queueHex, n] of perQueue) {
    s.push(
      sql`UPDATE orbit_queues SET unfinished_tasks = unfinished_tasks - ${n}, active_attempts = active_attempts - ${n} WHERE queue_id = ${Buffer.from(queueHex, 'hex')}`,
    );
  }
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
      WHERE (task_id, current_attempt_id) IN (${sql.join(
        byTask.map((i) => sql`(${i.taskId}, ${i.attemptId})`),
        sql`, `,
      )}) AND state = 'RUNNING'`,
    guard(items.length, applicationId),
  );
  const byAttempt = [...items].sort((a, b) => Buffer.compare(a.attemptId, b.attemptId));
  s.push(
    sql`UPDATE orbit_attempts SET state = CASE attempt_id ${sql.join(
      byAttempt.map((i) => sql`WHEN ${i.attemptId} THEN ${i.attemptState}`),
      sql` `,
    )} END, finished_at = @now
      WHERE (attempt_id, session_id) IN (${sql.join(
        byAttempt.map((i) => sql`(${i.attemptId}, ${i.sessionId})`),
        sql`, `,
      )}) AND state = 'RUNNING' AND lease_expires_at > @now`,
    guard(items.length, applicationId),
  );
  const perKey = [...countBy(items, (i) => (i.resourceKey === null ? null : `${hex(i.queueId)}/${i.resourceKey}`))].sort(([a], [b]) => a.localeCompare(b));
  for (const [key, n] of perKey) {
    const slash = key.indexOf('/');
    s.push(
      sql`UPDATE orbit_key_permits SET holders = holders - ${n}, updated_at = @now WHERE queue_id = ${Buffer.from(key.slice(0, slash), 'hex')} AND resource_key = ${key.slice(slash + 1)}`,
    );
  }
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

/** The task's error column after this result (task-errors.ts): the text, or NULL for none. */
function errorColumn(item: KnownResult): string | null {
  const error = errorAfterResult(item.taskState, item.error, null);
  return error === null ? null : JSON.stringify(error);
}

/**
 * A guard fired (ER_BAD_NULL_ERROR), a counter would have gone below zero
 * (ER_DATA_OUT_OF_RANGE), or deadlocks outlasted the retries: the careful path decides.
 */
function isFastPathMiss(error: unknown): boolean {
  const errno = (error as { errno?: number } | null)?.errno;
  return errno === 1048 || errno === 1690 || isRetryableTransactionError(error);
}
