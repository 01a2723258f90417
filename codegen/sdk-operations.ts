/**
 * openapi.yaml → `sdk/generated/operations.ts`: what the HTTP SDK (sdk/index.ts) needs to know
 * about each operation it has a method for, instead of lists kept by hand beside the spec:
 *
 * - `OPERATIONS`: method, path, path and query parameters, whether the operation takes the
 *   `Idempotency-Key` header and whether it has a JSON body - for every operation answered with
 *   the JSON envelope (every one without `x-orbit-raw`);
 * - `RESPONSE_COUNTS`: where the usage counts sit in each operation's 200 `data` - the
 *   properties whose schema is the spec's Counter (`$ref: '#/components/schemas/Counter'`, or an
 *   inline copy of it), uint64 decimal strings on the wire that the SDK returns as numbers.
 *   Revisions (Revision) and sequences (Uint64) are uint64 too but opaque tokens the caller
 *   passes back: they stay strings. Free JSON (`type: object` without properties: payload,
 *   result, details, data) is never described, so never walked;
 * - `COUNT_FIELDS` / `CountField`: every count's property name, for the SDK's `FromWire<T>`,
 *   which types them as `number` by name - so a name is refused here when it is a count in one
 *   response schema and something else in another.
 */
import { generatedHeader } from './header.ts';
import { deref, isObject, resolvePointer, type Json, type JsonObject } from './spec.ts';

/** The component schema whose properties are usage counts. */
export const COUNT_SCHEMA = 'Counter';
const REF_PREFIX = '#/components/schemas/';

export interface SdkOperationInput {
  operationId: string;
  method: string;
  path: string;
  raw: boolean;
  params: ReadonlyArray<{ name: string; in: 'path' | 'query' | 'header' }>;
  body: Json | null;
  /** The operation object of openapi.yaml (for its responses). */
  node: JsonObject;
}

/** Where counts sit in a value: a count; every item of an array; an object's properties. */
type Shape =
  | { kind: 'count'; required: boolean }
  | { kind: 'array'; items: Shape }
  | { kind: 'object'; properties: Map<string, Shape>; name?: string | undefined };

class CountWalker {
  /** Component schemas already walked: their shape, or null when they hold no count. */
  private readonly components = new Map<string, Shape | null>();
  /** Components with counts, dependencies first: each becomes a constant of the generated file. */
  readonly named: Array<{ name: string; shape: Shape }> = [];
  /** Property names at count positions, and at other positions, anywhere in the response schemas. */
  readonly countNames = new Set<string>();
  readonly otherNames = new Map<string, string>();
  private readonly walking: string[] = [];
  private readonly countPattern: string;

  constructor(private readonly doc: JsonObject) {
    const counter = resolvePointer(doc, `${REF_PREFIX}${COUNT_SCHEMA}`);
    if (!isObject(counter) || counter.type !== 'string' || typeof counter.pattern !== 'string')
      throw new Error(`openapi.yaml: ${COUNT_SCHEMA} must be a string schema with a pattern (a uint64 decimal string)`);
    this.countPattern = counter.pattern;
  }

  private isCount(schema: JsonObject): boolean {
    if (schema.$ref === `${REF_PREFIX}${COUNT_SCHEMA}`) return true;
    // An inline copy of the Counter schema is a count as well.
    return schema.$ref === undefined && schema.type === 'string' && schema.pattern === this.countPattern;
  }

