/** Loading the YAML specs and walking `$ref`s, shared by the OpenAPI and AsyncAPI generators. */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export function loadYaml(path: string): JsonObject {
  const doc = parse(readFileSync(path, 'utf8'), { uniqueKeys: true }) as unknown;
  if (!isObject(doc)) throw new Error(`${path}: the document is not a mapping`);
  return doc;
}

export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Follows a local `#/a/b/c` reference inside `doc`. */
export function resolvePointer(doc: JsonObject, ref: string): Json {
  if (!ref.startsWith('#/')) throw new Error(`only local references are supported: ${ref}`);
  let node: Json = doc;
  for (const raw of ref.slice(2).split('/')) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (!isObject(node) || !(key in node)) throw new Error(`unresolved reference ${ref}`);
    node = node[key] as Json;
  }
  return node;
}

/** Resolves `node` if it is a `{ $ref }` object (one level; the target may not be a `$ref` itself). */
export function deref<T extends Json>(doc: JsonObject, node: Json): T {
  if (isObject(node) && typeof node.$ref === 'string') return resolvePointer(doc, node.$ref) as T;
  return node as T;
}

/**
 * A JSON Schema ready for Ajv: OpenAPI's component references are pointed at the shared
 * definitions document, and keys Ajv does not know (`x-…` extensions other than the ones we
 * implement, `example`) are dropped.
 */
export function toAjvSchema(node: Json, refPrefix: string, definitionsId: string, keepKeywords: ReadonlySet<string>): Json {
  if (Array.isArray(node)) return node.map((item) => toAjvSchema(item, refPrefix, definitionsId, keepKeywords));
  if (!isObject(node)) return node;
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === 'example') continue;
    if (key.startsWith('x-') && !keepKeywords.has(key)) continue;
    if (key === '$ref' && typeof value === 'string') {
      if (!value.startsWith(refPrefix)) throw new Error(`unsupported reference ${value}`);
      out.$ref = `${definitionsId}#/$defs/${value.slice(refPrefix.length)}`;
      continue;
    }
    // `properties` maps names to schemas: its keys are field names, not keywords.
    if (key === 'properties' && isObject(value)) {
      out.properties = Object.fromEntries(Object.entries(value).map(([name, schema]) => [name, toAjvSchema(schema, refPrefix, definitionsId, keepKeywords)]));
      continue;
    }
    out[key] = toAjvSchema(value, refPrefix, definitionsId, keepKeywords);
  }
  return out;
}

/** A TypeScript identifier-safe, stable name. */
export function pascal(name: string): string {
  return name.replace(/(^|[^A-Za-z0-9]+)([A-Za-z0-9])/g, (_m, _sep, ch: string) => ch.toUpperCase());
}
