/**
 * Drizzle mirror of the database schema. The SQL files in `migrations/` ARE the schema (applied by
 * `migrate.ts`, which also creates `orbit_schema_migrations`); this file describes the same tables
 * for typed queries and tooling, and must never disagree with them:
 * `test/store/schema-drift.test.ts` migrates a fresh database and compares every table,
 * column (order, SQL type, character set, nullability, default, auto-increment), primary key and
 * index against these definitions.
 *
 * When a migration adds or changes something, change this file in the same commit.
 *
 * Conventions (docs/storage.md#rules-for-every-table): every table is `orbit_*`, has
 * `application_id`, ids are BINARY(16), no foreign keys, utf8mb4 / utf8mb4_bin, and a Chinese
 * COMMENT on every table and column (comments are checked by the drift test against the database;
 * drizzle cannot express them).
 *
 * This file is also the single description of the rows the store reads. The store sends its own
 * SQL (locking reads, multi-statement round trips) through mysql2, not drizzle's query builder,
 * so the keys here are the column names and each column's TypeScript type is what mysql2 hands
 * back for it with Orbit's pool settings: `BINARY` → Buffer, `BIGINT UNSIGNED` → decimal string
 * (`bigNumberStrings`: counters, revisions and sequences stay exact), `DATETIME(6)` → text in
 * UTC (`dateStrings`), `TINYINT(1)` → 0 or 1. `typeof tasks.$inferSelect` (exported below as
 * `TaskRow`, …) is therefore exactly a row of `SELECT * FROM orbit_tasks`; a query selecting a
 * few columns types its rows as a `Pick<>` of it.
 */
import { sql } from 'drizzle-orm';
import {
  bigint,
  binary,
  char,
  customType,
  datetime,
  index,
  int,
  mediumtext,
  mysqlTable,
  primaryKey,
  smallint,
  text,
  tinyint,
  uniqueIndex,
  varchar,
} from 'drizzle-orm/mysql-core';

/** A 16-byte identifier (`BINARY(16)`). */
const id = <N extends string>(name: N) => binary(name, { length: 16 }).$type<Buffer>();
/** `BINARY(n)` other than ids (secret and request hashes), a Buffer like ids. */
const bytes = <N extends string>(name: N, length: number) => binary(name, { length }).$type<Buffer>();
/** `DATETIME(6)`, UTC, read as `YYYY-MM-DD HH:MM:SS.ffffff`. */
const time = <N extends string>(name: N) => datetime(name, { fsp: 6, mode: 'string' });
/** `BIGINT UNSIGNED` as a `bigint` (uint64 counters, revisions, sequences; the API renders them as decimal strings). */
const uint64 = <N extends string>(name: N) => bigint(name, { mode: 'bigint', unsigned: true }).$type<string>();
/**
 * `TINYINT(1)` flags. mysql2 returns them as the numbers 0 and 1 (drizzle's `boolean` would
 * claim `true`/`false`, which the raw rows the store reads never hold).
 */
const flag = customType<{ data: number; driverData: number }>({
  dataType() {
    return 'tinyint(1)';
  },
});
/** `INT UNSIGNED`. */
const uint32 = <N extends string>(name: N) => int(name, { unsigned: true });
/** `SMALLINT UNSIGNED`. */
const uint16 = <N extends string>(name: N) => smallint(name, { unsigned: true });

/**
 * `VARCHAR(n) CHARACTER SET ascii COLLATE ascii_bin` (idempotency keys): drizzle's varchar has no
 * character-set option, so the full column type is spelled out.
 */
const asciiVarchar = customType<{ data: string; driverData: string; config: { length: number } }>({
  dataType(config) {
    return `varchar(${config?.length ?? 255}) character set ascii collate ascii_bin`;
  },
});

