/**
 * Strict input, generated from openapi.yaml (docs/http-api.md#strict-input). For every operation
 * with a request body, starting from one valid example body (written below), the request body
 * schema (`$ref`s resolved) is walked and cases are generated:
 *
 *   per field:     null; removed (when required); name in the wrong case; a duplicate key (raw
 *                  JSON text); wrong type; integers min-1 / max+1; strings maxLength+1; a value
 *                  outside an enum or pattern (picked from candidates and checked with Ajv)
 *   per object:    an unknown field
 *   per array:     minItems-1 / maxItems+1 items, an item of the wrong type, an item outside
 *                  its pattern, a repeated item (`uniqueItems`; the sized cases of such an array
 *                  hold distinct items, so only the size is wrong)
 *   per operation: non-JSON body, `null` / array body, wrong / missing Content-Type, an
 *                  undeclared query parameter, a body one byte over the operation's limit
 *                  (`x-orbit-max-body-bytes`, else 1 MiB), a missing Idempotency-Key, one of
 *                  129 characters and one containing a space (when the operation declares it)
 *   bulk items:    the items of a bulk body (submitTasks: "each a `SubmitTaskItem`") get the
 *                  per-field cases of their own schema; a body valid as a whole is 200 and
 *                  each bad item is refused in its own result naming `tasks[i].<field>`, while
 *                  a duplicate key inside an item is the whole body's 400
 *
 * Every case must answer 400 INVALID_ARGUMENT naming the offending field (or header / query
 * parameter) in `error.details.field`, match the spec's error schema, and change nothing: the
 * row count of every orbit_ table and the application's resources row are compared before and
 * after all of them. Then the accepted side: integers exactly at min and max, strings exactly at
 * maxLength, arrays of exactly maxItems, bodies of exactly the byte limit are never 400 (200, or
 * 409 for a business reason; bulk items each accepted, valid and invalid ones mixed in order),
 * and nulls and unknown keys inside user data (`payload`, `result`, `error`) are accepted and
 * come back unchanged.
 *
 * Query parameters, generated from every GET operation's declared parameters the same way:
 * integers min-1 / max+1, not an integer, empty, given twice; a value outside an enum or a
 * pattern - each 400 naming the parameter (location query); integers exactly at min and max are
 * 200. The targets answer at once whatever `wait_seconds` says (a CANCELLED task, a subscription
 * with events to read), and every such request is cut off after a few seconds, so a wait that
 * does not end as it should fails instead of holding the suite for 30 s.
 *
 * Fields that exclude each other (a schedule's `cron` and `interval_seconds`) cannot sit in one
 * valid example: an example may name `variants`, other valid bodies, and a field missing from
 * the example gets its cases from the first variant that has it. The rules a schema cannot say
 * (the delay rule, a schedule's trigger rules) make a boundary value that breaks one a 400
 * naming that field.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { testApp, type TestResponse } from '../helpers/app.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { ALL_ACTIONS } from '../../server/domain/actions.ts';
import { MAX_JSON_BYTES, assertMatchesSpec, operations, requestSchemaValidator, type JsonSchema, type SpecOperation } from './spec-validator.ts';
import { scheduleTriggerProblems } from '../helpers/fuzz-spec.ts';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

// ---------------------------------------------------------------------------------------------
// One valid example per operation with a body. `{task_id}` / `{queue}` / `{schedule_id}` /
// `{subscription_id}` are filled in at run time. Every optional field is present (in the example
// or one of its variants), so every field gets its cases.
// ---------------------------------------------------------------------------------------------

const NEG_QUEUE = 'neg';

/** A schedule that never fires during the tests (none does here: no schedule loop runs in-process). */
const FAR_START = '2099-01-01T00:00:00Z';

const VALID_EXAMPLES: Record<string, { path: string; body: JsonObject; variants?: JsonObject[] }> = {
  configureApplicationResources: {
    path: '/v1/application/resources:configure',
    body: { expected_revision: '1', reason: '负例测试基线', max_unfinished_tasks: 1000000, max_concurrency: 10000, rate_per_second: 100000 },
    variants: [
      { expected_revision: '1', reason: '负例测试试运行', max_unfinished_tasks: 1000000, max_concurrency: 10000, rate_per_second: 100000, dry_run: true },
    ],
  },
  configureNamespaceResources: {
    path: '/v1/application/namespaces/{namespace}:configure',
    body: { expected_revision: '1', reason: '负例测试保底', reserved_unfinished_tasks: 0, reserved_concurrency: 0, reserved_rate_per_second: 0 },
    variants: [
      { expected_revision: '1', reason: '负例测试试运行', reserved_unfinished_tasks: 0, reserved_concurrency: 0, reserved_rate_per_second: 0, dry_run: true },
    ],
  },
  configureRetention: {
    path: '/v1/application/retention:configure',
    body: {
      expected_revision: '1',
      reason: '负例测试保留策略',
      finished_task_retention_seconds: 604800,
      event_retention_seconds: 604800,
      receipt_retention_seconds: 604800,
      audit_retention_seconds: 31536000,
      subscription_max_lag_seconds: 2592000,
      dry_run: true,
    },
  },
  createQueue: {
    path: '/v1/queues',
    body: {
      name: 'created-by-negative',
      reason: '负例测试建队列',
      max_unfinished_tasks: 1000,
      max_concurrency: 10,
      rate_per_second: 100,
      key_concurrency: 2,
      paused: false,
    },
  },
  configureQueue: {
    path: `/v1/queues/{queue}:configure`,
    body: {
      expected_revision: '1',
      reason: '负例测试调整队列',
      max_unfinished_tasks: 100000,
      max_concurrency: 1000,
      rate_per_second: 10000,
      key_concurrency: 1,
      paused: false,
    },
    variants: [
      {
        expected_revision: '1',
        reason: '负例测试试运行',
        max_unfinished_tasks: 100000,
        max_concurrency: 1000,
        rate_per_second: 10000,
        key_concurrency: 1,
        paused: false,
        dry_run: true,
      },
    ],
  },
  submitTask: {
    path: `/v1/queues/{queue}/tasks`,
    body: {
      payload: { order: 1, lines: [{ sku: 'A-1', qty: 2 }] },
      priority: 5,
      resource_key: 'customer-1',
      max_attempts: 3,
      deadline_seconds: 86400,
      delay_seconds: 0,
      on_unknown_outcome: 'retry',
    },
  },
  submitTasks: {
    path: `/v1/queues/{queue}/tasks:batch`,
    body: {
      tasks: [
        {
          idempotency_key: 'neg-item',
          payload: { order: 1, lines: [{ sku: 'A-1', qty: 2 }] },
          priority: 5,
          resource_key: 'customer-1',
          max_attempts: 3,
          deadline_seconds: 86400,
          delay_seconds: 0,
          on_unknown_outcome: 'retry',
        },
      ],
    },
  },
  cancelTask: { path: '/v1/tasks/{task_id}:cancel', body: { reason: '负例测试取消' } },
  retryTask: { path: '/v1/tasks/{task_id}:retry', body: { reason: '负例测试重试' } },
  resolveTask: {
    path: '/v1/tasks/{task_id}:resolve',
    body: { outcome: 'succeeded', reason: '负例测试核查', result: { ok: true }, error: { note: 'none' } },
  },
  createSchedule: {
    path: '/v1/queues/{queue}/schedules',
    body: {
      name: 'created-by-negative',
      reason: '负例测试建计划',
      cron: '0 9 * * 1-5',
      timezone: 'Asia/Shanghai',
      payload: { report: 'daily', lines: [{ sku: 'A-1', qty: 2 }] },
      priority: 5,
      resource_key: 'customer-1',
      max_attempts: 3,
      deadline_seconds: 86400,
      on_unknown_outcome: 'retry',
      misfire_policy: 'skip',
      misfire_window_seconds: 60,
      start_at: FAR_START,
    },
    // "Exactly one of cron and interval_seconds": interval_seconds gets its cases here.
    variants: [{ name: 'created-by-negative', reason: '负例测试建计划', interval_seconds: 86400, payload: { report: 'daily' }, start_at: FAR_START }],
  },
  pauseSchedule: { path: '/v1/schedules/{schedule_id}:pause', body: { reason: '负例测试暂停' } },
  resumeSchedule: { path: '/v1/schedules/{schedule_id}:resume', body: { reason: '负例测试恢复' } },
  createSubscription: {
    path: '/v1/subscriptions',
    body: { name: 'created-by-negative', reason: '负例测试建订阅', types: ['task.submitted'], queues: [NEG_QUEUE], from: 'beginning' },
  },
  pauseSubscription: { path: '/v1/subscriptions/{subscription_id}:pause', body: { reason: '负例测试暂停订阅' } },
  resumeSubscription: { path: '/v1/subscriptions/{subscription_id}:resume', body: { reason: '负例测试恢复订阅' } },
  // The acknowledged position of the target (a fresh subscription from the beginning is at 0): 200, unchanged.
  ackSubscription: { path: '/v1/subscriptions/{subscription_id}:ack', body: { sequence: '0' } },
};

