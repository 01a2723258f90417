/**
 * What the recovery loop does, one batch at a time. Candidates are found with plain reads
 * (no lock), grouped by application, and settled in one transaction per application that takes
 * the locks in lock order and re-checks every condition under them. A busy application row is
 * passed over with SKIP LOCKED (the next round tries again, then waits for it), so recovery
 * never queues up behind a hot application. Nothing here looks at credentials or `enabled`:
 * disabled applications are recovered like any other.
 */
import { idToHex, type IdBytes } from '../../ids.ts';
import { attemptExpireBatch, type ExpiryKind } from './attempt-results.ts';
import type { AttemptRef } from './attempts.ts';
import { sql, type SQL } from '../database/sql.ts';
import { valueList, type Database } from '../database/database.ts';
import type { AttemptRow, TaskRow } from '../database/schema.ts';
import { usageDeltaStatements, type QueueOwner } from '../quotas/usage-writes.ts';
import { namespaceRowsLockStatement } from '../quotas/namespace-resources.ts';
import { lockRows } from '../database/lock-order.ts';
import { taskEventsEnabled, taskEventsFromRows } from '../records/task-events.ts';
import { deadlineExceededError } from '../../domain/task-errors.ts';

function groupByApplication<T extends { application_id: Buffer }>(rows: T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const row of rows) {
    const key = idToHex(row.application_id);
    const group = groups.get(key);
    if (group) group.push(row);
    else groups.set(key, [row]);
  }
  return groups;
}

export interface RecoveryCounts {
  expired_reservation: number;
  expired_lease: number;
  deadline: number;
  /** Applications whose row was busy this round. */
  busy: string[];
  /** Candidates read (at most the limit): a full batch means more may be waiting. */
  candidates: number;
}

/**
 * @param waitFor applications skipped as busy last round: this round waits for their row
 * instead of skipping it again, so a constantly busy application is still recovered.
 */
export async function recoverExpiredAttempts(db: Database, params: { limit: number; waitFor: ReadonlySet<string> }): Promise<RecoveryCounts> {
  const counts: RecoveryCounts = { expired_reservation: 0, expired_lease: 0, deadline: 0, busy: [], candidates: 0 };
  const rows = await db.rows<Pick<AttemptRow, 'application_id' | 'attempt_id' | 'task_id' | 'queue_id' | 'namespace_id'>>(
    sql`SELECT /* scatter: recovery-expired-leases */ application_id, attempt_id, task_id, queue_id, namespace_id FROM orbit_attempts
      WHERE state IN ('RESERVED', 'RUNNING') AND lease_expires_at <= NOW(6)
      ORDER BY lease_expires_at LIMIT ${params.limit}`,
  );
  counts.candidates = rows.length;
  for (const [applicationHex, group] of groupByApplication(rows)) {
    const refs: AttemptRef[] = group.map((r) => ({ attemptId: r.attempt_id, taskId: r.task_id, queueId: r.queue_id, namespaceId: r.namespace_id }));
    const result = await attemptExpireBatch(db, {
      applicationId: Buffer.from(applicationHex, 'hex'),
      refs,
      skipLockedApplication: !params.waitFor.has(applicationHex),
    });
    if (!result) {
      counts.busy.push(applicationHex);
      continue;
    }
    for (const answer of result.answers) if (answer) counts[answer as ExpiryKind] += 1;
  }
  return counts;
}

/** WAITING tasks past their deadline → EXPIRED (one unfinished slot back at both levels). */
export async function expireDeadlines(db: Database, params: { limit: number; waitFor: ReadonlySet<string> }): Promise<RecoveryCounts> {
  const counts: RecoveryCounts = { expired_reservation: 0, expired_lease: 0, deadline: 0, busy: [], candidates: 0 };
  const rows = await db.rows<Pick<TaskRow, 'application_id' | 'namespace_id' | 'queue_id' | 'task_id'>>(
    sql`SELECT /* scatter: recovery-deadlines */ application_id, namespace_id, queue_id, task_id FROM orbit_tasks WHERE state = 'WAITING' AND deadline_at <= NOW(6) LIMIT ${params.limit}`,
  );
  for (const [applicationHex, group] of groupByApplication(rows)) {
    const applicationId: IdBytes = Buffer.from(applicationHex, 'hex');
    const skip = !params.waitFor.has(applicationHex);
    const expired = await db.transaction(async (tx) => {
      const queueIds = [...new Map(group.map((r) => [idToHex(r.queue_id), r.queue_id])).values()].sort(Buffer.compare);
      const taskIds = group.map((r) => r.task_id).sort(Buffer.compare);
      // The application row alone first: when it is busy, nothing else gets locked (or waited for).
      const app = await tx.rows<{ now: string }>(
        sql`SELECT NOW(6) AS now FROM orbit_application_resources WHERE application_id = ${applicationId} ${lockRows('application', skip ? 'skip-locked' : 'update')}`,
      );
      if (!app[0]) return null;
      const now = app[0].now;
      // A task's queue and namespace never change: the plain read above names the rows to lock.
      const [, , tasks] = (await tx.batch(
        sql.join(
          [
            namespaceRowsLockStatement(group.map((r) => r.namespace_id)) as SQL,
            sql`SELECT queue_id FROM orbit_queues WHERE queue_id IN (${valueList(queueIds)}) ORDER BY queue_id ${lockRows('queue')}`,
            sql`SELECT task_id, namespace_id, queue_id FROM orbit_tasks
          WHERE task_id IN (${valueList(taskIds)}) AND state = 'WAITING' AND deadline_at <= NOW(6)
          ORDER BY task_id ${lockRows('task')}`,
          ],
          sql`;\n`,
        ),
      )) as [unknown, unknown, Array<Pick<TaskRow, 'task_id' | 'namespace_id' | 'queue_id'>>];
      if (tasks.length === 0) return 0;
      // Why it is EXPIRED, replacing what a failed attempt before said (task-errors.ts).
      const error = JSON.stringify(deadlineExceededError());
      const perQueue = new Map<string, QueueOwner & { delta: { unfinished: number } }>();
      for (const t of tasks) {
        const entry = perQueue.get(idToHex(t.queue_id)) ?? { queueId: t.queue_id, namespaceId: t.namespace_id, delta: { unfinished: 0 } };
        entry.delta.unfinished -= 1;
        perQueue.set(idToHex(t.queue_id), entry);
      }
      const statements = [
        sql`UPDATE orbit_tasks SET state = 'EXPIRED', finished_at = ${now}, updated_at = ${now}, error = ${error}
          WHERE task_id IN (${valueList(tasks.map((t) => t.task_id))})`,
        ...usageDeltaStatements(applicationId, [...perQueue.values()]),
      ];
      if (taskEventsEnabled())
        statements.push(
          taskEventsFromRows(
            applicationId,
            tasks.map((t) => t.task_id),
            sql`'task.expired'`,
          ),
        );
      await tx.finish(statements);
      return tasks.length;
    });
    if (expired === null) counts.busy.push(applicationHex);
    else counts.deadline += expired;
  }
  return counts;
}
