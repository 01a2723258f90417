/**
 * Where a task goes when an attempt ends (docs/worker-protocol.md#where-a-task-goes). Pure: the
 * store applies the answer and releases counters from it.
 */
import type { components } from '../generated/openapi.ts';

export type TaskState = components['schemas']['TaskState'];

/** The states of a task that is not finished: each counts against `max_unfinished_tasks` at both levels. */
export const UNFINISHED_TASK_STATES = ['WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW'] as const satisfies readonly TaskState[];
/** The states a task ends in (every other is in UNFINISHED_TASK_STATES; test/unit/task-transitions.test.ts holds the two to the spec's enum). */
export const FINISHED_TASK_STATES = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED'] as const satisfies readonly TaskState[];
/** Attempt states that hold a worker session's slot and count as active attempts. */
export const ACTIVE_ATTEMPT_STATES = ['RESERVED', 'RUNNING'] as const;

export const TERMINAL_STATES: ReadonlySet<TaskState> = new Set(FINISHED_TASK_STATES);

export function isTerminal(state: TaskState): boolean {
  return TERMINAL_STATES.has(state);
}

/** Retry delay after the n-th failed attempt: 1 s, 2 s, 4 s … capped at 5 minutes. */
export function retryBackoffMs(attemptsSoFar: number): number {
  return Math.min(1000 * 2 ** Math.max(0, attemptsSoFar - 1), 300_000);
}

export interface TaskFacts {
  /** Started attempts so far, including the one ending now. */
  attempts: number;
  maxAttempts: number;
  onUnknownOutcome: 'retry' | 'review';
  cancelRequested: boolean;
  deadlineMs: number;
}

export type AttemptOutcome = 'succeeded' | 'failed' | 'cancelled';

/** What an operator decides for a NEEDS_REVIEW task (`POST /v1/tasks/{id}:resolve`). */
export type ResolveOutcome = 'succeeded' | 'failed' | 'retry';

export interface Transition {
  state: TaskState;
  /** For WAITING: when the task may be claimed again. */
  availableAtMs?: number;
}

/** The state an attempt ends in for the worker's outcome. */
export const ATTEMPT_STATE_OF_OUTCOME = { succeeded: 'SUCCEEDED', failed: 'FAILED', cancelled: 'CANCELLED' } as const satisfies Record<
  AttemptOutcome,
  TaskState
>;

/**
 * The task's state after a result when none of the task's facts can change it - a success, a
 * cancellation, a failure not to be retried: `afterResult` without reading the task (the fast
 * result path). Null for a retryable failure, which depends on attempts, time and a cancel intent.
 */
export function resultStateWithoutFacts(outcome: AttemptOutcome, retryable: boolean): (typeof ATTEMPT_STATE_OF_OUTCOME)[AttemptOutcome] | null {
  if (outcome === 'failed' && retryable) return null;
  return ATTEMPT_STATE_OF_OUTCOME[outcome];
}

/** The worker's authoritative result for a started attempt. */
export function afterResult(task: TaskFacts, outcome: AttemptOutcome, retryable: boolean, nowMs: number): Transition {
  if (outcome === 'succeeded') return { state: 'SUCCEEDED' };
  if (outcome === 'cancelled') return { state: 'CANCELLED' };
  // A failure is retried only if asked, with attempts and time left, and nobody cancelled the task.
  if (retryable && !task.cancelRequested && task.attempts < task.maxAttempts && nowMs < task.deadlineMs) {
    return { state: 'WAITING', availableAtMs: nowMs + retryBackoffMs(task.attempts) };
  }
  return { state: 'FAILED' };
}

/**
 * A running attempt's lease expired: its effect is unknown. Cancelled tasks go to review (the
 * cancellation may or may not have happened); otherwise retry when the task says so and it has
 * attempts and time left, else review, or EXPIRED once the deadline has passed for a task that
 * asked to be retried.
 */
export function afterLostLease(task: TaskFacts, nowMs: number): Transition {
  if (task.cancelRequested) return { state: 'NEEDS_REVIEW' };
  if (task.onUnknownOutcome === 'review') return { state: 'NEEDS_REVIEW' };
  if (nowMs >= task.deadlineMs) return { state: 'EXPIRED' };
  if (task.attempts < task.maxAttempts) return { state: 'WAITING', availableAtMs: nowMs + retryBackoffMs(task.attempts) };
  return { state: 'NEEDS_REVIEW' };
}

/** A reservation that was never started expired or was given back: it was not an attempt. */
export function afterUnstartedReservation(task: Pick<TaskFacts, 'deadlineMs'>, nowMs: number): Transition {
  return nowMs >= task.deadlineMs ? { state: 'EXPIRED' } : { state: 'WAITING' };
}

/**
 * An operator's decision on a NEEDS_REVIEW task: `succeeded` and `failed` end it, `retry` puts it
 * back to WAITING, claimable at once (the store allows one more attempt).
 */
export function afterResolve(outcome: ResolveOutcome): Transition {
  if (outcome === 'succeeded') return { state: 'SUCCEEDED' };
  if (outcome === 'failed') return { state: 'FAILED' };
  return { state: 'WAITING' };
}

/** The states an operator may send back to WAITING (`POST /v1/tasks/{id}:retry`); SUCCEEDED is an answer, not a failure. */
export const OPERATOR_RETRYABLE_STATES: ReadonlySet<TaskState> = new Set(['FAILED', 'EXPIRED', 'CANCELLED']);

/** The most attempts a task row can count (its columns are 16-bit). */
const MAX_ATTEMPTS_STORED = 65_535;

/**
 * What a retried task becomes: WAITING now, with a deadline as long as the one it was submitted
 * with (an EXPIRED task retried with its old deadline would expire at once), and one more attempt
 * than it has used (a FAILED task usually has none left). `deadlineSeconds` is that length as the
 * task keeps it once retried (`orbit_tasks.deadline_seconds`); before its first retry it is
 * `deadline_at - created_at`, which nothing but admission writes - after a retry `deadline_at`
 * counts from the retry, so the length is kept rather than computed again.
 */
export function afterOperatorRetry(
  task: { attempts: number; maxAttempts: number; deadlineSeconds: number | null; createdAtMs: number; deadlineAtMs: number },
  nowMs: number,
) {
  const deadlineSeconds = task.deadlineSeconds ?? Math.max(1, Math.round((task.deadlineAtMs - task.createdAtMs) / 1000));
  return {
    state: 'WAITING' as const,
    availableAtMs: nowMs,
    deadlineSeconds,
    deadlineAtMs: nowMs + deadlineSeconds * 1000,
    maxAttempts: Math.min(MAX_ATTEMPTS_STORED, Math.max(task.maxAttempts, task.attempts + 1)),
  };
}