/**
 * Bodies the schema accepts that a rule the spec states in words refuses, each naming the field
 * (written here by hand; the first test checks that crossFieldViolation, the oracle, agrees).
 */
const IN_WORDS: Record<string, Array<{ name: string; field: string; body: JsonObject }>> = (() => {
  const submit = (VALID_EXAMPLES.submitTask as { body: JsonObject }).body;
  const schedule = (VALID_EXAMPLES.createSchedule as { body: JsonObject }).body;
  const interval = (VALID_EXAMPLES.createSchedule as { variants: JsonObject[] }).variants[0] as JsonObject;
  const { cron: _cron, ...neither } = schedule;
  return {
    submitTask: [{ name: 'delay_seconds equal to deadline_seconds', field: 'delay_seconds', body: { ...submit, delay_seconds: 60, deadline_seconds: 60 } }],
    createSchedule: [
      { name: 'both cron and interval_seconds', field: 'cron', body: { ...schedule, interval_seconds: 86400 } },
      { name: 'neither cron nor interval_seconds', field: 'cron', body: neither },
      { name: 'cron of 4 fields', field: 'cron', body: { ...schedule, cron: '* * * *' } },
      { name: 'cron of 7 fields', field: 'cron', body: { ...schedule, cron: '* * * * * * *' } },
      { name: 'cron with minute 61', field: 'cron', body: { ...schedule, cron: '61 * * * *' } },
      { name: 'cron with day-of-week 8', field: 'cron', body: { ...schedule, cron: '0 9 * * 8' } },
      { name: 'an unknown timezone', field: 'timezone', body: { ...schedule, timezone: 'Mars/Olympus' } },
      { name: 'an unknown timezone on an interval schedule', field: 'timezone', body: { ...interval, timezone: 'Mars/Olympus' } },
      { name: 'start_at on February 30', field: 'start_at', body: { ...schedule, start_at: '2099-02-30T00:00:00Z' } },
      { name: 'start_at on February 29 of a year that is not a leap year', field: 'start_at', body: { ...schedule, start_at: '2100-02-29T00:00:00Z' } },
      { name: 'start_at at hour 24', field: 'start_at', body: { ...interval, start_at: '2099-01-01T24:00:00Z' } },
      { name: 'start_at with an offset of +24:00', field: 'start_at', body: { ...interval, start_at: '2099-01-01T00:00:00+24:00' } },
      { name: 'start_at in year 10000 in UTC', field: 'start_at', body: { ...interval, start_at: '9999-12-31T23:59:59-01:00' } },
      { name: 'start_at before year 0000 in UTC', field: 'start_at', body: { ...interval, start_at: '0000-01-01T00:30:00+01:00' } },
      {
        name: 'start_at on 0000-02-29 in UTC (a leap day for RFC 3339, none for the database)',
        field: 'start_at',
        body: { ...interval, start_at: '0000-02-28T12:00:00-12:00' },
      },
    ],
  };
})();

/**
 * Rules the spec states in words rather than keywords: a body breaking one is still 400 on the
 * accepted side. Returns the field the server must name, or null.
 */
