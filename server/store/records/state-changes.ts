/**
 * The records of a pause or a resume (schedules, subscriptions): the audit record of the state
 * change and its event, written last in the transaction that made it, under the application row.
 */
import type { Principal } from '../../domain/principal.ts';
import type { Queryable } from '../database/database.ts';
import { auditInsert, type AuditRecord } from './audit.ts';
import { eventInsert } from './events.ts';

export async function stateChangeRecords(
  tx: Queryable,
  change: {
    principal: Principal;
    requestId: string;
    idempotencyKey: string;
    reason: string;
    resourceType: AuditRecord['resourceType'];
    resource: string;
    action: string;
    from: string;
    to: string;
    event: { type: string; data: Record<string, unknown>; queue?: string | null };
  },
): Promise<void> {
  const { principal } = change;
  await auditInsert(tx, {
    principal,
    action: change.action,
    resourceType: change.resourceType,
    resource: change.resource,
    reason: change.reason,
    requestId: change.requestId,
    idempotencyKey: change.idempotencyKey,
    before: { state: change.from },
    after: { state: change.to },
  });
  await eventInsert(tx, {
    applicationId: principal.applicationId,
    namespaceId: principal.namespaceId,
    type: change.event.type,
    subject: change.resource,
    data: change.event.data,
    queue: change.event.queue ?? null,
  });
}
