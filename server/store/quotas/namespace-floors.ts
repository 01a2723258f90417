/**
 * The namespaces' floors through the API (docs/quotas-and-locking.md#floors): the list of an
 * application's namespaces with their floors and usage, and the configure of one namespace's
 * floors with its dry run. The rows are namespace-resources.ts's; the writes of a change of
 * floors are usage-writes.ts's `reservationStatements` (the namespace row's floors and revision,
 * the application row's sums and idle part), never written here.
 */
import { OrbitError, floorsAboveLimit, notFound, revisionConflict } from '../../errors.ts';
import { idToHex, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import type { components } from '../../generated/openapi.ts';
import { floorEffects, type ConfigureEffect } from '../../domain/configure-effects.ts';
import { firstFloorAboveLimit, floorSumsAfter, type Floors } from '../../domain/floor-sums.ts';
import { namespaceStartsInWindow, startsInCurrentWindow, windowOfRow } from '../../domain/start-window.ts';
import { sqlToMillis } from '../../time.ts';
import { auditInsert } from '../records/audit.ts';
import { eventInsert } from '../records/events.ts';
import { idempotentMutation, type ReceiptIdentity } from '../records/receipts.ts';
import { credentialsStillValid, noLongerValid } from '../tenancy/credentials.ts';
import { sql } from '../database/sql.ts';
import type { Database, Queryable } from '../database/database.ts';
import type { ApplicationResourcesRow, NamespaceRow } from '../database/schema.ts';
import { lockRows } from '../database/lock-order.ts';
import { namespaceRowsLock, type NamespaceUsageRow } from './namespace-resources.ts';
import { reservationStatements } from './usage-writes.ts';

export type NamespaceResources = components['schemas']['NamespaceResources'];

/** A namespace's row as the API shows it, with its name and environment and the application's window to count its starts by. */
type ListedRow = Pick<NamespaceRow, 'name' | 'environment'> & NamespaceUsageRow & { application_window_started_at: string | null; now: string };

/** The columns of ListedRow, of `ns` (orbit_namespaces), `r` (orbit_namespace_resources) and `a` (orbit_application_resources). */
const LISTED_COLUMNS = sql.raw(`ns.name, ns.environment, r.namespace_id, r.revision, r.reserved_unfinished_tasks, r.reserved_concurrency,
       r.reserved_rate_per_second, r.unfinished_tasks, r.active_attempts, r.pending_starts, r.window_started_at, r.window_starts,
       a.window_started_at AS application_window_started_at, NOW(6) AS now`);

/**
 * A namespace's starts in the application's current window: its `window_starts` count only when
 * they are of the window the application row names (usage-writes.ts), and that one is still open.
 */
function startsThisSecond(row: Pick<ListedRow, 'window_started_at' | 'window_starts' | 'application_window_started_at' | 'now'>): number {
  if (namespaceStartsInWindow(row, row.application_window_started_at) === 0) return 0;
  return startsInCurrentWindow(windowOfRow(row), sqlToMillis(row.now));
}

function toNamespaceResources(row: ListedRow): NamespaceResources {
  return {
    namespace: row.name,
    namespace_id: idToHex(row.namespace_id),
    environment: row.environment as NamespaceResources['environment'],
    revision: row.revision,
    reserved_unfinished_tasks: row.reserved_unfinished_tasks,
    reserved_concurrency: row.reserved_concurrency,
    reserved_rate_per_second: row.reserved_rate_per_second,
    unfinished_tasks: row.unfinished_tasks,
    active_attempts: row.active_attempts,
    pending_starts: row.pending_starts,
    starts_this_second: String(startsThisSecond(row)),
  };
}

const floorsOf = (r: Floors): Floors => ({
  reserved_unfinished_tasks: r.reserved_unfinished_tasks,
  reserved_concurrency: r.reserved_concurrency,
  reserved_rate_per_second: r.reserved_rate_per_second,
});

/** Every namespace of the application with its floors and usage, by name: one statement, a consistent snapshot. */
export async function namespaceResourcesList(db: Queryable, applicationId: IdBytes): Promise<NamespaceResources[]> {
  const rows = await db.rows<ListedRow>(sql`
    SELECT ${LISTED_COLUMNS}
      FROM orbit_namespaces ns
      JOIN orbit_namespace_resources r ON r.namespace_id = ns.namespace_id AND r.application_id = ${applicationId}
      JOIN orbit_application_resources a ON a.application_id = ${applicationId}
     WHERE ns.application_id = ${applicationId}
     ORDER BY ns.name`);
  return rows.map(toNamespaceResources);
}

/** The namespace of the application by name (identity level, not locked: namespaces are never renamed or deleted). */
async function namespaceByName(db: Queryable, applicationId: IdBytes, name: string): Promise<Pick<NamespaceRow, 'namespace_id' | 'name' | 'environment'>> {
  const [row] = await db.rows<Pick<NamespaceRow, 'namespace_id' | 'name' | 'environment'>>(
    sql`SELECT namespace_id, name, environment FROM orbit_namespaces WHERE application_id = ${applicationId} AND name = ${name}`,
  );
  if (!row) throw notFound(`namespace "${name}"`);
  return row;
}

/** What a configure of floors reads of the application row: its limits, the floors' sums and its window. */
type ApplicationFloorsRow = Pick<
  ApplicationResourcesRow,
  | 'max_unfinished_tasks'
  | 'max_concurrency'
  | 'rate_per_second'
  | 'reserved_unfinished_tasks'
  | 'reserved_concurrency'
  | 'reserved_rate_per_second'
  | 'window_started_at'
> & { now: string };

const APPLICATION_FLOORS_COLUMNS = sql.raw(`max_unfinished_tasks, max_concurrency, rate_per_second, reserved_unfinished_tasks,
       reserved_concurrency, reserved_rate_per_second, window_started_at, NOW(6) AS now`);

/** The sums the change would make must fit in the application's limits; else STATE_CONFLICT naming both figures. */
function assertFloorsFit(app: ApplicationFloorsRow, before: Floors, after: Floors): Floors {
  const sums = floorSumsAfter(
    {
      reserved_unfinished_tasks: Number(app.reserved_unfinished_tasks),
      reserved_concurrency: Number(app.reserved_concurrency),
      reserved_rate_per_second: Number(app.reserved_rate_per_second),
    },
    before,
    after,
  );
  const above = firstFloorAboveLimit(app, sums);
  if (above) throw floorsAboveLimit('floor', above);
  return sums;
}

/** What a dry run reads in one statement: the namespace's row as listed, and the application's limits and sums of floors (renamed beside the namespace's own columns of the same names). */
type DryRunRow = ListedRow &
  Pick<ApplicationResourcesRow, 'max_unfinished_tasks' | 'max_concurrency' | 'rate_per_second'> & {
    application_reserved_unfinished_tasks: ApplicationResourcesRow['reserved_unfinished_tasks'];
    application_reserved_concurrency: ApplicationResourcesRow['reserved_concurrency'];
    application_reserved_rate_per_second: ApplicationResourcesRow['reserved_rate_per_second'];
  };

export interface NamespaceFloorsConfigureParams {
  principal: Principal;
  requestId: string;
  receipt: ReceiptIdentity;
  /** The namespace configured: any of the caller's application, by name. */
  namespace: string;
  expectedRevision: string;
  reason: string;
  floors: Floors;
}

/**
 * Full replacement of one namespace's three floors under compare-and-set on its row's
 * `revision`. One transaction, in lock order: the application row (FOR UPDATE: its sums are
 * what the check reads, and what orders the event feed), then the namespace's row
 * (namespaceRowsLock); the revision, then the sums against the application's limits; then the
 * writes (reservationStatements), the audit record and the event in the caller's namespace, and
 * the receipt. Lowering or removing a floor revokes nothing: only the room of the others changes.
 */
export async function namespaceFloorsConfigure(
  db: Database,
  params: NamespaceFloorsConfigureParams,
): Promise<{ namespaceResources: NamespaceResources; deduplicated: boolean }> {
  const { principal } = params;
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    const target = await namespaceByName(tx, principal.applicationId, params.namespace);
    const [app] = await tx.rows<ApplicationFloorsRow>(
      sql`SELECT ${APPLICATION_FLOORS_COLUMNS} FROM orbit_application_resources WHERE application_id = ${principal.applicationId} ${lockRows('application')}`,
    );
    if (!app) throw new OrbitError('INTERNAL', 'the application has no resources row');
    const locked = (await namespaceRowsLock(tx, [target.namespace_id])).get(target.namespace_id.toString('hex'));
    if (!locked) throw new OrbitError('INTERNAL', 'the namespace has no resources row');
    const { revision } = locked;
    if (revision !== params.expectedRevision) throw revisionConflict(params.expectedRevision, revision);
    const before = floorsOf(locked);
    assertFloorsFit(app, before, params.floors);
    await tx.batch(reservationStatements(principal.applicationId, target.namespace_id, locked, params.floors, app.window_started_at));
    const nextRevision = (BigInt(revision) + 1n).toString();
    const row: ListedRow = {
      ...locked,
      ...params.floors,
      name: target.name,
      environment: target.environment,
      revision: nextRevision,
      application_window_started_at: app.window_started_at,
      now: app.now,
    };
    const after = toNamespaceResources(row);
    await auditInsert(tx, {
      principal,
      action: 'namespace.resources.configure',
      resourceType: 'namespace_resources',
      resource: target.name,
      reason: params.reason,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      before: { revision, ...before },
      after: { revision: nextRevision, ...params.floors },
    });
    await eventInsert(tx, {
      applicationId: principal.applicationId,
      namespaceId: principal.namespaceId,
      type: 'namespace.resources.configured',
      subject: target.name,
      data: { namespace: target.name, namespace_id: after.namespace_id, revision: nextRevision, ...params.floors },
    });
    return { response: after, resourceId: target.namespace_id };
  });
  return { namespaceResources: response, deduplicated };
}

