/**
 * What the specs say about a generated input, read from openapi.yaml and asyncapi.yaml
 * themselves (not from the generated code): whether a request body, path parameter or worker
 * frame is valid, and if not, every field an INVALID_ARGUMENT may name (Ajv with allErrors; the
 * server reports one of them).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { Cron } from 'croner';
import type { ErrorObject, ValidateFunction } from 'ajv/dist/2020.js';
import { fieldNames } from './fuzz-common.ts';
import { OPENAPI_FILE, operationById, operations, requestSchemaValidator, type JsonSchema, type SpecOperation } from '../contract/spec-validator.ts';

export const ASYNCAPI_FILE = fileURLToPath(new URL('../../asyncapi.yaml', import.meta.url));
export const OPENAPI_TEXT = readFileSync(OPENAPI_FILE, 'utf8');
export const ASYNCAPI_TEXT = readFileSync(ASYNCAPI_FILE, 'utf8');

/** The spellings of the field an Ajv error is about (see `fieldNames`); `within` is where the validated value sits in the document. */
function errorFields(error: ErrorObject, root: string, within: ReadonlyArray<string | number> = []): string[] {
  const segments: Array<string | number> = [
    ...within,
    ...error.instancePath
      .split('/')
      .slice(1)
      .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~')),
  ];
  if (error.keyword === 'required') segments.push(String(error.params.missingProperty));
  if (error.keyword === 'additionalProperties') segments.push(String(error.params.additionalProperty));
  return fieldNames(segments, root);
}

export interface Verdict {
  valid: boolean;
  /** Every field an INVALID_ARGUMENT may name, in every accepted spelling (empty when valid). */
  fields: string[];
  /**
   * A bulk body valid as a whole (`submitTasks`): the verdict on each item, in order - an
   * invalid item is refused in its own result naming one of its `fields` (`tasks[3].priority`),
   * the others go on.
   */
  items?: Verdict[];
}

function verdict(validate: ValidateFunction, value: unknown, root: string, within: ReadonlyArray<string | number> = []): Verdict {
  if (validate(value)) return { valid: true, fields: [] };
  return { valid: false, fields: [...new Set((validate.errors ?? []).flatMap((e) => errorFields(e, root, within)))] };
}

/**
 * A rule openapi.yaml states in words on DelaySeconds: "must be less than deadline_seconds"
 * (defaults 0 and 86400, from the same descriptions). Applies to every object schema with both
 * fields (a single submit, an item of a bulk submit), once the object is valid otherwise.
 */
function delayRule(schema: JsonSchema, value: unknown, root: string, within: ReadonlyArray<string | number>): Verdict | null {
  const properties = (schema.properties ?? {}) as Record<string, unknown>;
  if (!('delay_seconds' in properties) || !('deadline_seconds' in properties) || !value || typeof value !== 'object') return null;
  const body = value as { delay_seconds?: number; deadline_seconds?: number };
  if ((body.delay_seconds ?? 0) >= (body.deadline_seconds ?? 86400)) return { valid: false, fields: fieldNames([...within, 'delay_seconds'], root) };
  return null;
}

// ---------------------------------------------------------------------------------------------
// Schedules: the trigger rules openapi.yaml states in words
// ---------------------------------------------------------------------------------------------

/** Whether the runtime's time zone database (Intl, the IANA names) knows a zone. */
export function knownTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

/** Epoch milliseconds of a UTC calendar time; years 0-99 too (Date.UTC would read them as 1900-1999). */
function utcMillis(year: number, month: number, day: number, hour: number, minute: number, second: number, ms: number): number {
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, ms);
  return date.getTime();
}

/**
 * The instants a schedule's `start_at` may be, in UTC: years 0001-9999. A `Timestamp` (RFC 3339,
 * UTC) shows four-digit years only, and year 0000 is out too: the spec does not say, and RFC
 * 3339's calendar (where 0000 is a leap year) and the database's (where it is not) disagree there.
 */
export const FIRST_TIMESTAMP_MS = utcMillis(1, 1, 1, 0, 0, 0, 0);
export const LAST_TIMESTAMP_MS = utcMillis(9999, 12, 31, 23, 59, 59, 999);

/**
 * The instant a `TimestampInput` names (RFC 3339 with a time zone, at most microseconds), in epoch
 * milliseconds (microseconds cut off), or null when the text names no time: a month outside
 * 1-12, a day its month does not have (Gregorian leap years), an hour over 23, a minute or second
 * over 59 (RFC 3339's leap second 60 is not taken: the service's clock has none), an offset over
 * 23:59. Written from RFC 3339 itself, not from the server's parser.
 */
