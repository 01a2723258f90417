/**
 * How attempts end besides the worker's result (attempt-complete.ts): a release of an unstarted
 * reservation, the reservations a closing session leaves, and lease-expiry recovery. Each is a decision per
 * attempt handed to the settlement engine in attempts.ts, which locks, writes and releases the
 * counters.
 */
import type { IdBytes } from '../../ids.ts';
import { afterLostLease, afterUnstartedReservation, type TaskFacts } from '../../domain/task-transitions.ts';
import { errorAfterUnstartedReservation, leaseExpiredError } from '../../domain/task-errors.ts';
import { sqlToMillis } from '../../time.ts';
import { heldBySession, settleAttempts, type AttemptRef, type LockedAttempt, type LockedTaskRow } from './attempts.ts';
import { sql } from '../database/sql.ts';
import type { Database } from '../database/database.ts';
import type { AttemptRow } from '../database/schema.ts';

export function facts(task: LockedTaskRow): TaskFacts {
  return {
    attempts: task.attempts,
    maxAttempts: task.max_attempts,
    onUnknownOutcome: task.on_unknown_outcome,
    cancelRequested: task.cancel_requested === 1,
    deadlineMs: sqlToMillis(task.deadline_at),
  };
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
  const rows = await db.rows<Pick<AttemptRow, 'attempt_id' | 'task_id' | 'queue_id' | 'namespace_id'>>(
    sql`SELECT attempt_id, task_id, queue_id, namespace_id FROM orbit_attempts WHERE session_id = ${params.sessionId} AND state = 'RESERVED'`,
  );
  if (rows.length === 0) return 0;
  const { answers } = await attemptReleaseBatch(db, {
    applicationId: params.applicationId,
    items: rows.map((r) => ({ attemptId: r.attempt_id, taskId: r.task_id, queueId: r.queue_id, namespaceId: r.namespace_id, sessionId: params.sessionId })),
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
