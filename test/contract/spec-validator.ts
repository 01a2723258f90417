/**
 * The contract, read from `openapi.yaml` itself (not from the generated code): Ajv 2020
 * validators for every operation's response bodies by status, `$ref`s resolved against the
 * document, and the request body schemas fully dereferenced for generating negative cases.
 *
 *   assertMatchesSpec('getQueue', 200, body)   // throws naming the operation, status and Ajv errors
 *   findOperation('POST', '/v1/queues/a:configure')  // → the spec operation a request hits
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

// ajv-formats is CommonJS: its default export seen through ESM may be wrapped once more.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => Ajv2020;

export const OPENAPI_FILE = fileURLToPath(new URL('../../openapi.yaml', import.meta.url));

export type JsonSchema = Record<string, unknown>;

/** HTTP status of each ErrorCode, written out here as an oracle independent of server/errors.ts. */
export const STATUS_OF_CODE: Record<string, number> = {
  INVALID_ARGUMENT: 400,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  STATE_CONFLICT: 409,
  IDEMPOTENCY_CONFLICT: 409,
  APPLICATION_FULL: 429,
  QUEUE_FULL: 429,
  UNAVAILABLE: 503,
  INTERNAL: 500,
};

/** openapi.yaml's own keyword on a request body: the largest body in bytes; without it a body is at most 1 MiB (info.description). */
export const MAX_BODY_BYTES = 'x-orbit-max-body-bytes';
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

/** openapi.yaml's own keyword: the largest UTF-8 size of the value serialised as compact JSON. */
export const MAX_JSON_BYTES = 'x-orbit-max-json-bytes';
/** An Ajv for the spec's schemas: every error, and the byte-limit keyword. */
export function specAjv(options: { validateFormats?: boolean } = {}): Ajv2020 {
  const ajv = new Ajv2020({ strict: false, allErrors: true, ...options });
  ajv.addKeyword({
    keyword: MAX_JSON_BYTES,
    schemaType: 'number',
    validate: (max: number, data: unknown) => Buffer.byteLength(JSON.stringify(data) ?? '', 'utf8') <= max,
  });
  return ajv;
}
const requestAjv = specAjv();

/** The schema without OpenAPI's `example` and the `x-` keywords other than the byte limit (Ajv does not know them). */
export function stripExtensions(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(stripExtensions);
  if (schema === null || typeof schema !== 'object') return schema;
  return Object.fromEntries(
    Object.entries(schema as Record<string, unknown>)
      .filter(([k]) => k !== 'example' && (!k.startsWith('x-') || k === MAX_JSON_BYTES))
      .map(([k, v]) => [k, k === 'properties' ? Object.fromEntries(Object.entries(v as object).map(([p, s]) => [p, stripExtensions(s)])) : stripExtensions(v)]),
  );
}

const requestValidators = new Map<unknown, ValidateFunction>();

/** An Ajv validator (all errors) for a request schema of the spec, with the byte-limit keyword; compiled once per schema. */
export function requestSchemaValidator(schema: unknown): ValidateFunction {
  let validate = requestValidators.get(schema);
  if (!validate) {
    validate = requestAjv.compile(stripExtensions(schema) as JsonSchema);
    requestValidators.set(schema, validate);
  }
  return validate;
}

interface OpenApiOperation {
  operationId: string;
  security?: unknown[];
  parameters?: Array<Record<string, unknown>>;
  requestBody?: Record<string, unknown>;
  responses: Record<string, Record<string, unknown>>;
  [extension: `x-${string}`]: unknown;
}

export const spec = parse(readFileSync(OPENAPI_FILE, 'utf8')) as {
  paths: Record<string, Record<string, OpenApiOperation>>;
  components: Record<string, Record<string, unknown>>;
  security?: unknown[];
};

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];

export interface SpecOperation {
  operationId: string;
  method: string;
  /** As written in the spec, e.g. `/v1/queues/{queue}:configure`. */
  path: string;
  operation: OpenApiOperation;
  /** No envelope, no authentication (`x-orbit-raw: true`). */
  raw: boolean;
  authenticated: boolean;
  action: string | null;
  /** Parameters with `$ref`s resolved. */
  parameters: Array<{ name: string; in: string; required: boolean; schema: JsonSchema }>;
  /** The `application/json` request body schema, fully dereferenced; null when there is no body. */
  requestSchema: JsonSchema | null;
  /** The largest request body in bytes (`x-orbit-max-body-bytes`, else 1 MiB); null when there is no body. */
  maxBodyBytes: number | null;
  /**
   * A bulk operation: the request's array whose description says "each a `Schema`" - its items
   * are checked one by one against that component schema (dereferenced), each refused in its
   * own result. null otherwise.
   */
  bulkItems: { array: string; schemaName: string; schema: JsonSchema } | null;
  /** Spec path as a regex over a concrete request path. */
  matcher: RegExp;
}

