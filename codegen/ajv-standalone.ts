/**
 * Turns JSON Schemas into one CommonJS module of Ajv "standalone" validators: the validation
 * code itself is generated and committed, so the server compiles nothing at start-up and the
 * validators cannot drift from the spec without `codegen:check` noticing.
 */
import { Ajv2020, _, str, type KeywordCxt } from 'ajv/dist/2020.js';
import type { KeywordErrorCxt } from 'ajv/dist/types/index.js';
import standaloneModule from 'ajv/dist/standalone/index.js';
import { generatedHeader } from './header.ts';
import { isObject, toAjvSchema, type Json, type JsonObject } from './spec.ts';

// A CommonJS module: its default export arrives under `.default` when imported from ESM.
const standaloneCode = (standaloneModule as unknown as { default: typeof standaloneModule.default }).default;

/** Our schema extension: the compact-JSON size of a value, in UTF-8 bytes. */
export const MAX_JSON_BYTES_KEYWORD = 'x-orbit-max-json-bytes';

export function buildValidatorModule(params: {
  definitionsId: string;
  definitions: JsonObject;
  /** export name → schema */
  schemas: Record<string, Json>;
}): string {
  const ajv = new Ajv2020({
    strict: true,
    // All errors, so the one most useful to a caller can be reported (an unknown, wrongly cased
    // field before the "required" error it causes).
    allErrors: true,
    // `verbose` keeps the failing schema beside each error, so an unknown field can be
    // compared with the declared ones ("did you mean …") without a second lookup table.
    verbose: true,
    unicodeRegExp: true,
    // Output formats are documentation on the server side; inputs use patterns instead.
    formats: { 'date-time': true },
    code: { source: true, lines: true, optimize: 1 },
  });
  ajv.addKeyword({
    keyword: MAX_JSON_BYTES_KEYWORD,
    schemaType: 'number',
    code(cxt: KeywordCxt) {
      cxt.fail(_`Buffer.byteLength(JSON.stringify(${cxt.data}), "utf8") > ${cxt.schema}`);
    },
    error: { message: (cxt: KeywordErrorCxt) => str`must be at most ${cxt.schemaCode} bytes as JSON` },
  });
  ajv.addSchema({ $id: params.definitionsId, $defs: params.definitions });
  const exports: Record<string, string> = {};
  for (const [name, schema] of Object.entries(params.schemas)) {
    ajv.addSchema(schema as object, name);
    exports[name] = name;
  }
  return standaloneCode(ajv, exports);
}

/** Ajv's standalone output is CommonJS (`exports.name = validateN`); we emit an ES module. */
export function esmExports(code: string): string {
  const names: string[] = [];
  const body = code
    .replace(/^"use strict";\n?/, '')
    .replace(/^module\.exports\s*=\s*\{[^}]*\};\n?/m, '')
    .replace(/^exports\.(\w+)\s*=\s*(\w+);\n?/gm, (_m, name: string, fn: string) => {
      names.push(`${fn} as ${name}`);
      return '';
    });
  return `${body.trimEnd()}\n\nexport { ${names.join(', ')} };\n`;
}

/**
 * The generated validator files of one spec: `<name>.js` (an ES module of standalone
 * validators, one export per schema) and its `.d.ts`. `schemas` receives the converter that
 * points the spec's `$ref`s at its components.
 */
export function validatorFiles(params: {
  source: string;
  doc: JsonObject;
  refPrefix: string;
  definitionsId: string;
  schemas: (convert: (schema: Json) => Json) => Record<string, Json>;
}): { js: string; dts: string } {
  const components = isObject(params.doc.components) && isObject(params.doc.components.schemas) ? params.doc.components.schemas : {};
  const keep = new Set([MAX_JSON_BYTES_KEYWORD]);
  const convert = (schema: Json) => toAjvSchema(schema, params.refPrefix, params.definitionsId, keep);
  const schemas = params.schemas(convert);
  const code = buildValidatorModule({ definitionsId: params.definitionsId, definitions: convert(components) as JsonObject, schemas });
  const js = [
    generatedHeader(params.source),
    `import { createRequire } from 'node:module';`,
    `const require = createRequire(import.meta.url);`,
    esmExports(code),
  ].join('\n');
  const dts = [
    generatedHeader(params.source),
    `type ValidateFunction = ((data: unknown) => boolean) & { errors?: { instancePath: string; keyword: string; params: Record<string, unknown>; message?: string; parentSchema?: unknown }[] | null };`,
    ...Object.keys(schemas).map((name) => `export declare const ${name}: ValidateFunction;`),
    '',
  ].join('\n');
  return { js, dts };
}
