import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { RETENTION_FIELDS, type RetentionPolicy } from '../../domain/retention.ts';
import { retentionConfigure, retentionGet } from '../../store/retention/retention-policies.ts';
import { receiptIdentity } from './receipt-identity.ts';

type RetentionHandlers = Pick<Handlers<RequestContext>, 'getRetention' | 'configureRetention'>;

export function retentionHandlers(deps: AppDeps): RetentionHandlers {
  return {
    async getRetention(_input, ctx) {
      return retentionGet(deps.db, ctx.principal().applicationId);
    },
    async configureRetention(input, ctx) {
      const principal = ctx.principal();
      const body = input.body;
      // A full replacement: a duration absent from the body keeps that history forever.
      const policy = {} as RetentionPolicy;
      for (const field of RETENTION_FIELDS) policy[field] = body[field] ?? null;
      const { retention, deduplicated, dryRun } = await retentionConfigure(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'configureRetention', {}, body),
        expectedRevision: body.expected_revision,
        reason: body.reason,
        policy,
        dryRun: body.dry_run === true,
      });
      return dryRun ? { retention, deduplicated, dry_run: true } : { retention, deduplicated };
    },
  };
}
