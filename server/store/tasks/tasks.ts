/**
 * Task rows and their API shape; reads (get, list). Admission is in admission.ts, operator
 * operations (cancel, resolve, retry) in operator-operations.ts, the worker side in attempts.ts.
 */
import { notFound } from '../../errors.ts';
import { idToHex, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { sqlToRfc3339 } from '../../time.ts';
import type { components } from '../../generated/openapi.ts';
import { sql, type SQL } from '../database/sql.ts';
import { valueList, type Queryable } from '../database/database.ts';
import type { AttemptRow, QueueRow, TaskRow } from '../database/schema.ts';

export type Task = components['schemas']['Task'];
export type TaskState = components['schemas']['TaskState'];

/** A task as reads show it: the columns of TASK_COLUMNS, with its queue's name. */
export type TaskWithQueue = Pick<
  TaskRow,
  | 'task_id'
  | 'application_id'
  | 'namespace_id'
  | 'queue_id'
  | 'state'
  | 'priority'
  | 'resource_key'
  | 'payload'
  | 'attempts'
  | 'max_attempts'
  | 'on_unknown_outcome'
  | 'cancel_requested'
  | 'current_attempt_id'
  | 'created_at'
  | 'available_at'
  | 'deadline_at'
  | 'finished_at'
  | 'result'
  | 'error'
  | 'schedule_id'
  | 'scheduled_for'
> & { queue_name: QueueRow['name'] };

/** Columns of `orbit_tasks t JOIN orbit_queues q` (constant SQL text). */
const TASK_COLUMNS = sql.raw(`t.task_id, t.application_id, t.namespace_id, t.queue_id, q.name AS queue_name, t.state, t.priority,
  t.resource_key, t.payload, t.attempts, t.max_attempts, t.on_unknown_outcome, t.cancel_requested, t.current_attempt_id,
  t.created_at, t.available_at, t.deadline_at, t.finished_at, t.result, t.error, t.schedule_id, t.scheduled_for`);

/** The API shape; absent values are omitted, never null. */
export function toTask(row: TaskWithQueue, namespace: string): Task {
  const task: Task = {
    task_id: idToHex(row.task_id),
    queue: row.queue_name,
    namespace,
    // The columns hold only the values the API defines (every writer is in the store).
    state: row.state as TaskState,
    priority: row.priority,
    payload: JSON.parse(row.payload) as Task['payload'],
    attempts: row.attempts,
    max_attempts: row.max_attempts,
    on_unknown_outcome: row.on_unknown_outcome as Task['on_unknown_outcome'],
    cancel_requested: row.cancel_requested === 1,
    created_at: sqlToRfc3339(row.created_at),
    available_at: sqlToRfc3339(row.available_at),
    deadline_at: sqlToRfc3339(row.deadline_at),
  };
  if (row.resource_key !== null) task.resource_key = row.resource_key;
  if (row.finished_at !== null) task.finished_at = sqlToRfc3339(row.finished_at);
  if (row.result !== null) task.result = JSON.parse(row.result) as unknown;
  if (row.error !== null) task.error = JSON.parse(row.error) as unknown;
  if (row.schedule_id !== null) task.schedule_id = idToHex(row.schedule_id);
  if (row.scheduled_for !== null) task.scheduled_for = sqlToRfc3339(row.scheduled_for);
  return task;
}

/** A plain read (no lock). Transactions that change the task lock it afterwards, in lock order. */
export async function taskFind(db: Queryable, namespaceId: IdBytes, taskId: IdBytes): Promise<TaskWithQueue | null> {
  const [row] = await db.rows<TaskWithQueue>(sql`
    SELECT ${TASK_COLUMNS} FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id
     WHERE t.task_id = ${taskId} AND t.namespace_id = ${namespaceId}`);
  return row ?? null;
}

/** The task, or 404 when it is in another namespace or outside the credential's queue scope. */
export async function taskGetVisible(db: Queryable, principal: Principal, taskId: IdBytes): Promise<TaskWithQueue> {
  const row = await taskFind(db, principal.namespaceId, taskId);
  if (!row || (principal.queues !== '*' && !principal.queues.has(row.queue_name))) throw notFound(`task ${idToHex(taskId)}`);
  return row;
}

/** Oldest first (task ids grow with creation time); `after` is the last task id of the previous page. */
export async function taskList(
  db: Queryable,
  params: { queueId: IdBytes; state: TaskState | undefined; after: IdBytes | null; limit: number; namespace: string },
): Promise<{ tasks: Task[]; more: boolean }> {
  const where = [sql`t.queue_id = ${params.queueId}`];
  if (params.state !== undefined) where.push(sql`t.state = ${params.state}`);
  if (params.after !== null) where.push(sql`t.task_id > ${params.after}`);
  const rows = await db.rows<TaskWithQueue>(sql`
    SELECT ${TASK_COLUMNS} FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id
     WHERE ${sql.join(where, sql` AND `)} ORDER BY t.task_id LIMIT ${params.limit + 1}`);
  return { more: rows.length > params.limit, tasks: rows.slice(0, params.limit).map((row) => toTask(row, params.namespace)) };
}

/**
 * Newest first, across the queues named (`before`: the last task id of the previous page). Each
 * queue is one range of ix_orbit_tasks_queue_state (with a state) or ix_orbit_tasks_queue, read
 * backwards and cut at the page size, so a page of FAILED tasks among millions of finished ones
 * reads only what it shows. With several queues the ranges are merged on task ids alone (the
 * indexes cover them: no row is read, nothing large goes through the merge's temporary table),
 * then the page's rows are read by primary key - measured: 40 queues of 60 KB payloads, a page
 * of 100, 2.1 s when the merge carried whole rows, 0.02 s this way. The queue ids are the
 * namespace's own (the caller found them within the credential's scope).
 */
/** One queue's newest tasks, as a range of its index read backwards and cut at `take`. */
function newestRange(queueId: IdBytes, state: TaskState | undefined, before: IdBytes | null, take: number): SQL {
  const where = [sql`t.queue_id = ${queueId}`];
  if (state !== undefined) where.push(sql`t.state = ${state}`);
  if (before !== null) where.push(sql`t.task_id < ${before}`);
  return sql`WHERE ${sql.join(where, sql` AND `)} ORDER BY t.task_id DESC LIMIT ${take}`;
}

/** The ids of the newest `take` tasks across queues (exported for the plan test: index-only ranges). */
export function newestTaskIds(queueIds: readonly IdBytes[], state: TaskState | undefined, before: IdBytes | null, take: number): SQL {
  return sql`${sql.join(
    queueIds.map((queueId) => sql`(SELECT t.task_id FROM orbit_tasks t ${newestRange(queueId, state, before, take)})`),
    sql` UNION ALL `,
  )} ORDER BY task_id DESC LIMIT ${take}`;
}

export async function taskListNewest(
  db: Queryable,
  params: { queueIds: readonly IdBytes[]; state: TaskState | undefined; before: IdBytes | null; limit: number; namespace: string },
): Promise<{ tasks: Task[]; more: boolean }> {
  if (params.queueIds.length === 0) return { tasks: [], more: false };
  const take = params.limit + 1;
  const page = (rows: TaskWithQueue[]) => ({
    more: rows.length > params.limit,
    tasks: rows.slice(0, params.limit).map((row) => toTask(row, params.namespace)),
  });
  if (params.queueIds.length === 1) {
    const range = newestRange(params.queueIds[0] as IdBytes, params.state, params.before, take);
    return page(await db.rows<TaskWithQueue>(sql`SELECT ${TASK_COLUMNS} FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id ${range}`));
  }
  const ids = await db.rows<Pick<TaskRow, 'task_id'>>(newestTaskIds(params.queueIds, params.state, params.before, take));
  if (ids.length === 0) return { tasks: [], more: false };
  return page(
    await db.rows<TaskWithQueue>(sql`
      SELECT ${TASK_COLUMNS} FROM orbit_tasks t JOIN orbit_queues q ON q.queue_id = t.queue_id
       WHERE t.task_id IN (${valueList(ids.map((r) => r.task_id))}) ORDER BY t.task_id DESC`),
  );
}

/** An attempt as the API shows it (`node_id` from its session, absent once a closed session was pruned). */
export type Attempt = components['schemas']['Attempt'];

/** A task's attempts by number; the caller has checked the task is visible. */
export async function taskAttempts(db: Queryable, taskId: IdBytes): Promise<Attempt[]> {
  const rows = await db.rows<
    Pick<AttemptRow, 'attempt_id' | 'attempt_number' | 'state' | 'session_id' | 'claimed_at' | 'started_at' | 'finished_at' | 'lease_expires_at'> & {
      node_id: string | null;
    }
  >(sql`
    SELECT a.attempt_id, a.attempt_number, a.state, a.session_id, s.node_id, a.claimed_at, a.started_at, a.finished_at, a.lease_expires_at
      FROM orbit_attempts a LEFT JOIN orbit_worker_sessions s ON s.session_id = a.session_id
     WHERE a.task_id = ${taskId}
     ORDER BY a.attempt_number, a.attempt_id`);
  return rows.map((row) => {
    const attempt: Attempt = {
      attempt_id: idToHex(row.attempt_id),
      attempt_number: row.attempt_number,
      state: row.state as Attempt['state'],
      session_id: idToHex(row.session_id),
      claimed_at: sqlToRfc3339(row.claimed_at),
      lease_expires_at: sqlToRfc3339(row.lease_expires_at),
    };
    if (row.node_id !== null) attempt.node_id = row.node_id;
    if (row.started_at !== null) attempt.started_at = sqlToRfc3339(row.started_at);
    if (row.finished_at !== null) attempt.finished_at = sqlToRfc3339(row.finished_at);
    return attempt;
  });
}
