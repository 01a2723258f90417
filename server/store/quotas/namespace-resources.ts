/**
 * A namespace's resources row: its floors (reservations of the application's three limits) and
 * its usage (docs/quotas-and-locking.md#floors). Usage is written by usage-writes.ts only, in the
 * transactions that write the application's and the queues' usage; this module reads and locks.
 * The rows are the lock level `namespace`: after the application row, before queue rows.
 */
import type { IdBytes } from '../../ids.ts';
import { sql, type SQL } from '../database/sql.ts';
import type { Transaction } from '../database/database.ts';
import type { NamespaceResourcesRow } from '../database/schema.ts';
import { distinctIdsAscending, lockRows } from '../database/lock-order.ts';

/** What the decisions (and configure's compare-and-set) read of a namespace row. */
export type NamespaceUsageRow = Pick<
  NamespaceResourcesRow,
  | 'namespace_id'
  | 'revision'
  | 'reserved_unfinished_tasks'
  | 'reserved_concurrency'
  | 'reserved_rate_per_second'
  | 'unfinished_tasks'
  | 'active_attempts'
  | 'pending_starts'
  | 'window_started_at'
  | 'window_starts'
>;

const USAGE_COLUMNS = sql.raw(`namespace_id, revision, reserved_unfinished_tasks, reserved_concurrency, reserved_rate_per_second,
  unfinished_tasks, active_attempts, pending_starts, window_started_at, window_starts`);

/**
 * The locking read of namespace rows (ascending id, the lock order), to send in a batch before
 * the queue rows' when the rows themselves are not needed. Null for no namespace.
 */
export function namespaceRowsLockStatement(namespaceIds: readonly IdBytes[]): SQL | null {
  const ids = distinctIdsAscending(namespaceIds);
  if (ids.length === 0) return null;
  return sql`
    SELECT ${USAGE_COLUMNS} FROM orbit_namespace_resources
     WHERE namespace_id IN (${sql.join(
       ids.map((id) => sql`${id}`),
       sql`, `,
     )}) ORDER BY namespace_id ${lockRows('namespace')}`;
}

/** The rows a `namespaceRowsLockStatement` read, keyed by the namespace id in hex. */
export function namespaceRowsByHex(rows: readonly NamespaceUsageRow[], expected: number): Map<string, NamespaceUsageRow> {
  if (rows.length !== expected) throw new Error('a namespace has no resources row');
  return new Map(rows.map((r) => [r.namespace_id.toString('hex'), r]));
}

/**
 * Locks the namespace rows after the application row, before queue rows; keyed by the namespace
 * id in hex. Every namespace has its row (created with it, 0010 for the older ones).
 */
export async function namespaceRowsLock(tx: Transaction, namespaceIds: readonly IdBytes[]): Promise<Map<string, NamespaceUsageRow>> {
  const statement = namespaceRowsLockStatement(namespaceIds);
  if (statement === null) return new Map();
  return namespaceRowsByHex(await tx.rows<NamespaceUsageRow>(statement), distinctIdsAscending(namespaceIds).length);
}