export function timestampInputMillis(text: string): number | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(?:Z|([+-])(\d{2}):(\d{2}))$/.exec(text);
  if (!m) return null;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1];
  if (days === undefined || day < 1 || day > days || hour > 23 || minute > 59 || second > 59) return null;
  const offsetHours = Number(m[9] ?? 0);
  const offsetMinutes = Number(m[10] ?? 0);
  if (offsetHours > 23 || offsetMinutes > 59) return null;
  const ms = Number(((m[7] ?? '') + '000').slice(0, 3));
  const sign = m[8] === '-' ? -1 : 1;
  return utcMillis(year, month, day, hour, minute, second, ms) - sign * (offsetHours * 60 + offsetMinutes) * 60_000;
}

/**
 * Whether a cron expression is one openapi.yaml takes (CronExpression): "Five fields (minute hour
 * day-of-month month day-of-week) or six with a leading seconds field, evaluated by croner" - so
 * five or six whitespace-separated fields that croner reads.
 */
export function cronAccepted(expression: string, timezone = 'UTC'): boolean {
  const fields = expression.trim().split(/\s+/);
  if (fields.length !== 5 && fields.length !== 6) return false;
  try {
    new Cron(expression, { timezone: knownTimeZone(timezone) ? timezone : 'UTC', paused: true });
    return true;
  } catch {
    return false;
  }
}

/** The first trigger point of a cron at or after `fromMs` (croner, the spec's evaluator), or null when it has none. */
export function cronPointFrom(expression: string, timezone: string, fromMs: number): number | null {
  return new Cron(expression, { timezone, paused: true }).nextRun(new Date(fromMs - 1))?.getTime() ?? null;
}

/**
 * The rules openapi.yaml states in words on a schedule's trigger (CreateScheduleRequest), for a
 * body its schema accepts: every field whose rule is broken (the server names one of them).
 *
 *   - "Exactly one of `cron` and `interval_seconds` (both, or neither, is 400 INVALID_ARGUMENT naming `cron`)"
 *   - `timezone`: "An IANA time zone name (default `UTC`); an unknown zone is 400 naming `timezone`"
 *     (for any schedule: the rule does not depend on the trigger)
 *   - `cron`: five or six fields croner reads (see cronAccepted)
 *   - `start_at` (TimestampInput, "RFC 3339 with a time zone"): a time that exists (see
 *     timestampInputMillis), at an instant the Schedule's `start_at` (a `Timestamp`: RFC 3339,
 *     UTC) can show - years 0001-9999 in UTC (see FIRST_TIMESTAMP_MS).
 */
export function scheduleTriggerProblems(body: Record<string, unknown>): string[] {
  const problems: string[] = [];
  const cron = body.cron as string | undefined;
  if ((cron === undefined) === (body.interval_seconds === undefined)) problems.push('cron');
  const timezone = (body.timezone as string | undefined) ?? 'UTC';
  if (!knownTimeZone(timezone)) problems.push('timezone');
  if (cron !== undefined && !cronAccepted(cron, timezone) && !problems.includes('cron')) problems.push('cron');
  if (body.start_at !== undefined) {
    const ms = timestampInputMillis(body.start_at as string);
    if (ms === null || ms < FIRST_TIMESTAMP_MS || ms > LAST_TIMESTAMP_MS) problems.push('start_at');
  }
  return problems;
}

/** The trigger rules (scheduleTriggerProblems) for every object schema with both `cron` and `interval_seconds`, once it is valid otherwise. */
function triggerRule(schema: JsonSchema, value: unknown, root: string, within: ReadonlyArray<string | number>): Verdict | null {
  const properties = (schema.properties ?? {}) as Record<string, unknown>;
  if (!('cron' in properties) || !('interval_seconds' in properties) || !value || typeof value !== 'object') return null;
  const problems = scheduleTriggerProblems(value as Record<string, unknown>);
  if (problems.length === 0) return null;
  return { valid: false, fields: [...new Set(problems.flatMap((field) => fieldNames([...within, field], root)))] };
}

const bodyValidators = new Map<string, ValidateFunction>();

/** Operations with a JSON request body. */
export const bodyOperations: SpecOperation[] = operations.filter((op) => op.requestSchema !== null);

/** The largest body an operation takes, in bytes (`x-orbit-max-body-bytes`, else 1 MiB). */
export function maxBodyBytes(operationId: string): number {
  const limit = operationById(operationId).maxBodyBytes;
  if (limit === null) throw new Error(`${operationId} has no request body`);
  return limit;
}

/**
 * The spec's verdict on a request body; `root` ('body') is what the server names for the whole
 * body, plus the rules stated in words (the delay rule, a schedule's trigger rules). For a bulk
 * operation whose body is valid as a whole, also the verdict on every item (its component
 * schema, e.g. SubmitTaskItem, plus the rules stated in words).
 */
