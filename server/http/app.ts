/**
 * The Hono app: a request id for every request, the generated operations, and one error
 * handler that renders every failure as the envelope. Tests call `app.request()` directly.
 */
import { Hono } from 'hono';
import { newRequestId } from '../ids.ts';
import { OrbitError } from '../errors.ts';
import { credentialAuthenticate } from '../store/tenancy/credentials.ts';
import type { Handlers } from '../generated/routes.ts';
import { allowedMethods, mountOperations, rawPathOf, type RequestContext } from './operations.ts';
import { PrincipalCache } from './principal-cache.ts';
import { renderError } from './envelope.ts';
import { toCallerError } from '../failures.ts';
import type { AppEnv } from './env.ts';
import type { AppDeps } from './deps.ts';
import { systemHandlers } from './handlers/system.ts';
import { pageHandlers } from './handlers/pages.ts';
import { applicationResourcesHandlers } from './handlers/application-resources.ts';
import { queueHandlers } from './handlers/queues.ts';
import { taskHandlers } from './handlers/tasks.ts';
import { feedHandlers } from './handlers/feeds.ts';
import { scheduleHandlers } from './handlers/schedules.ts';
import { subscriptionHandlers } from './handlers/subscriptions.ts';
import { workerHandlers } from './handlers/workers.ts';

export function createHandlers(deps: AppDeps): Handlers<RequestContext> {
  return {
    ...systemHandlers(deps),
    ...pageHandlers(deps),
    ...applicationResourcesHandlers(deps),
    ...queueHandlers(deps),
    ...taskHandlers(deps),
    ...scheduleHandlers(deps),
    ...subscriptionHandlers(deps),
    ...feedHandlers(deps),
    ...workerHandlers(deps),
  };
}

/** `Authorization: Bearer <token>` → the principal, or 401. */
export function bearerAuthenticator(deps: AppDeps) {
  const cache = new PrincipalCache(deps.authCacheMs);
  return async (authorization: string | undefined) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!match) throw new OrbitError('UNAUTHENTICATED', 'an Authorization: Bearer <token> header is required');
    const token = match[1] as string;
    const cached = cache.get(token);
    if (cached) return cached;
    const principal = await credentialAuthenticate(deps.db, token);
    cache.set(token, principal);
    return principal;
  };
}

export function createApp(deps: AppDeps): Hono<AppEnv> {
  // Routing sees the path as sent; parameters are decoded once, by the operations (operations.ts).
  const app = new Hono<AppEnv>({ getPath: (request) => rawPathOf(request.url) });
  app.use(async (c, next) => {
    c.set('requestId', newRequestId());
    await next();
  });
  mountOperations(app, createHandlers(deps), bearerAuthenticator(deps));
  app.notFound((c) => {
    const path = rawPathOf(c.req.url);
    const allow = allowedMethods(path);
    if (allow.length === 0) return renderError(c, c.get('requestId'), new OrbitError('NOT_FOUND', `no operation at ${path}`));
    const error = new OrbitError('METHOD_NOT_ALLOWED', `${c.req.method} is not served at this path; allowed: ${allow.join(', ')}`, { details: { allow } });
    const response = renderError(c, c.get('requestId'), error);
    response.headers.set('Allow', allow.join(', '));
    return response;
  });
  app.onError(async (error, c) => {
    const requestId = c.get('requestId') ?? newRequestId();
    const orbitError = await toCallerError(error, deps.db, c.get('principal'));
    if (orbitError.status >= 500) deps.log.error({ err: error, requestId, path: c.req.path }, orbitError.message);
    return renderError(c, requestId, orbitError);
  });
  return app;
}
