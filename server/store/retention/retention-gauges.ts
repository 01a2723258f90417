/**
 * What the retention gauges of /metrics read (server/retention-metrics.ts): the age of the
 * oldest row still kept in each table pruning removes from, and every Orbit table's approximate
 * size. Plain reads on a scrape, no lock. The oldest row is found per application (or namespace,
 * for events) by a loose scan of the index pruning uses - one index dive per group, not a scan
 * of the table - and the sizes are InnoDB's estimates from information_schema.
 */
import { sql } from '../database/sql.ts';
import type { Queryable } from '../database/database.ts';

export interface RetentionSnapshot {
  /** Seconds since the oldest kept row of each table was written or finished (absent: the table holds none). */
  oldestAgeSeconds: Array<{ table: string; seconds: number }>;
  /** Approximate rows and bytes (data and indexes) of every Orbit table. */
  sizes: Array<{ table: string; rows: number; bytes: number }>;
}

/** Each pruned table's time column and the index prefix it is grouped by (constant SQL text). */
const OLDEST: ReadonlyArray<{ table: string; column: string; group: string }> = [
  { table: 'orbit_tasks', column: 'finished_at', group: 'application_id' },
  { table: 'orbit_events', column: 'occurred_at', group: 'namespace_id' },
  { table: 'orbit_idempotency_receipts', column: 'created_at', group: 'application_id' },
  { table: 'orbit_audit_events', column: 'created_at', group: 'application_id' },
  { table: 'orbit_worker_sessions', column: 'closed_at', group: 'application_id' },
];

export async function retentionSnapshot(db: Queryable): Promise<RetentionSnapshot> {
  const statements = OLDEST.map(
    ({ table, column, group }) =>
      sql`SELECT TIMESTAMPDIFF(MICROSECOND, MIN(oldest), NOW(6)) / 1000000 AS seconds
            FROM (SELECT MIN(${sql.raw(column)}) AS oldest FROM ${sql.raw(table)} /* scatter: metrics-retention */
                   WHERE ${sql.raw(column)} IS NOT NULL GROUP BY ${sql.raw(group)}) AS per_group`,
  );
  statements.push(
    sql`SELECT TABLE_NAME AS name, TABLE_ROWS AS row_estimate, DATA_LENGTH + INDEX_LENGTH AS bytes FROM information_schema.TABLES
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'orbit\\_%' ORDER BY TABLE_NAME`,
  );
  const results = (await db.batch(statements)) as Array<Array<Record<string, string | number | null>>>;
  const oldestAgeSeconds: RetentionSnapshot['oldestAgeSeconds'] = [];
  OLDEST.forEach(({ table }, i) => {
    const seconds = results[i]?.[0]?.seconds;
    if (seconds !== null && seconds !== undefined) oldestAgeSeconds.push({ table, seconds: Math.max(0, Number(seconds)) });
  });
  const sizes = (results[OLDEST.length] ?? []).map((r) => ({ table: String(r.name), rows: Number(r.row_estimate ?? 0), bytes: Number(r.bytes ?? 0) }));
  return { oldestAgeSeconds, sizes };
}
