/**
 * What the schedule loop does, one round at a time. Applications with due schedules are found
 * with a plain read across applications (no lock), in rotation (the loop says where the last
 * round stopped), and each application's due schedules are fired in one transaction:
 *
 *   SELECT due schedule rows … FOR UPDATE SKIP LOCKED        schedule level: a row another process
 *                                                            is firing (or an operator is pausing)
 *                                                            is passed over, never waited for
 *   SELECT the application row … FOR UPDATE                  application level
 *   SELECT their queue rows … FOR UPDATE (ascending id)      queue level
 *   -- decide in this process: planRound for each schedule, admitting fires one by one against
 *   -- the exact room of both rows, in trigger-point order, stopping a schedule at its first refusal
 *   UPDATE schedule rows (by id, locked above); UPDATE the application and queue counters;
 *   INSERT the tasks; COMMIT                                 one round trip (more only when the
 *                                                            payloads would not fit in one packet)
 *
 * A fire is admitted exactly like a direct submission: it needs room at both levels, and a
 * refusal leaves nothing for that trigger point. The refused point and every point after it
 * stay pending (next_fire_at stays there), the waiting due points are counted once each in
 * deferred_full, and the next round tries again. A full quota never skips anything: only the
 * misfire policy does, for points older than the window (domain/schedule-points.ts).
 *
 * How much one round writes is bounded by bytes as well as by points: the tasks one
 * application's round makes carry their schedule's payload (up to 256 KiB, twice that once
 * escaped), so a round stops making tasks once they would pass one packet's worth
 * (`maxTaskBytes`, the server's max_allowed_packet); the points not reached stay pending, exactly
 * like the ones past MAX_FIRES_PER_ROUND, and the next round goes on from them. (Before, 40
 * schedules with such payloads falling due together made one ~20 MiB packet the server refused,
 * and every round failed on them.)
 *
 * A trigger point makes at most one task: the task's identity is (schedule_id, scheduled_for), a
 * unique key of orbit_tasks, and it is written in the same transaction that moves the schedule's
 * head past that point while holding the schedule row. A crash before the COMMIT leaves nothing;
 * after it, the head has moved. A schedule on a disabled application or namespace is not fired
 * (it stays due, and its points are handled by the policy once it is enabled again). A schedule
 * whose round failed waits until its `retry_at` (scheduleRecordFailure) and is not due before.
 */
import { sql, type SQL } from '../database/sql.ts';
import { idToHex, newId, type IdBytes } from '../../ids.ts';
import { countWaiting, failureRetryDelayMs, planRound, type MisfirePolicy } from '../../domain/schedule-points.ts';
import { millisToSql, sqlToMillis } from '../../time.ts';
import { rowsStatement, valueList, type BatchStatement, type Database, type Queryable } from '../database/database.ts';
import { valueBytesBound } from '../database/packets.ts';
import { distinctIdsAscending, lockRows } from '../database/lock-order.ts';
import type { QueueRow, ScheduleRow } from '../database/schema.ts';
import { namespaceRowsLock } from '../quotas/namespace-resources.ts';
import { applicationRowLock } from '../quotas/application-resources.ts';
import { usageDeltaStatements } from '../quotas/usage-writes.ts';
import { queueNamesOf } from '../quotas/queues.ts';
import { eventInsertStatement, type EventRecord } from '../records/events.ts';
import { taskEvent, taskEventsEnabled } from '../records/task-events.ts';
import { anchorOfRow, triggerOfRow } from './schedules.ts';
import { UnfinishedRoom } from '../../domain/admission.ts';

/** At most this many trigger points of one schedule are looked at in one round, and this many tasks made. */
export const MAX_POINTS_PER_ROUND = 1000;
export const MAX_FIRES_PER_ROUND = 100;
/** Due schedules of one application fired in one transaction, at most (the oldest first; the rest next round). */
export const DUE_SCHEDULES_PER_APPLICATION = 100;
/** What a task row takes in a statement besides its payload (ids, options, times), at most. */
const TASK_ROW_BYTES = 1024;

export interface FiringCounts {
  fired: number;
  /** Trigger points newly counted in deferred_full. */
  deferred: number;
  skipped: number;
}

/** Due, ACTIVE, not backed off: the condition on `orbit_schedules s` (constant SQL text). */
const DUE = sql.raw(`s.state = 'ACTIVE' AND s.next_fire_at <= NOW(6) AND (s.retry_at IS NULL OR s.retry_at <= NOW(6))`);

