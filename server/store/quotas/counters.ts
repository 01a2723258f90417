/**
 * Usage counter changes on the application row and queue rows, shared by every path that
 * releases usage (cancel, resolve, settlements, deadline expiry). Callers hold the rows' locks
 * already (taken in lock order) or accept that these statements take them now, application
 * first. Exactly-once release comes from the callers deriving deltas from state changes of rows
 * they hold locked; the unsigned columns only add that a counter never goes below zero.
 */
import type { IdBytes } from '../../ids.ts';
import type { Queryable } from '../database/database.ts';

export interface CounterDelta {
  unfinished?: number;
  active?: number;
  pending?: number;
}

export interface QueueDelta {
  queueId: IdBytes;
  delta: CounterDelta;
}

/**
 * The statements that apply per-queue deltas: the application row gets their sum, then each
 * queue row its own (ascending queue id, the lock order).
 */
export function counterAdjustSql(applicationId: IdBytes, queues: QueueDelta[]): { sql: string[]; params: unknown[] } {
  const set = 'SET unfinished_tasks = unfinished_tasks + ?, active_attempts = active_attempts + ?, pending_starts = pending_starts + ?';
  const values = (d: CounterDelta) => [d.unfinished ?? 0, d.active ?? 0, d.pending ?? 0];
  const total = queues.reduce((sum, q) => {
    const [u, a, p] = values(q.delta) as [number, number, number];
    return { unfinished: (sum.unfinished ?? 0) + u, active: (sum.active ?? 0) + a, pending: (sum.pending ?? 0) + p };
  }, {} as CounterDelta);
  const sorted = [...queues].sort((x, y) => Buffer.compare(x.queueId, y.queueId));
  return {
    sql: [`UPDATE orbit_application_resources ${set} WHERE application_id = ?`, ...sorted.map(() => `UPDATE orbit_queues ${set} WHERE queue_id = ?`)],
    params: [...values(total), applicationId, ...sorted.flatMap((q) => [...values(q.delta), q.queueId])],
  };
}

export async function counterAdjust(tx: Queryable, applicationId: IdBytes, queueId: IdBytes, delta: CounterDelta): Promise<void> {
  if (!delta.unfinished && !delta.active && !delta.pending) return;
  const { sql, params } = counterAdjustSql(applicationId, [{ queueId, delta }]);
  await tx.batch(sql.join(';\n'), params);
}

/** Gives back one keyed permit (the permit row is the last lock of the order). */
export async function permitRelease(tx: Queryable, queueId: IdBytes, resourceKey: string | null): Promise<void> {
  if (resourceKey === null) return;
  await tx.exec('UPDATE orbit_key_permits SET holders = holders - 1, updated_at = NOW(6) WHERE queue_id = ? AND resource_key = ?', [queueId, resourceKey]);
}
