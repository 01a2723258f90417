/**
 * openapi.yaml → the server's route table, validators and types, and the SDK's types.
 *
 * - `server/generated/openapi.ts` and `sdk/generated/openapi.ts`: `paths`, `components`,
 *   `operations` from openapi-typescript, written twice with the same contents: the server's
 *   copy backs its handler interface and error codes, the SDK's copy is used by openapi-fetch.
 *   Nothing under server/ imports sdk/ (the SDK is to become a package of its own).
 * - `server/generated/validators.js`: Ajv standalone validators for every operation's path,
 *   query, header and body input.
 * - `server/generated/routes.ts`: the route table (method, Hono path, action, parameters,
 *   validators) and the typed inputs and outputs each handler implements.
 * - `sdk/generated/operations.ts`: the SDK's operation table and where the usage counts sit in
 *   each response (codegen/sdk-operations.ts).
 */
import openapiTS, { astToString } from 'openapi-typescript';
import { pathToFileURL } from 'node:url';
import { generatedHeader } from './header.ts';
import { validatorFiles } from './ajv-standalone.ts';
import { generateSdkOperations } from './sdk-operations.ts';
import { deref, isObject, loadYaml, type Json, type JsonObject } from './spec.ts';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;
const DEFINITIONS_ID = 'https://orbit.invalid/openapi/components';
const REF_PREFIX = '#/components/schemas/';

interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required: boolean;
  schema: Json;
}

interface Operation {
  operationId: string;
  method: (typeof METHODS)[number];
  path: string;
  action: string | null;
  raw: boolean;
  params: Parameter[];
  body: Json | null;
  maxBodyBytes: number;
  /** The operation object as written in openapi.yaml. */
  node: JsonObject;
}

/** The body limit of an operation that does not set `x-orbit-max-body-bytes` (the largest field, payload, is 256 KiB). */
const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

function readOperations(doc: JsonObject): Operation[] {
  const operations: Operation[] = [];
  const paths = doc.paths;
  if (!isObject(paths)) throw new Error('openapi.yaml has no paths');
  for (const [path, itemNode] of Object.entries(paths)) {
    const item = deref<JsonObject>(doc, itemNode);
    const shared = Array.isArray(item.parameters) ? item.parameters : [];
    for (const method of METHODS) {
      const op = item[method];
      if (!isObject(op)) continue;
      const operationId = op.operationId;
      if (typeof operationId !== 'string') throw new Error(`${method.toUpperCase()} ${path} has no operationId`);
      const params = [...shared, ...(Array.isArray(op.parameters) ? op.parameters : [])].map((p) => {
        const param = deref<JsonObject>(doc, p);
        if (param.in !== 'path' && param.in !== 'query' && param.in !== 'header') {
          throw new Error(`${operationId}: parameter location ${String(param.in)} is not supported`);
        }
        return { name: String(param.name), in: param.in, required: param.required === true, schema: param.schema ?? {} } as Parameter;
      });
      let body: Json | null = null;
      let maxBodyBytes = DEFAULT_MAX_BODY_BYTES;
      if (op.requestBody !== undefined) {
        const requestBody = deref<JsonObject>(doc, op.requestBody);
        const limit = requestBody['x-orbit-max-body-bytes'];
        if (limit !== undefined) {
          if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1)
            throw new Error(`${operationId}: x-orbit-max-body-bytes must be a positive integer`);
          maxBodyBytes = limit;
        }
        const content = requestBody.content;
        if (!isObject(content) || !isObject(content['application/json'])) {
          throw new Error(`${operationId}: only application/json request bodies are supported`);
        }
        body = (content['application/json'] as JsonObject).schema ?? {};
      }
      const raw = op['x-orbit-raw'] === true;
      const action = typeof op['x-orbit-action'] === 'string' ? op['x-orbit-action'] : null;
      const unauthenticated = Array.isArray(op.security) && op.security.length === 0;
      if (!unauthenticated && action === null) throw new Error(`${operationId}: x-orbit-action is required unless security is []`);
      if (unauthenticated && action !== null) throw new Error(`${operationId}: an operation with security [] has no action`);
      operations.push({ operationId, method, path, action, raw, params, body, maxBodyBytes, node: op });
    }
  }
  return operations;
}

/** `/v1/queues/{queue}:configure` → `/v1/queues/:queue{[^/]+:configure}`. */
export function honoPath(path: string): string {
  const segments = path.split('/').map((segment) => {
    const match = /^\{([A-Za-z_][A-Za-z0-9_]*)\}(.*)$/.exec(segment);
    if (!match) {
      if (segment.includes('{')) throw new Error(`${path}: a parameter must start its path segment`);
      return segment;
    }
    const [, name, suffix] = match as unknown as [string, string, string];
    if (suffix === '') return `:${name}`;
    if (!/^:[a-z][A-Za-z]*$/.test(suffix)) throw new Error(`${path}: unsupported suffix ${suffix}`);
    // Hono reads `:name` as a parameter only at the start of a segment, and a literal suffix
    // after a parameter needs a regex parameter that includes it. Handlers do not read Hono's
    // parameters: they decode the raw path against the template (server/http/operations.ts).
    return `:${name}{[^/]+${suffix}}`;
  });
  return segments.join('/');
}

