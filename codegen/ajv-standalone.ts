/**
 * Turns JSON Schemas into one CommonJS module of Ajv "standalone" validators: the validation
 * code itself is generated and committed, so the server compiles nothing at start-up and the
 * validators cannot drift from the spec without `codegen:check` noticing.
 */
import { Ajv2020, _, str, type KeywordCxt } from 'ajv/dist/2020.js';
import type { KeywordErrorCxt } from 'ajv/dist/types/index.js';
import standaloneModule from 'ajv/dist/standalone/index.js';
import type { Json, JsonObject } from './spec.ts';

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
