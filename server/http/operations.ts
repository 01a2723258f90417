/**
 * Mounts the generated route table on Hono. For every operation, in this order:
 * authenticate (401) → check the action (403) → path, query, header and body validation (400)
 * → the handler → the envelope. Nothing here knows an operation by name: what to check comes
 * from openapi.yaml through `server/generated/routes.ts`.
 */
import type { Context, Hono } from 'hono';
import { OrbitError, invalidArgument } from '../errors.ts';
import { routes, type Handlers, type OperationId, type OperationInput, type RouteSpec } from '../generated/routes.ts';
import type { Principal } from '../domain/principal.ts';
import { parseStrictJson } from './strict-json.ts';
import { validationError } from './validation-errors.ts';
import { renderData } from './envelope.ts';
import type { AppEnv } from './env.ts';

/** What every handler gets besides its validated input. */
export interface RequestContext {
  readonly requestId: string;
  /** The authenticated caller; operations without authentication must not ask. */
  principal(): Principal;
  /** The raw Hono context, for raw operations that build their own Response. */
  readonly hono: Context<AppEnv>;
}

export type Authenticate = (authorization: string | undefined) => Promise<Principal>;

/** Request bodies larger than this are refused before parsing (the largest field, payload, is 256 KiB). */
export const MAX_BODY_BYTES = 1024 * 1024;

function readPath(c: Context, route: RouteSpec): Record<string, string> {
  const params = c.req.param() as Record<string, string>;
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(params)) {
    const suffix = route.pathSuffixes[name];
    const decoded = decodeURIComponent(value);
    out[name] = suffix !== undefined && decoded.endsWith(suffix) ? decoded.slice(0, -suffix.length) : decoded;
  }
  return out;
}

function readQuery(c: Context, route: RouteSpec): Record<string, unknown> {
  const url = new URL(c.req.url);
  const out: Record<string, unknown> = {};
  for (const name of new Set(url.searchParams.keys())) {
    const type = route.queryParams[name];
    if (type === undefined) throw invalidArgument(name, 'is not a query parameter of this operation', 'query');
    const values = url.searchParams.getAll(name);
    if (values.length > 1) throw invalidArgument(name, 'must appear at most once', 'query');
    const value = values[0] as string;
    // Integers are converted only when they look like integers; anything else stays a string
    // and the validator reports the type.
    out[name] = type === 'integer' && /^-?(0|[1-9]\d{0,14})$/.test(value) ? Number(value) : value;
  }
  return out;
}

function readHeaders(c: Context, route: RouteSpec): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of route.headerParams) {
    const value = c.req.header(name);
    if (value !== undefined) out[name] = value;
  }
  return out;
}

async function readBody(c: Context): Promise<unknown> {
  const contentType = c.req.header('Content-Type');
  if (contentType === undefined || !/^application\/json\s*(;\s*charset=utf-8\s*)?$/i.test(contentType.trim())) {
    throw invalidArgument('Content-Type', 'must be application/json', 'header');
  }
  const declared = Number(c.req.header('Content-Length') ?? '0');
  if (declared > MAX_BODY_BYTES) throw invalidArgument('body', `must be at most ${MAX_BODY_BYTES} bytes`, 'body');
  const buffer = await c.req.arrayBuffer();
  if (buffer.byteLength > MAX_BODY_BYTES) throw invalidArgument('body', `must be at most ${MAX_BODY_BYTES} bytes`, 'body');
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(buffer);
  } catch {
    throw invalidArgument('body', 'is not valid UTF-8', 'body');
  }
  const parsed = parseStrictJson(text);
  if (!parsed.ok) throw invalidArgument(parsed.field, parsed.reason, 'body');
  return parsed.value;
}

export function mountOperations(app: Hono<AppEnv>, handlers: Handlers<RequestContext>, authenticate: Authenticate): void {
  for (const route of routes) {
    const handler = handlers[route.operationId] as (input: OperationInput<OperationId>, context: RequestContext) => Promise<unknown>;
    app.on(route.method, route.honoPath, async (c) => {
      const requestId = c.get('requestId');
      let principal: Principal | null = null;
      if (route.action !== null) {
        principal = await authenticate(c.req.header('Authorization'));
        if (!principal.actions.has(route.action)) {
          throw new OrbitError('PERMISSION_DENIED', `the credential lacks the action ${route.action}`, { details: { action: route.action } });
        }
      }
      const path = readPath(c, route);
      if (!route.validate.path(path)) throw validationError(route.validate.path.errors, 'path');
      const query = readQuery(c, route);
      if (!route.validate.query(query)) throw validationError(route.validate.query.errors, 'query');
      const headers = readHeaders(c, route);
      if (!route.validate.headers(headers)) throw validationError(route.validate.headers.errors, 'header');
      let body: unknown = undefined;
      if (route.validate.body !== null) {
        body = await readBody(c);
        if (!route.validate.body(body)) throw validationError(route.validate.body.errors, 'body');
      }
      const context: RequestContext = {
        requestId,
        hono: c,
        principal() {
          if (principal === null) throw new Error(`${route.operationId} is unauthenticated`);
          return principal;
        },
      };
      const result = await handler({ path, query, headers, body } as OperationInput<OperationId>, context);
      return route.raw ? (result as Response) : renderData(c, requestId, result);
    });
  }
}
