/** Defaults of the limits (DESIGN.md §4–§6; ranges are in openapi.yaml). */
export const APPLICATION_DEFAULTS = {
  max_unfinished_tasks: 1_000_000,
  max_concurrency: 10_000,
  rate_per_second: 100_000,
} as const;

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
