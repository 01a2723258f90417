/**
 * Operator operations on a task: cancel (tasks:cancel), resolve (tasks:review) and retry
 * (tasks:submit). Each is an idempotent mutation with an audit record and an event, in one
 * transaction that locks the application row, the queue row, then the task (and its attempt).
 */
import { OrbitError, notFound } from '../../errors.ts';
import { idToHex, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { auditInsert } from '../records/audit.ts';
import { usageAdjust, permitRelease } from '../quotas/usage-writes.ts';
import { eventInsert } from '../records/events.ts';
import { idempotentMutation, type ReceiptIdentity } from '../records/receipts.ts';
import { taskFind, taskGetVisible, toTask, type Task, type TaskWithQueue } from './tasks.ts';
import { sql } from '../database/sql.ts';
import type { Database, Queryable, Transaction } from '../database/database.ts';
import type { TaskRow } from '../database/schema.ts';
import { lockRows } from '../database/lock-order.ts';
import { applicationRowLock } from '../quotas/application-resources.ts';
import { OPERATOR_RETRYABLE_STATES, afterOperatorRetry, afterResolve, type ResolveOutcome, type TaskState } from '../../domain/task-transitions.ts';
import { millisToSql, sqlToMillis } from '../../time.ts';
import { applicationFull, queueFull } from './admission.ts';
import { namespaceRowsLock } from '../quotas/namespace-resources.ts';
import { UnfinishedRoom } from '../../domain/admission.ts';
import type { QueueRow } from '../database/schema.ts';
import { cancelledError, errorAfterResolve } from '../../domain/task-errors.ts';

/**
 * What a decision needs of the task row it locked (`error`: what the decision replaces, named in
 * its event; the attempts and deadline columns: what a retry makes of the task).
 */
type LockedTask = Pick<
  TaskRow,
  | 'state'
  | 'current_attempt_id'
  | 'resource_key'
  | 'cancel_requested'
  | 'error'
  | 'attempts'
  | 'max_attempts'
  | 'deadline_seconds'
  | 'created_at'
  | 'deadline_at'
>;

/**
 * Lock order: application row → namespace row → queue row → task row. The task's queue never changes, so the
 * plain read that found it is good for choosing which queue row to lock. Answers the task row
 * and the room for unfinished tasks the two locked rows leave (what a retry is admitted by).
 */
async function lockTask(tx: Transaction, task: TaskWithQueue): Promise<{ locked: LockedTask; room: UnfinishedRoom }> {
  const app = await applicationRowLock(tx, task.application_id);
  const namespaces = await namespaceRowsLock(tx, [task.namespace_id]);
  const [queue] = await tx.rows<Pick<QueueRow, 'unfinished_tasks' | 'max_unfinished_tasks'>>(
    sql`SELECT unfinished_tasks, max_unfinished_tasks FROM orbit_queues WHERE queue_id = ${task.queue_id} ${lockRows('queue')}`,
  );
  const [locked] = await tx.rows<LockedTask>(sql`
    SELECT state, current_attempt_id, resource_key, cancel_requested, error, attempts, max_attempts, deadline_seconds, created_at, deadline_at
      FROM orbit_tasks WHERE task_id = ${task.task_id} ${lockRows('task')}`);
  if (!locked || !queue) throw notFound(`task ${idToHex(task.task_id)}`);
  return { locked, room: new UnfinishedRoom(app, namespaces, [[idToHex(task.queue_id), queue, idToHex(task.namespace_id)]]) };
}

async function snapshot(tx: Queryable, principal: Principal, taskId: IdBytes): Promise<Task> {
  const row = await taskFind(tx, principal.namespaceId, taskId);
  if (!row) throw notFound(`task ${idToHex(taskId)}`);
  return toTask(row, principal.namespace);
}

/** The task after the decision, with its audit record and event (written under the application row's lock). */
async function record(
  tx: Queryable,
  params: TaskDecisionParams,
  what: {
    action: string;
    eventType: string;
    before: LockedTask;
    after: (task: Task) => Record<string, unknown>;
    data: (task: Task) => Record<string, unknown>;
  },
): Promise<Task> {
  const { principal } = params;
  const task = await snapshot(tx, principal, params.taskId);
  await auditInsert(tx, {
    principal,
    action: what.action,
    resourceType: 'task',
    resource: task.task_id,
    reason: params.reason,
    requestId: params.requestId,
    idempotencyKey: params.receipt.key,
    before: { state: what.before.state },
    after: what.after(task),
  });
  await eventInsert(tx, {
    applicationId: principal.applicationId,
    namespaceId: principal.namespaceId,
    type: what.eventType,
    subject: task.task_id,
    // The same facts as every task lifecycle event (task-events.ts), then the decision's own.
    data: {
      task_id: task.task_id,
      queue: task.queue,
      ...(task.schedule_id === undefined ? {} : { schedule_id: task.schedule_id, scheduled_for: task.scheduled_for }),
      ...what.data(task),
      // A decision that replaced the task's error keeps it in the task's history (task-errors.ts).
      ...(what.before.error !== null && JSON.stringify(task.error) !== what.before.error ? { previous_error: JSON.parse(what.before.error) as unknown } : {}),
    },
    queue: task.queue,
  });
  return task;
}

export interface TaskDecisionParams {
  principal: Principal;
  requestId: string;
  receipt: ReceiptIdentity;
  taskId: IdBytes;
  reason: string;
}

/**
 * WAITING or NEEDS_REVIEW → CANCELLED at once; LEASED → the reservation is released and the
 * task CANCELLED; RUNNING → only the intent is saved (`cancel_requested`, with the reason, which
 * the task's error names when the worker's answer ends it CANCELLED) and the worker is told;
 * the attempt keeps its concurrency until its authoritative result or lease-expiry recovery.
 */
export async function taskCancel(db: Database, params: TaskDecisionParams): Promise<{ task: Task; deduplicated: boolean }> {
  const { principal } = params;
  const found = await taskGetVisible(db, principal, params.taskId);
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    const { locked } = await lockTask(tx, found);
    const error = JSON.stringify(cancelledError(params.reason));
    let eventType = 'task.cancelled';
    switch (locked.state) {
      case 'WAITING':
      // Writes in the lock order (lock-order.ts): counters (application, queue), task, attempt, permit.
      case 'NEEDS_REVIEW':
        await usageAdjust(tx, found.application_id, { queueId: found.queue_id, namespaceId: found.namespace_id }, { unfinished: -1 });
        await tx.exec(
          sql`UPDATE orbit_tasks SET state = 'CANCELLED', finished_at = NOW(6), error = ${error}, updated_at = NOW(6) WHERE task_id = ${found.task_id}`,
        );
        break;
      case 'LEASED': {
        const attemptId = locked.current_attempt_id;
        if (attemptId === null) throw new OrbitError('INTERNAL', 'a LEASED task without an attempt');
        await usageAdjust(tx, found.application_id, { queueId: found.queue_id, namespaceId: found.namespace_id }, { unfinished: -1, active: -1, pending: -1 });
        await tx.exec(sql`
          UPDATE orbit_tasks SET state = 'CANCELLED', current_attempt_id = NULL, finished_at = NOW(6), error = ${error}, updated_at = NOW(6)
           WHERE task_id = ${found.task_id}`);
        const released = await tx.exec(
          sql`UPDATE orbit_attempts SET state = 'RELEASED', finished_at = NOW(6) WHERE attempt_id = ${attemptId} AND state = 'RESERVED'`,
        );
        // Rolls the whole transaction back, counters included.
        if (released.affectedRows !== 1) throw new OrbitError('INTERNAL', 'a LEASED task whose attempt is not reserved');
        await permitRelease(tx, locked.resource_key === null ? null : { queue: idToHex(found.queue_id), resourceKey: locked.resource_key });
        break;
      }
      case 'RUNNING':
        eventType = 'task.cancel_requested';
        // The latest reason: a second :cancel while the worker has not answered yet restates it.
        await tx.exec(sql`UPDATE orbit_tasks SET cancel_requested = 1, cancel_reason = ${params.reason}, updated_at = NOW(6) WHERE task_id = ${found.task_id}`);
        break;
      default:
        throw new OrbitError('STATE_CONFLICT', `task ${idToHex(found.task_id)} is ${locked.state} and cannot be cancelled`, {
          details: { state: locked.state },
        });
    }
    const task = await record(tx, params, {
      action: 'task.cancel',
      eventType,
      before: locked,
      after: (t) => ({ state: t.state, cancel_requested: t.cancel_requested }),
      data: (t) => ({ queue: t.queue, state: t.state, previous_state: locked.state }),
    });
    return { response: task, resourceId: found.task_id };
  });
  return { task: response, deduplicated };
}

