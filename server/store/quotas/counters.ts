/**
 * Usage counter changes on the application row and queue rows, shared by every path that
 * releases usage (cancel, resolve, settlements, deadline expiry). Callers hold the rows' locks
 * already (taken in lock order) or accept that these statements take them now, application
 * first. Exactly-once release comes from the callers deriving deltas from state changes of rows
 * they hold locked; the unsigned columns only add that a counter never goes below zero.
 */
import { sql, type SQL } from '../database/sql.ts';
import type { IdBytes } from '../../ids.ts';
import type { Queryable } from '../database/database.ts';
import { updateEachRow } from '../database/set-based.ts';

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
 * The statements that apply per-queue deltas: the application row gets their sum, then the
 * queue rows each their own, in ONE statement whatever the number of queues (ascending queue
 * id, the lock order). Send them in the list of the caller's other statements
 * (`tx.batch([...])`, `tx.finish([...])`): the same round trip.
 */
export function counterAdjustStatements(applicationId: IdBytes, queues: QueueDelta[]): SQL[] {
  const set = (d: CounterDelta) =>
    sql`SET unfinished_tasks = unfinished_tasks + ${d.unfinished ?? 0}, active_attempts = active_attempts + ${d.active ?? 0}, pending_starts = pending_starts + ${d.pending ?? 0}`;
  const columns = ['unfinished_tasks', 'active_attempts', 'pending_starts'] as const;
  const total = queues.reduce<Required<CounterDelta>>(
    (sum, q) => ({
      unfinished: sum.unfinished + (q.delta.unfinished ?? 0),
      active: sum.active + (q.delta.active ?? 0),
      pending: sum.pending + (q.delta.pending ?? 0),
    }),
    { unfinished: 0, active: 0, pending: 0 },
  );
  const sorted = [...queues].sort((x, y) => Buffer.compare(x.queueId, y.queueId));
  const statements = [sql`UPDATE orbit_application_resources ${set(total)} WHERE application_id = ${applicationId}`];
  if (sorted.length > 0) {
    statements.push(
      updateEachRow({
        table: 'orbit_queues',
        key: ['queue_id'],
        columns,
        rows: sorted.map((q) => ({
          key: [q.queueId],
          values: [
            sql`unfinished_tasks + ${q.delta.unfinished ?? 0}`,
            sql`active_attempts + ${q.delta.active ?? 0}`,
            sql`pending_starts + ${q.delta.pending ?? 0}`,
          ],
        })),
      }),
    );
  }
  return statements;
}

/**
 * ONE statement for every keyed permit's holder change (`queue/key` → delta), ascending
 * (queue_id, resource_key) - the permit level's lock order. Null when there is none.
 */
export function permitHoldersStatement(deltas: ReadonlyMap<string, number>, now: SQL): SQL | null {
  if (deltas.size === 0) return null;
  const rows = [...deltas]
    .map(([permit, n]) => {
      const slash = permit.indexOf('/');
      return { queueId: Buffer.from(permit.slice(0, slash), 'hex'), key: permit.slice(slash + 1), n };
    })
    .sort((a, b) => Buffer.compare(a.queueId, b.queueId) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return updateEachRow({
    table: 'orbit_key_permits',
    key: ['queue_id', 'resource_key'],
    columns: ['holders', 'updated_at'],
    rows: rows.map((r) => ({ key: [r.queueId, r.key], values: [sql`holders + ${r.n}`, now] })),
  });
}

export async function counterAdjust(tx: Queryable, applicationId: IdBytes, queueId: IdBytes, delta: CounterDelta): Promise<void> {
  if (!delta.unfinished && !delta.active && !delta.pending) return;
  await tx.batch(counterAdjustStatements(applicationId, [{ queueId, delta }]));
}

/** Gives back one keyed permit (the permit row is the last lock of the order). */
export async function permitRelease(tx: Queryable, queueId: IdBytes, resourceKey: string | null): Promise<void> {
  if (resourceKey === null) return;
  await tx.exec(sql`UPDATE orbit_key_permits SET holders = holders - 1, updated_at = NOW(6) WHERE queue_id = ${queueId} AND resource_key = ${resourceKey}`);
}
