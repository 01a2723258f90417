/**
 * The Hono app: a request id for every request, the generated operations, one error handler
 * that renders every failure as the envelope, and one middleware that gives every answer
 * `X-Content-Type-Options: nosniff` and counts it in `orbit_http_requests_total{operation,
 * status}`. Tests call `app.request()` directly.
 */
import { Hono } from 'hono';
import { newRequestId } from '../ids.ts';
import { withDeadline } from '../deadline.ts';
import { OrbitError } from '../errors.ts';
import { credentialAuthenticate } from '../store/tenancy/credentials.ts';
import { routes, type Handlers } from '../generated/routes.ts';
import { allowedMethods, mountOperations, rawPathOf, type RequestContext } from './operations.ts';
import { PrincipalCache } from './principal-cache.ts';
import { renderError } from './envelope.ts';
import { toCallerError } from '../failures.ts';
import type { AppEnv } from './env.ts';
import type { AppDeps } from './deps.ts';
import { systemHandlers } from './handlers/system.ts';
import { pageHandlers } from './handlers/pages.ts';
import { applicationResourcesHandlers } from './handlers/application-resources.ts';
import { namespaceResourcesHandlers } from './handlers/namespace-resources.ts';
import { retentionHandlers } from './handlers/retention.ts';
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
    ...namespaceResourcesHandlers(deps),
    ...retentionHandlers(deps),
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

/**
 * The `operation` label of a request that matches no operation (an unknown path: 404; a known
 * path with another method: 405). One fixed value, not the path, so that whatever a client
 * sends the label has one series more than the spec has operations.
 */
export const UNMATCHED_OPERATION = 'unmatched';

/** operationId → its path template (the access log's `route`). */
const ROUTE_OF = new Map<string, string>(routes.map((r) => [r.operationId, r.path]));

export function createApp(deps: AppDeps): Hono<AppEnv> {
  // Routing sees the path as sent; parameters are decoded once, by the operations (operations.ts).
  const app = new Hono<AppEnv>({ getPath: (request) => rawPathOf(request.url) });
  app.use(async (c, next) => {
    const startedAt = performance.now();
    c.set('requestId', newRequestId());
    // Every database wait of the request - authentication, the operation, the error handler's
    // look-up - shares one bound (deadline.ts): a database that stops answering makes the
    // request answer 503 within it, however many waits it would have made.
    await withDeadline(deps.requestTimeoutMs, next);
    // After the route, the error handler or notFound made the answer (a handler's throw is
    // rendered by onError below before this resumes), so this sees every answer, refusals
    // included - the one place that adds what every answer carries and counts it.
    c.res.headers.set('X-Content-Type-Options', 'nosniff');
    // An upgrade the worker route took is answered by the WebSocket server (101), not with the
    // app's placeholder response (server/worker/upgrade.ts).
    const status = (c.env as { accepted?: boolean } | undefined)?.accepted === true ? 101 : c.res.status;
    const operation = c.get('operation');
    deps.metrics.httpRequests.inc({ operation: operation ?? UNMATCHED_OPERATION, status: String(status) });
    // The access log: one line per answer, at info (ORBIT_LOG_LEVEL=warn turns it off). The
    // route is the operation's path template, never the path as sent (no ids or tokens in it).
    deps.log.info(
      {
        request_id: c.get('requestId'),
        method: c.req.method,
        route: operation === undefined ? UNMATCHED_OPERATION : ROUTE_OF.get(operation),
        operation: operation ?? UNMATCHED_OPERATION,
        status,
        duration_ms: Math.round((performance.now() - startedAt) * 10) / 10,
      },
      'request',
    );
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
