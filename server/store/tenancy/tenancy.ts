/** Applications and namespaces: created and switched on or off by `orbit-admin` only. */
import { OrbitError } from '../../errors.ts';
import { newId, type IdBytes } from '../../ids.ts';
import { applicationResourcesInsert } from '../quotas/application-resources.ts';
import type { Queryable } from '../database/database.ts';

export const ENVIRONMENTS = ['development', 'staging', 'production'] as const;
export type Environment = (typeof ENVIRONMENTS)[number];

export interface ApplicationRow {
  application_id: Buffer;
  name: string;
  enabled: number;
}

export interface NamespaceRow {
  namespace_id: Buffer;
  application_id: Buffer;
  name: string;
  environment: Environment;
  enabled: number;
}

export async function applicationFindByName(db: Queryable, name: string): Promise<ApplicationRow | null> {
  const [row] = await db.rows<ApplicationRow>('SELECT application_id, name, enabled FROM orbit_applications WHERE name = ?', [name]);
  return row ?? null;
}

export async function applicationFindById(db: Queryable, applicationId: IdBytes): Promise<ApplicationRow | null> {
  const [row] = await db.rows<ApplicationRow>('SELECT application_id, name, enabled FROM orbit_applications WHERE application_id = ?', [applicationId]);
  return row ?? null;
}

/** A new application and its resources row with the default limits, revision 1. */
export async function applicationCreate(tx: Queryable, name: string): Promise<ApplicationRow> {
  const applicationId = newId();
  await tx.exec('INSERT INTO orbit_applications (application_id, name, enabled, created_at, updated_at) VALUES (?, ?, 1, NOW(6), NOW(6))', [
    applicationId,
    name,
  ]);
  await applicationResourcesInsert(tx, applicationId);
  return { application_id: applicationId, name, enabled: 1 };
}

export async function applicationSetEnabled(db: Queryable, applicationId: IdBytes, enabled: boolean): Promise<boolean> {
  const result = await db.exec('UPDATE orbit_applications SET enabled = ?, updated_at = NOW(6) WHERE application_id = ?', [enabled ? 1 : 0, applicationId]);
  return result.affectedRows === 1;
}

export async function namespaceFind(db: Queryable, applicationId: IdBytes, name: string): Promise<NamespaceRow | null> {
  const [row] = await db.rows<NamespaceRow>(
    'SELECT namespace_id, application_id, name, environment, enabled FROM orbit_namespaces WHERE application_id = ? AND name = ?',
    [applicationId, name],
  );
  return row ?? null;
}

export async function namespaceFindById(db: Queryable, namespaceId: IdBytes): Promise<NamespaceRow | null> {
  const [row] = await db.rows<NamespaceRow>(
    'SELECT namespace_id, application_id, name, environment, enabled FROM orbit_namespaces WHERE namespace_id = ?',
    [namespaceId],
  );
  return row ?? null;
}

export async function namespaceCreate(tx: Queryable, params: { applicationId: IdBytes; name: string; environment: Environment }): Promise<NamespaceRow> {
  const namespaceId = newId();
  await tx.exec(
    'INSERT INTO orbit_namespaces (namespace_id, application_id, name, environment, enabled, created_at, updated_at) VALUES (?, ?, ?, ?, 1, NOW(6), NOW(6))',
    [namespaceId, params.applicationId, params.name, params.environment],
  );
  return { namespace_id: namespaceId, application_id: params.applicationId, name: params.name, environment: params.environment, enabled: 1 };
}

export async function namespaceSetEnabled(db: Queryable, namespaceId: IdBytes, enabled: boolean): Promise<boolean> {
  const result = await db.exec('UPDATE orbit_namespaces SET enabled = ?, updated_at = NOW(6) WHERE namespace_id = ?', [enabled ? 1 : 0, namespaceId]);
  return result.affectedRows === 1;
}

export function assertEnvironment(value: string): Environment {
  if (!(ENVIRONMENTS as readonly string[]).includes(value)) {
    throw new OrbitError('INVALID_ARGUMENT', `environment must be one of ${ENVIRONMENTS.join(', ')}`);
  }
  return value as Environment;
}