function crossFieldViolation(operationId: string, body: JsonObject): string | null {
  // A single submit and each item of a bulk submit (submitTasks' items are checked on their own).
  if (operationId === 'submitTask' || operationId === 'submitTasks item') {
    // "delay_seconds … must be less than deadline_seconds"
    const delay = (body.delay_seconds as number | undefined) ?? 0;
    const deadline = (body.deadline_seconds as number | undefined) ?? 86400;
    if (delay >= deadline) return 'delay_seconds';
  }
  if (operationId === 'createSchedule') {
    // Exactly one of cron and interval_seconds, a cron croner reads, a known time zone, a start_at that exists (test/helpers/fuzz-spec.ts).
    const problems = scheduleTriggerProblems(body);
    assert.ok(problems.length <= 1, `createSchedule: a boundary case breaks more than one trigger rule (${problems.join(', ')}); the generator is wrong`);
    return problems[0] ?? null;
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// JSON helpers
// ---------------------------------------------------------------------------------------------

type FieldPath = string[];
const show = (path: FieldPath) => path.join('.');
const clone = <T>(value: T): T => structuredClone(value);

function parentOf(root: JsonObject, path: FieldPath): JsonObject {
  let node: Json = root;
  for (const part of path.slice(0, -1)) node = (node as JsonObject)[part] as Json;
  return node as JsonObject;
}
function getAt(root: JsonObject, path: FieldPath): Json | undefined {
  return parentOf(root, path)[path.at(-1) as string];
}
function withValue(root: JsonObject, path: FieldPath, value: Json): JsonObject {
  const copy = clone(root);
  parentOf(copy, path)[path.at(-1) as string] = value;
  return copy;
}
function without(root: JsonObject, path: FieldPath): JsonObject {
  const copy = clone(root);
  delete parentOf(copy, path)[path.at(-1) as string];
  return copy;
}
/** The same object with one key renamed, keeping its position. */
function renamed(root: JsonObject, path: FieldPath, name: string): JsonObject {
  const copy = clone(root);
  const parent = parentOf(copy, path);
  const entries = Object.entries(parent).map(([k, v]): [string, Json] => [k === path.at(-1) ? name : k, v]);
  for (const k of Object.keys(parent)) delete parent[k];
  for (const [k, v] of entries) parent[k] = v;
  return copy;
}
/** JSON text in which the member at `path` appears twice (JSON.stringify cannot write this). */
function withDuplicateKey(value: Json, path: FieldPath): string {
  if (path.length === 0 || value === null || typeof value !== 'object' || Array.isArray(value)) return JSON.stringify(value);
  const [head, ...rest] = path as [string, ...string[]];
  const members = Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}:${k === head ? withDuplicateKey(v, rest) : JSON.stringify(v)}`);
  if (rest.length === 0) members.push(`${JSON.stringify(head)}:${JSON.stringify(value[head])}`);
  return `{${members.join(',')}}`;
}

function upperFirst(name: string): string {
  return name.charAt(0).toUpperCase() + name.slice(1);
}

/** `a`, `b`, … `z`, `aa`, `ab`, …: the i-th suffix (i ≥ 1). */
function letters(i: number): string {
  let out = '';
  for (let n = i; n > 0; n = Math.floor((n - 1) / 26)) out = String.fromCharCode(97 + ((n - 1) % 26)) + out;
  return out;
}

/**
 * `count` items for an array of `uniqueItems`: the example's item, then the same with a suffix of
 * letters (`neg`, `nega`, `negb`, …), each valid per the item schema - so a sized case is wrong
 * (or right) by its size only.
 */
function distinctItems(itemSchema: JsonSchema, element: Json, count: number, where: string): Json[] {
  assert.equal(typeof element, 'string', `${where}: uniqueItems over items that are not strings; teach distinctItems to vary them`);
  const items = Array.from({ length: count }, (_, i) => (i === 0 ? element : `${element as string}${letters(i)}`));
  for (const item of items)
    assert.ok(specAccepts(itemSchema, item), `${where}: the distinct item ${JSON.stringify(item)} is not valid; teach distinctItems another suffix`);
  return items;
}

/** Pattern candidates the generator tries against a string field or an array's string items (each kept only when the spec refuses it). */
const PATTERN_CANDIDATES = ['0', '01', '-1', 'UPPER', 'a b', ' ', '\t', '\u3000', '', 'clé', 'k'.repeat(129)];

// ---------------------------------------------------------------------------------------------
// Case generation
// ---------------------------------------------------------------------------------------------

interface Field {
  path: FieldPath;
  schema: JsonSchema;
  required: boolean;
}

/** Orbit's own fields: every declared property, recursively; free JSON (no `type`) is user data and not entered. */
function fieldsOf(schema: JsonSchema, path: FieldPath = []): Field[] {
  const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema.required ?? []) as string[]);
  const out: Field[] = [];
  for (const [name, property] of Object.entries(properties)) {
    const field = { path: [...path, name], schema: property, required: required.has(name) };
    out.push(field);
    if (property.type === 'object' && property.properties) out.push(...fieldsOf(property, field.path));
  }
  return out;
}
/** Objects of Orbit's own schema (where an unknown field is refused). */
function objectsOf(schema: JsonSchema, path: FieldPath = []): FieldPath[] {
  const out: FieldPath[] = [path];
  for (const [name, property] of Object.entries((schema.properties ?? {}) as Record<string, JsonSchema>)) {
    if (property.type === 'object' && property.properties) out.push(...objectsOf(property, [...path, name]));
  }
  return out;
}

function specAccepts(schema: JsonSchema, value: unknown): boolean {
  return requestSchemaValidator(schema)(value) as boolean;
}

interface RequestShape {
  /** Query string appended to the path ('' for none). */
  query: string;
  /** The raw body text. */
  text: string;
  /** Content-Type header; null to send none. */
  contentType: string | null;
  /** Idempotency-Key; null to send none; undefined for a fresh valid key. */
  key?: string | null;
}

interface NegativeCase extends RequestShape {
  operationId: string;
  name: string;
  /** What `error.details.field` must say. */
  field: string;
  /** For body cases: the body as a value, to confirm the spec itself refuses it (null: not expressible, e.g. duplicate keys). */
  value: unknown;
  /** Refused by a rule the spec states in words (IN_WORDS): its schema accepts the body. */
  inWords?: boolean;
}

interface AcceptedCase {
  operationId: string;
  name: string;
  body: JsonObject;
  /** Send the body padded with whitespace to exactly this many bytes. */
  padTo?: number;
}

/** A case of one object against its schema: `value` is the object (null when only `text` can say it, e.g. duplicate keys). */
interface ObjectCase {
  name: string;
  /** The field `error.details.field` must name, from the object's root. */
  field: string;
  value: Json | null;
  text: string;
}

/**
 * The per-field and per-object cases of `base` (valid) against `schema`: refused ones (`negative`)
 * and boundary values that are valid (`accepted`). Used for request bodies and for the items of
 * a bulk body (validated one by one). A field `base` lacks gets its cases from the first of
 * `variants` (other valid bodies) that has it.
 */
function objectCases(
  schema: JsonSchema,
  main: JsonObject,
  label: string,
  variants: readonly JsonObject[] = [],
): { negative: ObjectCase[]; accepted: Array<{ name: string; body: JsonObject }> } {
  const negative: ObjectCase[] = [];
  const accepted: Array<{ name: string; body: JsonObject }> = [];
  const json = (name: string, field: string, value: JsonObject | Json) => negative.push({ name, field, value, text: JSON.stringify(value) });

  for (const field of fieldsOf(schema)) {
    const where = show(field.path);
    const base = [main, ...variants].find((body) => getAt(body, field.path) !== undefined);
    assert.ok(base, `${label}: the valid example lacks ${where}; add it (or a variant with it) so the field gets its cases`);
    const type = field.schema.type as string | undefined;
    const userData = type === undefined; // JsonValue: any JSON, null included

    if (!userData) json(`${where} = null`, where, withValue(base, field.path, null));
    if (field.required) json(`${where} removed`, where, without(base, field.path));
    const name = field.path.at(-1) as string;
    for (const wrongCase of new Set([upperFirst(name), name.toUpperCase()])) {
      json(`${where} spelled ${wrongCase}`, show([...field.path.slice(0, -1), wrongCase]), renamed(base, field.path, wrongCase));
    }
    negative.push({ name: `${where} duplicated`, field: where, value: null, text: withDuplicateKey(base, field.path) });

    // Wrong types.
    const wrongTypes: Record<string, Json[]> = {
      integer: ['1', 1.5, true],
      number: ['1'],
      string: [5, true, ['x']],
      boolean: ['true', 1],
      object: ['{}', [], 1],
      array: ['[]', {}],
    };
    for (const wrong of type ? (wrongTypes[type] ?? []) : [])
      json(`${where} = ${JSON.stringify(wrong)} (not ${type})`, where, withValue(base, field.path, wrong));

    // Integer ranges.
    if (type === 'integer') {
      const min = field.schema.minimum as number | undefined;
      const max = field.schema.maximum as number | undefined;
      if (min !== undefined) {
        json(`${where} = min-1 (${min - 1})`, where, withValue(base, field.path, min - 1));
        accepted.push({ name: `${where} = min (${min})`, body: withValue(base, field.path, min) });
      }
      if (max !== undefined) {
        json(`${where} = max+1 (${max + 1})`, where, withValue(base, field.path, max + 1));
        accepted.push({ name: `${where} = max (${max})`, body: withValue(base, field.path, max) });
      }
    }

    // Array sizes and items of the wrong type (the element's own fields are another schema's business).
    if (type === 'array') {
      const list = getAt(base, field.path) as Json[];
      const element = list[0] as Json;
      const minItems = field.schema.minItems as number | undefined;
      const maxItems = field.schema.maxItems as number | undefined;
      const itemSchema = field.schema.items as JsonSchema | undefined;
      const unique = field.schema.uniqueItems === true;
      const itemsOf = (count: number): Json[] =>
        unique ? distinctItems(itemSchema ?? {}, element, count, `${label} ${where}`) : Array.from({ length: count }, () => clone(element));
      if (minItems !== undefined && minItems > 0) {
        json(`${where} of minItems-1 (${minItems - 1}) items`, where, withValue(base, field.path, list.slice(0, minItems - 1)));
        accepted.push({ name: `${where} of minItems (${minItems}) items`, body: withValue(base, field.path, itemsOf(minItems)) });
      }
      if (maxItems !== undefined) {
        json(`${where} of maxItems+1 (${maxItems + 1}) items${unique ? ', all different' : ''}`, where, withValue(base, field.path, itemsOf(maxItems + 1)));
        accepted.push({
          name: `${where} of maxItems (${maxItems}) items${unique ? ', all different' : ''}`,
          body: withValue(base, field.path, itemsOf(maxItems)),
        });
      }
      if (unique && (maxItems === undefined || maxItems >= 2)) {
        json(`${where} holding the same item twice (uniqueItems)`, where, withValue(base, field.path, [clone(element), clone(element)]));
      }
      if (itemSchema?.type === 'string' && typeof itemSchema.pattern === 'string') {
        for (const candidate of PATTERN_CANDIDATES.filter((c) => !specAccepts(itemSchema, c)))
          json(
            `${where}[0] = ${JSON.stringify(candidate).slice(0, 24)} (against its items' pattern)`,
            `${where}[0]`,
            withValue(base, field.path, [candidate, ...list.slice(1)]),
          );
      }
      if (itemSchema?.type !== undefined) {
        for (const wrong of [null, 1, 'x', true, [], {}] as Json[]) {
          if (!specAccepts(itemSchema, wrong))
            json(
              `${where}[0] = ${JSON.stringify(wrong)} (not ${String(itemSchema.type)})`,
              `${where}[0]`,
              withValue(base, field.path, [wrong, ...list.slice(1)]),
            );
        }
      }
    }

    // Serialised size (bytes, not characters: two-byte characters make the difference visible).
    const maxBytes = field.schema[MAX_JSON_BYTES] as number | undefined;
    if (maxBytes !== undefined) {
      const sized = (bytes: number): JsonObject => {
        const content = bytes - Buffer.byteLength('{"s":""}');
        const twoByte = Math.floor(content / 2);
        return { s: 'é'.repeat(twoByte) + 'x'.repeat(content - 2 * twoByte) };
      };
      json(`${where} of ${maxBytes + 1} bytes as JSON`, where, withValue(base, field.path, sized(maxBytes + 1)));
      accepted.push({ name: `${where} of exactly ${maxBytes} bytes as JSON`, body: withValue(base, field.path, sized(maxBytes)) });
    }

    // String lengths, enums, patterns.
    if (type === 'string') {
      const maxLength = field.schema.maxLength as number | undefined;
      const minLength = field.schema.minLength as number | undefined;
      if (maxLength !== undefined) {
        json(`${where} of maxLength+1 (${maxLength + 1}) characters`, where, withValue(base, field.path, 'x'.repeat(maxLength + 1)));
        accepted.push({ name: `${where} of maxLength (${maxLength}) characters`, body: withValue(base, field.path, 'x'.repeat(maxLength)) });
      }
      if (minLength !== undefined && minLength > 0)
        json(`${where} of minLength-1 (${minLength - 1}) characters`, where, withValue(base, field.path, 'x'.repeat(minLength - 1)));
      if (Array.isArray(field.schema.enum)) json(`${where} outside its enum`, where, withValue(base, field.path, 'not-a-member'));
      if (typeof field.schema.pattern === 'string') {
        // Every candidate the field's pattern refuses (checked with Ajv, so the case is really invalid).
        const candidates = PATTERN_CANDIDATES.filter(
          (c) => c.length >= (minLength ?? 0) && (maxLength === undefined || c.length <= maxLength) && !specAccepts(schema, withValue(base, field.path, c)),
        );
        for (const candidate of candidates)
          json(`${where} = ${JSON.stringify(candidate).slice(0, 24)} (against its pattern)`, where, withValue(base, field.path, candidate));
      }
    }
  }

  for (const objectPath of objectsOf(schema)) {
    const unknown = [...objectPath, 'unknown_field'];
    json(`unknown field ${show(unknown)}`, show(unknown), withValue(main, unknown, 1));
  }
  return { negative, accepted };
}

