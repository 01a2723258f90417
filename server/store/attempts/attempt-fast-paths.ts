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
import { sqlToMillis } from '../../time.ts';
import { isRetryableTransactionError, type Database, type Row } from '../database/database.ts';
import type { AttemptRef } from './attempts.ts';

export interface KnownAttempt extends AttemptRef {
  sessionId: IdBytes;
  resourceKey: string | null;
  deadlineAtMs: number;
}


function countBy<T>(items: T[], key: (item: T) => string | null): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) {
    const k = key(item);
    if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return counts;
}

/** A guard: fails the transaction unless the previous statement changed exactly `n` rows. */
function guard(n: number, applicationId: IdBytes): { sql: string; params: unknown[] } {
  return { sql: 'UPDATE orbit_application_resources SET active_attempts = IF(ROW_COUNT() = ?, active_attempts, NULL) WHERE application_id = ?', params: [n, applicationId] };
}

class Statements {
  readonly sql: string[] = [];
  readonly params: unknown[] = [];
  add(sql: string, ...params: unknown[]): void {
    this.sql.push(sql);
    this.params.push(...params);
  }
  addGuard(n: number, applicationId: IdBytes): void {
    const g = guard(n, applicationId);
    this.add(g.sql, ...g.params);
  }
}

/**
 * Starts every item, or nothing. Both windows are checked and advanced in SQL exactly as
 * start-window.ts does: a window that has ended is replaced by one opened now; the starts must
 * fit under rate_per_second. Returns the database time of the start, or null when the careful
 * path must decide.
 */
