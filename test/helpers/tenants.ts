/** Applications, namespaces, queues and credentials for tests, made the way `orbit-admin bootstrap` makes them. */
import { APPLICATION_ACTIONS, NAMESPACE_ACTIONS, type Action } from '../../server/domain/actions.ts';
import { idToHex } from '../../server/ids.ts';
import { tenantBootstrap } from '../../server/store/tenancy/bootstrap.ts';
import { credentialCreate } from '../../server/store/tenancy/credentials.ts';
import type { Database } from '../../server/store/database/database.ts';

export interface TestTenant {
  applicationId: string;
  namespaceId: string;
  namespace: string;
  credentialId: string;
  token: string;
}

let counter = 0;

export async function createTenant(
  db: Database,
  options: { applicationId?: string; namespace?: string; queues?: string[]; resourceAccess?: boolean; actions?: Action[] } = {},
): Promise<TestTenant> {
  counter += 1;
  const namespace = options.namespace ?? `ns-${counter}`;
  const result = await tenantBootstrap(db, {
    ...(options.applicationId === undefined
      ? { applicationName: `app-${process.pid}-${counter}-${Date.now()}` }
      : { applicationId: Buffer.from(options.applicationId, 'hex') }),
    namespace,
    environment: 'development',
    queues: options.queues ?? ['default'],
    actions: options.actions ?? [...NAMESPACE_ACTIONS, ...(options.resourceAccess ? APPLICATION_ACTIONS : [])],
  });
  return {
    applicationId: idToHex(result.application.application_id),
    namespaceId: idToHex(result.namespace.namespace_id),
    namespace,
    credentialId: idToHex(result.credentialId),
    token: result.token,
  };
}

/** Another credential in the same namespace. */
export async function createCredential(db: Database, tenant: TestTenant, actions: readonly Action[], queues: readonly string[] = ['*']): Promise<string> {
  const { token } = await credentialCreate(db, {
    applicationId: Buffer.from(tenant.applicationId, 'hex'),
    namespaceId: Buffer.from(tenant.namespaceId, 'hex'),
    actions,
    queues,
  });
  return token;
}