/** `orbit_schema_migrations`: the ledger `migrate.ts` creates itself (not in a migration file). */
export const schemaMigrations = mysqlTable('orbit_schema_migrations', {
  version: uint32('version').primaryKey(),
  application_id: id('application_id').notNull().default(sql`x'00000000000000000000000000000000'`),
  name: varchar('name', { length: 128 }).notNull(),
  checksum: char('checksum', { length: 64 }).notNull(),
  applied_at: time('applied_at').notNull(),
});

/** `orbit_migration_lock`: the migration lock `migrate.ts` creates itself - a row while a migrator holds it. */
export const migrationLock = mysqlTable('orbit_migration_lock', {
  lock_name: varchar('lock_name', { length: 32 }).primaryKey(),
  application_id: id('application_id').notNull().default(sql`x'00000000000000000000000000000000'`),
  holder: char('holder', { length: 64 }).notNull(),
  expires_at: time('expires_at').notNull(),
});

// ---------------------------------------------------------------------------------------------
// 0001_foundation.sql
// ---------------------------------------------------------------------------------------------

export const applications = mysqlTable(
  'orbit_applications',
  {
    application_id: id('application_id').primaryKey(),
    name: varchar('name', { length: 128 }).notNull(),
    enabled: flag('enabled').notNull().default(1),
    created_at: time('created_at').notNull(),
    updated_at: time('updated_at').notNull(),
  },
  (t) => [uniqueIndex('uk_orbit_applications_name').on(t.name)],
);

export const namespaces = mysqlTable(
  'orbit_namespaces',
  {
    namespace_id: id('namespace_id').primaryKey(),
    application_id: id('application_id').notNull(),
    name: varchar('name', { length: 63 }).notNull(),
    environment: varchar('environment', { length: 16 }).notNull(),
    enabled: flag('enabled').notNull().default(1),
    created_at: time('created_at').notNull(),
    updated_at: time('updated_at').notNull(),
  },
  (t) => [uniqueIndex('uk_orbit_namespaces_name').on(t.application_id, t.name)],
);

