import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { applicationResourcesConfigure, applicationResourcesConfigureDryRun, applicationResourcesGet } from '../../store/quotas/application-resources.ts';
import { receiptIdentity } from './receipt-identity.ts';

type ApplicationResourcesHandlers = Pick<Handlers<RequestContext>, 'getApplicationResources' | 'configureApplicationResources'>;

export function applicationResourcesHandlers(deps: AppDeps): ApplicationResourcesHandlers {
  return {
    async getApplicationResources(_input, ctx) {
      return applicationResourcesGet(deps.db, ctx.principal().applicationId);
    },
    async configureApplicationResources(input, ctx) {
      const principal = ctx.principal();
      const body = input.body;
      const limits = { max_unfinished_tasks: body.max_unfinished_tasks, max_concurrency: body.max_concurrency, rate_per_second: body.rate_per_second };
      if (body.dry_run === true) {
        // No receipt: a dry run neither replays a key nor keeps one (openapi.yaml).
        const { resources, effects } = await applicationResourcesConfigureDryRun(deps.db, { principal, expectedRevision: body.expected_revision, limits });
        return { resources, deduplicated: false, dry_run: true, effects };
      }
      return applicationResourcesConfigure(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'configureApplicationResources', {}, body),
        expectedRevision: body.expected_revision,
        reason: body.reason,
        limits,
      });
    },
  };
}