export function bodyVerdict(operationId: string, value: unknown): Verdict {
  const op = operationById(operationId);
  let validate = bodyValidators.get(operationId);
  if (!validate) {
    validate = requestSchemaValidator(op.requestSchema);
    bodyValidators.set(operationId, validate);
  }
  const result = verdict(validate, value, 'body');
  if (!result.valid) return result;
  const rule = delayRule(op.requestSchema as JsonSchema, value, 'body', []) ?? triggerRule(op.requestSchema as JsonSchema, value, 'body', []);
  if (rule) return rule;
  const bulk = op.bulkItems;
  if (bulk === null) return result;
  const validateItem = requestSchemaValidator(bulk.schema);
  const items = (value as Record<string, unknown[]>)[bulk.array] as unknown[];
  return {
    valid: true,
    fields: [],
    items: items.map((item, i) => {
      const itemVerdict = verdict(validateItem, item, 'body', [bulk.array, i]);
      return itemVerdict.valid ? (delayRule(bulk.schema, item, 'body', [bulk.array, i]) ?? itemVerdict) : itemVerdict;
    }),
  };
}

const parameterValidators = new Map<string, ValidateFunction>();

/** The spec's verdict on one path or query parameter value of an operation. */
export function parameterVerdict(operationId: string, name: string, value: unknown): boolean {
  const key = `${operationId} ${name}`;
  let validate = parameterValidators.get(key);
  if (!validate) {
    const parameter = operationById(operationId).parameters.find((p) => p.name === name);
    if (!parameter) throw new Error(`${operationId} has no parameter ${name}`);
    validate = requestSchemaValidator(parameter.schema);
    parameterValidators.set(key, validate);
  }
  return validate(value) as boolean;
}

// ---------------------------------------------------------------------------------------------
// asyncapi.yaml: worker → server frames
// ---------------------------------------------------------------------------------------------

const asyncapi = parse(ASYNCAPI_TEXT) as {
  components: { messages: Record<string, { payload: { $ref: string } }>; schemas: Record<string, unknown> };
  operations: Record<string, { action: string; messages: Array<{ $ref: string }> }>;
};

function resolveAsync(node: unknown, depth = 0): unknown {
  if (depth > 40) throw new Error('recursive $ref in asyncapi.yaml');
  if (Array.isArray(node)) return node.map((n) => resolveAsync(n, depth + 1));
  if (node === null || typeof node !== 'object') return node;
  const object = node as Record<string, unknown>;
  if (typeof object.$ref === 'string') {
    let target: unknown = asyncapi;
    for (const part of object.$ref.slice(2).split('/')) target = (target as Record<string, unknown>)[part];
    return resolveAsync(target, depth + 1);
  }
  return Object.fromEntries(Object.entries(object).map(([k, v]) => [k, resolveAsync(v, depth + 1)]));
}

/** The frame types a worker sends (asyncapi.yaml, operation `receiveWorkerFrames`). */
export const WORKER_FRAME_TYPES: string[] = (() => {
  const receive = Object.values(asyncapi.operations).find((o) => o.action === 'receive');
  if (!receive) throw new Error('asyncapi.yaml has no receive operation');
  return receive.messages.map((m) => m.$ref.split('/').pop() as string);
})();

/** The frame types the server sends. */
export const SERVER_FRAME_TYPES: string[] = Object.keys(asyncapi.components.messages).filter((t) => !WORKER_FRAME_TYPES.includes(t));

const frameValidators = new Map<string, ValidateFunction>();

/** The schema of a worker frame type, dereferenced. */
export function frameSchema(type: string): JsonSchema {
  const message = asyncapi.components.messages[type];
  if (!message) throw new Error(`asyncapi.yaml has no message ${type}`);
  return resolveAsync(message.payload) as JsonSchema;
}

/**
 * The spec's verdict on a worker frame: not an object → 'frame'; no or unknown `type` → 'type';
 * otherwise the frame's schema. The server names the whole frame 'frame'.
 */
export function frameVerdict(value: unknown): Verdict {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { valid: false, fields: ['frame'] };
  const type = (value as { type?: unknown }).type;
  if (typeof type !== 'string' || !WORKER_FRAME_TYPES.includes(type)) return { valid: false, fields: ['type'] };
  let validate = frameValidators.get(type);
  if (!validate) {
    validate = requestSchemaValidator(frameSchema(type));
    frameValidators.set(type, validate);
  }
  const result = verdict(validate, value, 'frame');
  // asyncapi.yaml in words: `retryable` "With `failed`" (the server refuses it with other outcomes).
  if (result.valid && type === 'complete') {
    const frame = value as { outcome?: string; retryable?: unknown };
    if (frame.retryable !== undefined && frame.outcome !== 'failed') return { valid: false, fields: ['retryable'] };
  }
  return result;
}

/** Errors of a frame the server sent against its schema in asyncapi.yaml (empty when it matches). */
export function serverFrameErrors(frame: unknown): string[] {
  const type = (frame as { type?: unknown } | null)?.type;
  if (typeof type !== 'string' || !SERVER_FRAME_TYPES.includes(type)) return [`not a server frame type: ${JSON.stringify(type)}`];
  let validate = frameValidators.get(`server ${type}`);
  if (!validate) {
    validate = requestSchemaValidator(frameSchema(type));
    frameValidators.set(`server ${type}`, validate);
  }
  return validate(frame) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '(root)'} ${e.message ?? e.keyword}`);
}