export async function attemptStartFast(db: Database, params: { applicationId: IdBytes; items: KnownAttempt[]; leaseSeconds: number }): Promise<number | null> {
  const { items, applicationId } = params;
  if (new Set(items.map((i) => hex(i.attemptId))).size !== items.length) return null;
  const s = new Statements();
  // One timestamp for the whole transaction: windows, started_at and leases agree exactly.
  s.add('SET @now = NOW(6)');
  s.add('SELECT @now AS now');
  const window = (table: string, key: string) => `UPDATE ${table}
      SET window_starts = IF(window_started_at IS NULL OR window_started_at + INTERVAL 1 SECOND <= @now,
                             IF(? <= rate_per_second, ?, NULL),
                             IF(window_starts + ? <= rate_per_second, window_starts + ?, NULL)),
          window_started_at = IF(window_started_at IS NULL OR window_started_at + INTERVAL 1 SECOND <= @now, @now, window_started_at),
          pending_starts = pending_starts - ?
    WHERE ${key} = ?`;
  s.add(window('orbit_application_resources', 'application_id'), items.length, items.length, items.length, items.length, items.length, applicationId);
  const perQueue = [...countBy(items, (i) => hex(i.queueId))].sort(([a], [b]) => a.localeCompare(b));
  for (const [queueHex, n] of perQueue) s.add(window('orbit_queues', 'queue_id'), n, n, n, n, n, Buffer.from(queueHex, 'hex'));
  const byTask = [...items].sort((a, b) => Buffer.compare(a.taskId, b.taskId));
  s.add(
    `UPDATE orbit_tasks SET state = 'RUNNING', attempts = attempts + 1, updated_at = @now
      WHERE (task_id, current_attempt_id) IN (${byTask.map(() => '(?, ?)').join(', ')}) AND state = 'LEASED'`,
    ...byTask.flatMap((i) => [i.taskId, i.attemptId]),
  );
  s.addGuard(items.length, applicationId);
  const byAttempt = [...items].sort((a, b) => Buffer.compare(a.attemptId, b.attemptId));
  s.add(
    `UPDATE orbit_attempts SET state = 'RUNNING', started_at = @now, lease_expires_at = LEAST(@now + INTERVAL ? SECOND, deadline_at)
      WHERE (attempt_id, session_id) IN (${byAttempt.map(() => '(?, ?)').join(', ')}) AND state = 'RESERVED' AND lease_expires_at > @now`,
    params.leaseSeconds,
    ...byAttempt.flatMap((i) => [i.attemptId, i.sessionId]),
  );
  s.addGuard(items.length, applicationId);
  try {
    const results = await db.oneShot(s.sql.join(';\n'), s.params, { retries: 2 });
    const [row] = results[1] as Array<Row & { now: string }>;
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

const json = (value: unknown) => (value === undefined ? null : JSON.stringify(value));

/**
 * Finishes every item with a terminal task state (a success, a cancellation, or a failure that
 * is not to be retried - the outcomes that do not depend on the task's other facts), or nothing.
 * True when done; false when the careful path must decide.
 */
export async function attemptFinishFast(db: Database, params: { applicationId: IdBytes; items: KnownResult[] }): Promise<boolean> {
  const { items, applicationId } = params;
  if (new Set(items.map((i) => hex(i.attemptId))).size !== items.length) return false;
  const s = new Statements();
  s.add('SET @now = NOW(6)');
  s.add(
    `UPDATE orbit_application_resources SET unfinished_tasks = unfinished_tasks - ?, active_attempts = active_attempts - ? WHERE application_id = ?`,
    items.length,
    items.length,
    applicationId,
  );
  const perQueue = [...countBy(items, (i) => hex(i.queueId))].sort(([a], [b]) => a.localeCompare(b));
  for (const [queueHex, n] of perQueue) {
    s.add('UPDATE orbit_queues SET unfinished_tasks = unfinished_tasks - ?, active_attempts = active_attempts - ? WHERE queue_id = ?', n, n, Buffer.from(queueHex, 'hex'));
  }
  const byTask = [...items].sort((a, b) => Buffer.compare(a.taskId, b.taskId));
  const cases = (value: (i: KnownResult) => unknown) => ({ sql: `CASE task_id ${byTask.map(() => 'WHEN ? THEN ?').join(' ')} END`, params: byTask.flatMap((i) => [i.taskId, value(i)]) });
  const state = cases((i) => i.taskState);
  const result = cases((i) => json(i.result));
  const error = cases((i) => json(i.error));
  s.add(
    `UPDATE orbit_tasks
        SET state = ${state.sql}, current_attempt_id = NULL, finished_at = @now, updated_at = @now,
            result = COALESCE(${result.sql}, result), error = COALESCE(${error.sql}, error)
      WHERE (task_id, current_attempt_id) IN (${byTask.map(() => '(?, ?)').join(', ')}) AND state = 'RUNNING'`,
    ...state.params,
    ...result.params,
    ...error.params,
    ...byTask.flatMap((i) => [i.taskId, i.attemptId]),
  );
  s.addGuard(items.length, applicationId);
  const byAttempt = [...items].sort((a, b) => Buffer.compare(a.attemptId, b.attemptId));
  s.add(
    `UPDATE orbit_attempts SET state = CASE attempt_id ${byAttempt.map(() => 'WHEN ? THEN ?').join(' ')} END, finished_at = @now
      WHERE (attempt_id, session_id) IN (${byAttempt.map(() => '(?, ?)').join(', ')}) AND state = 'RUNNING' AND lease_expires_at > @now`,
    ...byAttempt.flatMap((i) => [i.attemptId, i.attemptState]),
    ...byAttempt.flatMap((i) => [i.attemptId, i.sessionId]),
  );
  s.addGuard(items.length, applicationId);
  const perKey = [...countBy(items, (i) => (i.resourceKey === null ? null : `${hex(i.queueId)}/${i.resourceKey}`))].sort(([a], [b]) => a.localeCompare(b));
  for (const [key, n] of perKey) {
    const slash = key.indexOf('/');
    s.add('UPDATE orbit_key_permits SET holders = holders - ?, updated_at = @now WHERE queue_id = ? AND resource_key = ?', n, Buffer.from(key.slice(0, slash), 'hex'), key.slice(slash + 1));
  }
  try {
    await db.oneShot(s.sql.join(';\n'), s.params, { retries: 2 });
    return true;
  } catch (error) {
    if (isFastPathMiss(error)) return false;
    throw error;
  }
}

/**
 * A guard fired (ER_BAD_NULL_ERROR), a counter would have gone below zero
 * (ER_DATA_OUT_OF_RANGE), or deadlocks outlasted the retries: the careful path decides.
 */
function isFastPathMiss(error: unknown): boolean {
  const errno = (error as { errno?: number } | null)?.errno;
  return errno === 1048 || errno === 1690 || isRetryableTransactionError(error);
}