  /** The shape of `schema`, or null when it holds no count. `where` names it in errors. */
  shape(node: Json, where: string): Shape | null {
    if (!isObject(node)) return null;
    if (this.isCount(node)) return { kind: 'count', required: true };
    if (typeof node.$ref === 'string') {
      if (!node.$ref.startsWith(REF_PREFIX)) return this.shape(deref(this.doc, node), `${where} (${node.$ref})`);
      const name = node.$ref.slice(REF_PREFIX.length);
      if (this.components.has(name)) return this.components.get(name) ?? null;
      if (this.walking.includes(name))
        throw new Error(`openapi.yaml: ${name} refers to itself (${this.walking.join(' → ')} → ${name}); counts cannot be described through a cycle`);
      this.walking.push(name);
      const shape = this.shape(resolvePointer(this.doc, node.$ref), name);
      this.walking.pop();
      const named = shape?.kind === 'object' ? { ...shape, name } : shape;
      this.components.set(name, named);
      if (named?.kind === 'object') this.named.push({ name, shape: named });
      return named;
    }
    // Keywords the converter cannot follow: a count under one of them fails the generation.
    const unsupported: Array<[string, Json]> = [];
    for (const keyword of ['oneOf', 'anyOf', 'prefixItems'] as const) {
      const members = node[keyword];
      if (Array.isArray(members)) for (const [i, m] of members.entries()) unsupported.push([`${keyword}[${i}]`, m]);
    }
    for (const keyword of ['patternProperties', 'dependentSchemas'] as const) {
      const members = node[keyword];
      if (isObject(members)) for (const [k, m] of Object.entries(members)) unsupported.push([`${keyword}.${k}`, m]);
    }
    for (const keyword of ['additionalProperties', 'not', 'if', 'then', 'else', 'contains'] as const) {
      if (node[keyword] !== undefined) unsupported.push([keyword, node[keyword]]);
    }
    for (const [at, member] of unsupported) {
      if (this.shape(member, `${where}.${at}`) !== null)
        throw new Error(`openapi.yaml: ${where}: a count under ${at} is not supported by codegen/sdk-operations.ts`);
    }

    const parts: Shape[] = [];
    if (Array.isArray(node.allOf)) {
      for (const [i, member] of node.allOf.entries()) {
        const s = this.shape(member, `${where}.allOf[${i}]`);
        if (s) parts.push(s);
      }
    }
    if (node.items !== undefined) {
      const items = this.shape(node.items, `${where}[]`);
      if (items) parts.push({ kind: 'array', items });
    }
    if (isObject(node.properties)) {
      const required = new Set(Array.isArray(node.required) ? node.required.filter((r): r is string => typeof r === 'string') : []);
      const properties = new Map<string, Shape>();
      for (const [property, schema] of Object.entries(node.properties)) {
        const s = this.shape(schema, `${where}.${property}`);
        if (s?.kind === 'count') {
          this.countNames.add(property);
          properties.set(property, { kind: 'count', required: required.has(property) });
        } else {
          this.otherNames.set(property, `${where}.${property}`);
          if (s) properties.set(property, s);
        }
      }
      if (properties.size > 0) parts.push({ kind: 'object', properties });
    }
    return parts.reduce<Shape | null>((a, b) => (a === null ? b : merge(a, b, where)), null);
  }
}

/** Two descriptions of one value (the members of an allOf). */
function merge(a: Shape, b: Shape, where: string): Shape {
  if (a.kind === 'count' && b.kind === 'count') return { kind: 'count', required: a.required || b.required };
  if (a.kind === 'array' && b.kind === 'array') return { kind: 'array', items: merge(a.items, b.items, `${where}[]`) };
  if (a.kind === 'object' && b.kind === 'object') {
    const properties = new Map(a.properties);
    for (const [k, v] of b.properties) {
      const there = properties.get(k);
      properties.set(k, there ? merge(there, v, `${where}.${k}`) : v);
    }
    return { kind: 'object', properties };
  }
  throw new Error(`openapi.yaml: ${where}: allOf members disagree on where counts are (${a.kind} and ${b.kind})`);
}

/** The generated constant of a component schema with counts. */
const constantName = (component: string) => `${component}Counts`;
const list = (items: readonly string[]) => `[${items.map((i) => JSON.stringify(i)).join(', ')}]`;
const key = (name: string) => (/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name) ? name : JSON.stringify(name));

function render(shape: Shape, constants: ReadonlySet<string>, top = false): string {
  if (shape.kind === 'count') return shape.required ? `'count'` : `'count?'`;
  if (shape.kind === 'array') return `[${render(shape.items, constants)}]`;
  if (!top && shape.name !== undefined && constants.has(shape.name)) return constantName(shape.name);
  return `{ ${[...shape.properties].map(([k, v]) => `${key(k)}: ${render(v, constants)}`).join(', ')} }`;
}

/** The schema of a 200 answer's `data` (the envelope's), or null when there is no JSON 200 answer. */
function responseData(doc: JsonObject, op: SdkOperationInput): Json | null {
  const responses = deref<JsonObject>(doc, op.node.responses ?? null);
  if (!isObject(responses) || responses['200'] === undefined) return null;
  const ok = deref<JsonObject>(doc, responses['200']);
  const content = isObject(ok.content) ? ok.content['application/json'] : undefined;
  if (!isObject(content)) return null;
  const envelope = deref<JsonObject>(doc, content.schema ?? null);
  if (!isObject(envelope) || !isObject(envelope.properties) || envelope.properties.data === undefined)
    throw new Error(`${op.operationId}: a 200 answer of an enveloped operation must be { request_id, data }`);
  return envelope.properties.data;
}

