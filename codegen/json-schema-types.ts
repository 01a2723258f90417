/**
 * A small JSON Schema → TypeScript emitter for the frame schemas of asyncapi.yaml (objects,
 * strings with const/enum, integers, booleans, arrays, `$ref`s to named schemas, and free JSON).
 * Anything else is an error, so a schema the emitter does not understand cannot slip through
 * as `any`.
 */
import { isObject, type Json, type JsonObject } from './spec.ts';

export function typeOf(schema: Json, refName: (ref: string) => string, indent = ''): string {
  if (!isObject(schema)) throw new Error(`not a schema: ${JSON.stringify(schema)}`);
  if (typeof schema.$ref === 'string') return refName(schema.$ref);
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (Array.isArray(schema.enum)) return schema.enum.map((v) => JSON.stringify(v)).join(' | ');
  switch (schema.type) {
    case 'string':
      return 'string';
    case 'integer':
    case 'number':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'array':
      return `Array<${typeOf(schema.items ?? {}, refName, indent)}>`;
    case 'object':
      return objectType(schema, refName, indent);
    case undefined: {
      const keys = Object.keys(schema).filter((k) => k !== 'description' && !k.startsWith('x-'));
      if (keys.length === 0) return 'unknown';
      throw new Error(`schema without a type: ${JSON.stringify(schema)}`);
    }
    default:
      throw new Error(`unsupported type ${String(schema.type)}`);
  }
}

function objectType(schema: JsonObject, refName: (ref: string) => string, indent: string): string {
  const properties = isObject(schema.properties) ? schema.properties : {};
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : []);
  if (Object.keys(properties).length === 0) return 'Record<string, unknown>';
  const inner = `${indent}  `;
  const lines = Object.entries(properties).map(([name, prop]) => {
    const doc = isObject(prop) && typeof prop.description === 'string' ? `${inner}/** ${prop.description.replace(/\*\//g, '*\\/')} */\n` : '';
    return `${doc}${inner}${name}${required.has(name) ? '' : '?'}: ${typeOf(prop, refName, inner)};`;
  });
  return `{\n${lines.join('\n')}\n${indent}}`;
}
