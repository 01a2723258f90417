/**
 * How attempts end: the worker's authoritative result, a release of an unstarted reservation,
 * the reservations a closing session leaves, and lease-expiry recovery. Each is a decision per
 * attempt handed to the settlement engine in attempts.ts, which locks, writes and releases the
 * counters.
 */
import type { IdBytes } from '../../ids.ts';
import { afterLostLease, afterResult, afterUnstartedReservation, type AttemptOutcome, type TaskFacts, type TaskState } from '../../domain/task-transitions.ts';
import { errorAfterResult, errorAfterUnstartedReservation, leaseExpiredError } from '../../domain/task-errors.ts';
import { sqlToMillis } from '../../time.ts';
import { heldBySession, settleAttempts, type AttemptRef, type LockedAttempt, type LockedTaskRow, type Settlement } from './attempts.ts';
import { sql } from '../database/sql.ts';
import type { Database } from '../database/database.ts';
import type { AttemptRow } from '../database/schema.ts';

function facts(task: LockedTaskRow): TaskFacts {
  return {
    attempts: task.attempts,
    maxAttempts: task.max_attempts,
    onUnknownOutcome: task.on_unknown_outcome,
    cancelRequested: task.cancel_requested === 1,
    deadlineMs: sqlToMillis(task.deadline_at),
  };
}

const OUTCOME_STATE = { succeeded: 'SUCCEEDED', failed: 'FAILED', cancelled: 'CANCELLED' } as const;

export interface CompleteItem extends AttemptRef {
  sessionId: IdBytes;
  outcome: AttemptOutcome;
  result?: unknown;
  error?: unknown;
  retryable: boolean;
  /**
   * The size of the frame that carried it: an upper bound of its result's and error's JSON. A
   * group of results is bounded by it (completionBytes), so that the one UPDATE of the fast path
   * that carries them all fits in one database packet.
   */
  frameBytes?: number;
}

/** What one result adds to its group's statements, at most: its JSON escaped, and the rest of its row. */
export function completionBytes(item: CompleteItem): number {
  const json = item.frameBytes ?? Buffer.byteLength(JSON.stringify([item.result ?? null, item.error ?? null]), 'utf8');
  return 2 * json + 1024;
}

export type CompleteAnswer = { kind: 'completed'; taskState: TaskState; duplicate: boolean } | { kind: 'lease_lost' } | { kind: 'not_started' };

/**
 * The authoritative result of a started attempt. A repeated `complete` of an attempt this
 * session already finished with the same outcome answers again and changes nothing.
 */
export async function attemptCompleteBatch(db: Database, params: { applicationId: IdBytes; items: CompleteItem[] }) {
  const outcome = await settleAttempts<CompleteItem, CompleteAnswer>(db, {
    applicationId: params.applicationId,
    refs: params.items,
    decide(item, attempt, task, nowMs) {
      if (attempt && task && attempt.session_id.equals(item.sessionId) && attempt.state === OUTCOME_STATE[item.outcome]) {
        return { answer: { kind: 'completed', taskState: task.state, duplicate: true } };
      }
      if (!heldBySession(attempt, item.sessionId, nowMs) || !task) return { answer: { kind: 'lease_lost' } };
      if (attempt.state === 'RESERVED') return { answer: { kind: 'not_started' } };
      if (attempt.state !== 'RUNNING') return { answer: { kind: 'lease_lost' } };
      const next = afterResult(facts(task), item.outcome, item.retryable, nowMs);
      const settlement: Settlement = {
        attemptState: OUTCOME_STATE[item.outcome],
        taskState: next.state,
        availableAtMs: next.availableAtMs,
        error: errorAfterResult(next.state, item.error, task.cancel_reason),
      };
      if (item.result !== undefined) settlement.result = item.result;
      // A cancellation's error is the operator's reason; the worker's own words stay in the event.
      if (next.state === 'CANCELLED' && item.error !== undefined) settlement.workerError = item.error;
      return { answer: { kind: 'completed', taskState: next.state, duplicate: false }, settlement };
    },
  });
  return outcome as NonNullable<typeof outcome>;
}

