/**
 * Schedules: their rows, their API shape, and the management operations (create, read, list,
 * pause, resume). What the schedule loop does with them is in schedule-firing.ts.
 *
 * Management changes follow the lock order (lock-order.ts): the schedule row (schedule level),
 * then the application row (which the event feed's ordering rule asks for), then records. A
 * schedule's misfire policy is frozen: no operation here changes it.
 */
import { sql } from '../database/sql.ts';
import { OrbitError, notFound } from '../../errors.ts';
import { idToHex, newId, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { canAccessQueue } from '../../domain/principal.ts';
import { firstPoint, type MisfirePolicy, type Trigger } from '../../domain/schedule-points.ts';
import { millisToSql, sqlToMillis, sqlToRfc3339 } from '../../time.ts';
import type { components } from '../../generated/openapi.ts';
import { auditInsert } from '../records/audit.ts';
import { eventInsert } from '../records/events.ts';
import { stateChangeRecords } from '../records/state-changes.ts';
import { idempotentMutation, type ReceiptIdentity } from '../records/receipts.ts';
import { isDuplicateKeyError, type Database, type Queryable, type Transaction } from '../database/database.ts';
import { lockRows } from '../database/lock-order.ts';
import type { QueueRow, ScheduleRow } from '../database/schema.ts';
import { queueFind } from '../quotas/queues.ts';
import { applicationRowLock } from '../quotas/application-resources.ts';

export type Schedule = components['schemas']['Schedule'];

/** A schedule as this module reads it (every column), with its queue's name. */
export type StoredSchedule = ScheduleRow & { queue_name: QueueRow['name'] };

/** Columns of `orbit_schedules s JOIN orbit_queues q` (constant SQL text). */
const SCHEDULE_COLUMNS = sql.raw(`s.schedule_id, s.application_id, s.namespace_id, s.queue_id, q.name AS queue_name, s.name, s.cron_expression,
  s.interval_seconds, s.timezone, s.payload, s.priority, s.resource_key, s.max_attempts, s.deadline_seconds, s.on_unknown_outcome,
  s.misfire_policy, s.misfire_window_seconds, s.state, s.start_at, s.next_fire_at, s.last_fire_at, s.deferred_through, s.fired,
  s.skipped_misfire, s.deferred_full, s.created_at, s.updated_at, s.last_error, s.last_error_at, s.consecutive_failures, s.retry_at`);

/** The trigger a row describes. */
export function triggerOfRow(row: Pick<ScheduleRow, 'cron_expression' | 'interval_seconds' | 'timezone'>): Trigger {
  if (row.cron_expression !== null) return { kind: 'cron', expression: row.cron_expression, timezone: row.timezone };
  return { kind: 'interval', seconds: row.interval_seconds ?? 1 };
}

/** Where interval points are counted from (see firstPoint). */
export function anchorOfRow(row: Pick<ScheduleRow, 'cron_expression' | 'interval_seconds' | 'timezone' | 'created_at' | 'start_at'>): number {
  return firstPoint(triggerOfRow(row), sqlToMillis(row.created_at), row.start_at === null ? null : sqlToMillis(row.start_at)).anchorMs;
}

/** The API shape; absent values are omitted, never null. */
export function toSchedule(row: StoredSchedule, namespace: string): Schedule {
  const schedule: Schedule = {
    schedule_id: idToHex(row.schedule_id),
    queue: row.queue_name,
    namespace,
    name: row.name,
    timezone: row.timezone,
    payload: JSON.parse(row.payload) as Schedule['payload'],
    priority: row.priority,
    max_attempts: row.max_attempts,
    deadline_seconds: row.deadline_seconds,
    on_unknown_outcome: row.on_unknown_outcome as Schedule['on_unknown_outcome'],
    misfire_policy: row.misfire_policy as Schedule['misfire_policy'],
    misfire_window_seconds: row.misfire_window_seconds,
    state: row.state as Schedule['state'],
    fired: row.fired,
    skipped_misfire: row.skipped_misfire,
    deferred_full: row.deferred_full,
    created_at: sqlToRfc3339(row.created_at),
  };
  if (row.cron_expression !== null) schedule.cron = row.cron_expression;
  if (row.interval_seconds !== null) schedule.interval_seconds = row.interval_seconds;
  if (row.resource_key !== null) schedule.resource_key = row.resource_key;
  if (row.start_at !== null) schedule.start_at = sqlToRfc3339(row.start_at);
  if (row.next_fire_at !== null) schedule.next_fire_at = sqlToRfc3339(row.next_fire_at);
  if (row.last_fire_at !== null) schedule.last_fire_at = sqlToRfc3339(row.last_fire_at);
  if (row.consecutive_failures > 0 && row.last_error !== null && row.last_error_at !== null) {
    schedule.last_error = {
      message: row.last_error,
      occurred_at: sqlToRfc3339(row.last_error_at),
      consecutive_failures: row.consecutive_failures,
      retry_at: sqlToRfc3339(row.retry_at ?? row.last_error_at),
    };
  }
  return schedule;
}

/** What audit records and events say about a schedule: everything but the payload (which may be 256 KiB). */
function describe(schedule: Schedule): Record<string, unknown> {
  const { payload, fired: _f, skipped_misfire: _s, deferred_full: _d, next_fire_at: _n, last_fire_at: _l, last_error: _e, ...rest } = schedule;
  return { ...rest, payload_bytes: Buffer.byteLength(JSON.stringify(payload)) };
}

/** A schedule by id within a namespace; with `lock`, its row is locked (schedule level). */
async function scheduleFind(db: Queryable, namespaceId: IdBytes, scheduleId: IdBytes): Promise<StoredSchedule | null>;
async function scheduleFind(tx: Transaction, namespaceId: IdBytes, scheduleId: IdBytes, options: { lock: true }): Promise<StoredSchedule | null>;
async function scheduleFind(db: Queryable, namespaceId: IdBytes, scheduleId: IdBytes, options: { lock?: boolean } = {}): Promise<StoredSchedule | null> {
  // Locking reads lock one level at a time: the schedule row alone, then the plain join.
  if (options.lock) {
    const [locked] = await db.rows<Pick<ScheduleRow, 'schedule_id'>>(
      sql`SELECT schedule_id FROM orbit_schedules WHERE schedule_id = ${scheduleId} AND namespace_id = ${namespaceId} ${lockRows('schedule')}`,
    );
    if (!locked) return null;
  }
  const [row] = await db.rows<StoredSchedule>(sql`
    SELECT ${SCHEDULE_COLUMNS} FROM orbit_schedules s JOIN orbit_queues q ON q.queue_id = s.queue_id
     WHERE s.schedule_id = ${scheduleId} AND s.namespace_id = ${namespaceId}`);
  return row ?? null;
}

/** The schedule, or 404 when it is in another namespace or its queue is outside the credential's scope. */
export async function scheduleGetVisible(db: Queryable, principal: Principal, scheduleId: IdBytes): Promise<StoredSchedule> {
  const row = await scheduleFind(db, principal.namespaceId, scheduleId);
  if (!row || !canAccessQueue(principal, row.queue_name)) throw notFound(`schedule ${idToHex(scheduleId)}`);
  return row;
}

/** A validated schedule definition, defaults filled in (the handler checks the fields). */
export interface ScheduleDefinition {
  name: string;
  trigger: Trigger;
  /** The IANA zone cron points are computed in; kept as given for an interval schedule too. */
  timezone: string;
  payload: Record<string, unknown>;
  priority: number;
  resourceKey: string | null;
  maxAttempts: number;
  deadlineSeconds: number;
  onUnknownOutcome: 'retry' | 'review';
  misfirePolicy: MisfirePolicy;
  misfireWindowSeconds: number;
  startAtMs: number | null;
}

export async function scheduleCreate(
  db: Database,
  params: {
    principal: Principal;
    requestId: string;
    receipt: ReceiptIdentity;
    queueName: string;
    reason: string;
    nowMs: number;
    definition: ScheduleDefinition;
  },
): Promise<{ schedule: Schedule; deduplicated: boolean }> {
  const { principal, definition: d } = params;
  if (!canAccessQueue(principal, params.queueName)) throw notFound(`queue "${params.queueName}"`);
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    // Queues are never deleted, so a plain read is enough to know it exists.
    const queue = await queueFind(tx, principal.namespaceId, params.queueName);
    if (!queue) throw notFound(`queue "${params.queueName}"`);
    const scheduleId = newId(params.nowMs);
    const { firstMs } = firstPoint(d.trigger, params.nowMs, d.startAtMs);
    const created = millisToSql(params.nowMs);
    try {
      await tx.exec(sql`
        INSERT INTO orbit_schedules
          (schedule_id, application_id, namespace_id, queue_id, name, cron_expression, interval_seconds, timezone, payload, priority,
           resource_key, max_attempts, deadline_seconds, on_unknown_outcome, misfire_policy, misfire_window_seconds, state, start_at,
           next_fire_at, created_at, updated_at)
        VALUES (${scheduleId}, ${principal.applicationId}, ${principal.namespaceId}, ${queue.queue_id}, ${d.name},
                ${d.trigger.kind === 'cron' ? d.trigger.expression : null}, ${d.trigger.kind === 'interval' ? d.trigger.seconds : null},
                ${d.timezone}, ${JSON.stringify(d.payload)}, ${d.priority}, ${d.resourceKey},
                ${d.maxAttempts}, ${d.deadlineSeconds}, ${d.onUnknownOutcome}, ${d.misfirePolicy}, ${d.misfireWindowSeconds}, 'ACTIVE',
                ${d.startAtMs === null ? null : millisToSql(d.startAtMs)}, ${firstMs === null ? null : millisToSql(firstMs)}, ${created}, ${created})`);
    } catch (error) {
      if (isDuplicateKeyError(error)) {
        throw new OrbitError('STATE_CONFLICT', `queue "${params.queueName}" already has a schedule named "${d.name}"`, { details: { field: 'name' } });
      }
      throw error;
    }
    // Lock order: the schedule row (just inserted; its unique name may have waited for another
    // create of the same name), then the application row, under which events are written.
    await applicationRowLock(tx, principal.applicationId);
    const row = await scheduleFind(tx, principal.namespaceId, scheduleId);
    if (!row) throw new OrbitError('INTERNAL', 'the new schedule is missing');
    const schedule = toSchedule(row, principal.namespace);
    await auditInsert(tx, {
      principal,
      action: 'schedule.create',
      resourceType: 'schedule',
      resource: schedule.schedule_id,
      reason: params.reason,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      before: null,
      after: describe(schedule),
    });
    await eventInsert(tx, {
      applicationId: principal.applicationId,
      namespaceId: principal.namespaceId,
      type: 'schedule.created',
      subject: schedule.schedule_id,
      data: describe(schedule),
      queue: schedule.queue,
    });
    return { response: schedule, resourceId: scheduleId };
  });
  return { schedule: response, deduplicated };
}

