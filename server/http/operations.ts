/**
 * Mounts the generated route table on Hono. For every operation, in this order:
 * authenticate (401) → check the action (403) → path, query, header and body validation (400)
 * → the handler → the envelope. Nothing here knows an operation by name: what to check comes
 * from openapi.yaml through `server/generated/routes.ts`.
 */
import type { Context, Hono } from 'hono';
import { OrbitError, invalidArgument } from '../errors.ts';
import { withOperation } from '../operation.ts';
import { routes, type Handlers, type OperationId, type OperationInput, type RouteSpec } from '../generated/routes.ts';
import type { Principal } from '../domain/principal.ts';
import { parseStrictJson } from '../input/strict-json.ts';
import { fieldPath } from '../input/field-path.ts';
import { validationError } from '../input/validation-errors.ts';
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

/**
 * The request path exactly as sent (percent-escapes kept). The app routes on it and path
 * parameters are decoded from it exactly once (`readPath`): decoding before routing and again
 * afterwards would let `/v1/queues/%2561` name queue `a`, and a malformed escape would
 * surface as a decoder exception.
 */
export function rawPathOf(url: string): string {
  const start = url.indexOf('/', url.indexOf(':') + 3);
  if (start === -1) return '/';
  let end = url.length;
  for (const stop of ['?', '#']) {
    const at = url.indexOf(stop, start);
    if (at !== -1 && at < end) end = at;
  }
  return url.slice(start, end);
}

/** A matcher for a route's path template: one capture group per `{parameter}`, in order. */
export function pathTemplate(template: string): { pattern: RegExp; names: string[] } {
  const names: string[] = [];
  const source = template.replace(/\{([^}]+)\}|[^{]+/g, (part, name: string | undefined) => {
    if (name === undefined) return part.replace(/[.*+?^$()|[\]\\]/g, '\\$&');
    names.push(name);
    return '([^/]+)';
  });
  return { pattern: new RegExp(`^${source}$`), names };
}

const TEMPLATES = routes.map((route) => ({ method: route.method, ...pathTemplate(route.path) }));

/** The methods served at a raw path (HEAD wherever GET is: Hono answers it from the GET route); empty for an unknown path. */
export function allowedMethods(rawPath: string): string[] {
  const methods = new Set<string>(TEMPLATES.filter((t) => t.pattern.test(rawPath)).map((t) => t.method));
  if (methods.has('GET')) methods.add('HEAD');
  return [...methods].sort();
}

function decodeParameter(name: string, raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw invalidArgument(name, 'is not a valid percent-encoded UTF-8 string', 'path');
  }
}

function readPath(c: Context, template: ReturnType<typeof pathTemplate>): Record<string, string> {
  const match = template.pattern.exec(rawPathOf(c.req.url));
  const out: Record<string, string> = {};
  // Hono routed this request here, so the template matches; fail closed all the same.
  if (!match) throw new OrbitError('NOT_FOUND', 'no such path');
  template.names.forEach((name, i) => {
    out[name] = decodeParameter(name, match[i + 1] as string);
  });
  return out;
}

function readQuery(c: Context, route: RouteSpec): Record<string, unknown> {
  const url = new URL(c.req.url);
  const out: Record<string, unknown> = {};
  for (const name of new Set(url.searchParams.keys())) {
    const type = Object.hasOwn(route.queryParams, name) ? route.queryParams[name] : undefined;
    if (type === undefined) throw invalidArgument(fieldPath([name]), 'is not a query parameter of this operation', 'query');
    const values = url.searchParams.getAll(name);
    if (values.length > 1) throw invalidArgument(fieldPath([name]), 'must appear at most once', 'query');
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

function bodyTooLarge(limit: number): OrbitError {
  return invalidArgument('body', `must be at most ${limit} bytes`, 'body');
}

/**
 * The body's bytes, reading no further than `limit`: a chunked upload without Content-Length
 * is refused as soon as it passes the limit, not after it has been buffered whole. The rest is
 * left unread; the refusal goes out with `Connection: close` (see `readBody`).
 */
async function readAtMost(stream: ReadableStream<Uint8Array> | null, limit: number): Promise<Uint8Array> {
  if (stream === null) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > limit) throw bodyTooLarge(limit);
      chunks.push(value);
    }
  } finally {
    reader.releaseLock();
  }
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

/** How much of a refused body is read and thrown away so that its sender can read the answer. */
const DISCARD_BYTES = 16 * 1024 * 1024;
/** Discarding stops when nothing arrives for this long (a body left open, a trickle). */
const DISCARD_IDLE_MS = 500;

/**
 * Reads what is left of a refused body and throws it away; true when it ended within
 * DISCARD_BYTES (and `declared`, its Content-Length, did not already say it is longer) with no
 * pause longer than DISCARD_IDLE_MS.
 */
