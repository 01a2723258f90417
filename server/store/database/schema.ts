/**
 * Drizzle mirror of the database schema. The SQL files in `migrations/` ARE the schema (applied by
 * `migrate.ts`, which also creates `orbit_schema_migrations`); this file describes the same tables
 * for typed queries and tooling, and must never disagree with them:
 * `test/integration/schema-drift.test.ts` migrates a fresh database and compares every table,
 * column (order, SQL type, character set, nullability, default, auto-increment), primary key and
 * index against these definitions.
 *
 * When a migration adds or changes something, change this file in the same commit.
 *
 * Conventions (docs/storage.md#rules-for-every-table): every table is `orbit_*`, has
 * `application_id`, ids are BINARY(16), no foreign keys, utf8mb4 / utf8mb4_bin, and a Chinese
 * COMMENT on every table and column (comments are checked by the drift test against the database;
 * drizzle cannot express them). Usage counters and revisions are BIGINT UNSIGNED, read as `bigint`.
 */
import { sql } from 'drizzle-orm';
import {
  bigint,
  binary,
  boolean,
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
const id = (name: string) => binary(name, { length: 16 });
/** `DATETIME(6)`, UTC, read as `YYYY-MM-DD HH:MM:SS.ffffff`. */
const time = (name: string) => datetime(name, { fsp: 6, mode: 'string' });
/** `BIGINT UNSIGNED` as a `bigint` (uint64 counters, revisions, sequences; the API renders them as decimal strings). */
const uint64 = (name: string) => bigint(name, { mode: 'bigint', unsigned: true });
/** `INT UNSIGNED`. */
const uint32 = (name: string) => int(name, { unsigned: true });
/** `SMALLINT UNSIGNED`. */
const uint16 = (name: string) => smallint(name, { unsigned: true });

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
  applicationId: id('application_id')
    .notNull()
    .default(sql`x'00000000000000000000000000000000'`),
  name: varchar('name', { length: 128 }).notNull(),
  checksum: char('checksum', { length: 64 }).notNull(),
  appliedAt: time('applied_at').notNull(),
});

// ---------------------------------------------------------------------------------------------
// 0001_foundation.sql
// ---------------------------------------------------------------------------------------------

export const applications = mysqlTable(
  'orbit_applications',
  {
    applicationId: id('application_id').primaryKey(),
    name: varchar('name', { length: 128 }).notNull(),
    enabled: boolean('enabled').notNull().default(true),
    createdAt: time('created_at').notNull(),
    updatedAt: time('updated_at').notNull(),
  },
  (t) => [uniqueIndex('uk_orbit_applications_name').on(t.name)],
);

export const namespaces = mysqlTable(
  'orbit_namespaces',
  {
    namespaceId: id('namespace_id').primaryKey(),
    applicationId: id('application_id').notNull(),
    name: varchar('name', { length: 63 }).notNull(),
    environment: varchar('environment', { length: 16 }).notNull(),
    enabled: boolean('enabled').notNull().default(true),
    createdAt: time('created_at').notNull(),
    updatedAt: time('updated_at').notNull(),
  },
  (t) => [uniqueIndex('uk_orbit_namespaces_name').on(t.applicationId, t.name)],
);

export const credentials = mysqlTable(
  'orbit_credentials',
  {
    credentialId: id('credential_id').primaryKey(),
    applicationId: id('application_id').notNull(),
    namespaceId: id('namespace_id').notNull(),
    secretSha256: binary('secret_sha256', { length: 32 }).notNull(),
    actions: text('actions').notNull(),
    queueScope: text('queue_scope').notNull(),
    description: varchar('description', { length: 255 }).notNull().default(''),
    createdAt: time('created_at').notNull(),
    expiresAt: time('expires_at'),
    revokedAt: time('revoked_at'),
  },
  (t) => [index('ix_orbit_credentials_namespace').on(t.namespaceId)],
);