export const credentials = mysqlTable(
  'orbit_credentials',
  {
    credential_id: id('credential_id').primaryKey(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    secret_sha256: bytes('secret_sha256', 32).notNull(),
    actions: text('actions').notNull(),
    queue_scope: text('queue_scope').notNull(),
    description: varchar('description', { length: 255 }).notNull().default(''),
    created_at: time('created_at').notNull(),
    expires_at: time('expires_at'),
    revoked_at: time('revoked_at'),
  },
  (t) => [index('ix_orbit_credentials_namespace').on(t.namespace_id)],
);

export const applicationResources = mysqlTable('orbit_application_resources', {
  application_id: id('application_id').primaryKey(),
  revision: uint64('revision').notNull().default('1'),
  max_unfinished_tasks: uint32('max_unfinished_tasks').notNull().default(1000000),
  max_concurrency: uint32('max_concurrency').notNull().default(10000),
  rate_per_second: uint32('rate_per_second').notNull().default(100000),
  unfinished_tasks: uint64('unfinished_tasks').notNull().default('0'),
  active_attempts: uint64('active_attempts').notNull().default('0'),
  pending_starts: uint64('pending_starts').notNull().default('0'),
  window_started_at: time('window_started_at'),
  window_starts: uint32('window_starts').notNull().default(0),
  updated_at: time('updated_at').notNull(),
  // 0010_namespace_floors.sql: the sums of the namespaces' reservations and their idle part.
  reserved_unfinished_tasks: uint64('reserved_unfinished_tasks').notNull().default('0'),
  reserved_concurrency: uint64('reserved_concurrency').notNull().default('0'),
  reserved_rate_per_second: uint64('reserved_rate_per_second').notNull().default('0'),
  idle_reserved_unfinished_tasks: uint64('idle_reserved_unfinished_tasks').notNull().default('0'),
  idle_reserved_concurrency: uint64('idle_reserved_concurrency').notNull().default('0'),
  window_reserved_starts: uint64('window_reserved_starts').notNull().default('0'),
  // 0011_event_order.sql: bumped by the transactions that insert events and change no usage.
  event_writes: uint64('event_writes').notNull().default('0'),
});

/** 0010_namespace_floors.sql: a namespace's reservations inside its application's limits, and its usage. */
export const namespaceResources = mysqlTable(
  'orbit_namespace_resources',
  {
    namespace_id: id('namespace_id').primaryKey(),
    application_id: id('application_id').notNull(),
    revision: uint64('revision').notNull().default('1'),
    reserved_unfinished_tasks: uint32('reserved_unfinished_tasks').notNull().default(0),
    reserved_concurrency: uint32('reserved_concurrency').notNull().default(0),
    reserved_rate_per_second: uint32('reserved_rate_per_second').notNull().default(0),
    unfinished_tasks: uint64('unfinished_tasks').notNull().default('0'),
    active_attempts: uint64('active_attempts').notNull().default('0'),
    pending_starts: uint64('pending_starts').notNull().default('0'),
    window_started_at: time('window_started_at'),
    window_starts: uint32('window_starts').notNull().default(0),
    updated_at: time('updated_at').notNull(),
  },
  (t) => [index('ix_orbit_namespace_resources_application').on(t.application_id, t.namespace_id)],
);

export const queues = mysqlTable(
  'orbit_queues',
  {
    queue_id: id('queue_id').primaryKey(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    name: varchar('name', { length: 63 }).notNull(),
    revision: uint64('revision').notNull().default('1'),
    max_unfinished_tasks: uint32('max_unfinished_tasks').notNull().default(100000),
    max_concurrency: uint32('max_concurrency').notNull().default(1000),
    rate_per_second: uint32('rate_per_second').notNull().default(10000),
    key_concurrency: uint16('key_concurrency').notNull().default(1),
    paused: flag('paused').notNull().default(0),
    unfinished_tasks: uint64('unfinished_tasks').notNull().default('0'),
    active_attempts: uint64('active_attempts').notNull().default('0'),
    pending_starts: uint64('pending_starts').notNull().default('0'),
    window_started_at: time('window_started_at'),
    window_starts: uint32('window_starts').notNull().default(0),
    created_at: time('created_at').notNull(),
    updated_at: time('updated_at').notNull(),
  },
  (t) => [uniqueIndex('uk_orbit_queues_name').on(t.namespace_id, t.name)],
);

export const idempotencyReceipts = mysqlTable(
  'orbit_idempotency_receipts',
  {
    namespace_id: id('namespace_id').notNull(),
    idempotency_key: asciiVarchar('idempotency_key', { length: 128 }).notNull(),
    application_id: id('application_id').notNull(),
    operation: varchar('operation', { length: 64 }).notNull(),
    request_sha256: bytes('request_sha256', 32).notNull(),
    resource_id: id('resource_id'),
    response: mediumtext('response').notNull(),
    created_at: time('created_at').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.namespace_id, t.idempotency_key] }),
    // 0007_retention.sql
    index('ix_orbit_idempotency_receipts_created').on(t.application_id, t.created_at),
  ],
);

