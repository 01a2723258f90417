/**
 * The application's shared quota row: three limits, a config revision and live usage.
 * This row serialises one application's short transactions; see lock-order.ts.
 */
import { OrbitError, floorsAboveLimit, revisionConflict } from '../../errors.ts';
import { idToHex, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import type { components } from '../../generated/openapi.ts';
import { auditInsert } from '../records/audit.ts';
import { eventInsert } from '../records/events.ts';
import { idempotentMutation, type ReceiptIdentity } from '../records/receipts.ts';
import { credentialsStillValid, noLongerValid } from '../tenancy/credentials.ts';
import { configureEffects, type ConfigureEffect } from '../../domain/configure-effects.ts';
import { firstFloorAboveLimit } from '../../domain/floor-sums.ts';
import { idleReservedRate, startsInCurrentWindow, windowOfRow } from '../../domain/start-window.ts';
import { sqlToMillis } from '../../time.ts';
import { sql } from '../database/sql.ts';
import type { Database, Queryable, Transaction } from '../database/database.ts';
import type { ApplicationResourcesRow } from '../database/schema.ts';
import { lockRows } from '../database/lock-order.ts';

export type ApplicationResources = components['schemas']['ApplicationResources'];

/**
 * Locks the application row (level application) and returns its backlog figures: what a
 * transaction that writes the application's events, or admits tasks, takes first after the
 * identity, session and schedule levels.
 */
export async function applicationRowLock(
  tx: Transaction,
  applicationId: IdBytes,
): Promise<Pick<ApplicationResourcesRow, 'unfinished_tasks' | 'max_unfinished_tasks' | 'idle_reserved_unfinished_tasks'>> {
  const [row] = await tx.rows<Pick<ApplicationResourcesRow, 'unfinished_tasks' | 'max_unfinished_tasks' | 'idle_reserved_unfinished_tasks'>>(
    sql`SELECT unfinished_tasks, max_unfinished_tasks, idle_reserved_unfinished_tasks FROM orbit_application_resources WHERE application_id = ${applicationId} ${lockRows('application')}`,
  );
  if (!row) throw new OrbitError('INTERNAL', 'the application has no resources row');
  return row;
}
export type ApplicationLimits = Pick<ApplicationResources, 'max_unfinished_tasks' | 'max_concurrency' | 'rate_per_second'>;

/**
 * The limits, usage and floors this module reads: the namespaces' reservations summed and their
 * idle part (docs/quotas-and-locking.md#floors), and the start window with the database's time,
 * which the idle part of the rate floors depends on.
 */
type ResourcesRow = Pick<
  ApplicationResourcesRow,
  | 'application_id'
  | 'revision'
  | 'max_unfinished_tasks'
  | 'unfinished_tasks'
  | 'max_concurrency'
  | 'active_attempts'
  | 'pending_starts'
  | 'rate_per_second'
  | 'reserved_unfinished_tasks'
  | 'reserved_concurrency'
  | 'reserved_rate_per_second'
  | 'idle_reserved_unfinished_tasks'
  | 'idle_reserved_concurrency'
  | 'window_reserved_starts'
  | 'window_started_at'
  | 'window_starts'
> & { now: string };

/** The columns of ResourcesRow (constant SQL text). */
const COLUMNS = sql.raw(`application_id, revision, max_unfinished_tasks, unfinished_tasks, max_concurrency,
                 active_attempts, pending_starts, rate_per_second, reserved_unfinished_tasks, reserved_concurrency,
                 reserved_rate_per_second, idle_reserved_unfinished_tasks, idle_reserved_concurrency, window_reserved_starts,
                 window_started_at, window_starts, NOW(6) AS now`);

/** The idle part of the rate floors as the row leaves it now (domain/start-window.ts). */
function idleReservedRateOf(row: ResourcesRow): bigint {
  return idleReservedRate(
    { window: windowOfRow(row), reservedRate: BigInt(row.reserved_rate_per_second), windowReservedStarts: BigInt(row.window_reserved_starts) },
    sqlToMillis(row.now),
  );
}

function toResources(row: ResourcesRow): ApplicationResources {
  return {
    application_id: idToHex(row.application_id),
    revision: row.revision,
    max_unfinished_tasks: row.max_unfinished_tasks,
    unfinished_tasks: row.unfinished_tasks,
    max_concurrency: row.max_concurrency,
    active_attempts: row.active_attempts,
    pending_starts: row.pending_starts,
    rate_per_second: row.rate_per_second,
    reserved_unfinished_tasks: Number(row.reserved_unfinished_tasks),
    reserved_concurrency: Number(row.reserved_concurrency),
    reserved_rate_per_second: Number(row.reserved_rate_per_second),
    idle_reserved_unfinished_tasks: row.idle_reserved_unfinished_tasks,
    idle_reserved_concurrency: row.idle_reserved_concurrency,
    idle_reserved_rate_per_second: idleReservedRateOf(row).toString(),
  };
}

/** The application's configure refuses limits below the floors' sums (domain/floor-sums.ts). */
function assertFloorsFit(row: ResourcesRow, limits: ApplicationLimits): void {
  const above = firstFloorAboveLimit(limits, {
    reserved_unfinished_tasks: Number(row.reserved_unfinished_tasks),
    reserved_concurrency: Number(row.reserved_concurrency),
    reserved_rate_per_second: Number(row.reserved_rate_per_second),
  });
  if (above) throw floorsAboveLimit('limit', above);
}

/** The row as one consistent read (a single statement): limits, usage, the floors' sums and their idle part. */
export async function applicationResourcesGet(db: Queryable, applicationId: IdBytes): Promise<ApplicationResources> {
  const [row] = await db.rows<ResourcesRow>(sql`SELECT ${COLUMNS} FROM orbit_application_resources WHERE application_id = ${applicationId}`);
  if (!row) throw new OrbitError('INTERNAL', 'the application has no resources row');
  return toResources(row);
}

/** Created together with the application, with the defaults of the column definitions. */
export async function applicationResourcesInsert(tx: Queryable, applicationId: IdBytes): Promise<void> {
  await tx.exec(sql`INSERT INTO orbit_application_resources (application_id, revision, updated_at) VALUES (${applicationId}, 1, NOW(6))`);
}

export interface ApplicationResourcesConfigureParams {
  principal: Principal;
  requestId: string;
  receipt: ReceiptIdentity;
  expectedRevision: string;
  reason: string;
  limits: ApplicationLimits;
}

/**
 * Full replacement of the three limits under compare-and-set on `revision`. Config, revision,
 * audit record, event and receipt commit together or not at all. Lowering a limit below usage
 * changes nothing else: no task is deleted, no lease shortened or extended, no window reset.
 * Lowering one below the namespaces' floors of it (their sum, read under the row's lock, which
 * every configure of a floor holds too) is refused: STATE_CONFLICT naming both figures.
 */
export async function applicationResourcesConfigure(
  db: Database,
  params: ApplicationResourcesConfigureParams,
): Promise<{ resources: ApplicationResources; deduplicated: boolean }> {
  const { principal } = params;
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    // Lock order: application resources row first (it is also what orders the event feed).
    const [row] = await tx.rows<ResourcesRow>(
      sql`SELECT ${COLUMNS} FROM orbit_application_resources WHERE application_id = ${principal.applicationId} ${lockRows('application')}`,
    );
    if (!row) throw new OrbitError('INTERNAL', 'the application has no resources row');
    if (row.revision !== params.expectedRevision) throw revisionConflict(params.expectedRevision, row.revision);
    assertFloorsFit(row, params.limits);
    await tx.exec(sql`
      UPDATE orbit_application_resources
         SET max_unfinished_tasks = ${params.limits.max_unfinished_tasks}, max_concurrency = ${params.limits.max_concurrency},
             rate_per_second = ${params.limits.rate_per_second}, revision = revision + 1, updated_at = NOW(6)
       WHERE application_id = ${principal.applicationId}`);
    const before = toResources(row);
    const after: ApplicationResources = { ...before, ...params.limits, revision: (BigInt(row.revision) + 1n).toString() };
    const limitsOf = (r: ApplicationResources) => ({
      revision: r.revision,
      max_unfinished_tasks: r.max_unfinished_tasks,
      max_concurrency: r.max_concurrency,
      rate_per_second: r.rate_per_second,
    });
    await auditInsert(tx, {
      principal,
      action: 'application.resources.configure',
      resourceType: 'application_resources',
      resource: after.application_id,
      reason: params.reason,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      before: limitsOf(before),
      after: limitsOf(after),
    });
    await eventInsert(tx, {
      applicationId: principal.applicationId,
      namespaceId: principal.namespaceId,
      type: 'application.resources.configured',
      subject: after.application_id,
      data: limitsOf(after),
    });
    return { response: after, resourceId: principal.applicationId };
  });
  return { resources: response, deduplicated };
}

