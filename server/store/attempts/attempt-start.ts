/**
 * Start: RESERVED → RUNNING under both one-second start windows - its two paths and the choice
 * between them, in one place.
 *
 * - `startFast`: one round trip for the common case. Both windows are advanced in SQL exactly as
 *   start-window.ts decides, tasks LEASED → RUNNING and attempts RESERVED → RUNNING, each
 *   followed by a `ROW_COUNT()` guard (usage-writes.ts `rowCountGuard`). A full window, a lease that ran
 *   out, a duplicate Start or a cancelled reservation fails a guard, and nothing is written.
 * - `startCareful`: locks in lock order (application row → namespace rows → queue rows → task rows → attempt
 *   rows), grants in order while both windows have room, and answers each item (`started`,
 *   `rate_limited`, lease lost).
 * - `startAttempts`: the fast path, then the careful one when it misses. The differential test
 *   (test/integration/hot-path-differential.test.ts) runs both on generated scenarios and asserts
 *   the same answers and rows.
 *
 * Either way the application row is locked first and never held across a round trip to this
 * process in the fast path.
 */
import { idToHex as hex, type IdBytes } from '../../ids.ts';
import { floorRetryAfterMs, namespaceStartsInWindow, startFloorLedger, tryStart, windowOfRow, type WindowState } from '../../domain/start-window.ts';
import { leaseEndMs } from '../../domain/leases.ts';
import { leaseEndSql } from './lease-end.ts';
import { millisToSql, sqlToMillis } from '../../time.ts';
import { sql, type SQL } from '../database/sql.ts';
import { updateEachRow } from '../database/set-based.ts';
import { countByQueue, rowCountGuard, startWindowsGuardedStatements, usageStatements } from '../quotas/usage-writes.ts';
import { valueList, type Database } from '../database/database.ts';
import { taskEventsEnabled, taskEventsFromRows } from '../records/task-events.ts';
import { heldBySession, lockForAttempts, type AttemptRef, type LockedAttempt, type Locked } from './attempts.ts';
import { isFastPathMiss, rowsAsExpected, type KnownAttempt, type PathTaken } from './fast-path-guards.ts';

export type StartAnswer =
  | { kind: 'started'; leaseExpiresAtMs: number; duplicate: boolean }
  | { kind: 'rate_limited'; retryAfterMs: number }
  | { kind: 'lease_lost' };

export interface StartItem extends AttemptRef {
  sessionId: IdBytes;
}

/**
 * Grants Starts in order while both windows have room. A Start of an attempt already running
 * in this session answers `started` again and is not counted; a refused Start leaves the
 * reservation as it is (the worker retries within its lease).
 */
export async function startCareful(db: Database, params: { applicationId: IdBytes; items: StartItem[]; leaseSeconds: number }): Promise<StartAnswer[]> {
  return db.transaction(async (tx) => {
    const locked = (await lockForAttempts(tx, params.applicationId, params.items)) as Locked;
    const { nowMs, nowSql } = locked;
    let appWindow = windowOfRow(locked.app);
    // The rate floors (domain/floors.ts): each namespace's starts use its own reservation first.
    const floors = startFloorLedger(
      {
        ratePerSecond: locked.app.rate_per_second,
        window: appWindow,
        reservedRate: BigInt(locked.app.reserved_rate_per_second),
        windowReservedStarts: BigInt(locked.app.window_reserved_starts),
      },
      [...locked.namespaces].map(
        ([k, n]) =>
          [
            k,
            {
              reserved: BigInt(n.reserved_rate_per_second),
              windowStarts: BigInt(namespaceStartsInWindow(n, locked.app.window_started_at)),
            },
          ] as const,
      ),
      nowMs,
    );
    const queueWindows = new Map([...locked.queues].map(([k, q]) => [k, windowOfRow(q)]));
    const granted: Array<{ attempt: LockedAttempt; item: StartItem; leaseExpiresAtMs: number }> = [];
    const answers: StartAnswer[] = params.items.map((item) => {
      const attempt = locked.attempts.get(hex(item.attemptId));
      if (!heldBySession(attempt, item.sessionId, nowMs)) return { kind: 'lease_lost' };
      if (attempt.state === 'RUNNING') return { kind: 'started', leaseExpiresAtMs: sqlToMillis(attempt.lease_expires_at), duplicate: true };
      if (attempt.state !== 'RESERVED') return { kind: 'lease_lost' };
      const queueKey = hex(attempt.queue_id);
      const queueRow = locked.queues.get(queueKey);
      if (!queueRow) return { kind: 'lease_lost' };
      const namespaceKey = hex(item.namespaceId);
      const app = tryStart(appWindow, locked.app.rate_per_second, nowMs);
      const queue = tryStart(queueWindows.get(queueKey) as WindowState, queueRow.rate_per_second, nowMs);
      const floorRoom = floors.room(namespaceKey) >= 1n;
      if (!app.granted || !queue.granted || !floorRoom) {
        const retryAfterMs = Math.max(
          app.granted ? 0 : app.retryAfterMs,
          queue.granted ? 0 : queue.retryAfterMs,
          floorRoom ? 0 : floorRetryAfterMs(appWindow, nowMs),
        );
        return { kind: 'rate_limited', retryAfterMs };
      }
      floors.take(namespaceKey);
      appWindow = app.window;
      queueWindows.set(queueKey, queue.window);
      const leaseExpiresAtMs = leaseEndMs(nowMs, params.leaseSeconds, sqlToMillis(attempt.deadline_at));
      attempt.state = 'RUNNING';
      attempt.lease_expires_at = millisToSql(leaseExpiresAtMs);
      granted.push({ attempt, item, leaseExpiresAtMs });
      return { kind: 'started', leaseExpiresAtMs, duplicate: false };
    });
    if (granted.length === 0) return answers;
    // The windows as decided above (rows locked), and the granted starts' pending starts given back.
    const statements: SQL[] = usageStatements(
      params.applicationId,
      { pending: -granted.length, window: appWindow },
      countByQueue(granted.map((g) => g.item)).map((q) => ({
        ...q,
        change: { pending: -q.count, window: queueWindows.get(hex(q.queueId)) as WindowState },
        starts: q.count,
      })),
    );
    statements.push(
      sql`UPDATE orbit_tasks SET state = 'RUNNING', attempts = attempts + 1, updated_at = ${nowSql} WHERE task_id IN (${valueList(granted.map((g) => g.attempt.task_id))})`,
    );
    statements.push(
      updateEachRow({
        table: 'orbit_attempts',
        key: ['attempt_id'],
        columns: ['state', 'started_at', 'lease_expires_at'],
        rows: [...granted]
          .sort((a, b) => Buffer.compare(a.attempt.attempt_id, b.attempt.attempt_id))
          .map((g) => ({ key: [g.attempt.attempt_id], values: [sql`'RUNNING'`, sql`${nowSql}`, sql`${millisToSql(g.leaseExpiresAtMs)}`] })),
      }),
    );
    if (taskEventsEnabled()) {
      // The same statement as the fast Start's (after the task rows above were updated).
      const taskIds = granted.map((g) => g.attempt.task_id);
      statements.push(taskEventsFromRows(params.applicationId, taskIds, sql`'task.started'`, sql`JSON_OBJECT('attempt_number', t.attempts)`));
    }
    await tx.finish(statements);
    return answers;
  });
}