/** Pause (ACTIVE → PAUSED) or resume (PAUSED → ACTIVE). The other direction from the current state is STATE_CONFLICT. */
export async function scheduleSetState(
  db: Database,
  params: { principal: Principal; requestId: string; receipt: ReceiptIdentity; scheduleId: IdBytes; reason: string; to: 'PAUSED' | 'ACTIVE' },
): Promise<{ schedule: Schedule; deduplicated: boolean }> {
  const { principal } = params;
  const verb = params.to === 'PAUSED' ? 'pause' : 'resume';
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    // Lock order: the schedule row, then the application row (events), then records.
    const row = await scheduleFind(tx, principal.namespaceId, params.scheduleId, { lock: true });
    if (!row || !canAccessQueue(principal, row.queue_name)) throw notFound(`schedule ${idToHex(params.scheduleId)}`);
    if (row.state === params.to) {
      throw new OrbitError('STATE_CONFLICT', `the schedule is already ${row.state}`, { details: { field: 'state', state: row.state } });
    }
    await applicationRowLock(tx, principal.applicationId);
    await tx.exec(sql`UPDATE orbit_schedules SET state = ${params.to}, updated_at = NOW(6) WHERE schedule_id = ${row.schedule_id}`);
    const after = toSchedule({ ...row, state: params.to }, principal.namespace);
    await stateChangeRecords(tx, {
      principal,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      reason: params.reason,
      resourceType: 'schedule',
      resource: after.schedule_id,
      action: `schedule.${verb}`,
      from: row.state,
      to: params.to,
      event: {
        type: params.to === 'PAUSED' ? 'schedule.paused' : 'schedule.resumed',
        data: { queue: after.queue, name: after.name, state: after.state, ...(after.next_fire_at ? { next_fire_at: after.next_fire_at } : {}) },
        queue: after.queue,
      },
    });
    return { response: after, resourceId: row.schedule_id };
  });
  return { schedule: response, deduplicated };
}

/** Schedules of one queue by name; `after` is the last name of the previous page. */
export async function scheduleList(
  db: Queryable,
  params: { principal: Principal; queueId: IdBytes; after: string; limit: number },
): Promise<{ schedules: Schedule[]; more: boolean }> {
  const rows = await db.rows<StoredSchedule>(sql`
    SELECT ${SCHEDULE_COLUMNS} FROM orbit_schedules s JOIN orbit_queues q ON q.queue_id = s.queue_id
     WHERE s.queue_id = ${params.queueId} AND s.name > ${params.after} ORDER BY s.name LIMIT ${params.limit + 1}`);
  return { more: rows.length > params.limit, schedules: rows.slice(0, params.limit).map((row) => toSchedule(row, params.principal.namespace)) };
}