export interface TaskResolveParams extends TaskDecisionParams {
  outcome: ResolveOutcome;
  result: unknown;
  error: unknown;
}

/**
 * NEEDS_REVIEW → SUCCEEDED, FAILED, or back to WAITING (claimable now, with one more attempt
 * allowed). The error becomes what task-errors.ts says (none, or the resolution's); a result
 * given with `succeeded` or `failed` becomes the task's result.
 */
export async function taskResolve(db: Database, params: TaskResolveParams): Promise<{ task: Task; deduplicated: boolean }> {
  const { principal } = params;
  const found = await taskGetVisible(db, principal, params.taskId);
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    const { locked } = await lockTask(tx, found);
    if (locked.state !== 'NEEDS_REVIEW') {
      throw new OrbitError('STATE_CONFLICT', `task ${idToHex(found.task_id)} is ${locked.state}; only NEEDS_REVIEW tasks can be resolved`, {
        details: { state: locked.state },
      });
    }
    const json = (value: unknown) => (value === undefined ? null : JSON.stringify(value));
    const { state } = afterResolve(params.outcome);
    const decided = errorAfterResolve(params.outcome, params.reason, params.error);
    const error = decided === null ? null : JSON.stringify(decided);
    if (state === 'WAITING') {
      await tx.exec(sql`
        UPDATE orbit_tasks SET state = 'WAITING', available_at = NOW(6), cancel_requested = 0, cancel_reason = NULL, error = ${error},
               max_attempts = GREATEST(max_attempts, attempts + 1), updated_at = NOW(6)
         WHERE task_id = ${found.task_id}`);
    } else {
      await usageAdjust(tx, found.application_id, { queueId: found.queue_id, namespaceId: found.namespace_id }, { unfinished: -1 });
      await tx.exec(sql`
        UPDATE orbit_tasks SET state = ${state}, result = COALESCE(${json(params.result)}, result), error = ${error},
               finished_at = NOW(6), updated_at = NOW(6)
         WHERE task_id = ${found.task_id}`);
    }
    const task = await record(tx, params, {
      action: 'task.resolve',
      eventType: 'task.resolved',
      before: locked,
      after: (t) => ({ state: t.state, outcome: params.outcome }),
      data: (t) => ({ queue: t.queue, state: t.state, outcome: params.outcome }),
    });
    return { response: task, resourceId: found.task_id };
  });
  return { task: response, deduplicated };
}

