/**
 * Gauges of usage against limits, for dashboards (deploy/grafana/orbit-dashboard.json): read from
 * the database when /metrics is scraped (at most once a second per process, whatever the number
 * of gauges), so every process reports the same database-wide figures - take `max` across
 * processes, not `sum`.
 *
 * Labels, and why the number of series stays bounded:
 * - `orbit_application_*{application}`: one series per application (its name);
 * - `orbit_queue_*{application, namespace, queue}`: one per queue, for at most
 *   ORBIT_METRICS_MAX_QUEUES queues (default 200), the ones with the most unfinished tasks;
 * - `orbit_subscription_lag_*{application, namespace, subscription}`: one per subscription, for at
 *   most as many subscriptions, the ones furthest behind.
 * No task, attempt, credential or worker id is ever a label.
 */
import { Gauge, type Registry } from 'prom-client';
import type { Logger } from './log.ts';
import type { ApplicationUsage, QueueUsage, SubscriptionLag, UsageFigures } from './store/quotas/usage-gauges.ts';

export interface UsageSnapshot {
  applications: ApplicationUsage[];
  queues: QueueUsage[];
  subscriptions: SubscriptionLag[];
}

const FIGURES: Array<[keyof UsageFigures, string]> = [
  ['unfinished_tasks', 'unfinished tasks (WAITING, LEASED, RUNNING, NEEDS_REVIEW)'],
  ['max_unfinished_tasks', 'the max_unfinished_tasks limit'],
  ['active_attempts', 'active attempts (reserved or running)'],
  ['max_concurrency', 'the max_concurrency limit'],
  ['pending_starts', 'attempts reserved but not started'],
  ['window_starts', 'starts granted in the current one-second window'],
  ['rate_per_second', 'the rate_per_second limit (starts per one-second window)'],
];

/**
 * `load`, at most once a second however many gauges ask (a scrape collects each gauge in turn);
 * when the database does not answer, `empty` for that scrape and a warning naming `what`.
 */
export function oncePerSecond<T>(load: () => Promise<T>, empty: () => T, log: Logger, what: string): () => Promise<T> {
  let cached: { at: number; value: Promise<T> } | null = null;
  return () => {
    if (cached === null || Date.now() - cached.at >= 1000) {
      cached = {
        at: Date.now(),
        value: load().catch((error: unknown) => {
          log.warn({ err: error }, `${what}: the database did not answer; reporting none this scrape`);
          return empty();
        }),
      };
    }
    return cached.value;
  };
}

export function registerUsageGauges(registry: Registry, load: () => Promise<UsageSnapshot>, log: Logger): void {
  const snapshot = oncePerSecond(load, () => ({ applications: [], queues: [], subscriptions: [] }), log, 'usage gauges');
  const gauge = <T>(
    name: string,
    help: string,
    labelNames: string[],
    rows: (s: UsageSnapshot) => T[],
    labels: (row: T) => Record<string, string>,
    value: (row: T) => number,
  ) =>
    new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        const current = rows(await snapshot());
        this.reset();
        for (const row of current) this.set(labels(row), value(row));
      },
    });
  const app = (a: ApplicationUsage) => ({ application: a.application });
  const queue = (q: QueueUsage) => ({ application: q.application, namespace: q.namespace, queue: q.queue });
  for (const [figure, help] of FIGURES) {
    gauge(
      `orbit_application_${figure}`,
      `Application: ${help}`,
      ['application'],
      (s) => s.applications,
      app,
      (a) => a[figure],
    );
    gauge(
      `orbit_queue_${figure}`,
      `Queue: ${help}`,
      ['application', 'namespace', 'queue'],
      (s) => s.queues,
      queue,
      (q) => q[figure],
    );
  }
  gauge(
    'orbit_application_open_sessions',
    'Application: OPEN worker sessions, on every server process',
    ['application'],
    (s) => s.applications,
    app,
    (a) => a.open_sessions,
  );
  const subscription = (s: SubscriptionLag) => ({ application: s.application, namespace: s.namespace, subscription: s.subscription });
  gauge(
    'orbit_subscription_lag_events',
    'Subscription: events of its namespace after its acknowledged position (among the next 100,000 sequence numbers; its filters not applied)',
    ['application', 'namespace', 'subscription'],
    (s) => s.subscriptions,
    subscription,
    (s) => s.events_behind,
  );
  gauge(
    'orbit_subscription_lag_seconds',
    'Subscription: seconds since the first event after its acknowledged position happened (0 at the head)',
    ['application', 'namespace', 'subscription'],
    (s) => s.subscriptions,
    subscription,
    (s) => s.seconds_behind,
  );
  gauge(
    'orbit_queue_paused',
    'Queue: 1 when paused',
    ['application', 'namespace', 'queue'],
    (s) => s.queues,
    queue,
    (q) => (q.paused ? 1 : 0),
  );
  gauge(
    'orbit_queue_oldest_waiting_seconds',
    'Queue: seconds since the oldest claimable WAITING task became available (0 when none waits)',
    ['application', 'namespace', 'queue'],
    (s) => s.queues,
    queue,
    (q) => q.oldest_waiting_seconds,
  );
}