/**
 * Starts a group of one application: the fast path when nothing is unusual, else the careful
 * one (`path: 'careful'` skips the fast path - for the differential test). Answers in item order.
 */
export async function startAttempts(
  db: Database,
  params: { applicationId: IdBytes; items: Array<StartItem & KnownAttempt>; leaseSeconds: number },
  options: { path?: 'choose' | 'careful' } = {},
): Promise<{ answers: StartAnswer[]; path: PathTaken }> {
  if (options.path !== 'careful') {
    const nowMs = await startFast(db, params);
    if (nowMs !== null) {
      return {
        answers: params.items.map(
          (i): StartAnswer => ({ kind: 'started', leaseExpiresAtMs: leaseEndMs(nowMs, params.leaseSeconds, i.deadlineAtMs), duplicate: false }),
        ),
        path: 'fast',
      };
    }
  }
  return { answers: await startCareful(db, params), path: 'careful' };
}

/**
 * Starts every item, or nothing. Both windows are checked and advanced in SQL exactly as
 * start-window.ts does: a window that has ended is replaced by one opened now; the starts must
 * fit under rate_per_second. Returns the database time of the start, or null when the careful
 * path must decide.
 */
export async function startFast(db: Database, params: { applicationId: IdBytes; items: KnownAttempt[]; leaseSeconds: number }): Promise<number | null> {
  const { items, applicationId } = params;
  if (new Set(items.map((i) => hex(i.attemptId))).size !== items.length) return null;
  // One timestamp for the whole transaction: windows, started_at and leases agree exactly.
  const s: SQL[] = [sql`SET @now = NOW(6)`, sql`SELECT @now AS now`];
  // Both windows advanced in SQL as domain/start-window.ts decides, guarded (usage-writes.ts).
  s.push(...startWindowsGuardedStatements(applicationId, countByQueue(items), sql.raw('@now')));
  const byTask = [...items].sort((a, b) => Buffer.compare(a.taskId, b.taskId));
  s.push(
    sql`UPDATE orbit_tasks SET state = 'RUNNING', attempts = attempts + 1, updated_at = @now
      WHERE ${rowsAsExpected(
        'task_id',
        'current_attempt_id',
        byTask.map((i) => [i.taskId, i.attemptId] as const),
      )} AND state = 'LEASED'`,
    rowCountGuard(items.length, applicationId),
  );
  const byAttempt = [...items].sort((a, b) => Buffer.compare(a.attemptId, b.attemptId));
  s.push(
    sql`UPDATE orbit_attempts SET state = 'RUNNING', started_at = @now, lease_expires_at = ${leaseEndSql(sql.raw('@now'), params.leaseSeconds)}
      WHERE ${rowsAsExpected(
        'attempt_id',
        'session_id',
        byAttempt.map((i) => [i.attemptId, i.sessionId] as const),
      )} AND state = 'RESERVED' AND lease_expires_at > @now`,
    rowCountGuard(items.length, applicationId),
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
