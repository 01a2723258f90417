/**
 * Retention gauges, for dashboards and for sizing the database (docs/operations.md#retention):
 * read from the database when /metrics is scraped (at most once a second per process), the same
 * figures in every process - take `max` across processes, not `sum`. Labels: `table` only (the
 * Orbit table's name), so the series are bounded by the schema.
 */
import { Gauge, type Registry } from 'prom-client';
import type { Logger } from './log.ts';
import type { RetentionSnapshot } from './store/retention/retention-gauges.ts';
import { oncePerSecond } from './usage-metrics.ts';

export function registerRetentionGauges(registry: Registry, load: () => Promise<RetentionSnapshot>, log: Logger): void {
  const snapshot = oncePerSecond(load, () => ({ oldestAgeSeconds: [], sizes: [] }), log, 'retention gauges');
  const gauge = <T>(name: string, help: string, rows: (s: RetentionSnapshot) => T[], label: (row: T) => string, value: (row: T) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['table'],
      registers: [registry],
      async collect() {
        const current = rows(await snapshot());
        this.reset();
        for (const row of current) this.set({ table: label(row) }, value(row));
      },
    });
  gauge(
    'orbit_retention_oldest_row_age_seconds',
    'Age of the oldest row still kept in a table pruned by retention (tasks: since they finished; events, receipts, audit records: since written; sessions: since closed)',
    (s) => s.oldestAgeSeconds,
    (r) => r.table,
    (r) => r.seconds,
  );
  gauge(
    'orbit_table_rows',
    "Approximate rows of an Orbit table (InnoDB's estimate)",
    (s) => s.sizes,
    (r) => r.table,
    (r) => r.rows,
  );
  gauge(
    'orbit_table_bytes',
    'Approximate bytes of an Orbit table, data and indexes',
    (s) => s.sizes,
    (r) => r.table,
    (r) => r.bytes,
  );
}
