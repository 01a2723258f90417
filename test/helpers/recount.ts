/**
 * The check every integration test ends with: each usage counter on the application and queue
 * rows, and each keyed permit, equals a recount from the tasks and attempts tables.
 */
import assert from 'node:assert/strict';
import type { Database } from '../../server/store/database.ts';

const UNFINISHED = "'WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW'";

export async function assertCountersMatchRecount(db: Database): Promise<void> {
  // The same comparison for both levels: the owner's row against counts over its tasks and attempts.
  const levels = [
    { table: 'orbit_application_resources', key: 'application_id', label: 'HEX(r.application_id)', what: 'application' },
    { table: 'orbit_queues', key: 'queue_id', label: 'r.name', what: 'queue' },
  ];
  for (const level of levels) {
    const rows = await db.rows<{ label: string; unfinished_tasks: string; active_attempts: string; pending_starts: string; u: string; a: string; p: string }>(`
      SELECT ${level.label} AS label, r.unfinished_tasks, r.active_attempts, r.pending_starts,
             (SELECT COUNT(*) FROM orbit_tasks t WHERE t.${level.key} = r.${level.key} AND t.state IN (${UNFINISHED})) AS u,
             (SELECT COUNT(*) FROM orbit_attempts x WHERE x.${level.key} = r.${level.key} AND x.state IN ('RESERVED', 'RUNNING')) AS a,
             (SELECT COUNT(*) FROM orbit_attempts x WHERE x.${level.key} = r.${level.key} AND x.state = 'RESERVED') AS p
        FROM ${level.table} r`);
    for (const row of rows) {
      assert.deepEqual(
        { unfinished: row.unfinished_tasks, active: row.active_attempts, pending: row.pending_starts },
        { unfinished: String(row.u), active: String(row.a), pending: String(row.p) },
        `${level.what} ${row.label}: counters differ from the recount`,
      );
    }
  }
  const permits = await db.rows<{ resource_key: string; holders: number; n: string }>(`
    SELECT k.resource_key, k.holders,
           (SELECT COUNT(*) FROM orbit_attempts x
             WHERE x.queue_id = k.queue_id AND x.resource_key = k.resource_key AND x.state IN ('RESERVED', 'RUNNING')) AS n
      FROM orbit_key_permits k`);
  for (const row of permits) {
    assert.equal(String(row.holders), String(row.n), `permit ${row.resource_key}: holders differ from the recount`);
  }
  // Every task's state agrees with its attempts: LEASED has one RESERVED attempt, RUNNING one RUNNING attempt, others none active.
  const [mismatch] = await db.rows<{ n: string }>(`
    SELECT COUNT(*) AS n FROM orbit_tasks t
     WHERE (SELECT COUNT(*) FROM orbit_attempts x WHERE x.task_id = t.task_id AND x.state IN ('RESERVED', 'RUNNING'))
           <> (CASE WHEN t.state IN ('LEASED', 'RUNNING') THEN 1 ELSE 0 END)`);
  assert.equal(String(mismatch?.n), '0', 'tasks whose state disagrees with their active attempts');
}
