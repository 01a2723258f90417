/**
 * Trigger points of a schedule, and what one round of the schedule loop does with the due ones.
 * Pure: times are epoch milliseconds in database time, and the caller (the store) applies the
 * plan under its locks, admitting fires one by one until the quota refuses one.
 *
 * Cron expressions are evaluated by croner (never by hand), in the schedule's IANA time zone,
 * with daylight-saving changes handled as croner defines them: a local time that a spring-forward
 * gap skips moves to the first instant after the gap; a local time that a fall-back repeats fires
 * once for a fixed hour (the first occurrence) and in both hours for a wildcard hour.
 */
import { Cron } from 'croner';

export type MisfirePolicy = 'skip' | 'fire_once' | 'fire_all';

export type Trigger = { kind: 'cron'; expression: string; timezone: string } | { kind: 'interval'; seconds: number };

/** Why a trigger definition is refused, naming the field; null when it is fine. */
export function triggerProblem(trigger: Trigger): { field: 'cron' | 'timezone' | 'interval_seconds'; message: string } | null {
  if (trigger.kind === 'interval') return null;
  if (!isKnownTimeZone(trigger.timezone)) return { field: 'timezone', message: `"${trigger.timezone}" is not an IANA time zone name` };
  const fields = trigger.expression.trim().split(/\s+/);
  if (fields.length !== 5 && fields.length !== 6) {
    return {
      field: 'cron',
      message: `must have 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field; it has ${fields.length}`,
    };
  }
  try {
    cronOf(trigger);
  } catch (error) {
    return { field: 'cron', message: error instanceof Error ? error.message : String(error) };
  }
  return null;
}

export function isKnownTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

const crons = new Map<string, Cron>();

/** A parsed cron, reused (parsing is the costly part; `nextRun(from)` keeps no state between calls). */
function cronOf(trigger: Extract<Trigger, { kind: 'cron' }>): Cron {
  const key = `${trigger.timezone} ${trigger.expression}`;
  let cron = crons.get(key);
  if (!cron) {
    cron = new Cron(trigger.expression, { timezone: trigger.timezone, paused: true });
    if (crons.size > 10_000) crons.clear();
    crons.set(key, cron);
  }
  return cron;
}

/** The last instant a trigger point may have: DATETIME(6) and RFC 3339 in UTC both end with year 9999. */
export const LAST_POINT_MS = Date.parse('9999-12-31T23:59:59.999Z');

/** The first trigger point strictly after `afterMs`, or null when there is none (before the end of year 9999). */
export function pointAfter(trigger: Trigger, afterMs: number, anchorMs: number): number | null {
  let next: number | null;
  if (trigger.kind === 'interval') {
    const step = trigger.seconds * 1000;
    next = afterMs < anchorMs ? anchorMs : anchorMs + (Math.floor((afterMs - anchorMs) / step) + 1) * step;
  } else {
    next = cronOf(trigger).nextRun(new Date(afterMs))?.getTime() ?? null;
  }
  return next !== null && next <= LAST_POINT_MS ? next : null;
}

/**
 * The schedule's first trigger point. Interval: `start_at` when it is given and not in the past,
 * else one interval after creation; later points are that anchor plus whole intervals. Cron: the
 * first point at or after `start_at`, or after creation.
 */
export function firstPoint(trigger: Trigger, createdMs: number, startAtMs: number | null): { anchorMs: number; firstMs: number | null } {
  const from = startAtMs !== null && startAtMs >= createdMs ? startAtMs : null;
  if (trigger.kind === 'interval') {
    const anchorMs = from ?? createdMs + trigger.seconds * 1000;
    return { anchorMs, firstMs: anchorMs };
  }
  return { anchorMs: from ?? createdMs, firstMs: pointAfter(trigger, (from ?? createdMs) - 1, 0) };
}

/** One thing the round does, in order. */
export type Step =
  /** Drop `count` overdue points (the policy says so); the head moves to `nextHead`. */
  | { kind: 'skip'; count: number; nextHead: number | null }
  /** Make the task of trigger point `at`; when admitted, the head moves to `nextHead`. */
  | { kind: 'fire'; at: number; nextHead: number | null };

export interface RoundInput {
  trigger: Trigger;
  /** Anchor of interval points (see firstPoint); unused by cron. */
  anchorMs: number;
  policy: MisfirePolicy;
  windowMs: number;
  nowMs: number;
  /** The first unprocessed trigger point. */
  headMs: number;
  /** At most this many points are looked at (counted, skipped or fired) in one round. */
  maxPoints: number;
  /** At most this many tasks are made in one round. */
  maxFires: number;
}