/** The items of a bulk body, each checked on its own: refused ones and boundary values, named from the body's root (`tasks[i].priority`). */
interface ItemCases {
  array: string;
  negative: ObjectCase[];
  accepted: Array<{ name: string; body: JsonObject }>;
}

const declaresIdempotencyKey = (op: SpecOperation) => op.parameters.some((p) => p.in === 'header' && p.name.toLowerCase() === 'idempotency-key');

function generate(op: SpecOperation): { negative: NegativeCase[]; accepted: AcceptedCase[]; items: ItemCases | null } {
  const example = VALID_EXAMPLES[op.operationId];
  assert.ok(example, `openapi.yaml has a request body for ${op.operationId} but this test has no valid example: add one to VALID_EXAMPLES`);
  const schema = op.requestSchema as JsonSchema;
  const base = example.body;
  const negative: NegativeCase[] = [];
  const accepted: AcceptedCase[] = [];
  const cases = objectCases(schema, base, op.operationId, example.variants);
  for (const c of cases.negative)
    negative.push({ operationId: op.operationId, name: c.name, field: c.field, value: c.value, query: '', text: c.text, contentType: 'application/json' });
  for (const c of IN_WORDS[op.operationId] ?? []) {
    negative.push({
      operationId: op.operationId,
      name: `${c.name} (a rule stated in words)`,
      field: c.field,
      value: c.body,
      query: '',
      text: JSON.stringify(c.body),
      contentType: 'application/json',
      inWords: true,
    });
  }
  for (const c of cases.accepted) accepted.push({ operationId: op.operationId, ...c });

  // A bulk body: its items are another schema, checked one by one (each refused in its own result).
  let items: ItemCases | null = null;
  if (op.bulkItems) {
    const { array, schema: itemSchema, schemaName } = op.bulkItems;
    const baseItem = (base[array] as JsonObject[])[0] as JsonObject;
    const itemCases = objectCases(itemSchema, baseItem, `${op.operationId} ${array}[0] (${schemaName})`);
    const inArray = (field: string) => (field.startsWith('[') ? `${array}[0]${field}` : `${array}[0].${field}`);
    // A duplicate key is the document's ambiguity, not the item's: the whole body is 400, naming where.
    for (const c of itemCases.negative.filter((c) => c.value === null)) {
      negative.push({
        operationId: op.operationId,
        name: `${array}[0]: ${c.name}`,
        field: inArray(c.field),
        value: null,
        query: '',
        text: `{${JSON.stringify(array)}:[${c.text}]}`,
        contentType: 'application/json',
      });
    }
    items = { array, negative: itemCases.negative.filter((c) => c.value !== null), accepted: itemCases.accepted };
  }

  // Per operation: the body as a whole, the headers and the query.
  const raw = (name: string, field: string, shape: Partial<RequestShape>) =>
    negative.push({ operationId: op.operationId, name, field, value: null, query: '', text: JSON.stringify(base), contentType: 'application/json', ...shape });
  raw('non-JSON body', 'body', { text: '{"reason": "unterminated' });
  raw('empty body', 'body', { text: '' });
  raw('body is null', 'body', { text: 'null' });
  raw('body is an array', 'body', { text: JSON.stringify([base]) });
  raw('Content-Type text/plain', 'Content-Type', { contentType: 'text/plain' });
  raw('Content-Type application/x-www-form-urlencoded', 'Content-Type', { contentType: 'application/x-www-form-urlencoded' });
  raw('no Content-Type', 'Content-Type', { contentType: null });
  raw('undeclared query parameter', 'dry_run', { query: '?dry_run=1' });
  // The operation's byte limit (x-orbit-max-body-bytes, else 1 MiB): one byte more is 400 `body`, exactly the limit is not refused for size.
  const limit = op.maxBodyBytes as number;
  const text = JSON.stringify(base);
  raw(`body of ${limit + 1} bytes (the limit plus one, valid JSON padded with spaces)`, 'body', {
    text: text + ' '.repeat(limit + 1 - Buffer.byteLength(text)),
  });
  accepted.push({ operationId: op.operationId, name: `a body of exactly ${limit} bytes (the limit, padded with spaces)`, body: base, padTo: limit });
  const idempotency = op.parameters.find((p) => p.in === 'header' && p.name.toLowerCase() === 'idempotency-key');
  if (idempotency) {
    assert.ok(idempotency.required, `${op.operationId}: its Idempotency-Key header must be required`);
    raw('no Idempotency-Key', idempotency.name, { key: null });
    raw('Idempotency-Key of 129 characters', idempotency.name, { key: 'k'.repeat(129) });
    raw('Idempotency-Key with a space', idempotency.name, { key: 'has space' });
    raw('Idempotency-Key with a non-ASCII character', idempotency.name, { key: 'clé' });
  } else {
    // No header: then every item carries its own required key (a bulk body).
    const itemSchema = op.bulkItems?.schema;
    assert.ok(
      itemSchema && ((itemSchema.required ?? []) as string[]).includes('idempotency_key'),
      `${op.operationId} has a body but neither a required Idempotency-Key header nor a required idempotency_key per item in openapi.yaml`,
    );
  }

  return { negative, accepted, items };
}

/** The state a schedule or subscription operation leaves its target in (each boundary case gets a fresh target in the state it acts on). */
const STATE_AFTER: Record<string, { of: 'schedule' | 'subscription'; state: string }> = {
  createSchedule: { of: 'schedule', state: 'ACTIVE' },
  pauseSchedule: { of: 'schedule', state: 'PAUSED' },
  resumeSchedule: { of: 'schedule', state: 'ACTIVE' },
  createSubscription: { of: 'subscription', state: 'ACTIVE' },
  pauseSubscription: { of: 'subscription', state: 'PAUSED' },
  resumeSubscription: { of: 'subscription', state: 'ACTIVE' },
  ackSubscription: { of: 'subscription', state: 'ACTIVE' },
};

