/**
 * Task lifecycle events (`task.submitted`, `task.started`, `task.retry_scheduled`,
 * `task.succeeded`, `task.failed`, `task.needs_review`, `task.cancelled`, `task.expired`; the
 * operator's `task.cancel_requested`, `task.cancelled` and `task.resolved` are written with their
 * audit records, in tasks/operator-operations.ts). Each is written by the store in
 * the transaction of the transition it describes, after that transaction took the application
 * row (events.ts: the feed's ordering rule), so a reader of the feed sees a task's events in the
 * order they happened and never one without its transition.
 *
 * `ORBIT_TASK_EVENTS=off` leaves them out (the benchmark measures what they cost); management
 * events are written either way.
 */
import { sql, type SQL } from '../database/sql.ts';
import { idToHex, type IdBytes } from '../../ids.ts';
import { sqlToRfc3339 } from '../../time.ts';
import type { EventRecord } from './events.ts';
import type { TaskState } from '../tasks/tasks.ts';

let enabled = true;

/** Set once at start-up from the configuration (ORBIT_TASK_EVENTS). */
export function setTaskEventsEnabled(on: boolean): void {
  enabled = on;
}

export function taskEventsEnabled(): boolean {
  return enabled;
}

/** What every task event says about its task. */
export interface TaskFactsForEvent {
  applicationId: IdBytes;
  namespaceId: IdBytes;
  taskId: IdBytes;
  queue: string;
  scheduleId?: IdBytes | null;
  /** DATETIME(6) text, as read. */
  scheduledFor?: string | null;
}

export function taskEvent(type: string, facts: TaskFactsForEvent, more: Record<string, unknown> = {}): EventRecord {
  const data: Record<string, unknown> = { task_id: idToHex(facts.taskId), queue: facts.queue };
  if (facts.scheduleId) data.schedule_id = idToHex(facts.scheduleId);
  if (facts.scheduledFor) data.scheduled_for = sqlToRfc3339(facts.scheduledFor);
  return {
    applicationId: facts.applicationId,
    namespaceId: facts.namespaceId,
    type,
    subject: idToHex(facts.taskId),
    data: { ...data, ...more },
    queue: facts.queue,
  };
}

/** The event of an attempt's end: which transition the task made. RESERVED attempts that end put the task back unchanged: no event. */
export function settlementEventType(attemptWasRunning: boolean, taskState: TaskState): string | null {
  switch (taskState) {
    case 'WAITING':
      return attemptWasRunning ? 'task.retry_scheduled' : null;
    case 'SUCCEEDED':
      return 'task.succeeded';
    case 'FAILED':
      return 'task.failed';
    case 'NEEDS_REVIEW':
      return 'task.needs_review';
    case 'CANCELLED':
      return 'task.cancelled';
    case 'EXPIRED':
      return 'task.expired';
    default:
      return null;
  }
}

/** `DATETIME(6)` → RFC 3339 UTC with milliseconds, in SQL (as sqlToRfc3339 does in TypeScript). */
const rfc3339 = (column: string) => `CONCAT(DATE_FORMAT(${column}, '%Y-%m-%dT%H:%i:%s.'), LPAD(FLOOR(MICROSECOND(${column}) / 1000), 3, '0'), 'Z')`;

/**
 * One event per task, built in SQL from the task rows as this transaction left them, for the
 * one-round-trip paths that know only ids (the claim, the fast Start and result): `type` and
 * `more` are SQL over the task row `t` (e.g. `t.attempts` for the attempt number after a start).
 * Same data as `taskEvent`. Send it after the task rows were written, with the application row
 * held (the feed's ordering rule); the rows it reads are locked by the same transaction.
 *
 * One INSERT … SELECT over the task rows. (Tried: INSERT … VALUES with a lookup per column, so
 * InnoDB would take exactly as many sequence numbers as rows - an INSERT … SELECT reserves them
 * in growing blocks and leaves the rest unused; it cost a third of the drain, see
 * bench/RESULTS.md. The event watcher copes with the unused numbers instead.)
 */
export function taskEventsFromRows(applicationId: IdBytes, taskIds: readonly IdBytes[], type: SQL, more: SQL = sql`JSON_OBJECT()`): SQL {
  return sql`INSERT INTO orbit_events (event_id, application_id, namespace_id, type, subject, data, occurred_at, queue_name)
    SELECT UNHEX(REPLACE(UUID(), '-', '')), t.application_id, t.namespace_id, ${type}, LOWER(HEX(t.task_id)),
           JSON_MERGE_PATCH(
             JSON_OBJECT('task_id', LOWER(HEX(t.task_id)), 'queue', q.name),
             ${more},
             IF(t.schedule_id IS NULL, JSON_OBJECT(), JSON_OBJECT('schedule_id', LOWER(HEX(t.schedule_id)), 'scheduled_for', ${sql.raw(rfc3339('t.scheduled_for'))}))
           ),
           NOW(6), q.name
      FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id
     WHERE t.application_id = ${applicationId} AND t.task_id IN (${sql.join(
       [...taskIds].map((id) => sql`${id}`),
       sql`, `,
     )})
     ORDER BY t.task_id`;
}
