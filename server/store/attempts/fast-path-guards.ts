/**
 * What the one-round-trip paths of Start and of the result share (attempt-start.ts,
 * attempt-complete.ts): what the session knows about an attempt, how a statement names the rows
 * it expects, and which errors mean "the careful path decides".
 *
 * A fast path sends every statement and the COMMIT in one round trip. Each statement carries
 * what the session expects in its WHERE clause and the next statement checks it with a guard
 * (`IF(ROW_COUNT() = n, …, NULL)` on a NOT NULL column, usage-writes.ts `rowCountGuard`): if anything differs, the server stops
 * before COMMIT, the transaction rolls back untouched, and the careful path runs instead.
 */
import type { IdBytes } from '../../ids.ts';
import { sql, type SQL } from '../database/sql.ts';
import { isRetryableTransactionError } from '../database/database.ts';
import type { AttemptRef } from './attempts.ts';

/** What the session knows of an attempt it holds: enough to write the fast path's expectations. */
export interface KnownAttempt extends AttemptRef {
  sessionId: IdBytes;
  resourceKey: string | null;
  deadlineAtMs: number;
}

/** Which path an operation took: the one-round-trip one, or the careful one that decides item by item. */
export type PathTaken = 'fast' | 'careful';

/** How many items per key; items whose key is null are not counted. */
export function countBy<T>(items: T[], key: (item: T) => string | null): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) {
    const k = key(item);
    if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return counts;
}

/**
 * `id IN (…) AND (id, other) IN ((…), …)`: rows named by primary key, each with what the session
 * expects of it. The plain IN keeps the lookup on the primary key: with the row-constructor IN
 * alone, MariaDB 10.11 plans a one-pair list as a range over a secondary index - for attempts,
 * `(state, lease_expires_at)`: every RUNNING attempt of every application (seen in the slow log:
 * 120 rows examined to finish one attempt, growing with the number running).
 */
export function rowsAsExpected(
  idColumn: 'task_id' | 'attempt_id',
  otherColumn: 'current_attempt_id' | 'session_id',
  pairs: ReadonlyArray<readonly [IdBytes, IdBytes]>,
): SQL {
  return sql`${sql.raw(idColumn)} IN (${sql.join(
    pairs.map(([id]) => sql`${id}`),
    sql`, `,
  )}) AND (${sql.raw(idColumn)}, ${sql.raw(otherColumn)}) IN (${sql.join(
    pairs.map(([id, other]) => sql`(${id}, ${other})`),
    sql`, `,
  )})`;
}

/**
 * A guard fired (ER_BAD_NULL_ERROR), a counter would have gone below zero
 * (ER_DATA_OUT_OF_RANGE), or deadlocks outlasted the retries: the careful path decides.
 */
export function isFastPathMiss(error: unknown): boolean {
  const errno = (error as { errno?: number } | null)?.errno;
  return errno === 1048 || errno === 1690 || isRetryableTransactionError(error);
}