/** Operations in the order their accepted cases run: submissions before anything that lowers limits. */
const ORDER = [
  'submitTask',
  'submitTasks',
  'cancelTask',
  'retryTask',
  'resolveTask',
  'createQueue',
  'createSchedule',
  'pauseSchedule',
  'resumeSchedule',
  'createSubscription',
  'pauseSubscription',
  'resumeSubscription',
  'ackSubscription',
  'configureQueue',
  'configureApplicationResources',
  'configureRetention',
];
const bodyOperations = operations
  .filter((op) => op.requestSchema !== null)
  .sort((a, b) => (ORDER.indexOf(a.operationId) + 1 || 99) - (ORDER.indexOf(b.operationId) + 1 || 99));
const generated = bodyOperations.map((op) => ({ op, ...generate(op) }));
const negativeCount = generated.reduce((n, g) => n + g.negative.length, 0);
const acceptedCount = generated.reduce((n, g) => n + g.accepted.length, 0);
const itemCount = generated.reduce((n, g) => n + (g.items ? g.items.negative.length + g.items.accepted.length : 0), 0);

/**
 * Every queue a boundary case of createSubscription names (`queues` of maxItems distinct names):
 * made in `before`, so that the case can succeed ("a queue that does not exist" is 404).
 */
const SUBSCRIPTION_QUEUES = [
  ...new Set(
    generated
      .filter((g) => g.op.operationId === 'createSubscription')
      .flatMap((g) => g.accepted.flatMap((c) => (Array.isArray(c.body.queues) ? (c.body.queues as string[]) : []))),
  ),
];

// ---------------------------------------------------------------------------------------------
// Query parameters of the GET operations
// ---------------------------------------------------------------------------------------------

interface QueryCase {
  name: string;
  /** The query string, `?` included. */
  query: string;
  /** The parameter a 400 names; null for a value that is valid (an accepted case). */
  field: string | null;
}

/** Query cases of one GET operation, from its declared parameters: refused values (400 naming the parameter) and the bounds of integers (accepted). */
function queryCases(op: SpecOperation): QueryCase[] {
  const out: QueryCase[] = [];
  for (const p of op.parameters.filter((x) => x.in === 'query')) {
    const refused = (name: string, value: string) => {
      assert.equal(
        requestSchemaValidator(p.schema)(p.schema.type === 'integer' && /^-?\d+$/.test(value) ? Number(value) : value),
        false,
        `${op.operationId} ${p.name}=${value} is valid; the generator is wrong`,
      );
      out.push({ name: `${p.name} ${name}`, query: `?${p.name}=${encodeURIComponent(value)}`, field: p.name });
    };
    if (p.schema.type === 'integer') {
      const min = p.schema.minimum as number | undefined;
      const max = p.schema.maximum as number | undefined;
      if (min !== undefined) {
        refused(`= min-1 (${min - 1})`, String(min - 1));
        out.push({ name: `${p.name} = min (${min})`, query: `?${p.name}=${min}`, field: null });
      }
      if (max !== undefined) {
        refused(`= max+1 (${max + 1})`, String(max + 1));
        out.push({ name: `${p.name} = max (${max})`, query: `?${p.name}=${max}`, field: null });
      }
      for (const value of ['abc', '1.5', '', '1e1', '0x1', ' 1']) refused(`= ${JSON.stringify(value)} (not an integer)`, value);
      out.push({ name: `${p.name} given twice`, query: `?${p.name}=${min ?? 1}&${p.name}=${min ?? 1}`, field: p.name });
    }
    if (p.schema.type === 'string') {
      if (Array.isArray(p.schema.enum)) {
        const member = String(p.schema.enum[0]);
        refused('outside its enum', 'not-a-member');
        refused(`= ${JSON.stringify(member)} in another case`, member === member.toLowerCase() ? member.toUpperCase() : member.toLowerCase());
      }
      if (typeof p.schema.pattern === 'string') {
        for (const candidate of [...PATTERN_CANDIDATES, 'x'.repeat(201), '-1', '18446744073709551616'].filter((c) => !requestSchemaValidator(p.schema)(c)))
          refused(`= ${JSON.stringify(candidate).slice(0, 24)} (against its pattern)`, candidate);
      }
      out.push({ name: `${p.name} given twice`, query: `?${p.name}=x&${p.name}=x`, field: p.name });
    }
  }
  return out;
}

const queryOperations = operations.filter((op) => op.method === 'GET' && !op.raw && op.parameters.some((p) => p.in === 'query'));
const generatedQueries = queryOperations.map((op) => ({ op, cases: queryCases(op) }));
const queryCount = generatedQueries.reduce((n, g) => n + g.cases.length, 0);

// ---------------------------------------------------------------------------------------------

