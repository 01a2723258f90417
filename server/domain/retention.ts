/**
 * Retention: what finished history an application keeps, and the one rule of what may be pruned
 * (docs/operations.md#retention). The pruning statements (server/store/retention/prune.ts) are
 * the SQL form of `mayPrune`; test/store/retention-rule.test.ts runs both on generated
 * histories and requires the same survivors.
 *
 * Never pruned, whatever the policy:
 * - an unfinished task (WAITING, LEASED, RUNNING, NEEDS_REVIEW) and its attempts;
 * - the receipt of an unfinished task (a replay of its submission finds it however old it is);
 * - an event that an ACTIVE subscription of its namespace has not acknowledged, unless it is
 *   older than the policy's `subscription_max_lag_seconds` - and then the subscriptions that
 *   had not acknowledged it are marked (`pruned_through`) and told on their next read;
 * - a worker session that holds an attempt, or closed more recently than the task retention;
 * - schedules, subscriptions, queues, namespaces, credentials and the quota rows (resources are
 *   never deleted; only history is).
 * Usage counters count unfinished work only, so pruning never changes one.
 */
import { FINISHED_TASK_STATES } from './task-transitions.ts';

/** A policy's durations in seconds; null keeps forever. */
export interface RetentionPolicy {
  finished_task_retention_seconds: number | null;
  event_retention_seconds: number | null;
  receipt_retention_seconds: number | null;
  audit_retention_seconds: number | null;
  subscription_max_lag_seconds: number | null;
}

export const RETENTION_FIELDS = [
  'finished_task_retention_seconds',
  'event_retention_seconds',
  'receipt_retention_seconds',
  'audit_retention_seconds',
  'subscription_max_lag_seconds',
] as const satisfies ReadonlyArray<keyof RetentionPolicy>;

/**
 * The policy of a new application - the column defaults of orbit_retention_policies
 * (migrations/0007): a week of finished tasks, events and receipts (the idempotency window),
 * a year of audit records, and a subscription may lag 30 days before its unacknowledged events go.
 */
export const RETENTION_DEFAULTS: RetentionPolicy = {
  finished_task_retention_seconds: 604_800,
  event_retention_seconds: 604_800,
  receipt_retention_seconds: 604_800,
  audit_retention_seconds: 31_536_000,
  subscription_max_lag_seconds: 2_592_000,
};

/** Bounds of every duration (openapi.yaml says the same): at least a minute, at most ten years. */
export const RETENTION_MIN_SECONDS = 60;
export const RETENTION_MAX_SECONDS = 315_360_000;

/** The moment before which a duration's rows may go (ms), or null when kept forever. */
export function cutoffOf(seconds: number | null, nowMs: number): number | null {
  return seconds === null ? null : nowMs - seconds * 1000;
}

/** History rows as the rule sees them (times in ms). */
export type HistoryRow =
  | { kind: 'task'; state: string; finishedAtMs: number | null }
  | { kind: 'receipt'; createdAtMs: number; taskUnfinished: boolean }
  | { kind: 'audit'; createdAtMs: number }
  | { kind: 'session'; state: string; closedAtMs: number | null; holdsAttempt: boolean }
  | {
      kind: 'event';
      sequence: bigint;
      occurredAtMs: number;
      /** The acknowledged positions of the ACTIVE subscriptions of the event's namespace. */
      activePositions: readonly bigint[];
    };

/** Older than the cutoff (strictly), and the cutoff exists. */
function before(atMs: number | null, cutoffMs: number | null): boolean {
  return atMs !== null && cutoffMs !== null && atMs < cutoffMs;
}

/** THE rule: may this row be pruned now under this policy? */
export function mayPrune(row: HistoryRow, policy: RetentionPolicy, nowMs: number): boolean {
  switch (row.kind) {
    case 'task':
      return (
        (FINISHED_TASK_STATES as readonly string[]).includes(row.state) && before(row.finishedAtMs, cutoffOf(policy.finished_task_retention_seconds, nowMs))
      );
    case 'receipt':
      return !row.taskUnfinished && before(row.createdAtMs, cutoffOf(policy.receipt_retention_seconds, nowMs));
    case 'audit':
      return before(row.createdAtMs, cutoffOf(policy.audit_retention_seconds, nowMs));
    case 'session':
      return row.state === 'CLOSED' && !row.holdsAttempt && before(row.closedAtMs, cutoffOf(policy.finished_task_retention_seconds, nowMs));
    case 'event': {
      if (!before(row.occurredAtMs, cutoffOf(policy.event_retention_seconds, nowMs))) return false;
      const heldBy = row.activePositions.some((acked) => acked < row.sequence);
      return !heldBy || before(row.occurredAtMs, cutoffOf(policy.subscription_max_lag_seconds, nowMs));
    }
  }
}

/**
 * What a subscription is told after pruning: it lags when events after its position were
 * pruned (`pruned_through` beyond `acked_sequence`); reading then fails with the oldest sequence
 * still kept, and acknowledging `pruned_through` (or beyond) moves it on.
 */
export function subscriptionLag(ackedSequence: bigint, prunedThrough: bigint): { prunedThrough: string; oldestSequence: string } | null {
  return prunedThrough > ackedSequence ? { prunedThrough: prunedThrough.toString(), oldestSequence: (prunedThrough + 1n).toString() } : null;
}
