/**
 * Ajv's first error → INVALID_ARGUMENT naming the field. Ajv says where (`instancePath`) and
 * what (`keyword`); this turns that into `payload.items[2]`-style field names and short reasons.
 * Transport-neutral: HTTP inputs (server/http/operations.ts) and worker frames
 * (server/worker/frames.ts) both word their validation errors here.
 */
import { invalidArgument, type FieldLocation, type OrbitError } from '../errors.ts';
import { fieldAt, fieldPath } from './field-path.ts';

/** One error of an Ajv standalone validator (the generated HTTP and frame validators both report these). */
export interface ValidationError {
  instancePath: string;
  keyword: string;
  params: Record<string, unknown>;
  message?: string;
  parentSchema?: unknown;
}

/** Ajv's JSON Pointer (`/payload/items/2`) plus an optional child → `payload.items[2]`. */
function pointerPath(instancePath: string, extra?: string): string {
  const parts = instancePath
    .split('/')
    .slice(1)
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (extra !== undefined) parts.push(extra);
  // Only Orbit's own fields reach here (user data is free JSON), and arrays of them hold no objects with numeric keys.
  return fieldPath(parts.map((part) => (/^(0|[1-9]\d*)$/.test(part) ? Number(part) : part)));
}

function declaredProperties(parentSchema: unknown): string[] {
  const properties = (parentSchema as { properties?: Record<string, unknown> } | undefined)?.properties;
  return properties ? Object.keys(properties) : [];
}

function describe(error: ValidationError): { field: string; reason: string } {
  const params = error.params;
  switch (error.keyword) {
    case 'required':
      return { field: pointerPath(error.instancePath, String(params.missingProperty)), reason: 'is required' };
    case 'additionalProperties': {
      const name = String(params.additionalProperty);
      const sameIgnoringCase = declaredProperties(error.parentSchema).find((p) => p.toLowerCase() === name.toLowerCase());
      const hint = sameIgnoringCase ? ` (names are case-sensitive: did you mean "${sameIgnoringCase}"?)` : '';
      return { field: pointerPath(error.instancePath, name), reason: `is not a known field${hint}` };
    }
    case 'type': {
      const data = (error as { data?: unknown }).data;
      const expected = String(params.type);
      return {
        field: pointerPath(error.instancePath),
        reason: data === null ? `must not be null (expected ${expected})` : `must be ${article(expected)} ${expected}`,
      };
    }
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      return { field: pointerPath(error.instancePath), reason: `must be ${String(params.comparison)} ${String(params.limit)}` };
    case 'minLength':
      return {
        field: pointerPath(error.instancePath),
        reason: Number(params.limit) === 1 ? 'must not be empty' : `must have at least ${String(params.limit)} characters`,
      };
    case 'maxLength':
      return { field: pointerPath(error.instancePath), reason: `must have at most ${String(params.limit)} characters` };
    case 'pattern':
      return { field: pointerPath(error.instancePath), reason: patternReason(String(params.pattern)) };
    case 'enum':
      return {
        field: pointerPath(error.instancePath),
        reason: `must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`,
      };
    default:
      return { field: pointerPath(error.instancePath), reason: error.message ?? `fails ${error.keyword}` };
  }
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? 'an' : 'a';
}

/** Patterns the spec uses, said in words; anything else is quoted. */
function patternReason(pattern: string): string {
  if (pattern === '\\S') return 'must not be blank';
  if (pattern === '^[0-9a-f]{32}$') return 'must be 32 lowercase hex characters';
  if (pattern.startsWith('^(?:[1-9]')) return 'must be a non-zero uint64 decimal string';
  if (pattern.startsWith('^(?:0|[1-9]')) return 'must be a uint64 decimal string';
  if (pattern === '^[!-~]{1,128}$') return 'must be 1-128 printable non-space ASCII characters';
  if (pattern.startsWith('^[a-z0-9][a-z0-9._-]')) return 'must match [a-z0-9][a-z0-9._-]{0,62}';
  if (pattern === '^[^\\p{Cs}]*[^ \\p{Cs}]$') return 'must not end with a space or contain an unpaired surrogate';
  return `must match ${pattern}`;
}

/**
 * The INVALID_ARGUMENT for a failed validation, naming the field. `within` is where the
 * validated value sits in the document, for a part validated on its own (`tasks[3]` of a
 * bulk submit): its fields are named from the document's root (`tasks[3].priority`).
 */
export function validationError(
  errors: ValidationError[] | null | undefined,
  location: FieldLocation,
  within: ReadonlyArray<string | number> = [],
): OrbitError {
  const prefix = fieldPath(within);
  const at = (field: string) => (prefix === '' ? field : field === '' ? prefix : field.startsWith('[') ? `${prefix}${field}` : `${prefix}.${field}`);
  // An unknown field explains a missing one when it is the same name in another case.
  const first = errors?.find((e) => e.keyword === 'additionalProperties') ?? errors?.[0];
  if (!first) return invalidArgument(fieldAt(location, at('')), 'is invalid', location);
  const { field, reason } = describe(first);
  return invalidArgument(fieldAt(location, at(field)), reason, location);
}
