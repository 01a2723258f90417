/**
 * What a task's `error` says (openapi.yaml, `Task.error`): why the task is in its current state.
 * Every transition that has a cause replaces it; a success clears it, and so do an operator's
 * `succeeded` and `retry`; a task put back as it was (a reservation given back or expired before
 * its deadline) keeps it. Earlier errors are not kept on the task - its transitions are its
 * events, and an operator's decision names the error it replaced there (`previous_error`).
 * Pure: the store writes what these answer.
 */
import type { ResolveOutcome, TaskState } from './task-transitions.ts';

/** An error Orbit itself puts on a task (a worker's error is free JSON and stays as it was sent). */
export interface OrbitTaskError {
  code: string;
  message: string;
}

/**
 * A task that ends CANCELLED, however it got there (WAITING, LEASED or NEEDS_REVIEW at once,
 * RUNNING when its worker answers): the reason given to `:cancel`.
 */
export function cancelledError(reason: string): OrbitTaskError {
  return { code: 'CANCELLED', message: reason };
}

/** The message of a cancellation nobody asked for: the worker reported `cancelled` on its own. */
export const CANCELLED_BY_WORKER = 'the worker reported the attempt cancelled without a cancel request';

export function leaseExpiredError(attemptHex: string): OrbitTaskError {
  return { code: 'LEASE_EXPIRED', message: `attempt ${attemptHex} lost its lease while running; its outcome is unknown` };
}

export function deadlineExceededError(): OrbitTaskError {
  return { code: 'DEADLINE_EXCEEDED', message: 'the task reached its deadline before it finished' };
}

/**
 * The task's error after the worker's result moved it to `state` (task-transitions.ts
 * `afterResult`); null for none. A success has none, whatever earlier attempts reported. A
 * cancellation is the reason saved with the cancel intent (`cancelReason`), not what the worker
 * said - its words go to the `task.cancelled` event. A failure, final or one that waits for a
 * retry, is the worker's error as sent.
 */
export function errorAfterResult(state: TaskState, workerError: unknown, cancelReason: string | null): unknown | null {
  if (state === 'SUCCEEDED') return null;
  if (state === 'CANCELLED') return cancelledError(cancelReason ?? CANCELLED_BY_WORKER);
  return workerError ?? null;
}

/**
 * A reservation that ends unstarted (given back, or expired) was not an attempt: the task is put
 * back as it was, its error kept (undefined), unless its deadline passed meanwhile (EXPIRED).
 */
export function errorAfterUnstartedReservation(state: TaskState): OrbitTaskError | undefined {
  return state === 'EXPIRED' ? deadlineExceededError() : undefined;
}

/**
 * The task's error after an operator resolved it from NEEDS_REVIEW; null for none. SUCCEEDED and
 * back to WAITING: none (what sent it to review is history). FAILED: the resolution's `error`,
 * or - when it gave none - the operator's reason, so a FAILED task always says why.
 */
export function errorAfterResolve(outcome: ResolveOutcome, reason: string, given: unknown): unknown | null {
  if (outcome !== 'failed') return null;
  return given === undefined || given === null ? { code: 'RESOLVED_FAILED', message: reason } : given;
}
