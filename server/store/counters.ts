/**
 * Usage counter changes on the application row and a queue row. Callers hold both rows'
 * locks already (taken in lock order) or accept that this statement takes them now, application
 * first. The columns are unsigned: releasing a counter twice fails the statement (and the
 * transaction) instead of wrapping around - a safety net under "each counter is released exactly once".
 */
import type { IdBytes } from '../ids.ts';
import type { Queryable } from './database.ts';

export interface CounterDelta {
  unfinished?: number;
  active?: number;
  pending?: number;
}

export function counterAdjustSql(applicationId: IdBytes, queueId: IdBytes, delta: CounterDelta): { sql: string; params: unknown[] } {
  const u = delta.unfinished ?? 0;
  const a = delta.active ?? 0;
  const p = delta.pending ?? 0;
  return {
    sql: `UPDATE orbit_application_resources
             SET unfinished_tasks = unfinished_tasks + ?, active_attempts = active_attempts + ?, pending_starts = pending_starts + ?
           WHERE application_id = ?;
          UPDATE orbit_queues
             SET unfinished_tasks = unfinished_tasks + ?, active_attempts = active_attempts + ?, pending_starts = pending_starts + ?
           WHERE queue_id = ?`,
    params: [u, a, p, applicationId, u, a, p, queueId],
  };
}

export async function counterAdjust(tx: Queryable, applicationId: IdBytes, queueId: IdBytes, delta: CounterDelta): Promise<void> {
  if (!delta.unfinished && !delta.active && !delta.pending) return;
  const { sql, params } = counterAdjustSql(applicationId, queueId, delta);
  await tx.batch(sql, params);
}

/** Gives back one keyed permit (the permit row is the last lock of the order). */
export async function permitRelease(tx: Queryable, queueId: IdBytes, resourceKey: string | null): Promise<void> {
  if (resourceKey === null) return;
  await tx.exec('UPDATE orbit_key_permits SET holders = holders - 1, updated_at = NOW(6) WHERE queue_id = ? AND resource_key = ?', [queueId, resourceKey]);
}