/** The value a local `$ref` (`#/a/b`) points at. */
export function resolvePointer(ref: string): unknown {
  assert.ok(ref.startsWith('#/'), `only local $refs are supported: ${ref}`);
  let node: unknown = spec;
  for (const raw of ref.slice(2).split('/')) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    node = (node as Record<string, unknown> | undefined)?.[key];
    assert.ok(node !== undefined, `unresolvable $ref ${ref}`);
  }
  return node;
}

/** Follows `$ref` chains at the top of `node` (responses, parameters). */
function deref<T>(node: T): T {
  let current: unknown = node;
  for (let i = 0; i < 20 && current && typeof current === 'object' && '$ref' in current; i++) {
    current = resolvePointer((current as { $ref: string }).$ref);
  }
  return current as T;
}

/** A deep copy with every `$ref` replaced by its target (the spec's schemas are not recursive). */
export function dereference(schema: unknown, depth = 0): unknown {
  assert.ok(depth < 64, 'recursive $ref in openapi.yaml');
  if (Array.isArray(schema)) return schema.map((item) => dereference(item, depth + 1));
  if (schema === null || typeof schema !== 'object') return schema;
  const object = schema as Record<string, unknown>;
  if (typeof object.$ref === 'string') {
    const { $ref, ...siblings } = object;
    const target = dereference(resolvePointer($ref as string), depth + 1) as Record<string, unknown>;
    return { ...target, ...(dereference(siblings, depth + 1) as Record<string, unknown>) };
  }
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(object)) out[key] = dereference(value, depth + 1);
  return out;
}

/** The same schema without OpenAPI `x-` extension keywords (which Ajv does not know). */
function withoutExtensions(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withoutExtensions);
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema as Record<string, unknown>)) {
    if (key.startsWith('x-')) continue;
    out[key] =
      key === 'properties'
        ? Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, withoutExtensions(v)]))
        : withoutExtensions(value);
  }
  return out;
}

/** A component schema of openapi.yaml, fully dereferenced. */
export function componentSchema(name: string): JsonSchema {
  const schema = spec.components.schemas?.[name];
  assert.ok(schema !== undefined, `openapi.yaml has no schema ${name}`);
  return dereference(schema) as JsonSchema;
}

/** The array of a request schema whose items the spec says are "each a `Name`" (a component schema). */
function bulkItemsOf(schema: JsonSchema): SpecOperation['bulkItems'] {
  for (const [name, property] of Object.entries((schema.properties ?? {}) as Record<string, JsonSchema>)) {
    if (property.type !== 'array' || typeof property.description !== 'string') continue;
    const match = /\beach an? `([A-Za-z][A-Za-z0-9]*)`/.exec(property.description);
    if (match && spec.components.schemas?.[match[1] as string] !== undefined)
      return { array: name, schemaName: match[1] as string, schema: componentSchema(match[1] as string) };
  }
  return null;
}

function pathMatcher(path: string): RegExp {
  const source = path
    .split(/(\{[^}]+\})/)
    .map((part) => (part.startsWith('{') ? '([^/]+?)' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('');
  return new RegExp(`^${source}$`);
}

export const operations: SpecOperation[] = [];
for (const [path, item] of Object.entries(spec.paths)) {
  for (const method of HTTP_METHODS) {
    const operation = item[method];
    if (!operation) continue;
    const parameters = [...((item as { parameters?: unknown[] }).parameters ?? []), ...(operation.parameters ?? [])].map((p) => {
      const param = deref(p) as { name: string; in: string; required?: boolean; schema: unknown };
      return { name: param.name, in: param.in, required: param.required === true, schema: withoutExtensions(dereference(param.schema)) as JsonSchema };
    });
    const body = deref(operation.requestBody as Record<string, unknown> | undefined) as
      | ({ content?: Record<string, { schema: unknown }> } & Record<string, unknown>)
      | undefined;
    const jsonBody = body?.content?.['application/json']?.schema;
    const requestSchema = jsonBody === undefined ? null : (dereference(jsonBody) as JsonSchema);
    const declaredLimit = body?.[MAX_BODY_BYTES];
    assert.ok(
      declaredLimit === undefined || (Number.isSafeInteger(declaredLimit) && (declaredLimit as number) > 0),
      `${operation.operationId}: ${MAX_BODY_BYTES} must be a positive integer`,
    );
    operations.push({
      operationId: operation.operationId,
      method: method.toUpperCase(),
      path,
      operation,
      raw: operation['x-orbit-raw'] === true,
      authenticated: (operation.security ?? spec.security ?? []).length > 0,
      action: (operation['x-orbit-action'] as string | undefined) ?? null,
      parameters,
      requestSchema,
      maxBodyBytes: requestSchema === null ? null : ((declaredLimit as number | undefined) ?? DEFAULT_MAX_BODY_BYTES),
      bulkItems: requestSchema === null ? null : bulkItemsOf(requestSchema),
      matcher: pathMatcher(path),
    });
  }
}

export const operationIds: ReadonlySet<string> = new Set(operations.map((o) => o.operationId));

export function operationById(operationId: string): SpecOperation {
  const found = operations.find((o) => o.operationId === operationId);
  assert.ok(found, `openapi.yaml has no operation ${operationId}`);
  return found;
}

/**
 * The spec operation a concrete request hits. Among templates that match, the one with the most
 * literal characters wins (`/v1/queues/{queue}:configure` over `/v1/queues/{queue}`).
 */
export function findOperation(method: string, requestPath: string): SpecOperation | null {
  const pathOnly = requestPath.split('?')[0] as string;
  const candidates = operations
    .filter((o) => o.method === method.toUpperCase() && o.matcher.test(pathOnly))
    .sort((a, b) => b.path.replace(/\{[^}]+\}/g, '').length - a.path.replace(/\{[^}]+\}/g, '').length);
  return candidates[0] ?? null;
}

