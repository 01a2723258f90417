/**
 * Defaults (docs/quotas-and-locking.md#three-limits-two-levels; ranges are in openapi.yaml). The
 * application's defaults are the column defaults of orbit_application_resources (migrations/0001),
 * used when a row is created.
 */
export const QUEUE_DEFAULTS = {
  max_unfinished_tasks: 100_000,
  max_concurrency: 1_000,
  rate_per_second: 10_000,
  key_concurrency: 1,
  paused: false,
} as const;

export const TASK_DEFAULTS = {
  priority: 5,
  max_attempts: 3,
  deadline_seconds: 86_400,
  delay_seconds: 0,
  on_unknown_outcome: 'retry',
} as const;

export const SCHEDULE_DEFAULTS = {
  timezone: 'UTC',
  misfire_policy: 'skip',
  misfire_window_seconds: 60,
} as const;