describe(`contract: strict input, ${negativeCount} generated 400 cases, ${acceptedCount} boundary cases, ${itemCount} bulk item cases and ${queryCount} query cases from openapi.yaml`, () => {
  let t: TestDatabase;
  let api: Awaited<ReturnType<typeof testApp>>;
  let tenant: TestTenant;
  let token: string;
  let keyCounter = 0;
  const freshKey = () => `neg-${++keyCounter}-${randomBytes(3).toString('hex')}`;
  let snapshotBefore: unknown;
  /** A task in a state the operation can act on. */
  let waitingTask: string;
  let reviewTask: string;
  /** A schedule in the state each operation acts on: pause's refused cases target an ACTIVE one, resume's a PAUSED one. */
  let activeSchedule: string;
  let pausedSchedule: string;
  /** Likewise for subscriptions (from the beginning, so a read of the active one has events at once). */
  let activeSubscription: string;
  let pausedSubscription: string;
  /** A CANCELLED task: getTask with any wait_seconds answers at once. */
  let settledTask: string;

  async function submit(payload: JsonObject = { n: ++keyCounter }): Promise<string> {
    const r = await api.request('POST', `/v1/queues/${NEG_QUEUE}/tasks`, { token, key: freshKey(), body: { payload } });
    assert.equal(r.status, 200, r.text);
    return r.body.data.task.task_id as string;
  }
  /** A CANCELLED task, which a retry puts back to WAITING. */
  async function cancelled(): Promise<string> {
    const id = await submit();
    const r = await api.request('POST', `/v1/tasks/${id}:cancel`, { token, key: freshKey(), body: { reason: 'negative: a retry target' } });
    assert.equal(r.status, 200, r.text);
    return id;
  }
  async function needsReview(): Promise<string> {
    const id = await submit();
    await t.db.exec("UPDATE orbit_tasks SET state = 'NEEDS_REVIEW' WHERE task_id = UNHEX(?)", [id]);
    return id;
  }

  /** A fresh schedule (a new name, far in the future), ACTIVE or PAUSED. */
  async function schedule(state: 'ACTIVE' | 'PAUSED'): Promise<string> {
    const body = { ...(VALID_EXAMPLES.createSchedule as { body: JsonObject }).body, name: `neg-sched-${++keyCounter}` };
    const created = await api.request('POST', `/v1/queues/${NEG_QUEUE}/schedules`, { token, key: freshKey(), body });
    assert.equal(created.status, 200, created.text);
    const id = created.body.data.schedule.schedule_id as string;
    if (state === 'PAUSED') {
      const paused = await api.request('POST', `/v1/schedules/${id}:pause`, { token, key: freshKey(), body: { reason: 'negative: a paused target' } });
      assert.equal(paused.status, 200, paused.text);
    }
    return id;
  }

  /** A fresh subscription (a new name, the example's filters, from the beginning), ACTIVE or PAUSED. */
  async function subscription(state: 'ACTIVE' | 'PAUSED'): Promise<{ subscription_id: string; acked_sequence: string }> {
    const body = { ...(VALID_EXAMPLES.createSubscription as { body: JsonObject }).body, name: `neg-sub-${++keyCounter}` };
    const created = await api.request('POST', '/v1/subscriptions', { token, key: freshKey(), body });
    assert.equal(created.status, 200, created.text);
    const made = created.body.data.subscription as { subscription_id: string; acked_sequence: string };
    if (state === 'PAUSED') {
      const paused = await api.request('POST', `/v1/subscriptions/${made.subscription_id}:pause`, {
        token,
        key: freshKey(),
        body: { reason: 'negative: a paused target' },
      });
      assert.equal(paused.status, 200, paused.text);
    }
    return made;
  }

  function fill(template: string, operationId: string, id?: string): string {
    return template
      .replace('{queue}', NEG_QUEUE)
      .replace('{namespace}', tenant.namespace)
      .replace('{task_id}', id ?? (operationId === 'resolveTask' ? reviewTask : operationId === 'getTask' ? settledTask : waitingTask))
      .replace('{schedule_id}', id ?? (operationId === 'resumeSchedule' ? pausedSchedule : activeSchedule))
      .replace('{subscription_id}', id ?? (operationId === 'resumeSubscription' ? pausedSubscription : activeSubscription));
  }
  function pathFor(operationId: string, id?: string): string {
    return fill((VALID_EXAMPLES[operationId] as { path: string }).path, operationId, id);
  }

  /** Every orbit_ table's row count, and the application's, the namespaces' and the queues' rows, the tasks', the schedules' and the subscriptions' states (and positions). */
  async function snapshot(): Promise<unknown> {
    const tables = await t.db.rows<{ TABLE_NAME: string }>(
      "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME LIKE 'orbit\\_%' ORDER BY TABLE_NAME",
      [t.name],
    );
    assert.ok(tables.length >= 13);
    const counts: Record<string, string> = {};
    for (const { TABLE_NAME } of tables) counts[TABLE_NAME] = String((await t.db.rows<{ n: number }>(`SELECT COUNT(*) AS n FROM \`${TABLE_NAME}\``))[0]?.n);
    const resources = await t.db.rows('SELECT * FROM orbit_application_resources WHERE application_id = UNHEX(?)', [tenant.applicationId]);
    const namespaces = await t.db.rows('SELECT * FROM orbit_namespace_resources WHERE application_id = UNHEX(?) ORDER BY namespace_id', [tenant.applicationId]);
    const queues = await t.db.rows('SELECT * FROM orbit_queues WHERE application_id = UNHEX(?) ORDER BY name', [tenant.applicationId]);
    const tasks = await t.db.rows('SELECT HEX(task_id) AS id, state, updated_at, cancel_requested FROM orbit_tasks ORDER BY task_id');
    const schedules = await t.db.rows('SELECT HEX(schedule_id) AS id, name, state, next_fire_at, updated_at FROM orbit_schedules ORDER BY schedule_id');
    const subscriptions = await t.db.rows(
      'SELECT HEX(subscription_id) AS id, name, state, acked_sequence, acked_at, updated_at FROM orbit_subscriptions WHERE namespace_id = UNHEX(?) ORDER BY subscription_id',
      [tenant.namespaceId],
    );
    return JSON.parse(JSON.stringify({ counts, resources, namespaces, queues, tasks, schedules, subscriptions }));
  }

  /**
   * Exactly these headers and bytes. (A string body would make fetch add
   * `Content-Type: text/plain;charset=UTF-8` by itself; bytes get no Content-Type.)
   */
  async function send(method: string, path: string, headers: Record<string, string>, text: string): Promise<TestResponse> {
    const raw = await api.app.request(path, { method, headers, body: new TextEncoder().encode(text) });
    const responseText = await raw.text();
    let body: unknown;
    try {
      body = JSON.parse(responseText);
    } catch {
      body = undefined;
    }
    return { status: raw.status, headers: raw.headers, text: responseText, body };
  }

  function checkError(c: NegativeCase, response: TestResponse): void {
    const where = `${c.operationId}: ${c.name}`;
    assert.equal(response.status, 400, `${where}: expected 400, got ${response.status}: ${response.text.slice(0, 300)}`);
    assert.equal(response.body?.error?.code, 'INVALID_ARGUMENT', `${where}: ${response.text.slice(0, 300)}`);
    assert.equal(response.body.error.details?.field, c.field, `${where}: error.details.field must name ${c.field}: ${response.text.slice(0, 300)}`);
    // openapi.yaml (Error.details): `location` says where the field is.
    const location = c.query !== '' ? 'query' : c.field === 'Content-Type' || c.field.toLowerCase() === 'idempotency-key' ? 'header' : 'body';
    assert.equal(response.body.error.details.location, location, `${where}: error.details.location: ${response.text.slice(0, 300)}`);
    assertMatchesSpec(c.operationId, 400, response.body);
    assert.equal(response.headers.get('x-request-id'), response.body.request_id, `${where}: X-Request-Id`);
  }

  /** An item with the example's key gets a fresh one (so results can be told apart); items about the key keep theirs. */
  function withFreshKey(item: Json): Json {
    if (item === null || typeof item !== 'object' || Array.isArray(item) || item.idempotency_key !== 'neg-item') return item;
    return { ...item, idempotency_key: freshKey() };
  }
  const itemField = (array: string, i: number, field: string) => (field.startsWith('[') ? `${array}[${i}]${field}` : `${array}[${i}].${field}`);

  /**
   * A bulk answer: 200 matching the spec, one result per item in order with the item's key,
   * the tallies right; each item refused with INVALID_ARGUMENT naming exactly the expected
   * field (location body, no task), or accepted with a task of the queue holding its payload.
   */
  function checkItemResults(
    operationId: string,
    response: TestResponse,
    array: string,
    sent: Json[],
    expected: Array<{ refused: string } | { accepted: true }>,
  ): void {
    const where = `${operationId}`;
    assert.equal(response.status, 200, `${where}: a body valid as a whole is 200 whatever its items are: ${response.text.slice(0, 500)}`);
    assertMatchesSpec(operationId, 200, response.body);
    assert.equal(response.headers.get('x-request-id'), response.body.request_id, `${where}: X-Request-Id`);
    const results = response.body.data.results as Array<Record<string, any>>;
    assert.equal(results.length, sent.length, `${where}: one result per item`);
    const count = (status: string) => results.filter((r) => r.status === status).length;
    assert.deepEqual(
      [response.body.data.accepted, response.body.data.replayed, response.body.data.refused],
      [count('accepted'), count('replayed'), count('refused')],
      `${where}: tallies`,
    );
    expected.forEach((e, i) => {
      const item = sent[i] as JsonObject;
      const result = results[i] as Record<string, any>;
      const at = `${where}: ${array}[${i}] ${JSON.stringify(item).slice(0, 200)} → ${JSON.stringify(result).slice(0, 300)}`;
      assert.equal(result.idempotency_key, typeof item.idempotency_key === 'string' ? item.idempotency_key : '', `${at}: the result carries the item's key`);
      if ('refused' in e) {
        assert.equal(result.status, 'refused', at);
        assert.equal(result.error?.code, 'INVALID_ARGUMENT', at);
        assert.equal(result.error.details?.field, e.refused, `${at}: error.details.field must name ${e.refused}`);
        assert.equal(result.error.details?.location, 'body', `${at}: error.details.location`);
        assert.equal(result.task, undefined, `${at}: a refused item has no task`);
      } else {
        assert.equal(result.status, 'accepted', at);
        assert.equal(result.task?.queue, NEG_QUEUE, at);
        assert.deepEqual(result.task.payload, item.payload, `${at}: the task's payload`);
      }
    });
  }

  before(async () => {
    t = await freshDatabase('negative');
    api = await testApp(t.db);
    tenant = await createTenant(t.db, { namespace: 'negative', queues: [...new Set([NEG_QUEUE, ...SUBSCRIPTION_QUEUES])], resourceAccess: true });
    token = await createCredential(t.db, tenant, [...ALL_ACTIONS], ['*']);
    waitingTask = await submit();
    reviewTask = await needsReview();
    activeSchedule = await schedule('ACTIVE');
    pausedSchedule = await schedule('PAUSED');
    activeSubscription = (await subscription('ACTIVE')).subscription_id;
    pausedSubscription = (await subscription('PAUSED')).subscription_id;
    settledTask = await submit();
    const cancelled = await api.request('POST', `/v1/tasks/${settledTask}:cancel`, { token, key: freshKey(), body: { reason: 'negative: a settled target' } });
    assert.equal(cancelled.status, 200, cancelled.text);
  });

  after(async () => {
    if (!t) return;
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  test('the generator covers every operation with a body, and every example is valid per the spec', () => {
    assert.deepEqual(
      bodyOperations.map((op) => op.operationId).sort(),
      Object.keys(VALID_EXAMPLES).sort(),
      'VALID_EXAMPLES must have exactly one example per operation with a request body',
    );
    for (const { op } of generated) {
      const example = VALID_EXAMPLES[op.operationId] as { body: JsonObject; variants?: JsonObject[] };
      for (const [i, body] of [example.body, ...(example.variants ?? [])].entries()) {
        const which = i === 0 ? 'the valid example' : `variant ${i}`;
        assert.ok(specAccepts(op.requestSchema as JsonSchema, body), `${op.operationId}: ${which} does not match openapi.yaml`);
        assert.equal(crossFieldViolation(op.operationId, body), null, `${op.operationId}: ${which} breaks a rule the spec states in words`);
      }
    }
    // Body cases expressible as a value must be refused by the spec itself, or the case is wrong.
    for (const { op, negative } of generated) {
      for (const c of negative) {
        if (c.inWords) {
          assert.ok(
            specAccepts(op.requestSchema as JsonSchema, c.value),
            `${op.operationId}: ${c.name} is refused by the schema already; it tests no rule stated in words`,
          );
          assert.equal(
            crossFieldViolation(op.operationId, c.value as JsonObject),
            c.field,
            `${op.operationId}: ${c.name}: the oracle (crossFieldViolation) disagrees with the case`,
          );
        } else if (c.value !== null && c.contentType === 'application/json' && c.query === '' && c.key === undefined) {
          assert.equal(
            specAccepts(op.requestSchema as JsonSchema, c.value),
            false,
            `${op.operationId}: ${c.name} is valid per openapi.yaml; the generator is wrong`,
          );
        }
      }
    }
    for (const { op, accepted } of generated) {
      for (const c of accepted) assert.ok(specAccepts(op.requestSchema as JsonSchema, c.body), `${op.operationId}: ${c.name} should be valid per openapi.yaml`);
    }
    // Bulk items: the refused ones are refused by the item schema itself, the boundary ones valid, and every item case sits in a body valid as a whole.
    for (const { op, items } of generated) {
      if (!items || !op.bulkItems) continue;
      for (const c of items.negative) {
        assert.equal(
          specAccepts(op.bulkItems.schema, c.value),
          false,
          `${op.operationId}: item case ${c.name} is valid per ${op.bulkItems.schemaName}; the generator is wrong`,
        );
        assert.ok(
          specAccepts(op.requestSchema as JsonSchema, { [items.array]: [c.value] }),
          `${op.operationId}: item case ${c.name} makes the whole body invalid`,
        );
      }
      for (const c of items.accepted)
        assert.ok(specAccepts(op.bulkItems.schema, c.body), `${op.operationId}: item case ${c.name} should be valid per ${op.bulkItems.schemaName}`);
      assert.ok(items.negative.length > 40, `${op.operationId}: only ${items.negative.length} item cases generated`);
    }
    assert.ok(
      generated.some((g) => g.items !== null),
      'no bulk operation found in openapi.yaml (an array described as "each a `Schema`")',
    );
    assert.ok(negativeCount > 100, `only ${negativeCount} cases generated`);
  });

  test('snapshot before the refused cases', async () => {
    snapshotBefore = await snapshot();
  });

  for (const { op, negative, items } of generated) {
    describe(`${op.operationId} (${op.method} ${op.path}): ${negative.length} cases answer 400 naming the field`, () => {
      for (const c of negative) {
        test(c.name, async () => {
          const headers: Record<string, string> = {};
          if (c.contentType !== null) headers['Content-Type'] = c.contentType;
          const key = c.key === undefined ? (declaresIdempotencyKey(op) ? freshKey() : null) : c.key;
          headers.Authorization = `Bearer ${token}`;
          if (key !== null) headers['Idempotency-Key'] = key;
          checkError(c, await send(op.method, `${pathFor(op.operationId)}${c.query}`, headers, c.text));
        });
      }
      if (items) {
        test(`${items.negative.length} invalid items in one body: 200, each refused in its own result with INVALID_ARGUMENT naming ${items.array}[i].<field>, in order`, async () => {
          const sent = items.negative.map((c) => withFreshKey(c.value as Json));
          const response = await send(
            op.method,
            pathFor(op.operationId),
            { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
            JSON.stringify({ [items.array]: sent }),
          );
          checkItemResults(
            op.operationId,
            response,
            items.array,
            sent,
            items.negative.map((c, i) => ({ refused: itemField(items.array, i, c.field) })),
          );
        });
      }
    });
  }

  for (const { op, cases } of generatedQueries) {
    const refused = cases.filter((c) => c.field !== null).length;
    describe(`${op.operationId} (GET ${op.path}): ${refused} query cases answer 400 naming the parameter, ${cases.length - refused} bounds are 200`, () => {
      for (const c of cases) {
        test(c.field === null ? `${c.name} is accepted` : c.name, async () => {
          const path = `${fill(op.path, op.operationId)}${c.query}`;
          const started = Date.now();
          // Cut off after 20 s: the server then answers at once, and the time below says it waited
          // (the bound is generous for a loaded machine, yet below the cut-off and the largest wait_seconds).
          const raw = await api.app.request(path, { headers: { Authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(20_000) });
          const text = await raw.text();
          const ms = Date.now() - started;
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            body = undefined;
          }
          const response: TestResponse = { status: raw.status, headers: raw.headers, text, body };
          if (c.field !== null) {
            checkError({ operationId: op.operationId, name: c.name, field: c.field, value: null, query: c.query, text: '', contentType: null }, response);
            return;
          }
          assert.equal(response.status, 200, `${op.operationId}: ${c.name}: valid per openapi.yaml, got ${response.status}: ${text.slice(0, 300)}`);
          assertMatchesSpec(op.operationId, 200, response.body);
          assert.ok(ms < 10_000, `${op.operationId}: ${c.name}: the target answers at once (settled, or with events to read), yet it took ${ms} ms`);
        });
      }
    });
  }

  test('the refused cases changed nothing: row counts, resources, queues and tasks are as before', async () => {
    assert.deepEqual(await snapshot(), snapshotBefore);
  });

  test('user data may hold nulls, unknown and any-case keys: payload is accepted and returned unchanged', async () => {
    const payload = { x: null, Y: { z: [null] }, unknown_field: 1, Payload: 'same name, other case' };
    const response = await api.request('POST', `/v1/queues/${NEG_QUEUE}/tasks`, { token, key: freshKey(), body: { payload } });
    assert.equal(response.status, 200, response.text);
    assertMatchesSpec('submitTask', 200, response.body);
    assert.deepEqual(response.body.data.task.payload, payload);
    const fetched = await api.request('GET', `/v1/tasks/${response.body.data.task.task_id}`, { token });
    assert.deepEqual(fetched.body.data.payload, payload);
  });

  test('user data in resolve (result, error) may be null or hold nulls', async () => {
    const first = await needsReview();
    const result = { x: null, Y: { z: [null] } };
    const resolved = await api.request('POST', `/v1/tasks/${first}:resolve`, {
      token,
      key: freshKey(),
      body: { outcome: 'succeeded', reason: '核查', result, error: null },
    });
    assert.equal(resolved.status, 200, resolved.text);
    assertMatchesSpec('resolveTask', 200, resolved.body);
    assert.deepEqual(resolved.body.data.task.result, result);
  });

  test('duplicate keys inside user data are refused too (ambiguous), naming the path', async () => {
    const before = await snapshot();
    const response = await api.request('POST', `/v1/queues/${NEG_QUEUE}/tasks`, {
      token,
      key: freshKey(),
      rawBody: '{"payload":{"items":[{"sku":"a","sku":"b"}]}}',
      headers: { 'Content-Type': 'application/json' },
    });
    checkError(
      { operationId: 'submitTask', name: 'duplicate key in payload', field: 'payload.items[0].sku', value: null, query: '', text: '', contentType: null },
      response,
    );
    assert.deepEqual(await snapshot(), before);
  });

  test('ackSubscription: a sequence at either end of its uint64 range is no 400 - below the position, or beyond the newest event, 409 naming sequence, moving nothing', async () => {
    const created = await api.request('POST', '/v1/subscriptions', { token, key: freshKey(), body: { name: `neg-sub-${++keyCounter}`, reason: '从现在起' } });
    assert.equal(created.status, 200, created.text);
    const target = created.body.data.subscription;
    assert.notEqual(target.acked_sequence, '0', 'from now: after the events made so far');
    for (const sequence of ['0', '18446744073709551615']) {
      const response = await api.request('POST', `/v1/subscriptions/${target.subscription_id}:ack`, { token, key: freshKey(), body: { sequence } });
      assert.equal(response.status, 409, `sequence ${sequence}: ${response.text}`);
      assertMatchesSpec('ackSubscription', 409, response.body);
      assert.deepEqual(
        [response.body.error.code, response.body.error.details?.field],
        ['STATE_CONFLICT', 'sequence'],
        `sequence ${sequence}: ${response.text}`,
      );
    }
    const now = await api.request('GET', `/v1/subscriptions/${target.subscription_id}`, { token });
    assert.deepEqual(now.body.data, target, 'a refused ack moves nothing');
  });

  for (const { op, accepted, items } of generated) {
    describe(`${op.operationId}: ${accepted.length} boundary values are accepted (never 400)`, () => {
      for (const c of accepted) {
        test(c.name, async () => {
          // Fresh targets so a success is possible: a new queue name, the current revision, a task in the right state, fresh item keys.
          const body = clone(c.body);
          if (op.bulkItems) body[op.bulkItems.array] = (body[op.bulkItems.array] as Json[]).map(withFreshKey);
          let path = pathFor(op.operationId);
          if (op.operationId === 'createQueue') body.name = `nb-${keyCounter + 1}`;
          if (op.operationId === 'createSchedule') body.name = `nb-sched-${keyCounter + 1}`;
          if (op.operationId === 'createSubscription') body.name = `nb-sub-${keyCounter + 1}`;
          if (op.operationId === 'configureQueue') {
            body.expected_revision = (await api.request('GET', `/v1/queues/${NEG_QUEUE}`, { token })).body.data.revision;
          }
          if (op.operationId === 'configureApplicationResources') {
            body.expected_revision = (await api.request('GET', '/v1/application/resources', { token })).body.data.revision;
          }
          if (op.operationId === 'configureRetention') {
            body.expected_revision = (await api.request('GET', '/v1/application/retention', { token })).body.data.revision;
          }
          if (op.operationId === 'cancelTask') path = pathFor(op.operationId, await submit());
          if (op.operationId === 'retryTask') path = pathFor(op.operationId, await cancelled());
          if (op.operationId === 'resolveTask') path = pathFor(op.operationId, await needsReview());
          if (op.operationId === 'pauseSchedule') path = pathFor(op.operationId, await schedule('ACTIVE'));
          if (op.operationId === 'resumeSchedule') path = pathFor(op.operationId, await schedule('PAUSED'));
          if (op.operationId === 'pauseSubscription') path = pathFor(op.operationId, (await subscription('ACTIVE')).subscription_id);
          if (op.operationId === 'resumeSubscription') path = pathFor(op.operationId, (await subscription('PAUSED')).subscription_id);
          if (op.operationId === 'ackSubscription') {
            // Its own position: accepted and unchanged (a fuzzed ack never moves a subscription another case relies on).
            const target = await subscription('ACTIVE');
            path = pathFor(op.operationId, target.subscription_id);
            body.sequence = target.acked_sequence;
          }
          const crossField = crossFieldViolation(op.operationId, body);
          const text = JSON.stringify(body);
          const response = await api.request(op.method, path, {
            token,
            key: declaresIdempotencyKey(op) ? freshKey() : undefined,
            ...(c.padTo === undefined
              ? { body }
              : { rawBody: text + ' '.repeat(c.padTo - Buffer.byteLength(text)), headers: { 'Content-Type': 'application/json' } }),
          });
          if (crossField !== null) {
            // Reachable only through a rule the spec states in words (see crossFieldViolation).
            checkError({ operationId: op.operationId, name: c.name, field: crossField, value: null, query: '', text: '', contentType: null }, response);
            return;
          }
          assert.notEqual(response.status, 400, `${op.operationId}: ${c.name} is valid per openapi.yaml but was refused: ${response.text.slice(0, 300)}`);
          assert.ok(
            [200, 409].includes(response.status),
            `${op.operationId}: ${c.name}: expected 200 or 409, got ${response.status}: ${response.text.slice(0, 300)}`,
          );
          assertMatchesSpec(op.operationId, response.status, response.body);
          const stateAfter = STATE_AFTER[op.operationId];
          if (stateAfter) {
            // A fresh name, a target in the state the operation acts on: nothing to conflict with.
            assert.equal(response.status, 200, `${op.operationId}: ${c.name}: ${response.text.slice(0, 300)}`);
            assert.equal(response.body.data[stateAfter.of].state, stateAfter.state, `${op.operationId}: ${c.name}: the ${stateAfter.of}'s state`);
          }
          if (op.operationId === 'ackSubscription')
            assert.equal(response.body.data.subscription.acked_sequence, body.sequence, `${op.operationId}: ${c.name}: the position again is unchanged`);
          if (op.operationId === 'createSubscription') {
            const made = response.body.data.subscription;
            assert.deepEqual(
              [made.name, made.types, made.queues],
              [body.name, body.types, body.queues],
              `${op.operationId}: ${c.name}: the subscription as sent`,
            );
          }
          if (op.bulkItems) {
            const sent = body[op.bulkItems.array] as Json[];
            checkItemResults(
              op.operationId,
              response,
              op.bulkItems.array,
              sent,
              sent.map(() => ({ accepted: true })),
            );
          }
        });
      }
      if (items) {
        test(`${items.accepted.length} boundary values of ${items.array}[i] in one body: each accepted (or refused naming ${items.array}[i].delay_seconds past the delay rule)`, async () => {
          const sent = items.accepted.map((c) => withFreshKey(c.body));
          const response = await api.request(op.method, pathFor(op.operationId), { token, body: { [items.array]: sent } });
          checkItemResults(
            op.operationId,
            response,
            items.array,
            sent,
            sent.map((item, i) => {
              const violated = crossFieldViolation(`${op.operationId} item`, item as JsonObject);
              return violated === null ? { accepted: true } : { refused: itemField(items.array, i, violated) };
            }),
          );
        });
        test('valid and invalid items mixed: the valid ones are admitted, each invalid one refused on its own, in order', async () => {
          const valid = () => withFreshKey(clone((VALID_EXAMPLES[op.operationId]?.body[items.array] as JsonObject[] | undefined)?.[0] as JsonObject));
          const picks = [0, Math.floor(items.negative.length / 2), items.negative.length - 1].map((i) => items.negative[i] as ObjectCase);
          const sent: Json[] = [
            valid(),
            withFreshKey(picks[0]?.value as Json),
            valid(),
            withFreshKey(picks[1]?.value as Json),
            withFreshKey(picks[2]?.value as Json),
            valid(),
          ];
          const refused = (n: number, i: number) => ({ refused: itemField(items.array, i, (picks[n] as ObjectCase).field) });
          const before = (await snapshot()) as { counts: Record<string, string> };
          const response = await api.request(op.method, pathFor(op.operationId), { token, body: { [items.array]: sent } });
          checkItemResults(op.operationId, response, items.array, sent, [
            { accepted: true },
            refused(0, 1),
            { accepted: true },
            refused(1, 3),
            refused(2, 4),
            { accepted: true },
          ]);
          const after = (await snapshot()) as { counts: Record<string, string> };
          assert.equal(Number(after.counts.orbit_tasks), Number(before.counts.orbit_tasks) + 3, 'exactly the three valid items became tasks');
        });
      }
    });
  }
});
