/**
 * `cancel_requested` notices for running attempts whose task was cancelled: the cancel may have
 * arrived at any server process, so each process asks the database about its own sessions and
 * marks the attempts it is about to tell, so they are told once.
 *
 * Neither statement is in a transaction. The read locks nothing; the UPDATE writes attempt rows
 * only and holds no other lock, so it cannot take part in a cycle of waits: it is one of the
 * named single-statement exceptions to "application row first" (lock-order.ts).
 */
import { sql } from '../database/sql.ts';
import type { IdBytes } from '../../ids.ts';
import { valueList, type Queryable } from '../database/database.ts';
import type { AttemptRow } from '../database/schema.ts';

/**
 * The running attempts of these sessions whose task has a cancel request they were not told of
 * yet, now marked as told (`cancel_notified = 1`): the caller sends the notices.
 */
export async function attemptTakeCancelNotices(db: Queryable, sessionIds: IdBytes[]): Promise<Array<Pick<AttemptRow, 'attempt_id' | 'session_id'>>> {
  if (sessionIds.length === 0) return [];
  const rows = await db.rows<Pick<AttemptRow, 'attempt_id' | 'session_id'>>(
    sql`SELECT a.attempt_id, a.session_id FROM orbit_attempts a JOIN orbit_tasks t ON t.task_id = a.task_id
          WHERE a.session_id IN (${valueList(sessionIds)}) AND a.state = 'RUNNING' AND a.cancel_notified = 0 AND t.cancel_requested = 1`,
  );
  if (rows.length === 0) return rows;
  await db.exec(sql`UPDATE orbit_attempts SET cancel_notified = 1 WHERE attempt_id IN (${valueList(rows.map((r) => r.attempt_id))})`);
  return rows;
}
