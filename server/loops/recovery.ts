/**
 * The recovery loop that every server process runs: expired reservations and leases, WAITING
 * tasks past their deadline, and sessions of servers that died. Processes do not coordinate:
 * SKIP LOCKED and re-checks under locks make concurrent rounds safe and each release happen once.
 */
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Database } from '../store/database/database.ts';
import { expireDeadlines, recoverExpiredAttempts } from '../store/attempts/recovery.ts';
import { sessionCloseStale } from '../store/workers/worker-sessions.ts';
import { PeriodicLoop } from './periodic-loop.ts';

export interface RecoveryLoopOptions {
  db: Database;
  log: Logger;
  metrics: Metrics;
  intervalMs: number;
  leaseSeconds: number;
  batchSize?: number;
}

/** Batches of expired attempts one recovery round may settle when it finds a backlog. */
const MAX_BATCHES_PER_ROUND = 25;

export class RecoveryLoop extends PeriodicLoop {
  private busyAttempts = new Set<string>();
  private busyDeadlines = new Set<string>();

  constructor(private readonly options: RecoveryLoopOptions) {
    super(options.intervalMs, 'recovery');
  }

  /** One round; exported for tests that want recovery now. */
  async round(): Promise<void> {
    const { db, log, metrics } = this.options;
    const limit = this.options.batchSize ?? 200;
    try {
      // A backlog (many leases ending at once: a worker fleet lost) is worked off batch after
      // batch within the round, up to MAX_BATCHES_PER_ROUND, instead of one batch per interval.
      const attempts = await recoverExpiredAttempts(db, { limit, waitFor: this.busyAttempts });
      for (let batch = 1; batch < MAX_BATCHES_PER_ROUND && attempts.candidates === limit && attempts.busy.length === 0; batch++) {
        const more = await recoverExpiredAttempts(db, { limit, waitFor: new Set() });
        attempts.expired_reservation += more.expired_reservation;
        attempts.expired_lease += more.expired_lease;
        attempts.busy = more.busy;
        attempts.candidates = more.candidates;
      }
      this.busyAttempts = new Set(attempts.busy);
      const deadlines = await expireDeadlines(db, { limit, waitFor: this.busyDeadlines });
      this.busyDeadlines = new Set(deadlines.busy);
      const sessions = await sessionCloseStale(db, this.options.leaseSeconds * 3);
      if (attempts.expired_reservation) metrics.recoveries.inc({ kind: 'expired_reservation' }, attempts.expired_reservation);
      if (attempts.expired_lease) metrics.recoveries.inc({ kind: 'expired_lease' }, attempts.expired_lease);
      if (deadlines.deadline) metrics.recoveries.inc({ kind: 'deadline' }, deadlines.deadline);
      if (sessions) metrics.recoveries.inc({ kind: 'stale_session' }, sessions);
      if (attempts.expired_reservation + attempts.expired_lease + deadlines.deadline + sessions > 0) {
        log.info({ ...attempts, deadline: deadlines.deadline, stale_sessions: sessions, busy: undefined }, 'recovered');
      }
    } catch (error) {
      log.warn({ err: error }, 'recovery round failed; retrying next round');
    }
  }
}