/**
 * `dry_run: true` of configureApplicationResources: the same checks as applicationResourcesConfigure
 * - the credential may still act (re-checked as a write does), the row exists, `expected_revision`
 * is current, no limit goes below the namespaces' floors of it - and the answer it would give
 * (the new limits, the revision + 1), with what each limit would mean for the usage of right now
 * (and, for a changed limit floors reserve part of, how much of it they hold). Nothing is written and no lock is taken on the
 * application row: a plain read, like GET. No receipt is looked up or kept (a dry run never
 * replays a key; the key may be used afterwards for the real change).
 */
export async function applicationResourcesConfigureDryRun(
  db: Database,
  params: Pick<ApplicationResourcesConfigureParams, 'principal' | 'expectedRevision' | 'limits'>,
): Promise<{ resources: ApplicationResources; effects: ConfigureEffect[] }> {
  const { principal } = params;
  const row = await db.transaction(async (tx) => {
    if ((await credentialsStillValid(tx, [principal.credentialId])).size === 0) throw noLongerValid();
    const [found] = await tx.rows<ResourcesRow>(sql`SELECT ${COLUMNS} FROM orbit_application_resources WHERE application_id = ${principal.applicationId}`);
    return found;
  });
  if (!row) throw new OrbitError('INTERNAL', 'the application has no resources row');
  if (row.revision !== params.expectedRevision) throw revisionConflict(params.expectedRevision, row.revision);
  assertFloorsFit(row, params.limits);
  const before = toResources(row);
  const resources: ApplicationResources = { ...before, ...params.limits, revision: (BigInt(row.revision) + 1n).toString() };
  const effects = configureEffects(
    'application',
    before,
    params.limits,
    {
      unfinishedTasks: BigInt(row.unfinished_tasks),
      activeAttempts: BigInt(row.active_attempts),
      startsInWindow: BigInt(startsInCurrentWindow(windowOfRow(row), sqlToMillis(row.now))),
      pendingStarts: BigInt(row.pending_starts),
    },
    {
      max_unfinished_tasks: { reserved: BigInt(row.reserved_unfinished_tasks), idle: BigInt(before.idle_reserved_unfinished_tasks) },
      max_concurrency: { reserved: BigInt(row.reserved_concurrency), idle: BigInt(before.idle_reserved_concurrency) },
      rate_per_second: { reserved: BigInt(row.reserved_rate_per_second), idle: BigInt(before.idle_reserved_rate_per_second) },
    },
  );
  return { resources, effects };
}
