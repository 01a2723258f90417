/** Health, readiness, the spec and metrics: no envelope, no authentication. */
import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';

type SystemHandlers = Pick<Handlers<RequestContext>, 'getHealth' | 'getReadiness' | 'getOpenApiDocument' | 'getMetrics'>;

export function systemHandlers(deps: AppDeps): SystemHandlers {
  return {
    async getHealth(_input, ctx) {
      return ctx.hono.json({ status: 'ok' });
    },
    async getReadiness(_input, ctx) {
      const readiness = await deps.ready().catch((error: unknown) => ({ ok: false, detail: (error as Error).message }));
      const body = readiness.ok ? { status: 'ok' } : { status: 'unavailable', detail: readiness.detail ?? 'not ready' };
      return ctx.hono.json(body, readiness.ok ? 200 : 503);
    },
    async getOpenApiDocument(_input, ctx) {
      return ctx.hono.body(deps.openApiDocument, 200, { 'Content-Type': 'application/yaml; charset=utf-8' });
    },
    async getMetrics(_input, ctx) {
      return ctx.hono.body(await deps.metrics.registry.metrics(), 200, { 'Content-Type': deps.metrics.registry.contentType });
    },
  };
}
