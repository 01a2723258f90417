import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { invalidArgument, notFound } from '../../errors.ts';
import { hexToId } from '../../ids.ts';
import { canAccessQueue } from '../../domain/principal.ts';
import { SCHEDULE_DEFAULTS, TASK_DEFAULTS } from '../../domain/limits.ts';
import { LAST_POINT_MS, triggerProblem, type Trigger } from '../../domain/schedule-points.ts';
import type { components } from '../../generated/openapi.ts';
import { scheduleCreate, scheduleGetVisible, scheduleList, scheduleSetState, toSchedule, type ScheduleDefinition } from '../../store/schedules/schedules.ts';
import { DEFAULT_PAGE_SIZE, decodeCursor, encodeCursor } from '../cursor.ts';
import { receiptIdentity } from './receipt-identity.ts';

type ScheduleHandlers = Pick<Handlers<RequestContext>, 'createSchedule' | 'getSchedule' | 'listSchedules' | 'pauseSchedule' | 'resumeSchedule'>;
type CreateScheduleBody = components['schemas']['CreateScheduleRequest'];

/**
 * The checks the schema cannot express, each naming its field, and the defaults filled in; the
 * normalized content is what the idempotency identity covers (leaving out a default and sending
 * it are the same request).
 */
function definitionOf(body: CreateScheduleBody): { definition: ScheduleDefinition; normalized: Record<string, unknown> } {
  const { reason: _reason, ...rest } = body;
  if ((body.cron === undefined) === (body.interval_seconds === undefined)) {
    throw invalidArgument(
      'cron',
      body.cron === undefined ? 'give exactly one of cron and interval_seconds (neither was given)' : 'give exactly one of cron and interval_seconds, not both',
    );
  }
  const timezone = body.timezone ?? SCHEDULE_DEFAULTS.timezone;
  const trigger: Trigger =
    body.cron !== undefined ? { kind: 'cron', expression: body.cron, timezone } : { kind: 'interval', seconds: body.interval_seconds as number };
  // The zone is checked for interval schedules too: a typo should not wait for a switch to cron.
  const problem = triggerProblem(trigger.kind === 'interval' ? { kind: 'cron', expression: '* * * * *', timezone } : trigger);
  if (problem) throw invalidArgument(problem.field, problem.message);
  let startAtMs: number | null = null;
  if (body.start_at !== undefined) {
    startAtMs = Date.parse(body.start_at);
    if (!Number.isFinite(startAtMs) || !validCalendarTime(body.start_at)) throw invalidArgument('start_at', 'is not a valid RFC 3339 time');
    // Year 0000, or an offset carrying 9999-12-31 into year 10000 in UTC: neither the column nor
    // the Schedule's start_at (RFC 3339, UTC) can hold it.
    if (startAtMs < FIRST_STORABLE_MS || startAtMs > LAST_POINT_MS) throw invalidArgument('start_at', 'is outside the years 0001-9999 in UTC');
  }
  const definition: ScheduleDefinition = {
    name: body.name,
    trigger,
    timezone,
    payload: body.payload,
    priority: body.priority ?? TASK_DEFAULTS.priority,
    resourceKey: body.resource_key ?? null,
    maxAttempts: body.max_attempts ?? TASK_DEFAULTS.max_attempts,
    deadlineSeconds: body.deadline_seconds ?? TASK_DEFAULTS.deadline_seconds,
    onUnknownOutcome: body.on_unknown_outcome ?? TASK_DEFAULTS.on_unknown_outcome,
    misfirePolicy: body.misfire_policy ?? SCHEDULE_DEFAULTS.misfire_policy,
    misfireWindowSeconds: body.misfire_window_seconds ?? SCHEDULE_DEFAULTS.misfire_window_seconds,
    startAtMs,
  };
  const normalized = {
    ...rest,
    timezone,
    priority: definition.priority,
    max_attempts: definition.maxAttempts,
    deadline_seconds: definition.deadlineSeconds,
    on_unknown_outcome: definition.onUnknownOutcome,
    misfire_policy: definition.misfirePolicy,
    misfire_window_seconds: definition.misfireWindowSeconds,
    start_at: startAtMs === null ? null : new Date(startAtMs).toISOString(),
  };
  return { definition, normalized };
}

/**
 * The first instant a DATETIME(6) column and an RFC 3339 UTC time both hold (in year 0000 they
 * disagree - RFC 3339 has a 0000-02-29, MariaDB does not); the last is LAST_POINT_MS.
 */
const FIRST_STORABLE_MS = Date.parse('0001-01-01T00:00:00.000Z');

/** Date.parse accepts 2026-02-30 and rolls it over; a time that names a day that does not exist is refused. */
function validCalendarTime(text: string): boolean {
  const [y, m, d] = text.slice(0, 10).split('-').map(Number) as [number, number, number];
  const [hh, mm, ss] = text.slice(11, 19).split(':').map(Number) as [number, number, number];
  const days = new Date(Date.UTC(y, m, 0)).getUTCDate();
  return m >= 1 && m <= 12 && d >= 1 && d <= days && hh <= 23 && mm <= 59 && ss <= 59;
}

export function scheduleHandlers(deps: AppDeps): ScheduleHandlers {
  type StateInput = Parameters<ScheduleHandlers['pauseSchedule']>[0] | Parameters<ScheduleHandlers['resumeSchedule']>[0];
  function setState(input: StateInput, ctx: RequestContext, operation: 'pauseSchedule' | 'resumeSchedule', to: 'PAUSED' | 'ACTIVE') {
    const principal = ctx.principal();
    return scheduleSetState(deps.db, {
      principal,
      requestId: ctx.requestId,
      receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], operation, { schedule_id: input.path.schedule_id }, input.body),
      scheduleId: hexToId(input.path.schedule_id),
      reason: input.body.reason,
      to,
    });
  }

  return {
    async createSchedule(input, ctx) {
      const principal = ctx.principal();
      const { definition, normalized } = definitionOf(input.body);
      return scheduleCreate(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'createSchedule', { queue: input.path.queue }, normalized),
        queueName: input.path.queue,
        reason: input.body.reason,
        nowMs: deps.clock.now(),
        definition,
      });
    },
    async getSchedule(input, ctx) {
      const principal = ctx.principal();
      return toSchedule(await scheduleGetVisible(deps.db, principal, hexToId(input.path.schedule_id)), principal.namespace);
    },
    async listSchedules(input, ctx) {
      const principal = ctx.principal();
      const name = input.path.queue;
      const queueId = canAccessQueue(principal, name) ? await deps.queueIds.lookup(deps.db, principal.namespaceId, name) : null;
      if (!queueId) throw notFound(`queue "${name}"`);
      const limit = input.query.limit ?? DEFAULT_PAGE_SIZE;
      const { schedules, more } = await scheduleList(deps.db, { principal, queueId, after: decodeCursor(input.query.cursor) ?? '', limit });
      const last = schedules.at(-1);
      return more && last ? { schedules, next_cursor: encodeCursor(last.name) } : { schedules };
    },
    pauseSchedule: (input, ctx) => setState(input, ctx, 'pauseSchedule', 'PAUSED'),
    resumeSchedule: (input, ctx) => setState(input, ctx, 'resumeSchedule', 'ACTIVE'),
  };
}