export function generateSdkOperations(doc: JsonObject, all: readonly SdkOperationInput[]): string {
  const operations = all.filter((op) => !op.raw);
  const walker = new CountWalker(doc);
  const counts = new Map<string, Shape>();
  for (const op of operations) {
    const data = responseData(doc, op);
    const shape = data === null ? null : walker.shape(data, `${op.operationId} 200 data`);
    if (shape) counts.set(op.operationId, shape);
  }
  for (const name of walker.countNames) {
    const other = walker.otherNames.get(name);
    if (other !== undefined)
      throw new Error(`openapi.yaml: ${name} is a count in one response schema but not at ${other}; the SDK's FromWire<T> types counts by property name`);
  }
  const constants = new Set(walker.named.map((n) => n.name));
  const countFields = [...walker.countNames].sort();

  const lines: string[] = [generatedHeader('openapi.yaml')];
  lines.push(`import type { paths } from './openapi.ts';`);
  lines.push('');
  lines.push(`/** The operations the SDK has a method for: every operation of openapi.yaml answered with the JSON envelope (not \`x-orbit-raw\`). */`);
  lines.push(`export type SdkOperationId =\n${operations.map((op) => `  | ${JSON.stringify(op.operationId)}`).join('\n')};`);
  lines.push('');
  lines.push(`/** Where each option of a call goes on the wire. */`);
  lines.push(`export interface SdkOperation {`);
  lines.push(`  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';`);
  lines.push(`  /** As written in openapi.yaml. */`);
  lines.push(`  readonly path: keyof paths;`);
  lines.push(`  /** Path parameters, by their names in the spec. */`);
  lines.push(`  readonly pathParams: readonly string[];`);
  lines.push(`  /** Query parameters, by their names in the spec. */`);
  lines.push(`  readonly query: readonly string[];`);
  lines.push(`  /** Takes the Idempotency-Key header (the SDK's \`idempotency_key\`). */`);
  lines.push(`  readonly idempotent: boolean;`);
  lines.push(`  /** Has a JSON body: every other field goes there. */`);
  lines.push(`  readonly body: boolean;`);
  lines.push(`}`);
  lines.push('');
  lines.push(`export const OPERATIONS: { readonly [K in SdkOperationId]: SdkOperation } = {`);
  for (const op of operations) {
    const headers = op.params.filter((p) => p.in === 'header').map((p) => p.name);
    const unknown = headers.filter((h) => h !== 'Idempotency-Key');
    if (unknown.length > 0) throw new Error(`${op.operationId}: the SDK has no option for the header ${unknown.join(', ')}`);
    const fields = [
      `method: ${JSON.stringify(op.method.toUpperCase())}`,
      `path: ${JSON.stringify(op.path)}`,
      `pathParams: ${list(op.params.filter((p) => p.in === 'path').map((p) => p.name))}`,
      `query: ${list(op.params.filter((p) => p.in === 'query').map((p) => p.name))}`,
      `idempotent: ${headers.includes('Idempotency-Key')}`,
      `body: ${op.body !== null}`,
    ];
    lines.push(`  ${op.operationId}: { ${fields.join(', ')} },`);
  }
  lines.push(`};`);
  lines.push('');
  lines.push(
    `/** Every property that is a usage count (\`$ref: '#/components/schemas/${COUNT_SCHEMA}'\`) in some response: the SDK returns these as numbers. */`,
  );
  lines.push(`export const COUNT_FIELDS = ${list(countFields)} as const;`);
  lines.push(`export type CountField = (typeof COUNT_FIELDS)[number];`);
  lines.push('');
  lines.push(`/**`);
  lines.push(` * Where the counts sit in a value: \`'count'\` is one (\`'count?'\` one that may be absent); a`);
  lines.push(` * one-element array describes every item of an array; an object, those of its properties that`);
  lines.push(` * hold counts. Nothing else is described: every other field is returned as it came.`);
  lines.push(` */`);
  lines.push(`export type Counts = 'count' | 'count?' | readonly [Counts] | { readonly [property: string]: Counts };`);
  lines.push('');
  for (const { name, shape } of walker.named) {
    lines.push(`const ${constantName(name)}: Counts = ${render(shape, constants, true)};`);
  }
  if (walker.named.length > 0) lines.push('');
  lines.push(`/** Where the counts are in each operation's 200 \`data\`; an operation not here answers none. */`);
  lines.push(`export const RESPONSE_COUNTS: { readonly [K in SdkOperationId]?: Counts } = {`);
  for (const [id, shape] of counts) lines.push(`  ${id}: ${render(shape, constants)},`);
  lines.push(`};`);
  lines.push('');
  return lines.join('\n');
}
