/**
 * Prometheus metrics of one server process (prom-client). Each process exposes its own
 * counters at `/metrics`; sum them across processes in Prometheus.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { currentOperation } from './operation.ts';
import type { DatabaseObserver } from './store/database/database.ts';

export interface Metrics {
  registry: Registry;
  httpRequests: Counter<'operation' | 'status'>;
  submissions: Counter<'result'>;
  claims: Counter<'result'>;
  claimedAttempts: Counter;
  starts: Counter<'result'>;
  completions: Counter<'outcome' | 'task_state'>;
  releases: Counter;
  recoveries: Counter<'kind'>;
  scheduleTriggerPoints: Counter<'outcome'>;
  scheduleFailures: Counter<'reason'>;
  leaseAgeSeconds: Histogram;
  transactionSeconds: Histogram<'operation'>;
  dbStatements: Counter<'operation'>;
  dbRoundTrips: Counter<'operation'>;
  dbTransactionHeld: Histogram<'operation'>;
  dbTransactionRetries: Counter<'operation' | 'reason' | 'outcome'>;
  fastPath: Counter<'operation' | 'result'>;
  prunedRows: Counter<'table'>;
  workerSessions: Gauge;
}

export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'orbit_process_' });
  return {
    registry,
    httpRequests: new Counter({
      name: 'orbit_http_requests_total',
      help: 'HTTP answers by operation (the operationId of openapi.yaml; unmatched for a path or method no operation serves) and status code',
      labelNames: ['operation', 'status'],
      registers: [registry],
    }),
    submissions: new Counter({
      name: 'orbit_task_submissions_total',
      help: "Task submissions, single and bulk items, by result (accepted, deduplicated, or the refusal's error code in lower case: application_full, queue_full, invalid_argument, …)",
      labelNames: ['result'],
      registers: [registry],
    }),
    claims: new Counter({
      name: 'orbit_claims_total',
      help: 'Worker claim requests by result (granted, empty)',
      labelNames: ['result'],
      registers: [registry],
    }),
    claimedAttempts: new Counter({ name: 'orbit_claimed_attempts_total', help: 'Attempts reserved by claims', registers: [registry] }),
    starts: new Counter({
      name: 'orbit_starts_total',
      help: 'Starts by result (started, started_on_claim, duplicate, rate_limited, lease_lost)',
      labelNames: ['result'],
      registers: [registry],
    }),
    completions: new Counter({
      name: 'orbit_completions_total',
      help: 'Authoritative results by outcome and resulting task state',
      labelNames: ['outcome', 'task_state'],
      registers: [registry],
    }),
    releases: new Counter({ name: 'orbit_released_reservations_total', help: 'Unstarted reservations given back by workers', registers: [registry] }),
    recoveries: new Counter({
      name: 'orbit_recoveries_total',
      help: 'Recovery actions by kind (expired_reservation, expired_lease, deadline, stale_session)',
      labelNames: ['kind'],
      registers: [registry],
    }),
    scheduleTriggerPoints: new Counter({
      name: 'orbit_schedule_trigger_points_total',
      help: 'Schedule trigger points by outcome: fired (a task was made), deferred (waited a round because a quota was full; counted once per point), skipped (dropped by the misfire policy)',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    scheduleFailures: new Counter({
      name: 'orbit_schedule_failures_total',
      help: 'Schedules whose round failed, by reason: too_large (a write would not fit in the database packet), refused (the database refused the writes), invalid (the stored definition could not be evaluated); the schedule shows last_error and is tried again later',
      labelNames: ['reason'],
      registers: [registry],
    }),
    leaseAgeSeconds: new Histogram({
      name: 'orbit_lease_age_seconds',
      help: "Age of an attempt from its claim to the worker's final result",
      buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60, 300],
      registers: [registry],
    }),
    transactionSeconds: new Histogram({
      name: 'orbit_db_transaction_seconds',
      help: 'Database transaction latency by operation',
      labelNames: ['operation'],
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers: [registry],
    }),
    dbStatements: new Counter({
      name: 'orbit_db_statements_total',
      help: 'Statements sent to the database by operation (START TRANSACTION and COMMIT included)',
      labelNames: ['operation'],
      registers: [registry],
    }),
    dbRoundTrips: new Counter({
      name: 'orbit_db_round_trips_total',
      help: 'Round trips to the database by operation',
      labelNames: ['operation'],
      registers: [registry],
    }),
    dbTransactionRetries: new Counter({
      name: 'orbit_db_transaction_retries_total',
      help: 'Transactions that failed with a deadlock (on a Galera cluster: a certification failure too) or a lock-wait timeout, by operation, reason and outcome (retried whole, or gave_up: its retries spent - answered 503, or a fast path that falls back to its careful path)',
      labelNames: ['operation', 'reason', 'outcome'],
      registers: [registry],
    }),
    dbTransactionHeld: new Histogram({
      name: 'orbit_db_transaction_held_seconds',
      help: 'How long a transaction held its connection, from its start to its COMMIT or ROLLBACK (the hot rows it locks are held for at most this long), by operation',
      labelNames: ['operation'],
      buckets: [
        0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.006, 0.008, 0.012, 0.016, 0.024, 0.032, 0.048, 0.064, 0.128, 0.256, 0.512, 1, 2,
      ],
      registers: [registry],
    }),
    fastPath: new Counter({
      name: 'orbit_fast_path_total',
      help: 'One-round-trip transactions by operation and result (hit, or miss: the careful path decided)',
      labelNames: ['operation', 'result'],
      registers: [registry],
    }),
    prunedRows: new Counter({
      name: 'orbit_pruned_rows_total',
      help: "Rows of finished history this process's pruning loop removed, by table (retention policies)",
      labelNames: ['table'],
      registers: [registry],
    }),
    workerSessions: new Gauge({ name: 'orbit_worker_sessions', help: 'Worker sessions connected to this process', registers: [registry] }),
  };
}

/** The database layer's observer (store/database/database.ts) counting into these metrics, labelled by the operation in force (operation.ts). */
export function databaseObserver(metrics: Metrics): DatabaseObserver {
  return {
    roundTrip(statements) {
      const operation = currentOperation();
      metrics.dbRoundTrips.inc({ operation });
      metrics.dbStatements.inc({ operation }, statements);
    },
    transactionHeld(seconds) {
      metrics.dbTransactionHeld.observe({ operation: currentOperation() }, seconds);
    },
    transactionRetry(reason, outcome) {
      metrics.dbTransactionRetries.inc({ operation: currentOperation(), reason, outcome });
    },
  };
}
