/**
 * What the schedule loop does, one round at a time. Due schedules are found with a plain read
 * across applications (no lock), grouped by application, and fired in one transaction per
 * application:
 *
 *   SELECT due schedule rows … FOR UPDATE SKIP LOCKED        schedule level: a row another process
 *                                                            is firing (or an operator is pausing)
 *                                                            is passed over, never waited for
 *   SELECT the application row … FOR UPDATE                  application level
 *   SELECT their queue rows … FOR UPDATE (ascending id)      queue level
 *   -- decide in this process: planRound for each schedule, admitting fires one by one against
 *   -- the exact room of both rows, in trigger-point order, stopping a schedule at its first refusal
 *   UPDATE schedule rows (by id, locked above); UPDATE the application and queue counters;
 *   INSERT the tasks; COMMIT                                 one round trip
 *
 * A fire is admitted exactly like a direct submission: it needs room at both levels, and a
 * refusal leaves nothing for that trigger point. The refused point and every point after it
 * stay pending (next_fire_at stays there), the waiting due points are counted once each in
 * deferred_full, and the next round tries again. A full quota never skips anything: only the
 * misfire policy does, for points older than the window (domain/schedule-points.ts).
 *
 * A trigger point makes at most one task: the task's identity is (schedule_id, scheduled_for), a
 * unique key of orbit_tasks, and it is written in the same transaction that moves the schedule's
 * head past that point while holding the schedule row. A crash before the COMMIT leaves nothing;
 * after it, the head has moved. A schedule on a disabled application or namespace is not fired
 * (it stays due, and its points are handled by the policy once it is enabled again).
 */
import { sql, type SQL } from 'drizzle-orm';
import { idToHex, newId, type IdBytes } from '../../ids.ts';
import { countWaiting, planRound, type MisfirePolicy } from '../../domain/schedule-points.ts';
import { millisToSql, sqlToMillis } from '../../time.ts';
import { valueList, type Database } from '../database/database.ts';
import { distinctIdsAscending, lockRows } from '../database/lock-order.ts';
import type { QueueRow, ScheduleRow } from '../database/schema.ts';
import { applicationRowLock } from '../quotas/application-resources.ts';
import { counterAdjustStatements } from '../quotas/counters.ts';
import { queueNamesOf } from '../quotas/queues.ts';
import { eventInsertStatement, type EventRecord } from '../records/events.ts';
import { taskEvent, taskEventsEnabled } from '../records/task-events.ts';
import { anchorOfRow, triggerOfRow } from './schedules.ts';

/** At most this many trigger points of one schedule are looked at in one round, and this many tasks made. */
export const MAX_POINTS_PER_ROUND = 1000;
export const MAX_FIRES_PER_ROUND = 100;

export interface FiringCounts {
  fired: number;
  /** Trigger points newly counted in deferred_full. */
  deferred: number;
  skipped: number;
}

