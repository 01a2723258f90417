/**
 * THE lock order (docs/quotas-and-locking.md#the-lock-order). Every transaction that locks more
 * than one of these takes them in this order, so two transactions never wait on each other in a
 * cycle:
 *
 *   1. credential / namespace / application identity rows - shared (`LOCK IN SHARE MODE`), or
 *      not at all on the HTTP hot paths (authentication is a plain read before the transaction)
 *   2. worker session row                    (orbit_worker_sessions, FOR UPDATE)
 *   3. application resources row             (orbit_application_resources, FOR UPDATE / UPDATE)
 *   4. queue rows, in ascending queue_id     (orbit_queues)
 *   5. task rows, then their attempt rows    (orbit_tasks, orbit_attempts)
 *   6. keyed permits, in ascending (queue_id, resource_key)   (orbit_key_permits)
 *
 * How late a lock is taken is a speed decision, not a change of order: the admission fast path
 * inserts its new task and receipt rows first (new rows conflict with nobody but a duplicate
 * key), then updates the application row and the queue rows last and commits, holding the hot
 * rows for one round trip. Rows that are looked up without a lock (to find which queue a task is
 * in, say) are locked afterwards in this order and re-checked.
 *
 * Quota rows (3, 4) are separate from identity rows (1), so authentication never needs more
 * than a shared lock. Recovery takes a busy application row with SKIP LOCKED - alone, before
 * anything else - and tries again later (the round after, it waits).
 *
 * Every writer of task, attempt and permit rows of an application holds its application row
 * first (admission writes only new rows). So those rows are in effect serialised per
 * application: the permit sequence "INSERT IGNORE (shared lock on an existing row), then
 * SELECT … FOR UPDATE" cannot deadlock against another claim, and the order in which permits
 * of one transaction are touched does not matter - as long as that rule holds. A new writer
 * of these rows must take the application row first as well.
 */

/** Sorts ids the way rows of one table are locked: ascending bytes. */
export function byIdAscending(a: Buffer, b: Buffer): number {
  return Buffer.compare(a, b);
}
