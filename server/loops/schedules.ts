/**
 * The schedule loop that every server process runs: finds the applications with due schedules,
 * then fires each application's in one transaction (store/schedules/schedule-firing.ts).
 * Processes do not coordinate: SKIP LOCKED on the schedule rows means two processes never fire
 * the same schedule at once and never wait for each other, and the trigger point's unique
 * identity makes a second task for one point impossible even so.
 *
 * One tenant's failure stays its own:
 * - applications are visited in rotation (each round goes on after the last application the
 *   previous round reached), so none is kept out by others that have more due work or fail;
 * - when one application's transaction fails, the loop goes on with the next application, and
 *   fires that application's due schedules one by one, so that only the schedule that fails
 *   alone fails: it records the cause (`last_error`, metric `orbit_schedule_failures_total`)
 *   and is tried again after a pause that grows with each failure;
 * - only a database that does not answer at all ends the round early (every application would
 *   fail alike).
 */
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { idToHex, type IdBytes } from '../ids.ts';
import { isDatabaseUnreachable, isRetryableTransactionError, PacketTooLarge, type Database } from '../store/database/database.ts';
import {
  applicationsWithDueSchedules,
  dueScheduleIds,
  scheduleFireApplication,
  scheduleRecordFailure,
  type FiringCounts,
} from '../store/schedules/schedule-firing.ts';
import { PeriodicLoop } from './periodic-loop.ts';

export interface ScheduleLoopOptions {
  db: Database;
  log: Logger;
  metrics: Metrics;
  intervalMs: number;
  /** Applications visited per round, at most. */
  applicationsPerRound?: number;
}

export type ScheduleFailureReason = 'too_large' | 'refused' | 'invalid';

/** ER_NET_PACKET_TOO_LARGE: the server refused a packet larger than its max_allowed_packet. */
const PACKET_TOO_LARGE_ERRNO = 1153;

/**
 * Why a schedule's round failed, in Orbit's words (its owner reads it as `last_error`; the log
 * keeps the error itself): no database internals beyond the error's name.
 */
export function describeScheduleFailure(error: unknown): { reason: ScheduleFailureReason; message: string } {
  const e = (error ?? {}) as { errno?: number; code?: string; sqlState?: string; message?: string };
  if (error instanceof PacketTooLarge || e.errno === PACKET_TOO_LARGE_ERRNO) {
    return { reason: 'too_large', message: "the round's writes would not fit in the database's max_allowed_packet" };
  }
  if (typeof e.sqlState === 'string') {
    return { reason: 'refused', message: `the database refused the round's writes (${e.code ?? `errno ${e.errno}`})` };
  }
  const what = error instanceof Error ? error.message : String(error);
  return { reason: 'invalid', message: `the schedule could not be evaluated: ${what}` };
}

/** Errors that say the database as a whole is not there or not coping: not one schedule's fault. */
function isDatabaseWide(error: unknown): boolean {
  return isDatabaseUnreachable(error) || isRetryableTransactionError(error);
}

export class ScheduleLoop extends PeriodicLoop {
  /** The last application a round reached: the next round starts after it. */
  private cursor: IdBytes | null = null;

  constructor(private readonly options: ScheduleLoopOptions) {
    super(options.intervalMs, 'schedules');
  }

  /** One round; exported for tests that want the schedules fired now. */
  async round(): Promise<FiringCounts> {
    const { db, log, metrics } = this.options;
    const total: FiringCounts = { fired: 0, deferred: 0, skipped: 0 };
    const add = (counts: FiringCounts) => {
      total.fired += counts.fired;
      total.deferred += counts.deferred;
      total.skipped += counts.skipped;
    };
    try {
      const applications = await applicationsWithDueSchedules(db, { after: this.cursor, limit: this.options.applicationsPerRound ?? 50 });
      for (const applicationId of applications) {
        this.cursor = applicationId;
        try {
          add(await scheduleFireApplication(db, applicationId));
        } catch (error) {
          if (isDatabaseWide(error)) throw error;
          log.warn({ err: error, application: idToHex(applicationId) }, "an application's schedule round failed; firing its schedules one by one");
          add(await this.fireOneByOne(applicationId));
        }
      }
    } catch (error) {
      log.warn({ err: error }, 'schedule round failed; retrying next round');
    }
    if (total.fired) metrics.scheduleTriggerPoints.inc({ outcome: 'fired' }, total.fired);
    if (total.deferred) metrics.scheduleTriggerPoints.inc({ outcome: 'deferred' }, total.deferred);
    if (total.skipped) metrics.scheduleTriggerPoints.inc({ outcome: 'skipped' }, total.skipped);
    if (total.fired + total.skipped > 0) log.info({ ...total }, 'schedules fired');
    return total;
  }

  /** Each due schedule of the application in a transaction of its own; the ones that fail alone record why. */
  private async fireOneByOne(applicationId: IdBytes): Promise<FiringCounts> {
    const { db, log, metrics } = this.options;
    const total: FiringCounts = { fired: 0, deferred: 0, skipped: 0 };
    for (const scheduleId of await dueScheduleIds(db, applicationId)) {
      try {
        const counts = await scheduleFireApplication(db, applicationId, { scheduleIds: [scheduleId] });
        total.fired += counts.fired;
        total.deferred += counts.deferred;
        total.skipped += counts.skipped;
      } catch (error) {
        if (isDatabaseWide(error)) throw error;
        const failure = describeScheduleFailure(error);
        metrics.scheduleFailures.inc({ reason: failure.reason });
        log.warn({ err: error, schedule: idToHex(scheduleId), reason: failure.reason }, 'a schedule failed to fire; it records why and is tried again later');
        await scheduleRecordFailure(db, { applicationId, scheduleId, message: failure.message });
      }
    }
    return total;
  }
}