export const auditEvents = mysqlTable(
  'orbit_audit_events',
  {
    sequence: uint64('sequence').autoincrement().primaryKey(),
    audit_id: id('audit_id').notNull(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    credential_id: id('credential_id').notNull(),
    action: varchar('action', { length: 64 }).notNull(),
    resource_type: varchar('resource_type', { length: 32 }).notNull(),
    resource: varchar('resource', { length: 128 }).notNull(),
    reason: varchar('reason', { length: 1024 }).notNull(),
    request_id: id('request_id').notNull(),
    idempotency_key: asciiVarchar('idempotency_key', { length: 128 }).notNull(),
    before_state: text('before_state'),
    after_state: text('after_state'),
    created_at: time('created_at').notNull(),
  },
  (t) => [
    uniqueIndex('uk_orbit_audit_events_id').on(t.audit_id),
    index('ix_orbit_audit_events_namespace').on(t.namespace_id, t.sequence),
    // 0007_retention.sql
    index('ix_orbit_audit_events_created').on(t.application_id, t.created_at),
  ],
);

export const events = mysqlTable(
  'orbit_events',
  {
    sequence: uint64('sequence').autoincrement().primaryKey(),
    event_id: id('event_id').notNull(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    type: varchar('type', { length: 64 }).notNull(),
    subject: varchar('subject', { length: 128 }).notNull(),
    data: mediumtext('data').notNull(),
    occurred_at: time('occurred_at').notNull(),
    // 0004_subscriptions.sql
    queue_name: varchar('queue_name', { length: 63 }),
  },
  (t) => [
    uniqueIndex('uk_orbit_events_id').on(t.event_id),
    index('ix_orbit_events_namespace').on(t.namespace_id, t.sequence),
    // 0007_retention.sql
    index('ix_orbit_events_occurred').on(t.namespace_id, t.occurred_at),
    // 0008_task_history.sql
    index('ix_orbit_events_subject').on(t.namespace_id, t.subject, t.sequence),
  ],
);

// ---------------------------------------------------------------------------------------------
// 0002_tasks_and_workers.sql
// ---------------------------------------------------------------------------------------------

export const tasks = mysqlTable(
  'orbit_tasks',
  {
    task_id: id('task_id').primaryKey(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    queue_id: id('queue_id').notNull(),
    state: varchar('state', { length: 16 }).notNull(),
    priority: tinyint('priority', { unsigned: true }).notNull(),
    resource_key: varchar('resource_key', { length: 128 }),
    payload: mediumtext('payload').notNull(),
    attempts: uint16('attempts').notNull().default(0),
    max_attempts: uint16('max_attempts').notNull(),
    on_unknown_outcome: varchar('on_unknown_outcome', { length: 8 }).notNull(),
    cancel_requested: flag('cancel_requested').notNull().default(0),
    current_attempt_id: id('current_attempt_id'),
    idempotency_key: asciiVarchar('idempotency_key', { length: 128 }).notNull(),
    created_at: time('created_at').notNull(),
    available_at: time('available_at').notNull(),
    deadline_at: time('deadline_at').notNull(),
    finished_at: time('finished_at'),
    result: mediumtext('result'),
    error: mediumtext('error'),
    updated_at: time('updated_at').notNull(),
    // 0003_schedules.sql
    schedule_id: id('schedule_id'),
    scheduled_for: time('scheduled_for'),
    // 0005_task_cancel_reason.sql
    cancel_reason: varchar('cancel_reason', { length: 1024 }),
    // 0009_task_deadline_seconds.sql
    deadline_seconds: uint32('deadline_seconds'),
  },
  (t) => [
    index('ix_orbit_tasks_claim').on(t.queue_id, t.state, sql`${t.priority} desc`, t.available_at, t.task_id),
    index('ix_orbit_tasks_queue').on(t.queue_id, t.task_id),
    index('ix_orbit_tasks_deadline').on(t.state, t.deadline_at),
    // 0007_retention.sql
    index('ix_orbit_tasks_finished').on(t.application_id, t.finished_at),
    // 0008_task_history.sql
    index('ix_orbit_tasks_queue_state').on(t.queue_id, t.state, t.task_id),
    uniqueIndex('uk_orbit_tasks_trigger_point').on(t.schedule_id, t.scheduled_for),
  ],
);

export const attempts = mysqlTable(
  'orbit_attempts',
  {
    attempt_id: id('attempt_id').primaryKey(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    queue_id: id('queue_id').notNull(),
    task_id: id('task_id').notNull(),
    session_id: id('session_id').notNull(),
    attempt_number: uint16('attempt_number').notNull(),
    state: varchar('state', { length: 16 }).notNull(),
    resource_key: varchar('resource_key', { length: 128 }),
    claimed_at: time('claimed_at').notNull(),
    started_at: time('started_at'),
    lease_expires_at: time('lease_expires_at').notNull(),
    deadline_at: time('deadline_at').notNull(),
    finished_at: time('finished_at'),
    cancel_notified: flag('cancel_notified').notNull().default(0),
  },
  (t) => [
    index('ix_orbit_attempts_lease').on(t.state, t.lease_expires_at),
    index('ix_orbit_attempts_session').on(t.session_id, t.state),
    index('ix_orbit_attempts_task').on(t.task_id),
  ],
);

export const workerSessions = mysqlTable(
  'orbit_worker_sessions',
  {
    session_id: id('session_id').primaryKey(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    credential_id: id('credential_id').notNull(),
    node_id: varchar('node_id', { length: 128 }).notNull(),
    queues: text('queues').notNull(),
    capacity: uint32('capacity').notNull(),
    state: varchar('state', { length: 16 }).notNull(),
    waiting_since: time('waiting_since'),
    connected_at: time('connected_at').notNull(),
    last_seen_at: time('last_seen_at').notNull(),
    closed_at: time('closed_at'),
  },
  (t) => [
    index('ix_orbit_worker_sessions_waiting').on(t.application_id, t.state, t.waiting_since),
    index('ix_orbit_worker_sessions_liveness').on(t.state, t.last_seen_at),
    // 0007_retention.sql
    index('ix_orbit_worker_sessions_closed').on(t.application_id, t.closed_at),
  ],
);

export const keyPermits = mysqlTable(
  'orbit_key_permits',
  {
    queue_id: id('queue_id').notNull(),
    resource_key: varchar('resource_key', { length: 128 }).notNull(),
    application_id: id('application_id').notNull(),
    holders: uint32('holders').notNull().default(0),
    updated_at: time('updated_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.queue_id, t.resource_key] })],
);

// ---------------------------------------------------------------------------------------------
// 0003_schedules.sql (and the two columns of orbit_tasks above)
// ---------------------------------------------------------------------------------------------

export const schedules = mysqlTable(
  'orbit_schedules',
  {
    schedule_id: id('schedule_id').primaryKey(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    queue_id: id('queue_id').notNull(),
    name: varchar('name', { length: 128 }).notNull(),
    cron_expression: varchar('cron_expression', { length: 200 }),
    interval_seconds: uint32('interval_seconds'),
    timezone: varchar('timezone', { length: 64 }).notNull(),
    payload: mediumtext('payload').notNull(),
    priority: tinyint('priority', { unsigned: true }).notNull(),
    resource_key: varchar('resource_key', { length: 128 }),
    max_attempts: uint16('max_attempts').notNull(),
    deadline_seconds: uint32('deadline_seconds').notNull(),
    on_unknown_outcome: varchar('on_unknown_outcome', { length: 8 }).notNull(),
    misfire_policy: varchar('misfire_policy', { length: 16 }).notNull(),
    misfire_window_seconds: uint32('misfire_window_seconds').notNull(),
    state: varchar('state', { length: 16 }).notNull(),
    start_at: time('start_at'),
    next_fire_at: time('next_fire_at'),
    last_fire_at: time('last_fire_at'),
    deferred_through: time('deferred_through'),
    fired: uint64('fired').notNull().default('0'),
    skipped_misfire: uint64('skipped_misfire').notNull().default('0'),
    deferred_full: uint64('deferred_full').notNull().default('0'),
    created_at: time('created_at').notNull(),
    updated_at: time('updated_at').notNull(),
    // 0006_schedule_failures.sql
    last_error: varchar('last_error', { length: 1024 }),
    last_error_at: time('last_error_at'),
    consecutive_failures: uint32('consecutive_failures').notNull().default(0),
    retry_at: time('retry_at'),
  },
  (t) => [
    uniqueIndex('uk_orbit_schedules_name').on(t.queue_id, t.name),
    index('ix_orbit_schedules_due').on(t.state, t.next_fire_at),
    index('ix_orbit_schedules_application_due').on(t.application_id, t.state, t.next_fire_at),
  ],
);

// ---------------------------------------------------------------------------------------------
// 0004_subscriptions.sql (and orbit_events.queue_name above)
// ---------------------------------------------------------------------------------------------

export const subscriptions = mysqlTable(
  'orbit_subscriptions',
  {
    subscription_id: id('subscription_id').primaryKey(),
    application_id: id('application_id').notNull(),
    namespace_id: id('namespace_id').notNull(),
    name: varchar('name', { length: 128 }).notNull(),
    types: text('types'),
    queues: text('queues'),
    state: varchar('state', { length: 16 }).notNull(),
    acked_sequence: uint64('acked_sequence').notNull().default('0'),
    acked_at: time('acked_at'),
    created_at: time('created_at').notNull(),
    updated_at: time('updated_at').notNull(),
    // 0007_retention.sql
    pruned_through: uint64('pruned_through').notNull().default('0'),
  },
  (t) => [uniqueIndex('uk_orbit_subscriptions_name').on(t.namespace_id, t.name)],
);

// ---------------------------------------------------------------------------------------------
// 0007_retention.sql
// ---------------------------------------------------------------------------------------------
export const retentionPolicies = mysqlTable(
  'orbit_retention_policies',
  {
    application_id: id('application_id').primaryKey(),
    revision: uint64('revision').notNull().default('1'),
    finished_task_retention_seconds: uint64('finished_task_retention_seconds').default('604800'),
    event_retention_seconds: uint64('event_retention_seconds').default('604800'),
    receipt_retention_seconds: uint64('receipt_retention_seconds').default('604800'),
    audit_retention_seconds: uint64('audit_retention_seconds').default('31536000'),
    subscription_max_lag_seconds: uint64('subscription_max_lag_seconds').default('2592000'),
    next_prune_at: time('next_prune_at').notNull(),
    updated_at: time('updated_at').notNull(),
  },
  (t) => [index('ix_orbit_retention_policies_due').on(t.next_prune_at)],
);

/** Every table of the schema, ledger included: the drift test requires this list to equal the database's. */
export const allTables = [
  schemaMigrations,
  migrationLock,
  applications,
  namespaces,
  credentials,
  applicationResources,
  namespaceResources,
  queues,
  idempotencyReceipts,
  auditEvents,
  events,
  tasks,
  attempts,
  workerSessions,
  keyPermits,
  schedules,
  subscriptions,
  retentionPolicies,
] as const;

// ---------------------------------------------------------------------------------------------
// Row types: a row of `SELECT * FROM <table>` as mysql2 returns it (see the header).
// ---------------------------------------------------------------------------------------------

export type ApplicationRow = typeof applications.$inferSelect;
export type NamespaceRow = typeof namespaces.$inferSelect;
export type CredentialRow = typeof credentials.$inferSelect;
export type ApplicationResourcesRow = typeof applicationResources.$inferSelect;
export type NamespaceResourcesRow = typeof namespaceResources.$inferSelect;
export type QueueRow = typeof queues.$inferSelect;
export type IdempotencyReceiptRow = typeof idempotencyReceipts.$inferSelect;
export type AuditEventRow = typeof auditEvents.$inferSelect;
export type EventRow = typeof events.$inferSelect;
export type TaskRow = typeof tasks.$inferSelect;
export type AttemptRow = typeof attempts.$inferSelect;
export type WorkerSessionRow = typeof workerSessions.$inferSelect;
export type KeyPermitRow = typeof keyPermits.$inferSelect;
export type ScheduleRow = typeof schedules.$inferSelect;
export type SubscriptionRow = typeof subscriptions.$inferSelect;
export type RetentionPolicyRow = typeof retentionPolicies.$inferSelect;