export interface ReleaseItem extends AttemptRef {
  sessionId: IdBytes;
}

export type ReleaseAnswer = { kind: 'released' } | { kind: 'lease_lost' } | { kind: 'already_started' };

/** Gives back unstarted reservations: not an attempt; the task is claimable again at once. */
export async function attemptReleaseBatch(db: Database, params: { applicationId: IdBytes; items: ReleaseItem[]; ignoreLease?: boolean }) {
  const outcome = await settleAttempts<ReleaseItem, ReleaseAnswer>(db, {
    applicationId: params.applicationId,
    refs: params.items,
    decide(item, attempt, task, nowMs) {
      const held = params.ignoreLease ? attempt !== undefined && attempt.session_id.equals(item.sessionId) : heldBySession(attempt, item.sessionId, nowMs);
      if (!held || !attempt || !task) return { answer: { kind: 'lease_lost' } };
      if (attempt.state === 'RUNNING') return { answer: { kind: 'already_started' } };
      if (attempt.state !== 'RESERVED') return { answer: { kind: 'lease_lost' } };
      const next = afterUnstartedReservation(facts(task), nowMs);
      return {
        answer: { kind: 'released' },
        settlement: { attemptState: 'RELEASED', taskState: next.state, error: errorAfterUnstartedReservation(next.state) },
      };
    },
  });
  return outcome as NonNullable<typeof outcome>;
}

/** A closing session's reservations that were never started go back at once; running ones keep their lease until it runs out. */
export async function sessionReleaseReservations(db: Database, params: { applicationId: IdBytes; sessionId: IdBytes }): Promise<number> {
  const rows = await db.rows<Pick<AttemptRow, 'attempt_id' | 'task_id' | 'queue_id'>>(
    sql`SELECT attempt_id, task_id, queue_id FROM orbit_attempts WHERE session_id = ${params.sessionId} AND state = 'RESERVED'`,
  );
  if (rows.length === 0) return 0;
  const { answers } = await attemptReleaseBatch(db, {
    applicationId: params.applicationId,
    items: rows.map((r) => ({ attemptId: r.attempt_id, taskId: r.task_id, queueId: r.queue_id, sessionId: params.sessionId })),
    ignoreLease: true,
  });
  return answers.filter((a) => a.kind === 'released').length;
}

export type ExpiryKind = 'expired_reservation' | 'expired_lease';

/**
 * Recovery of attempts whose lease ran out, for one application. A reservation was not an
 * attempt: the task waits again (or expires at its deadline). A running attempt's outcome is
 * unknown: retry, review, or EXPIRED, by the task's `on_unknown_outcome`, its attempts and its
 * deadline; a task with a cancel intent goes to review. Null when the application row was busy.
 */
export async function attemptExpireBatch(db: Database, params: { applicationId: IdBytes; refs: AttemptRef[]; skipLockedApplication: boolean }) {
  return settleAttempts<AttemptRef, ExpiryKind | null>(db, {
    applicationId: params.applicationId,
    refs: params.refs,
    skipLockedApplication: params.skipLockedApplication,
    decide(_ref, attempt: LockedAttempt | undefined, task: LockedTaskRow | undefined, nowMs) {
      if (!attempt || !task || (attempt.state !== 'RESERVED' && attempt.state !== 'RUNNING') || sqlToMillis(attempt.lease_expires_at) > nowMs) {
        return { answer: null };
      }
      if (attempt.state === 'RESERVED') {
        const next = afterUnstartedReservation(facts(task), nowMs);
        return {
          answer: 'expired_reservation',
          settlement: { attemptState: 'EXPIRED', taskState: next.state, error: errorAfterUnstartedReservation(next.state) },
        };
      }
      const next = afterLostLease(facts(task), nowMs);
      return {
        answer: 'expired_lease',
        settlement: {
          attemptState: 'EXPIRED',
          taskState: next.state,
          availableAtMs: next.availableAtMs,
          error: leaseExpiredError(attempt.attempt_id.toString('hex')),
        },
      };
    },
  });
}