async function discardRest(stream: ReadableStream<Uint8Array> | null, declared: number): Promise<boolean> {
  if (stream === null) return true;
  if (declared > DISCARD_BYTES || stream.locked) return false;
  const reader = stream.getReader();
  let size = 0;
  let timer: NodeJS.Timeout | undefined;
  const idle = () => new Promise<'idle'>((resolve) => (timer = setTimeout(() => resolve('idle'), DISCARD_IDLE_MS)));
  try {
    for (;;) {
      const read = reader.read();
      read.catch(() => {}); // a read left pending after an idle stop may reject when the connection closes
      const next = await Promise.race([read, idle()]);
      clearTimeout(timer);
      if (next === 'idle') return false;
      if (next.done) return true;
      size += next.value.byteLength;
      if (size > DISCARD_BYTES) return false;
    }
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
    try {
      reader.releaseLock();
    } catch {
      // A read still pending (after an idle stop): the connection's close ends it.
    }
  }
}

/** The body as strict JSON, read no further than `limit` bytes (the route's `maxBodyBytes`, from openapi.yaml). */
async function readBody(c: Context, limit: number): Promise<unknown> {
  const contentType = c.req.header('Content-Type');
  if (contentType === undefined || !/^application\/json\s*(;\s*charset=utf-8\s*)?$/i.test(contentType.trim())) {
    throw invalidArgument('Content-Type', 'must be application/json', 'header');
  }
  const declared = Number(c.req.header('Content-Length') ?? '0');
  let buffer: Uint8Array;
  try {
    if (declared > limit) throw bodyTooLarge(limit);
    // With a Content-Length the HTTP parser delivers exactly that many bytes, and the adapter's
    // own reader is much faster than a web stream; without one (chunked), count as we read.
    buffer = c.req.header('Content-Length') !== undefined ? new Uint8Array(await c.req.arrayBuffer()) : await readAtMost(c.req.raw.body, limit);
    // (A Request built in-process, as tests do with app.request(), is not held to its header.)
    if (buffer.byteLength > limit) throw bodyTooLarge(limit);
  } catch (error) {
    const refusal = error instanceof OrbitError ? error : undefined;
    // A refused body may be only partly read. A client that is still sending cannot read the
    // answer if the connection closes under it (it gets EPIPE instead of the 400), so the rest
    // is read and thrown away - up to DISCARD_BYTES; beyond that, or when the body cannot be
    // read, the connection closes after the answer, so the leftover bytes are never taken for
    // the next request.
    if (!(refusal && (await discardRest(c.req.raw.body, declared)))) c.header('Connection', 'close');
    if (refusal) throw refusal;
    // The client went away (or broke the stream) mid-body: its problem, not the database's.
    throw invalidArgument('body', 'could not be read to its end (the client closed or broke the request)', 'body');
  }
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
    const template = pathTemplate(route.path);
    const handler = handlers[route.operationId] as (input: OperationInput<OperationId>, context: RequestContext) => Promise<unknown>;
    app.on(route.method, route.honoPath, async (c) => {
      // First, so that every answer of this route - refusals included - is counted under it (app.ts).
      c.set('operation', route.operationId);
      const requestId = c.get('requestId');
      // Only the worker session is an HTTP upgrade (server/worker/upgrade.ts marks such requests).
      if (route.operationId !== 'connectWorker' && (c.env as { viaUpgrade?: boolean } | undefined)?.viaUpgrade === true) {
        throw invalidArgument('Upgrade', 'is accepted only by GET /v1/workers/connect', 'header');
      }
      let principal: Principal | null = null;
      if (route.action !== null) {
        principal = await authenticate(c.req.header('Authorization'));
        c.set('principal', principal);
        if (!principal.actions.has(route.action)) {
          throw new OrbitError('PERMISSION_DENIED', `the credential lacks the action ${route.action}`, { details: { action: route.action } });
        }
      }
      const path = readPath(c, template);
      if (!route.validate.path(path)) throw validationError(route.validate.path.errors, 'path');
      const query = readQuery(c, route);
      if (!route.validate.query(query)) throw validationError(route.validate.query.errors, 'query');
      const headers = readHeaders(c, route);
      if (!route.validate.headers(headers)) throw validationError(route.validate.headers.errors, 'header');
      let body: unknown;
      if (route.validate.body !== null) {
        body = await readBody(c, route.maxBodyBytes);
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
      // Named for the database layer's figures (operation.ts): what these statements are for.
      const result = await withOperation(route.operationId, () => handler({ path, query, headers, body } as OperationInput<OperationId>, context));
      return route.raw ? (result as Response) : renderData(c, requestId, result);
    });
  }
}
