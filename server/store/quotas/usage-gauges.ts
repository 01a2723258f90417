/**
 * What the dashboards' gauges read: every application's and (at most `maxQueues`) queue's
 * limits and usage, the starts in the current one-second window, the age of the oldest claimable
 * WAITING task per queue, and the open worker sessions per application. Plain reads, no lock:
 * a snapshot for /metrics, never a decision. They scan across applications on purpose (named
 * scatter reads); the queue list is bounded so the series a scrape returns stay bounded too.
 */
import { sql } from '../database/sql.ts';
import type { Queryable } from '../database/database.ts';
import type { ApplicationResourcesRow, QueueRow } from '../database/schema.ts';
import { startsInCurrentWindow, windowOfRow } from '../../domain/start-window.ts';
import { sqlToMillis } from '../../time.ts';

type Usage = Pick<
  ApplicationResourcesRow,
  | 'max_unfinished_tasks'
  | 'unfinished_tasks'
  | 'max_concurrency'
  | 'active_attempts'
  | 'pending_starts'
  | 'rate_per_second'
  | 'window_started_at'
  | 'window_starts'
>;

export interface UsageFigures {
  max_unfinished_tasks: number;
  unfinished_tasks: number;
  max_concurrency: number;
  active_attempts: number;
  pending_starts: number;
  rate_per_second: number;
  window_starts: number;
}

export interface ApplicationUsage extends UsageFigures {
  application: string;
  open_sessions: number;
}

export interface QueueUsage extends UsageFigures {
  application: string;
  namespace: string;
  queue: string;
  paused: boolean;
  /** Seconds since the oldest WAITING task that may be claimed became available; 0 when there is none. */
  oldest_waiting_seconds: number;
}

function figures(row: Usage, nowMs: number): UsageFigures {
  return {
    max_unfinished_tasks: row.max_unfinished_tasks,
    unfinished_tasks: Number(row.unfinished_tasks),
    max_concurrency: row.max_concurrency,
    active_attempts: Number(row.active_attempts),
    pending_starts: Number(row.pending_starts),
    rate_per_second: row.rate_per_second,
    window_starts: startsInCurrentWindow(windowOfRow(row), nowMs),
  };
}

export interface SubscriptionLag {
  application: string;
  namespace: string;
  subscription: string;
  /**
   * Events of the namespace after the acknowledged position, among the next LAG_COUNT_CAP
   * sequence numbers of the feed (so at most that many; the subscription's filters are not
   * applied): a bounded index range, whatever the lag.
   */
  events_behind: number;
  /** Seconds since the first event after the position happened; 0 when it is at the head. */
  seconds_behind: number;
}

/** How far past a subscription's position its lag is counted, in sequence numbers: a gauge, not an audit. */
export const LAG_COUNT_CAP = 100_000;

export async function usageSnapshot(
  db: Queryable,
  maxQueues: number,
): Promise<{ applications: ApplicationUsage[]; queues: QueueUsage[]; subscriptions: SubscriptionLag[] }> {
  const applications = await db.rows<Usage & { application: string; open_sessions: number | string; now: string }>(sql`
    SELECT /* scatter: metrics-usage */ a.name AS application, r.max_unfinished_tasks, r.unfinished_tasks, r.max_concurrency, r.active_attempts,
           r.pending_starts, r.rate_per_second, r.window_started_at, r.window_starts, NOW(6) AS now,
           (SELECT COUNT(*) FROM orbit_worker_sessions s WHERE s.application_id = r.application_id AND s.state = 'OPEN') AS open_sessions
      FROM orbit_application_resources r JOIN orbit_applications a ON a.application_id = r.application_id
     ORDER BY a.name`);
  // The busiest queues first, so a cap keeps the ones worth watching.
  const queues = await db.rows<
    Usage & Pick<QueueRow, 'paused'> & { application: string; namespace: string; queue: string; oldest_available_at: string | null; now: string }
  >(sql`
    SELECT /* scatter: metrics-usage */ a.name AS application, n.name AS namespace, q.name AS queue, q.paused, q.max_unfinished_tasks,
           q.unfinished_tasks, q.max_concurrency, q.active_attempts, q.pending_starts, q.rate_per_second, q.window_started_at, q.window_starts,
           NOW(6) AS now,
           (SELECT MIN(t.available_at) FROM orbit_tasks t WHERE t.queue_id = q.queue_id AND t.state = 'WAITING' AND t.available_at <= NOW(6)) AS oldest_available_at
      FROM orbit_queues q
      JOIN orbit_namespaces n ON n.namespace_id = q.namespace_id
      JOIN orbit_applications a ON a.application_id = q.application_id
     ORDER BY q.unfinished_tasks DESC, a.name, n.name, q.name
     LIMIT ${maxQueues}`);
  // The subscriptions furthest behind first (oldest position), as many as queues are shown.
  const subscriptions = await db.rows<{
    application: string;
    namespace: string;
    subscription: string;
    behind: number | string;
    first_at: string | null;
    now: string;
  }>(sql`
    SELECT /* scatter: metrics-usage */ a.name AS application, n.name AS namespace, s.name AS subscription, NOW(6) AS now,
           (SELECT COUNT(*) FROM orbit_events e
             WHERE e.namespace_id = s.namespace_id AND e.sequence > s.acked_sequence AND e.sequence <= s.acked_sequence + ${LAG_COUNT_CAP}) AS behind,
           (SELECT e.occurred_at FROM orbit_events e WHERE e.namespace_id = s.namespace_id AND e.sequence > s.acked_sequence ORDER BY e.sequence LIMIT 1) AS first_at
      FROM orbit_subscriptions s
      JOIN orbit_namespaces n ON n.namespace_id = s.namespace_id
      JOIN orbit_applications a ON a.application_id = s.application_id
     ORDER BY s.acked_sequence, a.name, n.name, s.name
     LIMIT ${maxQueues}`);
  return {
    subscriptions: subscriptions.map((row) => ({
      application: row.application,
      namespace: row.namespace,
      subscription: row.subscription,
      events_behind: Number(row.behind),
      seconds_behind: row.first_at === null ? 0 : Math.max(0, (sqlToMillis(row.now) - sqlToMillis(row.first_at)) / 1000),
    })),
    applications: applications.map((row) => ({
      application: row.application,
      open_sessions: Number(row.open_sessions),
      ...figures(row, sqlToMillis(row.now)),
    })),
    queues: queues.map((row) => {
      const nowMs = sqlToMillis(row.now);
      return {
        application: row.application,
        namespace: row.namespace,
        queue: row.queue,
        paused: row.paused === 1,
        oldest_waiting_seconds: row.oldest_available_at === null ? 0 : Math.max(0, (nowMs - sqlToMillis(row.oldest_available_at)) / 1000),
        ...figures(row, nowMs),
      };
    }),
  };
}
