/**
 * `orbit-admin bootstrap` in one transaction: an application (new, or an existing enabled one),
 * a namespace in it, queues, and one credential. Existing namespaces and queues of the same
 * name are used as they are, so running the README's sequence again works; a namespace with
 * another environment, or anything disabled, is an error.
 */
import { OrbitError } from '../../errors.ts';
import { idToHex, type IdBytes } from '../../ids.ts';
import type { Action } from '../../domain/actions.ts';
import { credentialCreate } from './credentials.ts';
import { queueFind, queueInsert } from '../quotas/queues.ts';
import {
  applicationCreate,
  applicationFindById,
  applicationFindByName,
  namespaceCreate,
  namespaceFind,
  type Application,
  type Environment,
  type Namespace,
} from './tenancy.ts';
import type { Database } from '../database/database.ts';

export interface BootstrapParams {
  /** Exactly one of the two. */
  applicationName?: string;
  applicationId?: IdBytes;
  namespace: string;
  environment: Environment;
  queues: readonly string[];
  actions: readonly Action[];
}

export interface BootstrapResult {
  application: Application;
  namespace: Namespace;
  credentialId: IdBytes;
  token: string;
}

const failed = (message: string) => new OrbitError('INVALID_ARGUMENT', message);

export async function tenantBootstrap(db: Database, params: BootstrapParams, say: (line: string) => void = () => {}): Promise<BootstrapResult> {
  return db.transaction(async (tx) => {
    let application: Application | null;
    if (params.applicationId !== undefined) {
      application = await applicationFindById(tx, params.applicationId);
      if (!application) throw failed(`application ${idToHex(params.applicationId)} does not exist`);
      if (!application.enabled) throw failed(`application ${idToHex(params.applicationId)} is disabled`);
    } else {
      const name = params.applicationName as string;
      application = await applicationFindByName(tx, name);
      if (application && !application.enabled) throw failed(`application "${name}" exists and is disabled`);
      if (application) say(`using the existing application "${name}" (${idToHex(application.application_id)})`);
      else {
        application = await applicationCreate(tx, name);
        say(`created application "${name}" (${idToHex(application.application_id)})`);
      }
    }
    let namespace = await namespaceFind(tx, application.application_id, params.namespace);
    if (namespace) {
      if (namespace.environment !== params.environment) {
        throw failed(`namespace "${params.namespace}" exists with environment ${namespace.environment}, not ${params.environment}`);
      }
      if (!namespace.enabled) throw failed(`namespace "${params.namespace}" exists and is disabled`);
      say(`using the existing namespace "${params.namespace}"`);
    } else {
      namespace = await namespaceCreate(tx, { applicationId: application.application_id, name: params.namespace, environment: params.environment });
      say(`created namespace "${params.namespace}" (${params.environment})`);
    }
    const queues = [...new Set(params.queues)];
    for (const queue of queues) {
      if (await queueFind(tx, namespace.namespace_id, queue)) say(`using the existing queue "${queue}"`);
      else {
        await queueInsert(tx, { applicationId: application.application_id, namespaceId: namespace.namespace_id, name: queue });
        say(`created queue "${queue}"`);
      }
    }
    const credential = await credentialCreate(tx, {
      applicationId: application.application_id,
      namespaceId: namespace.namespace_id,
      actions: params.actions,
      queues,
      description: 'orbit-admin bootstrap',
    });
    return { application, namespace, credentialId: credential.credentialId, token: credential.token };
  });
}