export interface TaskRetryParams extends TaskDecisionParams {
  /** The server's clock now (the new deadline counts from it, as a submission's does). */
  nowMs: number;
}

/**
 * FAILED, EXPIRED or CANCELLED → WAITING, admitted like a submission: the application's and the
 * queue's `max_unfinished_tasks` are checked under their row locks (APPLICATION_FULL first, as
 * admission decides), and a refusal writes nothing - no counter, no task change, no receipt.
 * The finished task may be pruned meanwhile (retention); then it is 404.
 */
export async function taskRetry(db: Database, params: TaskRetryParams): Promise<{ task: Task; deduplicated: boolean }> {
  const { principal } = params;
  const found = await taskGetVisible(db, principal, params.taskId);
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    const { locked, room } = await lockTask(tx, found);
    if (!OPERATOR_RETRYABLE_STATES.has(locked.state as TaskState)) {
      throw new OrbitError('STATE_CONFLICT', `task ${idToHex(found.task_id)} is ${locked.state}; only FAILED, EXPIRED and CANCELLED tasks can be retried`, {
        details: { state: locked.state },
      });
    }
    const full = room.full(idToHex(found.queue_id));
    if (full === 'application') throw applicationFull(room.heldByOthersFloors(idToHex(found.queue_id)));
    if (full === 'queue') throw queueFull(found.queue_name);
    const next = afterOperatorRetry(
      {
        attempts: locked.attempts,
        maxAttempts: locked.max_attempts,
        deadlineSeconds: locked.deadline_seconds,
        createdAtMs: sqlToMillis(locked.created_at),
        deadlineAtMs: sqlToMillis(locked.deadline_at),
      },
      params.nowMs,
    );
    // Writes in the lock order: counters (application, queue), then the task.
    await usageAdjust(tx, found.application_id, { queueId: found.queue_id, namespaceId: found.namespace_id }, { unfinished: 1 });
    await tx.exec(sql`
      UPDATE orbit_tasks SET state = ${next.state}, available_at = ${millisToSql(next.availableAtMs)}, deadline_at = ${millisToSql(next.deadlineAtMs)},
             deadline_seconds = ${next.deadlineSeconds}, max_attempts = ${next.maxAttempts}, finished_at = NULL, result = NULL, error = NULL, cancel_requested = 0, cancel_reason = NULL,
             current_attempt_id = NULL, updated_at = NOW(6)
       WHERE task_id = ${found.task_id}`);
    const task = await record(tx, params, {
      action: 'task.retry',
      eventType: 'task.retried',
      before: locked,
      after: (t) => ({ state: t.state }),
      data: (t) => ({ state: t.state, previous_state: locked.state }),
    });
    return { response: task, resourceId: found.task_id };
  });
  return { task: response, deduplicated };
}