/**
 * The steps of one round for one schedule: every due point (at or before now) from the head, in
 * order, at most `maxPoints` of them. A point older than the window is overdue and handled by the
 * policy; the others fire. The store stops at the first fire the quota refuses: that point and
 * the ones after it stay pending (it counts them as deferred), while the steps before it stand.
 */
export function planRound(input: RoundInput): Step[] {
  const { trigger, anchorMs, policy, nowMs } = input;
  const cutoff = nowMs - input.windowMs; // a point before this is older than the window
  const next = (p: number) => pointAfter(trigger, p, anchorMs);
  const steps: Step[] = [];
  let head: number | null = input.headMs;
  let looked = 0;
  let fires = 0;
  while (head !== null && head <= nowMs && looked < input.maxPoints && fires < input.maxFires) {
    if (head < cutoff && policy !== 'fire_all') {
      // A run of overdue points: counted (arithmetically for an interval), then skipped - all of
      // them, or all but the latest, which fire_once fires.
      const run = overdueRun(input, head, cutoff, input.maxPoints - looked);
      looked += run.count;
      const complete = run.after === null || run.after >= cutoff;
      if (policy === 'skip') {
        steps.push({ kind: 'skip', count: run.count, nextHead: run.after });
      } else if (complete) {
        if (run.count > 1) steps.push({ kind: 'skip', count: run.count - 1, nextHead: run.last });
        steps.push({ kind: 'fire', at: run.last, nextHead: run.after });
        fires += 1;
      } else {
        // The run goes on past this round's budget: every point counted has a later overdue
        // point, so none of them is the latest; all are skipped and the next round goes on.
        steps.push({ kind: 'skip', count: run.count, nextHead: run.after });
        break;
      }
      head = run.after;
      continue;
    }
    const after = next(head);
    steps.push({ kind: 'fire', at: head, nextHead: after });
    fires += 1;
    looked += 1;
    head = after;
  }
  return steps;
}

/** Overdue points from `head` (inclusive) while before `cutoff`, at most `budget`: how many, the last, and the point after it. */
function overdueRun(input: RoundInput, head: number, cutoff: number, budget: number): { count: number; last: number; after: number | null } {
  const { trigger, anchorMs } = input;
  if (trigger.kind === 'interval') {
    const step = trigger.seconds * 1000;
    const count = Math.min(Math.floor((cutoff - 1 - head) / step) + 1, budget);
    const last = head + (count - 1) * step;
    return { count, last, after: last + step };
  }
  let count = 1;
  let last = head;
  let after = pointAfter(trigger, head, anchorMs);
  while (after !== null && after < cutoff && count < budget) {
    count += 1;
    last = after;
    after = pointAfter(trigger, after, anchorMs);
  }
  return { count, last, after };
}

/**
 * How many points from `fromMs` (inclusive) up to `nowMs` (inclusive) lie after `countedThrough`
 * (the latest point already counted as deferred, or null), at most `budget`; and the latest of
 * them. Used when the quota refuses the point at `fromMs`: every due point waiting behind it is
 * counted in `deferred_full` once.
 */
export function countWaiting(
  trigger: Trigger,
  anchorMs: number,
  fromMs: number,
  nowMs: number,
  countedThrough: number | null,
  budget: number,
): { count: number; through: number | null } {
  let p: number | null = countedThrough !== null && countedThrough >= fromMs ? pointAfter(trigger, countedThrough, anchorMs) : fromMs;
  if (p === null || p > nowMs) return { count: 0, through: countedThrough };
  if (trigger.kind === 'interval') {
    const step = trigger.seconds * 1000;
    const count = Math.min(Math.floor((nowMs - p) / step) + 1, budget);
    return { count, through: p + (count - 1) * step };
  }
  let count = 0;
  let through: number | null = countedThrough;
  while (p !== null && p <= nowMs && count < budget) {
    count += 1;
    through = p;
    p = pointAfter(trigger, p, anchorMs);
  }
  return { count, through };
}

/** The longest pause before a failing schedule is tried again. */
export const MAX_FAILURE_RETRY_MS = 60_000;

/**
 * How long a schedule whose round failed `consecutiveFailures` times in a row (1 or more) waits
 * before it is tried again: 1 s, doubled with each failure, at most a minute - so a schedule that
 * keeps failing costs the loop at most one attempt a minute, while a passing fault heals fast.
 */
export function failureRetryDelayMs(consecutiveFailures: number): number {
  const doublings = Math.min(Math.max(consecutiveFailures, 1) - 1, 16);
  return Math.min(MAX_FAILURE_RETRY_MS, 1000 * 2 ** doublings);
}