function objectSchema(params: Parameter[]): Json {
  return {
    type: 'object',
    additionalProperties: false,
    required: params.filter((p) => p.required).map((p) => p.name),
    properties: Object.fromEntries(params.map((p) => [p.name, p.schema])),
  };
}

function queryCoercion(doc: JsonObject, param: Parameter): 'integer' | 'string' {
  const schema = deref<JsonObject>(doc, param.schema);
  if (schema.type === 'integer') return 'integer';
  if (schema.type === undefined || schema.type === 'string') return 'string';
  throw new Error(`query parameter ${param.name}: only string and integer types are supported`);
}

function quote(value: string): string {
  return JSON.stringify(value);
}

function generateRoutes(doc: JsonObject, operations: Operation[]): string {
  const lines: string[] = [generatedHeader('openapi.yaml')];
  lines.push(`import * as validators from './validators.js';`);
  lines.push(`import type { operations } from './openapi.ts';`);
  lines.push('');
  lines.push(`/** An Ajv standalone validator. */`);
  lines.push(`export type ValidateFunction = ((data: unknown) => boolean) & { errors?: ValidationError[] | null };`);
  lines.push(`export interface ValidationError {`);
  lines.push(`  instancePath: string;`);
  lines.push(`  keyword: string;`);
  lines.push(`  params: Record<string, unknown>;`);
  lines.push(`  message?: string;`);
  lines.push(`  parentSchema?: unknown;`);
  lines.push(`}`);
  lines.push('');
  const ids = operations.map((op) => op.operationId);
  lines.push(`export type OperationId =\n${ids.map((id) => `  | ${quote(id)}`).join('\n')};`);
  const actions = [...new Set(operations.map((op) => op.action).filter((a): a is string => a !== null))].sort();
  lines.push(`/** The credential actions the HTTP operations require. */`);
  lines.push(`export type OperationAction =\n${actions.map((a) => `  | ${quote(a)}`).join('\n')};`);
  lines.push('');
  lines.push(`export interface RouteSpec {`);
  lines.push(`  readonly operationId: OperationId;`);
  lines.push(`  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';`);
  lines.push(`  /** As written in openapi.yaml. */`);
  lines.push(`  readonly path: string;`);
  lines.push(`  /** As Hono routes it; a parameter followed by a literal suffix is a regex parameter including it. */`);
  lines.push(`  readonly honoPath: string;`);
  lines.push(`  readonly queryParams: Readonly<Record<string, 'integer' | 'string'>>;`);
  lines.push(`  readonly headerParams: readonly string[];`);
  lines.push(`  readonly hasBody: boolean;`);
  lines.push(
    `  /** Bodies longer than this are refused before parsing (\`x-orbit-max-body-bytes\` of the request body; default ${DEFAULT_MAX_BODY_BYTES}). */`,
  );
  lines.push(`  readonly maxBodyBytes: number;`);
  lines.push(`  /** The credential action required, or null for operations without authentication (\`security: []\`). */`);
  lines.push(`  readonly action: OperationAction | null;`);
  lines.push(`  /** Raw endpoints answer with their own Response instead of the JSON envelope. */`);
  lines.push(`  readonly raw: boolean;`);
  lines.push(`  readonly validate: {`);
  lines.push(`    readonly path: ValidateFunction;`);
  lines.push(`    readonly query: ValidateFunction;`);
  lines.push(`    readonly headers: ValidateFunction;`);
  lines.push(`    readonly body: ValidateFunction | null;`);
  lines.push(`  };`);
  lines.push(`}`);
  lines.push('');
  lines.push(`export const routes: readonly RouteSpec[] = [`);
  for (const op of operations) {
    const hp = honoPath(op.path);
    const query = op.params.filter((p) => p.in === 'query');
    const headers = op.params.filter((p) => p.in === 'header');
    lines.push(`  {`);
    lines.push(`    operationId: ${quote(op.operationId)},`);
    lines.push(`    method: ${quote(op.method.toUpperCase())},`);
    lines.push(`    path: ${quote(op.path)},`);
    lines.push(`    honoPath: ${quote(hp)},`);
    lines.push(`    queryParams: ${JSON.stringify(Object.fromEntries(query.map((p) => [p.name, queryCoercion(doc, p)])))},`);
    lines.push(`    headerParams: ${JSON.stringify(headers.map((p) => p.name))},`);
    lines.push(`    hasBody: ${op.body !== null},`);
    lines.push(`    maxBodyBytes: ${op.maxBodyBytes},`);
    lines.push(`    action: ${op.action === null ? 'null' : quote(op.action)},`);
    lines.push(`    raw: ${op.raw},`);
    lines.push(`    validate: {`);
    lines.push(`      path: validators.${op.operationId}_path,`);
    lines.push(`      query: validators.${op.operationId}_query,`);
    lines.push(`      headers: validators.${op.operationId}_headers,`);
    lines.push(`      body: ${op.body !== null ? `validators.${op.operationId}_body` : 'null'},`);
    lines.push(`    },`);
    lines.push(`  },`);
  }
  lines.push(`];`);
  lines.push('');
  lines.push(
    `type Params<Op, In extends string> = Op extends { parameters: { [K in In]?: infer P } } ? ([P] extends [never] | [undefined] ? Record<string, never> : NonNullable<P>) : Record<string, never>;`,
  );
  lines.push(`type JsonBody<Op> = Op extends { requestBody: { content: { 'application/json': infer B } } } ? B : undefined;`);
  lines.push(
    `type SuccessData<Op> = Op extends { responses: { 200: { content: { 'application/json': infer R } } } } ? (R extends { data: infer D } ? D : R) : never;`,
  );
  lines.push('');
  lines.push(`/** What a handler receives: validated path, query, header and body input. */`);
  lines.push(`export interface OperationInput<Id extends OperationId> {`);
  lines.push(`  path: Params<operations[Id], 'path'>;`);
  lines.push(`  query: Params<operations[Id], 'query'>;`);
  lines.push(`  headers: Params<operations[Id], 'header'>;`);
  lines.push(`  body: JsonBody<operations[Id]>;`);
  lines.push(`}`);
  lines.push('');
  const rawIds = operations.filter((op) => op.raw).map((op) => quote(op.operationId));
  lines.push(`/** Operations answered without the envelope (health, spec, metrics, the WebSocket upgrade). */`);
  lines.push(`export type RawOperationId = ${rawIds.length > 0 ? rawIds.join(' | ') : 'never'};`);
  lines.push(`/** What an enveloped handler returns as \`data\`; raw handlers return a Response. */`);
  lines.push(`export type OperationOutput<Id extends OperationId> = Id extends RawOperationId ? Response : SuccessData<operations[Id]>;`);
  lines.push('');
  lines.push(`/** The server implements one handler per operation. */`);
  lines.push(`export type Handlers<Context> = {`);
  lines.push(`  [Id in OperationId]: (input: OperationInput<Id>, context: Context) => Promise<OperationOutput<Id>>;`);
  lines.push(`};`);
  lines.push('');
  return lines.join('\n');
}

