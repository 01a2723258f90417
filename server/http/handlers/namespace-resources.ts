import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { namespaceFloorsConfigure, namespaceFloorsConfigureDryRun, namespaceResourcesList } from '../../store/quotas/namespace-floors.ts';
import { receiptIdentity } from './receipt-identity.ts';

type NamespaceResourcesHandlers = Pick<Handlers<RequestContext>, 'listNamespaceResources' | 'configureNamespaceResources'>;

/** The namespaces' floors (docs/quotas-and-locking.md#floors): any namespace of the caller's application, by name. */
export function namespaceResourcesHandlers(deps: AppDeps): NamespaceResourcesHandlers {
  return {
    async listNamespaceResources(_input, ctx) {
      return { namespaces: await namespaceResourcesList(deps.db, ctx.principal().applicationId) };
    },
    async configureNamespaceResources(input, ctx) {
      const principal = ctx.principal();
      const { expected_revision, reason, dry_run, ...floors } = input.body;
      const namespace = input.path.namespace;
      if (dry_run === true) {
        // No receipt: a dry run neither replays a key nor keeps one (openapi.yaml).
        const { namespaceResources, effects } = await namespaceFloorsConfigureDryRun(deps.db, {
          principal,
          namespace,
          expectedRevision: expected_revision,
          floors,
        });
        return { namespace_resources: namespaceResources, deduplicated: false, dry_run: true, effects };
      }
      const { namespaceResources, deduplicated } = await namespaceFloorsConfigure(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'configureNamespaceResources', { namespace }, input.body),
        namespace,
        expectedRevision: expected_revision,
        reason,
        floors,
      });
      return { namespace_resources: namespaceResources, deduplicated };
    },
  };
}