export const applicationResources = mysqlTable('orbit_application_resources', {
  applicationId: id('application_id').primaryKey(),
  revision: uint64('revision').notNull().default(1n),
  maxUnfinishedTasks: uint32('max_unfinished_tasks').notNull().default(1000000),
  maxConcurrency: uint32('max_concurrency').notNull().default(10000),
  ratePerSecond: uint32('rate_per_second').notNull().default(100000),
  unfinishedTasks: uint64('unfinished_tasks').notNull().default(0n),
  activeAttempts: uint64('active_attempts').notNull().default(0n),
  pendingStarts: uint64('pending_starts').notNull().default(0n),
  windowStartedAt: time('window_started_at'),
  windowStarts: uint32('window_starts').notNull().default(0),
  updatedAt: time('updated_at').notNull(),
});

export const queues = mysqlTable(
  'orbit_queues',
  {
    queueId: id('queue_id').primaryKey(),
    applicationId: id('application_id').notNull(),
    namespaceId: id('namespace_id').notNull(),
    name: varchar('name', { length: 63 }).notNull(),
    revision: uint64('revision').notNull().default(1n),
    maxUnfinishedTasks: uint32('max_unfinished_tasks').notNull().default(100000),
    maxConcurrency: uint32('max_concurrency').notNull().default(1000),
    ratePerSecond: uint32('rate_per_second').notNull().default(10000),
    keyConcurrency: uint16('key_concurrency').notNull().default(1),
    paused: boolean('paused').notNull().default(false),
    unfinishedTasks: uint64('unfinished_tasks').notNull().default(0n),
    activeAttempts: uint64('active_attempts').notNull().default(0n),
    pendingStarts: uint64('pending_starts').notNull().default(0n),
    windowStartedAt: time('window_started_at'),
    windowStarts: uint32('window_starts').notNull().default(0),
    createdAt: time('created_at').notNull(),
    updatedAt: time('updated_at').notNull(),
  },
  (t) => [uniqueIndex('uk_orbit_queues_name').on(t.namespaceId, t.name)],
);

