/**
 * Management audit records, written in the same transaction as the change they describe, in
 * the initiating credential's namespace, with the application id kept explicitly.
 */
import { newId, idToHex, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { sqlToRfc3339 } from '../../time.ts';
import { sql } from '../database/sql.ts';
import type { Queryable } from '../database/database.ts';
import type { AuditEventRow } from '../database/schema.ts';

export interface AuditRecord {
  principal: Principal;
  action: string;
  resourceType: 'application_resources' | 'namespace_resources' | 'retention_policy' | 'queue' | 'task' | 'schedule' | 'subscription';
  resource: string;
  reason: string;
  requestId: string;
  idempotencyKey: string;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

export async function auditInsert(tx: Queryable, record: AuditRecord): Promise<void> {
  const json = (state: Record<string, unknown> | null) => (state === null ? null : JSON.stringify(state));
  await tx.exec(sql`
    INSERT INTO orbit_audit_events
      (audit_id, application_id, namespace_id, credential_id, action, resource_type, resource, reason,
       request_id, idempotency_key, before_state, after_state, created_at)
    VALUES (${newId()}, ${record.principal.applicationId}, ${record.principal.namespaceId}, ${record.principal.credentialId},
            ${record.action}, ${record.resourceType}, ${record.resource}, ${record.reason},
            ${Buffer.from(record.requestId, 'hex')}, ${record.idempotencyKey}, ${json(record.before)}, ${json(record.after)}, NOW(6))`);
}

/** The columns auditList reads. */
type AuditListRow = Pick<
  AuditEventRow,
  | 'sequence'
  | 'audit_id'
  | 'credential_id'
  | 'action'
  | 'resource_type'
  | 'resource'
  | 'reason'
  | 'request_id'
  | 'idempotency_key'
  | 'before_state'
  | 'after_state'
  | 'created_at'
>;

export async function auditList(
  db: Queryable,
  params: { namespaceId: IdBytes; namespace: string; afterSequence: string; limit: number },
): Promise<{ items: Record<string, unknown>[]; lastSequence: string | null; more: boolean }> {
  const rows = await db.rows<AuditListRow>(sql`
    SELECT sequence, audit_id, credential_id, action, resource_type, resource, reason, request_id, idempotency_key,
           before_state, after_state, created_at
      FROM orbit_audit_events
     WHERE namespace_id = ${params.namespaceId} AND sequence > ${params.afterSequence}
     ORDER BY sequence
     LIMIT ${params.limit + 1}`);
  const more = rows.length > params.limit;
  const page = rows.slice(0, params.limit);
  return {
    more,
    lastSequence: page.at(-1)?.sequence ?? null,
    items: page.map((row) => {
      const item: Record<string, unknown> = {
        audit_id: idToHex(row.audit_id),
        namespace: params.namespace,
        credential_id: idToHex(row.credential_id),
        action: row.action,
        resource_type: row.resource_type,
        resource: row.resource,
        reason: row.reason,
        request_id: idToHex(row.request_id),
        idempotency_key: row.idempotency_key,
        created_at: sqlToRfc3339(row.created_at),
      };
      if (row.before_state !== null) item.before = JSON.parse(row.before_state);
      if (row.after_state !== null) item.after = JSON.parse(row.after_state);
      return item;
    }),
  };
}