/** Due, ACTIVE schedules of enabled applications and namespaces, oldest trigger point first. */
export async function schedulesDue(db: Database, limit: number): Promise<Array<Pick<ScheduleRow, 'application_id' | 'schedule_id'>>> {
  return db.rows(sql`
    SELECT /* scatter: schedules-due */ s.application_id, s.schedule_id
      FROM orbit_schedules s
      JOIN orbit_namespaces n ON n.namespace_id = s.namespace_id AND n.enabled = 1
      JOIN orbit_applications a ON a.application_id = s.application_id AND a.enabled = 1
     WHERE s.state = 'ACTIVE' AND s.next_fire_at <= NOW(6)
     ORDER BY s.next_fire_at
     LIMIT ${limit}`);
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

/** Fires the due trigger points of these schedules of one application, in one transaction. */
export async function scheduleFireApplication(db: Database, applicationId: IdBytes, scheduleIds: IdBytes[]): Promise<FiringCounts> {
  return db.transaction(async (tx) => {
    const counts: FiringCounts = { fired: 0, deferred: 0, skipped: 0 };
    const rows = await tx.rows<LockedSchedule>(sql`
      SELECT schedule_id, namespace_id, queue_id, cron_expression, interval_seconds, timezone, payload, priority, resource_key, max_attempts,
             deadline_seconds, on_unknown_outcome, misfire_policy, misfire_window_seconds, start_at, next_fire_at, last_fire_at,
             deferred_through, created_at, NOW(6) AS now
        FROM orbit_schedules
       WHERE application_id = ${applicationId} AND schedule_id IN (${valueList(distinctIdsAscending(scheduleIds))})
         AND state = 'ACTIVE' AND next_fire_at <= NOW(6)
       ORDER BY next_fire_at, schedule_id
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
    const queueIds = distinctIdsAscending(due.map((r) => r.queue_id));
    const queueRows = await tx.rows<Pick<QueueRow, 'queue_id' | 'unfinished_tasks' | 'max_unfinished_tasks'>>(sql`
      SELECT queue_id, unfinished_tasks, max_unfinished_tasks FROM orbit_queues
       WHERE queue_id IN (${valueList(queueIds)}) ORDER BY queue_id ${lockRows('queue')}`);
    let appRoom = BigInt(app.max_unfinished_tasks) - BigInt(app.unfinished_tasks);
    const queueRoom = new Map(queueRows.map((q) => [idToHex(q.queue_id), BigInt(q.max_unfinished_tasks) - BigInt(q.unfinished_tasks)]));
    const perQueue = new Map<string, { queueId: IdBytes; count: number }>();
    const taskValues: SQL[] = [];
    const events: EventRecord[] = [];
    const names = taskEventsEnabled() ? await queueNamesOf(tx, queueIds) : new Map<string, string>();
    const changes: Change[] = [];

    for (const row of due) {
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
      for (const step of steps) {
        if (step.kind === 'skip') {
          change.skipped += step.count;
          change.head = step.nextHead;
          continue;
        }
        if (appRoom <= 0n || (queueRoom.get(queueKey) ?? 0n) <= 0n) {
          // Full at one level or both: this point and the ones after it wait for the next round.
          const waiting = countWaiting(trigger, anchorMs, step.at, nowMs, change.deferredThrough, MAX_POINTS_PER_ROUND);
          change.deferred += waiting.count;
          change.deferredThrough = waiting.through;
          break;
        }
        appRoom -= 1n;
        queueRoom.set(queueKey, (queueRoom.get(queueKey) ?? 0n) - 1n);
        const entry = perQueue.get(queueKey) ?? { queueId: row.queue_id, count: 0 };
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
      if (change.fired + change.skipped + change.deferred > 0) changes.push(change);
      counts.fired += change.fired;
      counts.skipped += change.skipped;
      counts.deferred += change.deferred;
    }
    if (changes.length === 0) return counts;

    // Lock order: schedule rows (locked above, by id), the application row, queue rows by
    // ascending id, then the new task rows - one round trip, with the COMMIT after it.
    const total = counts.fired;
    const statements: SQL[] = changes.map(
      (c) => sql`UPDATE orbit_schedules
         SET next_fire_at = ${c.head === null ? null : millisToSql(c.head)},
             last_fire_at = ${c.lastFire === null ? sql`last_fire_at` : millisToSql(c.lastFire)},
             deferred_through = ${c.deferredThrough === null ? null : millisToSql(c.deferredThrough)},
             fired = fired + ${c.fired}, skipped_misfire = skipped_misfire + ${c.skipped}, deferred_full = deferred_full + ${c.deferred},
             updated_at = NOW(6)
       WHERE schedule_id = ${c.row.schedule_id}`,
    );
    if (total > 0) {
      statements.push(
        ...counterAdjustStatements(
          applicationId,
          [...perQueue.values()].map((q) => ({ queueId: q.queueId, delta: { unfinished: q.count } })),
        ),
      );
      statements.push(sql`INSERT INTO orbit_tasks
        (task_id, application_id, namespace_id, queue_id, state, priority, resource_key, payload, attempts, max_attempts,
         on_unknown_outcome, cancel_requested, idempotency_key, created_at, available_at, deadline_at, updated_at, schedule_id, scheduled_for)
        VALUES ${sql.join(taskValues, sql`, `)}`);
      if (events.length > 0) statements.push(eventInsertStatement(events));
    }
    await tx.batch(sql.join(statements, sql`;\n`));
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