export const idempotencyReceipts = mysqlTable(
  'orbit_idempotency_receipts',
  {
    namespaceId: id('namespace_id').notNull(),
    idempotencyKey: asciiVarchar('idempotency_key', { length: 128 }).notNull(),
    applicationId: id('application_id').notNull(),
    operation: varchar('operation', { length: 64 }).notNull(),
    requestSha256: binary('request_sha256', { length: 32 }).notNull(),
    resourceId: id('resource_id'),
    response: mediumtext('response').notNull(),
    createdAt: time('created_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.namespaceId, t.idempotencyKey] })],
);

export const auditEvents = mysqlTable(
  'orbit_audit_events',
  {
    sequence: uint64('sequence').autoincrement().primaryKey(),
    auditId: id('audit_id').notNull(),
    applicationId: id('application_id').notNull(),
    namespaceId: id('namespace_id').notNull(),
    credentialId: id('credential_id').notNull(),
    action: varchar('action', { length: 64 }).notNull(),
    resourceType: varchar('resource_type', { length: 32 }).notNull(),
    resource: varchar('resource', { length: 128 }).notNull(),
    reason: varchar('reason', { length: 1024 }).notNull(),
    requestId: id('request_id').notNull(),
    idempotencyKey: asciiVarchar('idempotency_key', { length: 128 }).notNull(),
    beforeState: text('before_state'),
    afterState: text('after_state'),
    createdAt: time('created_at').notNull(),
  },
  (t) => [uniqueIndex('uk_orbit_audit_events_id').on(t.auditId), index('ix_orbit_audit_events_namespace').on(t.namespaceId, t.sequence)],
);

export const events = mysqlTable(
  'orbit_events',
  {
    sequence: uint64('sequence').autoincrement().primaryKey(),
    eventId: id('event_id').notNull(),
    applicationId: id('application_id').notNull(),
    namespaceId: id('namespace_id').notNull(),
    type: varchar('type', { length: 64 }).notNull(),
    subject: varchar('subject', { length: 128 }).notNull(),
    data: mediumtext('data').notNull(),
    occurredAt: time('occurred_at').notNull(),
  },
  (t) => [uniqueIndex('uk_orbit_events_id').on(t.eventId), index('ix_orbit_events_namespace').on(t.namespaceId, t.sequence)],
);

// ---------------------------------------------------------------------------------------------
// 0002_tasks_and_workers.sql
// ---------------------------------------------------------------------------------------------

export const tasks = mysqlTable(
  'orbit_tasks',
  {
    taskId: id('task_id').primaryKey(),
    applicationId: id('application_id').notNull(),
    namespaceId: id('namespace_id').notNull(),
    queueId: id('queue_id').notNull(),
    state: varchar('state', { length: 16 }).notNull(),
    priority: tinyint('priority', { unsigned: true }).notNull(),
    resourceKey: varchar('resource_key', { length: 128 }),
    payload: mediumtext('payload').notNull(),
    attempts: uint16('attempts').notNull().default(0),
    maxAttempts: uint16('max_attempts').notNull(),
    onUnknownOutcome: varchar('on_unknown_outcome', { length: 8 }).notNull(),
    cancelRequested: boolean('cancel_requested').notNull().default(false),
    currentAttemptId: id('current_attempt_id'),
    idempotencyKey: asciiVarchar('idempotency_key', { length: 128 }).notNull(),
    createdAt: time('created_at').notNull(),
    availableAt: time('available_at').notNull(),
    deadlineAt: time('deadline_at').notNull(),
    finishedAt: time('finished_at'),
    result: mediumtext('result'),
    error: mediumtext('error'),
    updatedAt: time('updated_at').notNull(),
  },
  (t) => [
    index('ix_orbit_tasks_claim').on(t.queueId, t.state, sql`${t.priority} desc`, t.availableAt, t.taskId),
    index('ix_orbit_tasks_queue').on(t.queueId, t.taskId),
    index('ix_orbit_tasks_deadline').on(t.state, t.deadlineAt),
  ],
);

export const attempts = mysqlTable(
  'orbit_attempts',
  {
    attemptId: id('attempt_id').primaryKey(),
    applicationId: id('application_id').notNull(),
    namespaceId: id('namespace_id').notNull(),
    queueId: id('queue_id').notNull(),
    taskId: id('task_id').notNull(),
    sessionId: id('session_id').notNull(),
    attemptNumber: uint16('attempt_number').notNull(),
    state: varchar('state', { length: 16 }).notNull(),
    resourceKey: varchar('resource_key', { length: 128 }),
    claimedAt: time('claimed_at').notNull(),
    startedAt: time('started_at'),
    leaseExpiresAt: time('lease_expires_at').notNull(),
    deadlineAt: time('deadline_at').notNull(),
    finishedAt: time('finished_at'),
    cancelNotified: boolean('cancel_notified').notNull().default(false),
  },
  (t) => [
    index('ix_orbit_attempts_lease').on(t.state, t.leaseExpiresAt),
    index('ix_orbit_attempts_session').on(t.sessionId, t.state),
    index('ix_orbit_attempts_task').on(t.taskId),
  ],
);

export const workerSessions = mysqlTable(
  'orbit_worker_sessions',
  {
    sessionId: id('session_id').primaryKey(),
    applicationId: id('application_id').notNull(),
    namespaceId: id('namespace_id').notNull(),
    credentialId: id('credential_id').notNull(),
    nodeId: varchar('node_id', { length: 128 }).notNull(),
    queues: text('queues').notNull(),
    capacity: uint32('capacity').notNull(),
    state: varchar('state', { length: 16 }).notNull(),
    waitingSince: time('waiting_since'),
    connectedAt: time('connected_at').notNull(),
    lastSeenAt: time('last_seen_at').notNull(),
    closedAt: time('closed_at'),
  },
  (t) => [
    index('ix_orbit_worker_sessions_waiting').on(t.applicationId, t.state, t.waitingSince),
    index('ix_orbit_worker_sessions_liveness').on(t.state, t.lastSeenAt),
  ],
);

export const keyPermits = mysqlTable(
  'orbit_key_permits',
  {
    queueId: id('queue_id').notNull(),
    resourceKey: varchar('resource_key', { length: 128 }).notNull(),
    applicationId: id('application_id').notNull(),
    holders: uint32('holders').notNull().default(0),
    updatedAt: time('updated_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.queueId, t.resourceKey] })],
);

/** Every table of the schema, ledger included: the drift test requires this list to equal the database's. */
export const allTables = [
  schemaMigrations,
  applications,
  namespaces,
  credentials,
  applicationResources,
  queues,
  idempotencyReceipts,
  auditEvents,
  events,
  tasks,
  attempts,
  workerSessions,
  keyPermits,
] as const;
