/** Applications and namespaces: created and switched on or off by `orbit-admin` only. */
import { OrbitError } from '../../errors.ts';
import { newId, type IdBytes } from '../../ids.ts';
import { sql } from '../database/sql.ts';
import { applicationResourcesInsert } from '../quotas/application-resources.ts';
import { retentionPolicyInsert } from '../retention/retention-policies.ts';
import type { Queryable } from '../database/database.ts';
import type { ApplicationRow, NamespaceRow } from '../database/schema.ts';

export const ENVIRONMENTS = ['development', 'staging', 'production'] as const;
export type Environment = (typeof ENVIRONMENTS)[number];

/** An application as this module reads it. */
export type Application = Pick<ApplicationRow, 'application_id' | 'name' | 'enabled'>;
/** A namespace as this module reads it. */
export type Namespace = Pick<NamespaceRow, 'namespace_id' | 'application_id' | 'name' | 'environment' | 'enabled'>;

export async function applicationFindByName(db: Queryable, name: string): Promise<Application | null> {
  const [row] = await db.rows<Application>(sql`SELECT application_id, name, enabled FROM orbit_applications WHERE name = ${name}`);
  return row ?? null;
}

export async function applicationFindById(db: Queryable, applicationId: IdBytes): Promise<Application | null> {
  const [row] = await db.rows<Application>(sql`SELECT application_id, name, enabled FROM orbit_applications WHERE application_id = ${applicationId}`);
  return row ?? null;
}

/** A new application, its resources row with the default limits and its retention policy with the default durations, revision 1 each. */
export async function applicationCreate(tx: Queryable, name: string): Promise<Application> {
  const applicationId = newId();
  await tx.exec(
    sql`INSERT INTO orbit_applications (application_id, name, enabled, created_at, updated_at) VALUES (${applicationId}, ${name}, 1, NOW(6), NOW(6))`,
  );
  await applicationResourcesInsert(tx, applicationId);
  await retentionPolicyInsert(tx, applicationId);
  return { application_id: applicationId, name, enabled: 1 };
}

export async function applicationSetEnabled(db: Queryable, applicationId: IdBytes, enabled: boolean): Promise<boolean> {
  const result = await db.exec(sql`UPDATE orbit_applications SET enabled = ${enabled ? 1 : 0}, updated_at = NOW(6) WHERE application_id = ${applicationId}`);
  return result.affectedRows === 1;
}

export async function namespaceFind(db: Queryable, applicationId: IdBytes, name: string): Promise<Namespace | null> {
  const [row] = await db.rows<Namespace>(
    sql`SELECT namespace_id, application_id, name, environment, enabled FROM orbit_namespaces WHERE application_id = ${applicationId} AND name = ${name}`,
  );
  return row ?? null;
}

export async function namespaceFindById(db: Queryable, namespaceId: IdBytes): Promise<Namespace | null> {
  const [row] = await db.rows<Namespace>(
    sql`SELECT namespace_id, application_id, name, environment, enabled FROM orbit_namespaces WHERE namespace_id = ${namespaceId}`,
  );
  return row ?? null;
}

export async function namespaceCreate(tx: Queryable, params: { applicationId: IdBytes; name: string; environment: Environment }): Promise<Namespace> {
  const namespaceId = newId();
  // With its resources row: no floors, no usage (written with every usage change of its tasks).
  await tx.batch(sql`
    INSERT INTO orbit_namespaces (namespace_id, application_id, name, environment, enabled, created_at, updated_at)
    VALUES (${namespaceId}, ${params.applicationId}, ${params.name}, ${params.environment}, 1, NOW(6), NOW(6));
    INSERT INTO orbit_namespace_resources (namespace_id, application_id, updated_at) VALUES (${namespaceId}, ${params.applicationId}, NOW(6))`);
  return { namespace_id: namespaceId, application_id: params.applicationId, name: params.name, environment: params.environment, enabled: 1 };
}

export async function namespaceSetEnabled(db: Queryable, namespaceId: IdBytes, enabled: boolean): Promise<boolean> {
  const result = await db.exec(sql`UPDATE orbit_namespaces SET enabled = ${enabled ? 1 : 0}, updated_at = NOW(6) WHERE namespace_id = ${namespaceId}`);
  return result.affectedRows === 1;
}

export function assertEnvironment(value: string): Environment {
  if (!(ENVIRONMENTS as readonly string[]).includes(value)) {
    throw new OrbitError('INVALID_ARGUMENT', `environment must be one of ${ENVIRONMENTS.join(', ')}`);
  }
  return value as Environment;
}