/**
 * `dry_run: true` of configureNamespaceResources: the same checks as namespaceFloorsConfigure -
 * the credential may still act (re-checked as a write does), the namespace exists (404),
 * `expected_revision` is current, the sums fit in the application's limits (409) - and the
 * answer it would give (the new floors, the revision + 1), with what each floor would mean for
 * the namespace's usage of right now. One plain read, like the list: no row is locked, nothing
 * is written and no receipt is looked up or kept.
 */
export async function namespaceFloorsConfigureDryRun(
  db: Database,
  params: Pick<NamespaceFloorsConfigureParams, 'principal' | 'namespace' | 'expectedRevision' | 'floors'>,
): Promise<{ namespaceResources: NamespaceResources; effects: ConfigureEffect[] }> {
  const { principal } = params;
  const applicationId = principal.applicationId;
  const row = await db.transaction(async (tx) => {
    if ((await credentialsStillValid(tx, [principal.credentialId])).size === 0) throw noLongerValid();
    const [found] = await tx.rows<DryRunRow>(sql`
      SELECT ${LISTED_COLUMNS}, a.max_unfinished_tasks, a.max_concurrency, a.rate_per_second,
             a.reserved_unfinished_tasks AS application_reserved_unfinished_tasks, a.reserved_concurrency AS application_reserved_concurrency,
             a.reserved_rate_per_second AS application_reserved_rate_per_second
        FROM orbit_namespaces ns
        JOIN orbit_namespace_resources r ON r.namespace_id = ns.namespace_id AND r.application_id = ${applicationId}
        JOIN orbit_application_resources a ON a.application_id = ${applicationId}
       WHERE ns.application_id = ${applicationId} AND ns.name = ${params.namespace}`);
    return found;
  });
  if (!row) throw notFound(`namespace "${params.namespace}"`);
  if (row.revision !== params.expectedRevision) throw revisionConflict(params.expectedRevision, row.revision);
  const before = floorsOf(row);
  const sums = assertFloorsFit(
    {
      max_unfinished_tasks: row.max_unfinished_tasks,
      max_concurrency: row.max_concurrency,
      rate_per_second: row.rate_per_second,
      reserved_unfinished_tasks: row.application_reserved_unfinished_tasks,
      reserved_concurrency: row.application_reserved_concurrency,
      reserved_rate_per_second: row.application_reserved_rate_per_second,
      window_started_at: row.application_window_started_at,
      now: row.now,
    },
    before,
    params.floors,
  );
  const namespaceResources = toNamespaceResources({ ...row, ...params.floors, revision: (BigInt(row.revision) + 1n).toString() });
  const effects = floorEffects(
    before,
    params.floors,
    {
      unfinishedTasks: BigInt(row.unfinished_tasks),
      activeAttempts: BigInt(row.active_attempts),
      startsThisSecond: BigInt(namespaceResources.starts_this_second),
    },
    sums,
    row,
  );
  return { namespaceResources, effects };
}