/**
 * Applications of enabled namespaces with due schedules, in rotation: those after `after` (by
 * id) first, then from the lowest again - so every application with due work is reached in
 * turn, and one whose rounds fail or that has many due schedules cannot keep the others out.
 */
export async function applicationsWithDueSchedules(db: Queryable, params: { after: IdBytes | null; limit: number }): Promise<IdBytes[]> {
  const wrapped = params.after === null ? sql`0` : sql`s.application_id <= ${params.after}`;
  const rows = await db.rows<{ application_id: Buffer }>(sql`
    SELECT /* scatter: schedules-due */ s.application_id, ${wrapped} AS wrapped
      FROM orbit_schedules s
      JOIN orbit_namespaces n ON n.namespace_id = s.namespace_id AND n.enabled = 1
      JOIN orbit_applications a ON a.application_id = s.application_id AND a.enabled = 1
     WHERE ${DUE}
     GROUP BY s.application_id
     ORDER BY wrapped, s.application_id
     LIMIT ${params.limit}`);
  return rows.map((r) => r.application_id);
}

/** The ids of one application's due schedules, oldest point first (a plain read: which ones to fire one by one). */
export async function dueScheduleIds(db: Queryable, applicationId: IdBytes, limit = DUE_SCHEDULES_PER_APPLICATION): Promise<IdBytes[]> {
  const rows = await db.rows<Pick<ScheduleRow, 'schedule_id'>>(sql`
    SELECT s.schedule_id FROM orbit_schedules s
     WHERE s.application_id = ${applicationId} AND ${DUE}
     ORDER BY s.next_fire_at, s.schedule_id
     LIMIT ${limit}`);
  return rows.map((r) => r.schedule_id);
}

/**
 * Records that a schedule's round failed: the cause (shown as `last_error`), one more
 * consecutive failure, and when to try again (domain: failureRetryDelayMs), in database time.
 * The schedule row alone, locked first (schedule level); nothing else changes.
 */
export async function scheduleRecordFailure(db: Database, params: { applicationId: IdBytes; scheduleId: IdBytes; message: string }): Promise<void> {
  await db.transaction(async (tx) => {
    const [row] = await tx.rows<Pick<ScheduleRow, 'consecutive_failures'> & { now: string }>(sql`
      SELECT consecutive_failures, NOW(6) AS now FROM orbit_schedules
       WHERE application_id = ${params.applicationId} AND schedule_id = ${params.scheduleId} ${lockRows('schedule')}`);
    if (!row) return;
    const failures = row.consecutive_failures + 1;
    const retryAt = millisToSql(sqlToMillis(row.now) + failureRetryDelayMs(failures));
    await tx.finish([
      sql`UPDATE orbit_schedules
             SET last_error = ${[...params.message].slice(0, 1024).join('')}, last_error_at = ${row.now}, consecutive_failures = ${failures}, retry_at = ${retryAt}
           WHERE schedule_id = ${params.scheduleId}`,
    ]);
  });
}

type LockedSchedule = Pick<
  ScheduleRow,
  | 'schedule_id'
  | 'namespace_id'
  | 'queue_id'
  | 'cron_expression'
  | 'interval_seconds'
  | 'timezone'
  | 'payload'
  | 'priority'
  | 'resource_key'
  | 'max_attempts'
  | 'deadline_seconds'
  | 'on_unknown_outcome'
  | 'misfire_policy'
  | 'misfire_window_seconds'
  | 'start_at'
  | 'next_fire_at'
  | 'last_fire_at'
  | 'deferred_through'
  | 'created_at'
  | 'consecutive_failures'
> & { now: string };

interface Change {
  row: LockedSchedule;
  head: number | null;
  lastFire: number | null;
  deferredThrough: number | null;
  fired: number;
  skipped: number;
  deferred: number;
}

/**
 * Fires the due trigger points of one application's due schedules (or only of `scheduleIds`), in
 * one transaction, making tasks until their bytes would pass `maxTaskBytes` (default: one
 * packet's worth, db.packets) - at least one task, so every round moves on.
 */
