/**
 * The schedule loop that every server process runs: finds due schedules, then fires each
 * application's in one transaction (store/schedules/schedule-firing.ts). Processes do not
 * coordinate: SKIP LOCKED on the schedule rows means two processes never fire the same schedule
 * at once and never wait for each other, and the trigger point's unique identity makes a second
 * task for one point impossible even so.
 */
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Database } from '../store/database/database.ts';
import { idToHex } from '../ids.ts';
import { scheduleFireApplication, schedulesDue, type FiringCounts } from '../store/schedules/schedule-firing.ts';
import { PeriodicLoop } from './periodic-loop.ts';

export interface ScheduleLoopOptions {
  db: Database;
  log: Logger;
  metrics: Metrics;
  intervalMs: number;
  /** Due schedules looked at per round (across applications). */
  batchSize?: number;
}

export class ScheduleLoop extends PeriodicLoop {
  constructor(private readonly options: ScheduleLoopOptions) {
    super(options.intervalMs);
  }

  /** One round; exported for tests that want the schedules fired now. */
  async round(): Promise<FiringCounts> {
    const { db, log, metrics } = this.options;
    const total: FiringCounts = { fired: 0, deferred: 0, skipped: 0 };
    try {
      const due = await schedulesDue(db, this.options.batchSize ?? 100);
      const byApplication = new Map<string, Buffer[]>();
      for (const row of due) {
        const key = idToHex(row.application_id);
        byApplication.set(key, [...(byApplication.get(key) ?? []), row.schedule_id]);
      }
      for (const [applicationHex, scheduleIds] of byApplication) {
        const counts = await scheduleFireApplication(db, Buffer.from(applicationHex, 'hex'), scheduleIds);
        total.fired += counts.fired;
        total.deferred += counts.deferred;
        total.skipped += counts.skipped;
      }
      if (total.fired) metrics.scheduleTriggerPoints.inc({ outcome: 'fired' }, total.fired);
      if (total.deferred) metrics.scheduleTriggerPoints.inc({ outcome: 'deferred' }, total.deferred);
      if (total.skipped) metrics.scheduleTriggerPoints.inc({ outcome: 'skipped' }, total.skipped);
      if (total.fired + total.skipped > 0) log.info({ ...total }, 'schedules fired');
    } catch (error) {
      log.warn({ err: error }, 'schedule round failed; retrying next round');
    }
    return total;
  }
}