// ---------------------------------------------------------------------------------------------
// Response validators
// ---------------------------------------------------------------------------------------------

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv);

const cache = new Map<string, ValidateFunction>();

function compile(key: string, schema: unknown): ValidateFunction {
  let validate = cache.get(key);
  if (!validate) {
    validate = ajv.compile(withoutExtensions(dereference(schema)) as JsonSchema);
    cache.set(key, validate);
  }
  return validate;
}

interface ResponseShape {
  declaredAs: string;
  /** null when the response declares no content (e.g. `101 Switching Protocols`). */
  contentType: string | null;
  schema: unknown;
  headers: Record<string, { schema?: unknown; required?: boolean }>;
}

/** The response the spec declares for `status`: the exact code, else `default`. */
export function declaredResponse(operationId: string, status: number): ResponseShape {
  const op = operationById(operationId);
  const declaredAs = String(status) in op.operation.responses ? String(status) : 'default';
  const response = deref(op.operation.responses[declaredAs]) as
    | { content?: Record<string, { schema?: unknown }>; headers?: Record<string, { schema?: unknown }> }
    | undefined;
  assert.ok(response, `${operationId}: status ${status} is not declared in openapi.yaml (and there is no default response)`);
  const [contentType, media] = Object.entries(response.content ?? {})[0] ?? [];
  if (contentType !== undefined) assert.ok(media?.schema !== undefined, `${operationId} ${declaredAs}: ${contentType} without a schema in openapi.yaml`);
  return { declaredAs, contentType: contentType ?? null, schema: media?.schema, headers: response.headers ?? {} };
}

/** The explicit status codes an operation declares (`200`, `429`, `101`, …; not `default`). */
export function declaredStatuses(operationId: string): number[] {
  return Object.keys(operationById(operationId).operation.responses)
    .filter((code) => /^\d{3}$/.test(code))
    .map(Number);
}

/**
 * Validates a response body against what openapi.yaml declares for the operation and status
 * (the `200`/`429`/`503` response when declared, else `default`). `body` is the parsed JSON, or
 * the text for non-JSON responses. Throws an AssertionError naming what does not match.
 */
export function assertMatchesSpec(operationId: string, status: number, body: unknown): void {
  const response = declaredResponse(operationId, status);
  if (response.contentType === null) {
    assert.ok(body === undefined || body === '', `${operationId} ${status}: the spec declares no content, got ${JSON.stringify(body)?.slice(0, 200)}`);
    return;
  }
  const validate = compile(`${operationId} ${response.declaredAs}`, response.schema);
  if (!validate(body)) {
    const errors = (validate.errors ?? []).map((e) => `${e.instancePath || '(root)'} ${e.message ?? e.keyword} ${JSON.stringify(e.params)}`);
    assert.fail(
      `${operationId} ${status} (spec response "${response.declaredAs}") does not match openapi.yaml:\n  ${errors.join('\n  ')}\nbody: ${JSON.stringify(body)?.slice(0, 2000)}`,
    );
  }
}

/** Every header the spec declares for the response is present and matches its schema (e.g. `Retry-After: 1` on 429). */
export function assertHeadersMatchSpec(operationId: string, status: number, headers: Headers): void {
  const response = declaredResponse(operationId, status);
  for (const [name, header] of Object.entries(response.headers)) {
    const value = headers.get(name);
    // A header the spec marks `required: false` is there only sometimes (X-Orbit-Wait: only after a wait).
    if (value === null && header.required === false) continue;
    assert.ok(value !== null, `${operationId} ${status}: header ${name} is declared in openapi.yaml but missing`);
    if (header.schema !== undefined) {
      const validate = compile(`${operationId} ${response.declaredAs} header ${name}`, header.schema);
      assert.ok(
        validate(value),
        `${operationId} ${status}: header ${name}: ${JSON.stringify(value)} does not match openapi.yaml (${ajv.errorsText(validate.errors)})`,
      );
    }
  }
}

/** The media type the spec declares for the response (null for none). */
export function declaredContentType(operationId: string, status: number): string | null {
  return declaredResponse(operationId, status).contentType;
}

const errorEnvelope = () => compile('ErrorEnvelope', { $ref: '#/components/schemas/ErrorEnvelope' });

/** For responses outside any operation (an unknown route): the spec's error envelope. */
export function assertErrorEnvelope(body: unknown): void {
  const validate = errorEnvelope();
  assert.ok(validate(body), `not an ErrorEnvelope: ${ajv.errorsText(validate.errors)}; body: ${JSON.stringify(body)}`);
}