export async function scheduleFireApplication(
  db: Database,
  applicationId: IdBytes,
  options: { scheduleIds?: readonly IdBytes[]; maxTaskBytes?: number } = {},
): Promise<FiringCounts> {
  const only =
    options.scheduleIds && options.scheduleIds.length > 0 ? sql` AND s.schedule_id IN (${valueList(distinctIdsAscending(options.scheduleIds))})` : sql``;
  const maxTaskBytes = options.maxTaskBytes ?? db.packets.budgetBytes;
  return db.transaction(async (tx) => {
    const counts: FiringCounts = { fired: 0, deferred: 0, skipped: 0 };
    const rows = await tx.rows<LockedSchedule>(sql`
      SELECT schedule_id, namespace_id, queue_id, cron_expression, interval_seconds, timezone, payload, priority, resource_key, max_attempts,
             deadline_seconds, on_unknown_outcome, misfire_policy, misfire_window_seconds, start_at, next_fire_at, last_fire_at,
             deferred_through, created_at, consecutive_failures, NOW(6) AS now
        FROM orbit_schedules s
       WHERE s.application_id = ${applicationId}${only} AND ${DUE}
       ORDER BY s.next_fire_at, s.schedule_id
       LIMIT ${DUE_SCHEDULES_PER_APPLICATION}
       ${lockRows('schedule', 'skip-locked')}`);
    if (rows.length === 0) return counts;
    // Disabled since the scan? Then not fired (a plain read: enabling and disabling take no
    // lock this transaction could wait for, and either order is a valid history).
    const enabled = await tx.rows<{ namespace_id: Buffer }>(sql`
      SELECT n.namespace_id FROM orbit_namespaces n JOIN orbit_applications a ON a.application_id = n.application_id
       WHERE n.namespace_id IN (${valueList(distinctIdsAscending(rows.map((r) => r.namespace_id)))}) AND n.enabled = 1
         AND a.application_id = ${applicationId} AND a.enabled = 1`);
    const enabledNamespaces = new Set(enabled.map((r) => idToHex(r.namespace_id)));
    const due = rows.filter((r) => enabledNamespaces.has(idToHex(r.namespace_id)));
    if (due.length === 0) return counts;

    const app = await applicationRowLock(tx, applicationId);
    const namespaces = await namespaceRowsLock(
      tx,
      due.map((r) => r.namespace_id),
    );
    const queueIds = distinctIdsAscending(due.map((r) => r.queue_id));
    const queueRows = await tx.rows<Pick<QueueRow, 'queue_id' | 'namespace_id' | 'unfinished_tasks' | 'max_unfinished_tasks'>>(sql`
      SELECT queue_id, namespace_id, unfinished_tasks, max_unfinished_tasks FROM orbit_queues
       WHERE queue_id IN (${valueList(queueIds)}) ORDER BY queue_id ${lockRows('queue')}`);
    const room = new UnfinishedRoom(
      app,
      namespaces,
      queueRows.map((q) => [idToHex(q.queue_id), q, idToHex(q.namespace_id)] as const),
    );
    const perQueue = new Map<string, { queueId: IdBytes; namespaceId: IdBytes; count: number }>();
    const taskValues: SQL[] = [];
    const events: EventRecord[] = [];
    const names = taskEventsEnabled() ? await queueNamesOf(tx, queueIds) : new Map<string, string>();
    const changes: Change[] = [];
    /** The bytes of the tasks made so far; past maxTaskBytes the round makes no more (the points wait). */
    let taskBytes = 0;
    let bytesUsedUp = false;

    for (const row of due) {
      if (bytesUsedUp) break;
      const nowMs = sqlToMillis(row.now);
      const trigger = triggerOfRow(row);
      const anchorMs = anchorOfRow(row);
      const change: Change = {
        row,
        head: sqlToMillis(row.next_fire_at as string),
        lastFire: null,
        deferredThrough: row.deferred_through === null ? null : sqlToMillis(row.deferred_through),
        fired: 0,
        skipped: 0,
        deferred: 0,
      };
      const steps = planRound({
        trigger,
        anchorMs,
        policy: row.misfire_policy as MisfirePolicy,
        windowMs: row.misfire_window_seconds * 1000,
        nowMs,
        headMs: change.head as number,
        maxPoints: MAX_POINTS_PER_ROUND,
        maxFires: MAX_FIRES_PER_ROUND,
      });
      const queueKey = idToHex(row.queue_id);
      const fireBytes = valueBytesBound(row.payload) + TASK_ROW_BYTES;
      for (const step of steps) {
        if (step.kind === 'skip') {
          change.skipped += step.count;
          change.head = step.nextHead;
          continue;
        }
        if (room.full(queueKey) !== null) {
          // Full at one level or both: this point and the ones after it wait for the next round.
          const waiting = countWaiting(trigger, anchorMs, step.at, nowMs, change.deferredThrough, MAX_POINTS_PER_ROUND);
          change.deferred += waiting.count;
          change.deferredThrough = waiting.through;
          break;
        }
        if (counts.fired + change.fired > 0 && taskBytes + fireBytes > maxTaskBytes) {
          // One packet's worth of tasks made: this point and the rest wait for the next round
          // (not deferred: nothing is full, the round is).
          bytesUsedUp = true;
          break;
        }
        taskBytes += fireBytes;
        room.take(queueKey);
        const entry = perQueue.get(queueKey) ?? { queueId: row.queue_id, namespaceId: row.namespace_id, count: 0 };
        entry.count += 1;
        perQueue.set(queueKey, entry);
        const taskId = newId(nowMs);
        taskValues.push(scheduledTaskValues(applicationId, row, taskId, step.at, nowMs));
        if (taskEventsEnabled()) {
          events.push(
            taskEvent(
              'task.submitted',
              {
                applicationId,
                namespaceId: row.namespace_id,
                taskId,
                queue: names.get(queueKey) ?? '',
                scheduleId: row.schedule_id,
                scheduledFor: millisToSql(step.at),
              },
              { priority: row.priority },
            ),
          );
        }
        change.fired += 1;
        change.lastFire = step.at;
        change.head = step.nextHead;
      }
      // A round that went through clears an earlier failure (its last_error goes away).
      if (change.fired + change.skipped + change.deferred > 0 || row.consecutive_failures > 0) changes.push(change);
      counts.fired += change.fired;
      counts.skipped += change.skipped;
      counts.deferred += change.deferred;
    }
    if (changes.length === 0) return counts;

    // Lock order: schedule rows (locked above, by id), the application row, queue rows by
    // ascending id, then the new task rows - one round trip, with the COMMIT after it.
    const total = counts.fired;
    const statements: BatchStatement[] = changes.map(
      (c) => sql`UPDATE orbit_schedules
         SET next_fire_at = ${c.head === null ? null : millisToSql(c.head)},
             last_fire_at = ${c.lastFire === null ? sql`last_fire_at` : millisToSql(c.lastFire)},
             deferred_through = ${c.deferredThrough === null ? null : millisToSql(c.deferredThrough)},
             fired = fired + ${c.fired}, skipped_misfire = skipped_misfire + ${c.skipped}, deferred_full = deferred_full + ${c.deferred},
             ${c.row.consecutive_failures > 0 ? sql`last_error = NULL, last_error_at = NULL, consecutive_failures = 0, retry_at = NULL,` : sql``}
             updated_at = NOW(6)
       WHERE schedule_id = ${c.row.schedule_id}`,
    );
    if (total > 0) {
      statements.push(
        ...usageDeltaStatements(
          applicationId,
          [...perQueue.values()].map((q) => ({ queueId: q.queueId, namespaceId: q.namespaceId, delta: { unfinished: q.count } })),
        ),
      );
      statements.push(
        rowsStatement(
          sql`INSERT INTO orbit_tasks
        (task_id, application_id, namespace_id, queue_id, state, priority, resource_key, payload, attempts, max_attempts,
         on_unknown_outcome, cancel_requested, idempotency_key, created_at, available_at, deadline_at, updated_at, schedule_id, scheduled_for)
        VALUES `,
          taskValues,
        ),
      );
      if (events.length > 0) statements.push(eventInsertStatement(events));
    }
    await tx.batch(statements);
    return counts;
  });
}

/**
 * The row of the task a trigger point makes: like a submission accepted now, plus its identity
 * (schedule_id, scheduled_for). Its idempotency_key column records where it came from; no
 * receipt is written (the unique trigger point is the identity, not a caller's key).
 */
function scheduledTaskValues(applicationId: IdBytes, row: LockedSchedule, taskId: IdBytes, atMs: number, nowMs: number): SQL {
  const created = millisToSql(nowMs);
  const deadline = millisToSql(nowMs + row.deadline_seconds * 1000);
  const origin = `schedule:${idToHex(row.schedule_id)}:${atMs}`;
  return sql`(${taskId}, ${applicationId}, ${row.namespace_id}, ${row.queue_id}, 'WAITING', ${row.priority}, ${row.resource_key}, ${row.payload},
    0, ${row.max_attempts}, ${row.on_unknown_outcome}, 0, ${origin}, ${created}, ${created}, ${deadline}, ${created}, ${row.schedule_id}, ${millisToSql(atMs)})`;
}
