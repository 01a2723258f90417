/**
 * The pruning loop that every server process runs: finished history goes by each application's
 * retention policy (server/domain/retention.ts says what may go; store/retention/prune.ts how).
 *
 * - Fair across processes and applications: a round takes the applications whose turn it is
 *   (their policy rows due longest ago, SKIP LOCKED, so two processes take different ones) and
 *   moves their turn on; an application with more left than a turn removes is due again at
 *   once, behind the others waiting.
 * - Bounded: a turn removes at most MAX_BATCHES_PER_TABLE batches per table, each of at most
 *   ORBIT_PRUNE_BATCH_ROWS rows, one statement at a time on one connection.
 * - Throttled: after each batch the loop pauses so that its statements take at most
 *   ORBIT_PRUNE_MAX_SHARE of the wall time (of one connection, per process); a batch of 40 ms at
 *   the default share 0.1 is followed by 360 ms of nothing.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Database } from '../store/database/database.ts';
import type { IdBytes } from '../ids.ts';
import type { RetentionPolicy } from '../domain/retention.ts';
import {
  namespacesOf,
  noneRemoved,
  pruneAudit,
  pruneDueAgain,
  pruneEvents,
  pruneFinishedTasks,
  pruneReceipts,
  pruneSessions,
  pruneTurnsTake,
  type PruneCounts,
} from '../store/retention/prune.ts';
import { PeriodicLoop } from './periodic-loop.ts';

export interface PruneLoopOptions {
  db: Database;
  log: Logger;
  metrics: Metrics | null;
  intervalMs: number;
  batchRows: number;
  maxShare: number;
}

/** Applications one round takes at most. */
const TURNS_PER_ROUND = 4;
/** Batches per table in one application's turn. */
const MAX_BATCHES_PER_TABLE = 20;

export class PruneLoop extends PeriodicLoop {
  private stopping = false;

  constructor(private readonly options: PruneLoopOptions) {
    super(options.intervalMs, 'prune');
  }

  override async stop(): Promise<void> {
    this.stopping = true;
    await super.stop();
  }

  /** One round: the applications due, each pruned in its turn. Exported for tests and `orbit-admin prune`. */
  async round(): Promise<PruneCounts> {
    const total = noneRemoved();
    try {
      const turns = await pruneTurnsTake(this.options.db, TURNS_PER_ROUND, this.options.intervalMs);
      for (const turn of turns) {
        if (this.stopping) break;
        const { counts, more } = await this.turn(turn.applicationId, turn.policy);
        for (const [table, n] of Object.entries(counts)) total[table as keyof PruneCounts] += n;
        if (more) await pruneDueAgain(this.options.db, turn.applicationId);
      }
      const removed = Object.values(total).reduce((a, b) => a + b, 0);
      if (removed > 0) this.options.log.debug({ pruned: total }, 'pruned');
    } catch (error) {
      this.options.log.warn({ err: error }, 'prune round failed; retrying next round');
    }
    return total;
  }

  /** One application's turn: every table, batch after batch while batches come back full. */
  async turn(applicationId: IdBytes, policy: RetentionPolicy): Promise<{ counts: PruneCounts; more: boolean }> {
    const { db, batchRows: limit } = this.options;
    const counts = noneRemoved();
    let more = false;
    /** Runs `batch` until it removes less than a full batch; false when the turn's budget ran out first. */
    const drain = async (batch: () => Promise<number>): Promise<void> => {
      for (let i = 0; i < MAX_BATCHES_PER_TABLE; i++) {
        if (this.stopping) return;
        const n = await this.throttled(batch);
        if (n < limit) return;
      }
      more = true;
    };
    const count = (table: keyof PruneCounts, n: number) => {
      counts[table] += n;
      if (n > 0) this.options.metrics?.prunedRows.inc({ table }, n);
    };
    const taskSeconds = policy.finished_task_retention_seconds;
    if (taskSeconds !== null) {
      await drain(async () => {
        const r = await pruneFinishedTasks(db, applicationId, taskSeconds, limit);
        count('orbit_tasks', r.tasks);
        count('orbit_attempts', r.attempts);
        return r.tasks;
      });
      await drain(async () => {
        const n = await pruneSessions(db, applicationId, taskSeconds, limit);
        count('orbit_worker_sessions', n);
        return n;
      });
    }
    const receiptSeconds = policy.receipt_retention_seconds;
    if (receiptSeconds !== null) {
      await drain(async () => {
        const n = await pruneReceipts(db, applicationId, receiptSeconds, limit);
        count('orbit_idempotency_receipts', n);
        return n;
      });
    }
    const auditSeconds = policy.audit_retention_seconds;
    if (auditSeconds !== null) {
      await drain(async () => {
        const n = await pruneAudit(db, applicationId, auditSeconds, limit);
        count('orbit_audit_events', n);
        return n;
      });
    }
    if (policy.event_retention_seconds !== null) {
      for (const namespaceId of await namespacesOf(db, applicationId)) {
        await drain(async () => {
          const r = await pruneEvents(db, applicationId, namespaceId, policy, limit);
          count('orbit_events', r.events);
          return r.events;
        });
      }
    }
    return { counts, more };
  }

  /** Runs one batch, then pauses so that batches take at most `maxShare` of the time. */
  private async throttled(batch: () => Promise<number>): Promise<number> {
    const started = performance.now();
    const n = await batch();
    const busy = performance.now() - started;
    const { maxShare } = this.options;
    if (maxShare < 1 && n > 0 && !this.stopping) await sleep((busy * (1 - maxShare)) / maxShare, undefined, { ref: false });
    return n;
  }
}
