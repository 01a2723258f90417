import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { OrbitError } from '../../errors.ts';

export function workerHandlers(deps: AppDeps): Pick<Handlers<RequestContext>, 'connectWorker'> {
  return {
    async connectWorker(_input, ctx) {
      if (!deps.workers) throw new OrbitError('UNAVAILABLE', 'worker sessions are not served here');
      return deps.workers.connect(ctx.hono, ctx.principal());
    },
  };
}
