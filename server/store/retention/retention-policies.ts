/**
 * The application's retention policy row (orbit_retention_policies): read, created with the
 * application, and replaced by configure under compare-and-set on its own revision - the same
 * rules and shapes as the application's limits (application-resources.ts): policy, revision,
 * audit record, event and receipt in one transaction; a replay answers the original snapshot.
 *
 * Lock order: the application row first (the event's place in the feed), then the policy row
 * (level `retention`). The pruning loop reads policies without locks and takes policy rows only
 * to choose whose turn it is (prune.ts).
 */
import { OrbitError, revisionConflict } from '../../errors.ts';
import { idToHex, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { RETENTION_FIELDS, type RetentionPolicy } from '../../domain/retention.ts';
import type { components } from '../../generated/openapi.ts';
import { auditInsert } from '../records/audit.ts';
import { eventInsert } from '../records/events.ts';
import { idempotentMutation, type ReceiptIdentity } from '../records/receipts.ts';
import { sql } from '../database/sql.ts';
import type { Database, Queryable, Transaction } from '../database/database.ts';
import type { RetentionPolicyRow } from '../database/schema.ts';
import { lockRows } from '../database/lock-order.ts';
import { applicationRowLock } from '../quotas/application-resources.ts';

export type Retention = components['schemas']['RetentionPolicy'];

type PolicyColumns = Pick<RetentionPolicyRow, 'application_id' | 'revision' | (typeof RETENTION_FIELDS)[number]>;

/** The columns of PolicyColumns (constant SQL text). */
const COLUMNS = sql.raw(`application_id, revision, ${RETENTION_FIELDS.join(', ')}`);

/** The row's durations as numbers (BIGINT UNSIGNED comes as a decimal string), null for forever. */
export function policyOfRow(row: Pick<RetentionPolicyRow, (typeof RETENTION_FIELDS)[number]>): RetentionPolicy {
  const policy = {} as RetentionPolicy;
  for (const field of RETENTION_FIELDS) policy[field] = row[field] === null ? null : Number(row[field]);
  return policy;
}

/** The API shape: a duration kept forever is absent. */
function toRetention(applicationId: IdBytes, revision: string, policy: RetentionPolicy): Retention {
  const out: Retention = { application_id: idToHex(applicationId), revision };
  for (const field of RETENTION_FIELDS) {
    const value = policy[field];
    if (value !== null) out[field] = value;
  }
  return out;
}

export async function retentionGet(db: Queryable, applicationId: IdBytes): Promise<Retention> {
  const [row] = await db.rows<PolicyColumns>(sql`SELECT ${COLUMNS} FROM orbit_retention_policies WHERE application_id = ${applicationId}`);
  if (!row) throw new OrbitError('INTERNAL', 'the application has no retention policy row');
  return toRetention(row.application_id, row.revision, policyOfRow(row));
}

/** Created together with the application, with the defaults of the column definitions; due for pruning at once. */
export async function retentionPolicyInsert(tx: Queryable, applicationId: IdBytes): Promise<void> {
  await tx.exec(sql`INSERT INTO orbit_retention_policies (application_id, revision, next_prune_at, updated_at) VALUES (${applicationId}, 1, NOW(6), NOW(6))`);
}

export interface RetentionConfigureParams {
  principal: Principal;
  requestId: string;
  receipt: ReceiptIdentity;
  expectedRevision: string;
  reason: string;
  policy: RetentionPolicy;
  dryRun: boolean;
}

/**
 * Full replacement of the policy under compare-and-set on its revision. Shortening a duration
 * deletes nothing here: the pruning loop removes what became due. A dry run reads, checks the
 * revision and answers what would be set, writing nothing (no receipt either).
 */
export async function retentionConfigure(
  db: Database,
  params: RetentionConfigureParams,
): Promise<{ retention: Retention; deduplicated: boolean; dryRun: boolean }> {
  const { principal } = params;
  if (params.dryRun) {
    const current = await retentionGet(db, principal.applicationId);
    if (current.revision !== params.expectedRevision) throw revisionConflict(params.expectedRevision, current.revision);
    const revision = (BigInt(current.revision) + 1n).toString();
    return { retention: toRetention(principal.applicationId, revision, params.policy), deduplicated: false, dryRun: true };
  }
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx: Transaction) => {
    // Lock order: the application row (the event's place in the feed), then the policy row.
    await applicationRowLock(tx, principal.applicationId);
    const [row] = await tx.rows<PolicyColumns>(
      sql`SELECT ${COLUMNS} FROM orbit_retention_policies WHERE application_id = ${principal.applicationId} ${lockRows('retention')}`,
    );
    if (!row) throw new OrbitError('INTERNAL', 'the application has no retention policy row');
    if (row.revision !== params.expectedRevision) throw revisionConflict(params.expectedRevision, row.revision);
    const set = sql.join(
      RETENTION_FIELDS.map((field) => sql`${sql.raw(field)} = ${params.policy[field]}`),
      sql`, `,
    );
    await tx.exec(
      sql`UPDATE orbit_retention_policies SET ${set}, revision = revision + 1, updated_at = NOW(6) WHERE application_id = ${principal.applicationId}`,
    );
    const before = toRetention(row.application_id, row.revision, policyOfRow(row));
    const after = toRetention(row.application_id, (BigInt(row.revision) + 1n).toString(), params.policy);
    const { application_id: _b, ...beforeState } = before;
    const { application_id: _a, ...afterState } = after;
    await auditInsert(tx, {
      principal,
      action: 'application.retention.configure',
      resourceType: 'retention_policy',
      resource: after.application_id,
      reason: params.reason,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      before: beforeState,
      after: afterState,
    });
    await eventInsert(tx, {
      applicationId: principal.applicationId,
      namespaceId: principal.namespaceId,
      type: 'application.retention.configured',
      subject: after.application_id,
      data: afterState,
    });
    return { response: after, resourceId: principal.applicationId };
  });
  return { retention: response, deduplicated, dryRun: false };
}

/** Every application's policy, or one's (`orbit-admin prune`): plain reads. */
export async function retentionPoliciesList(db: Queryable, applicationId?: IdBytes): Promise<Array<{ applicationId: IdBytes; policy: RetentionPolicy }>> {
  const rows = await db.rows<PolicyColumns>(
    applicationId === undefined
      ? sql`SELECT ${COLUMNS} FROM orbit_retention_policies /* scatter: prune-admin */ ORDER BY application_id`
      : sql`SELECT ${COLUMNS} FROM orbit_retention_policies WHERE application_id = ${applicationId}`,
  );
  return rows.map((r) => ({ applicationId: r.application_id, policy: policyOfRow(r) }));
}