function generateValidators(doc: JsonObject, operations: Operation[]): { js: string; dts: string } {
  return validatorFiles({
    source: 'openapi.yaml',
    doc,
    refPrefix: REF_PREFIX,
    definitionsId: DEFINITIONS_ID,
    schemas(convert) {
      const schemas: Record<string, Json> = {};
      for (const op of operations) {
        schemas[`${op.operationId}_path`] = convert(objectSchema(op.params.filter((p) => p.in === 'path')));
        schemas[`${op.operationId}_query`] = convert(objectSchema(op.params.filter((p) => p.in === 'query')));
        schemas[`${op.operationId}_headers`] = convert(objectSchema(op.params.filter((p) => p.in === 'header')));
        if (op.body !== null) schemas[`${op.operationId}_body`] = convert(op.body);
      }
      // Components marked `x-orbit-validator: true` get a validator of their own, for input the
      // server checks piece by piece (the items of a bulk submit, each refused on its own).
      const components = isObject(doc.components) && isObject(doc.components.schemas) ? doc.components.schemas : {};
      for (const [name, schema] of Object.entries(components)) {
        if (isObject(schema) && schema['x-orbit-validator'] === true) schemas[`schema_${name}`] = convert({ $ref: `${REF_PREFIX}${name}` });
      }
      return schemas;
    },
  });
}

export async function generateOpenApi(root: string): Promise<Record<string, string>> {
  const specPath = `${root}/openapi.yaml`;
  const doc = loadYaml(specPath);
  const operations = readOperations(doc);
  const ast = await openapiTS(pathToFileURL(specPath), { alphabetize: false });
  const types = generatedHeader('openapi.yaml') + astToString(ast);
  const { js, dts } = generateValidators(doc, operations);
  return {
    'server/generated/openapi.ts': types,
    'sdk/generated/openapi.ts': types,
    'server/generated/validators.js': js,
    'server/generated/validators.d.ts': dts,
    'server/generated/routes.ts': generateRoutes(doc, operations),
    'sdk/generated/operations.ts': generateSdkOperations(doc, operations),
  };
}
