/**
 * What /docs shows a user of openapi.yaml, checked against the spec itself:
 *
 * - every `example` and `examples` value (schemas, parameters, headers, request and response
 *   bodies, shared responses) validates against its schema; request bodies also pass the rules
 *   the spec states in words (a submit's `delay_seconds` < `deadline_seconds`, a schedule's
 *   trigger rules, each item of a bulk submit) - the spec's own verdict, test/helpers/fuzz-spec.ts;
 * - the examples tell one consistent story: tasks' timestamps, states and errors agree; a
 *   submit's answer is what its request asked for; a schedule's trigger points are points of its
 *   cron or interval; pages are in their documented order, hold at most `limit` items and their
 *   cursor is that of their last item; a configure's `expected_revision` is the revision its read
 *   example shows and its answer the next one;
 * - every operation has a short `summary`, one tag of the top-level list (in the order a user
 *   needs them: tasks first, the system last, every tag in one `x-tagGroups` group), names its
 *   credential action in its description, and has `x-codeSamples`: a curl sample whose method,
 *   path, query, headers and JSON body are valid for the operation, and (except the system's
 *   operations) a TypeScript SDK sample calling the method named by the operationId with one
 *   object whose fields are named as in the spec - and every SDK sample type-checks against
 *   the SDK itself (sdk/index.ts, sdk/worker.ts);
 * - the introduction is for users: no contributor material (codegen, `x-orbit-*`).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import type { Ajv2020, ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import ts from 'typescript';
import {
  dereference,
  findOperation,
  operationById,
  operations,
  spec,
  specAjv,
  stripExtensions,
  type JsonSchema,
  type SpecOperation,
} from './spec-validator.ts';
import { bodyVerdict, cronPointFrom } from '../helpers/fuzz-spec.ts';
import { SCHEDULE_DEFAULTS, TASK_DEFAULTS } from '../../server/domain/limits.ts';

// ajv-formats is CommonJS: its default export seen through ESM may be wrapped once more.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => Ajv2020;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };
const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The order of the sidebar: what a user needs first, the system last. */
const TAG_ORDER = [
  'Tasks',
  'Workers',
  'Schedules',
  'Events',
  'Subscriptions',
  'Audit',
  'Application limits',
  'Retention',
  'Queues',
  'Health and metrics',
  'Specifications',
  'Pages',
];
const SYSTEM_TAGS = new Set(['Health and metrics', 'Specifications', 'Pages']);
/** How every curl sample starts its URL: $ORBIT_URL, else a local server. */
const URL_PREFIX = ['$', '{ORBIT_URL:-http://127.0.0.1:8080}'].join('');
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED']);

// ---------------------------------------------------------------------------------------------
// Validating a value against a schema of the spec

const ajv = specAjv({ validateFormats: true });
addFormats(ajv);

const validators = new Map<unknown, ValidateFunction>();
function schemaErrors(schema: unknown, value: unknown): string[] {
  let validate = validators.get(schema);
  if (!validate) {
    validate = ajv.compile(stripExtensions(dereference(schema)) as JsonSchema);
    validators.set(schema, validate);
  }
  if (validate(value)) return [];
  return (validate.errors ?? []).map((e) => `${e.instancePath || '(root)'} ${e.message ?? e.keyword} ${JSON.stringify(e.params)}`);
}

// ---------------------------------------------------------------------------------------------
// Every example of the spec

interface Example {
  /** Where it is, as a JSON pointer-ish path. */
  where: string;
  value: unknown;
  /** The schema it must match. */
  schema: unknown;
  /** For examples of an operation: its id, and `request` or the response status. */
  operationId?: string;
  part?: string;
}

const OPERATION_AT = new Map<string, string>();
for (const op of operations) OPERATION_AT.set(`paths/${op.path}/${op.method.toLowerCase()}`, op.operationId);

/** Every `example`/`examples` of the document: of media types, parameters and headers (their `schema`), and of schemas themselves. */
function collectExamples(node: unknown, path: string[], out: Example[]): Example[] {
  if (Array.isArray(node)) {
    for (const [i, item] of node.entries()) collectExamples(item, [...path, String(i)], out);
    return out;
  }
  if (!isObject(node)) return out;
  const where = path.join('/');
  const operationId = OPERATION_AT.get(path.slice(0, 3).join('/'));
  const part = operationId === undefined ? undefined : path[3] === 'requestBody' ? 'request' : path[3] === 'responses' ? path[4] : path[3];
  // A media type, parameter or header example is of its `schema`; any other is a schema's own.
  const schemaOf = 'schema' in node ? node.schema : Object.fromEntries(Object.entries(node).filter(([k]) => k !== 'example' && k !== 'examples'));
  if ('example' in node) out.push({ where: `${where}/example`, value: node.example, schema: schemaOf, operationId, part });
  if ('examples' in node) {
    const examples = node.examples;
    if (Array.isArray(examples))
      for (const [i, value] of examples.entries()) out.push({ where: `${where}/examples/${i}`, value, schema: schemaOf, operationId, part });
    else if (isObject(examples))
      for (const [name, example] of Object.entries(examples)) {
        assert.ok(isObject(example) && 'value' in example, `${where}/examples/${name}: an Example object with a value`);
        out.push({ where: `${where}/examples/${name}`, value: example.value, schema: schemaOf, operationId, part });
      }
  }
  for (const [key, value] of Object.entries(node)) {
    if (key === 'example' || key === 'examples' || key === 'x-codeSamples') continue;
    collectExamples(value, [...path, key], out);
  }
  return out;
}

const EXAMPLES = collectExamples(spec, [], []);
const examplesOf = (operationId: string, part: string): unknown[] =>
  EXAMPLES.filter((e) => e.operationId === operationId && e.part === part).map((e) => e.value);
/** The `data` of an operation's 200 example (the envelope taken off). */
function dataOf(operationId: string): JsonObject {
  const [example] = examplesOf(operationId, '200');
  assert.ok(isObject(example), `${operationId} has a 200 example`);
  return (operationById(operationId).raw ? example : example.data) as JsonObject;
}
const requestExamples = (operationId: string): JsonObject[] => examplesOf(operationId, 'request') as JsonObject[];

test('every example in the spec validates against its schema', () => {
  assert.ok(EXAMPLES.length > 80, `examples found: ${EXAMPLES.length}`);
  const problems: string[] = [];
  for (const example of EXAMPLES) {
    const errors = schemaErrors(example.schema, example.value);
    if (errors.length > 0) problems.push(`${example.where}: ${errors.join('; ')}`);
  }
  assert.deepEqual(problems, []);
});

test('request body examples pass the rules the spec states in words (delay < deadline, schedule triggers, bulk items)', () => {
  const requests = EXAMPLES.filter((e) => e.part === 'request');
  assert.ok(requests.length >= 20, `request examples found: ${requests.length}`);
  for (const example of requests) {
    const verdict = bodyVerdict(example.operationId as string, example.value);
    assert.ok(verdict.valid, `${example.where}: ${JSON.stringify(verdict)}`);
    for (const [i, item] of (verdict.items ?? []).entries()) assert.ok(item.valid, `${example.where}: item ${i}: ${JSON.stringify(item)}`);
  }
});

test('every operation with a request body has a request example, and every enveloped operation a 200 example', () => {
  for (const op of operations) {
    if (op.requestSchema !== null) assert.ok(requestExamples(op.operationId).length > 0, `${op.operationId}: no request example`);
    if (!op.raw) assert.ok(examplesOf(op.operationId, '200').length > 0, `${op.operationId}: no 200 example`);
  }
});

// ---------------------------------------------------------------------------------------------
// The story the examples tell

/** Every object inside a value (itself included). */
function objectsIn(value: unknown, out: JsonObject[] = []): JsonObject[] {
  if (Array.isArray(value)) for (const v of value) objectsIn(v, out);
  else if (isObject(value)) {
    out.push(value);
    for (const v of Object.values(value)) objectsIn(v, out);
  }
  return out;
}
const ALL_OBJECTS = EXAMPLES.flatMap((e) => objectsIn(e.value).map((object) => ({ object, where: e.where })));
const ms = (t: Json | undefined) => Date.parse(t as string);

test('tasks in the examples are consistent: timestamps, state, attempts, error, schedule', () => {
  const tasks = ALL_OBJECTS.filter(({ object }) => 'task_id' in object && 'state' in object && 'deadline_at' in object);
  assert.ok(tasks.length >= 10, `tasks found: ${tasks.length}`);
  for (const { object: t, where } of tasks) {
    const at = `${where}: task ${t.task_id} (${t.state})`;
    assert.ok(ms(t.created_at) <= ms(t.available_at) && ms(t.available_at) < ms(t.deadline_at), `${at}: created_at <= available_at < deadline_at`);
    assert.equal('finished_at' in t, TERMINAL.has(t.state as string), `${at}: finished_at iff finished`);
    if ('finished_at' in t) assert.ok(ms(t.finished_at) >= ms(t.created_at), `${at}: finished after created`);
    assert.ok((t.attempts as number) <= (t.max_attempts as number), `${at}: attempts <= max_attempts`);
    const code = isObject(t.error) ? t.error.code : undefined;
    if (t.state === 'SUCCEEDED') assert.equal(t.error, undefined, `${at}: a success has no error`);
    if (t.state === 'CANCELLED') assert.equal(code, 'CANCELLED', at);
    if (t.state === 'NEEDS_REVIEW') assert.equal(code, 'LEASE_EXPIRED', at);
    if (t.state === 'EXPIRED') assert.ok(code === 'DEADLINE_EXCEEDED' || code === 'LEASE_EXPIRED', at);
    if (t.attempts === 0 && !TERMINAL.has(t.state as string)) assert.equal(t.error, undefined, `${at}: never attempted, never failed`);
    if (t.state === 'WAITING' || t.state === 'LEASED') assert.equal(t.result, undefined, `${at}: no result before it ran`);
    assert.equal('schedule_id' in t, 'scheduled_for' in t, `${at}: schedule_id and scheduled_for together`);
    if ('scheduled_for' in t) assert.ok(ms(t.created_at) >= ms(t.scheduled_for), `${at}: made at or after its trigger point`);
  }
});

/** The task a submission of `request` (a submit body or a bulk item) makes, as the spec says: the options or their defaults, both durations from acceptance. */
function assertTaskOf(request: JsonObject, task: JsonObject, queue: string, at: string): void {
  assert.deepEqual(task.payload, request.payload, `${at}: payload`);
  assert.equal(task.queue, queue, `${at}: queue`);
  assert.equal(task.state, 'WAITING', `${at}: a new task waits`);
  assert.equal(task.attempts, 0, at);
  assert.equal(task.priority, request.priority ?? TASK_DEFAULTS.priority, `${at}: priority`);
  assert.equal(task.max_attempts, request.max_attempts ?? TASK_DEFAULTS.max_attempts, `${at}: max_attempts`);
  assert.equal(task.on_unknown_outcome, request.on_unknown_outcome ?? TASK_DEFAULTS.on_unknown_outcome, `${at}: on_unknown_outcome`);
  assert.equal(task.resource_key, request.resource_key, `${at}: resource_key`);
  const delay = (request.delay_seconds as number | undefined) ?? TASK_DEFAULTS.delay_seconds;
  const deadline = (request.deadline_seconds as number | undefined) ?? TASK_DEFAULTS.deadline_seconds;
  assert.ok(delay < deadline, `${at}: delay_seconds < deadline_seconds`);
  assert.equal(ms(task.available_at) - ms(task.created_at), delay * 1000, `${at}: available_at = acceptance + delay_seconds`);
  assert.equal(ms(task.deadline_at) - ms(task.created_at), deadline * 1000, `${at}: deadline_at = acceptance + deadline_seconds`);
}

test("the task defaults the spec states are the server's (delay 0, deadline 86400, priority 5, 3 attempts)", () => {
  const schemas = spec.components.schemas as Record<string, { description?: string }>;
  assert.match(schemas.DelaySeconds?.description ?? '', new RegExp(`Default ${TASK_DEFAULTS.delay_seconds}\\b`));
  assert.match(schemas.DelaySeconds?.description ?? '', /less than deadline_seconds/);
  assert.match(schemas.DeadlineSeconds?.description ?? '', new RegExp(`default ${TASK_DEFAULTS.deadline_seconds}\\b`));
  assert.match(schemas.TaskPriority?.description ?? '', new RegExp(`default ${TASK_DEFAULTS.priority}\\b`));
  assert.match(schemas.MaxAttempts?.description ?? '', new RegExp(`Default ${TASK_DEFAULTS.max_attempts}\\b`));
});

test("a submit's answer is the task its request asks for; a bulk submit's results are its items'", () => {
  const { task } = dataOf('submitTask') as { task: JsonObject };
  const request = requestExamples('submitTask').find((r) => isDeepStrictEqual(r.payload, task.payload));
  assert.ok(request, 'a submitTask request example makes the task of its 200 example');
  assertTaskOf(request, task, curlOf('submitTask').pathParams.queue as string, 'submitTask');

  const bulk = dataOf('submitTasks') as { results: JsonObject[]; accepted: number; replayed: number; refused: number };
  const [items] = requestExamples('submitTasks').map((r) => r.tasks as JsonObject[]);
  assert.ok(items, 'a submitTasks request example');
  assert.equal(bulk.results.length, items.length, 'one result per item');
  for (const status of ['accepted', 'replayed', 'refused'] as const)
    assert.equal(bulk[status], bulk.results.filter((r) => r.status === status).length, `the count of ${status}`);
  for (const [i, result] of bulk.results.entries()) {
    const item = items[i] as JsonObject;
    assert.equal(result.idempotency_key, item.idempotency_key, `result ${i} is item ${i}'s`);
    if (result.status === 'refused') assert.ok(isObject(result.error) && result.task === undefined, `result ${i}: refused with an error`);
    else {
      assert.ok(isObject(result.task) && result.error === undefined, `result ${i}: a task`);
      const { idempotency_key: _key, ...submit } = item;
      assertTaskOf(submit, result.task, curlOf('submitTasks').pathParams.queue as string, `submitTasks result ${i}`);
    }
    // A replay is the original receipt: the same task as the single submit with that key, if the examples show one.
    if (result.status === 'replayed' && result.idempotency_key === curlOf('submitTask').headers['idempotency-key'])
      assert.deepEqual(result.task, task, 'the replayed item is the receipt of the single submit with the same key');
  }
});

test('the decisions on a task answer what their requests asked for (cancel, resolve, retry)', () => {
  const cancelled = (dataOf('cancelTask') as { task: JsonObject }).task;
  const [cancel] = requestExamples('cancelTask');
  assert.ok(cancel);
  assert.ok(
    (cancelled.state === 'CANCELLED' && isObject(cancelled.error) && cancelled.error.message === cancel.reason) ||
      (cancelled.state === 'RUNNING' && cancelled.cancel_requested === true),
    'cancelTask: CANCELLED with the reason as its error, or RUNNING with cancel_requested',
  );
  const resolved = (dataOf('resolveTask') as { task: JsonObject }).task;
  const outcome = { succeeded: 'SUCCEEDED', failed: 'FAILED', retry: 'WAITING' } as Record<string, string>;
  const decision = requestExamples('resolveTask').find((r) => outcome[r.outcome as string] === resolved.state);
  assert.ok(decision, `a resolveTask request example leads to ${resolved.state}`);
  if (decision.result !== undefined && decision.outcome !== 'retry') assert.deepEqual(resolved.result, decision.result, 'resolveTask: the result given');
  const retried = (dataOf('retryTask') as { task: JsonObject }).task;
  assert.equal(retried.state, 'WAITING', 'retryTask: WAITING again');
  assert.ok(retried.error === undefined && retried.result === undefined && retried.finished_at === undefined, 'retryTask: no error, result or finished_at');
  assert.ok((retried.max_attempts as number) > (retried.attempts as number), 'retryTask: one more attempt allowed');
  assert.equal(curlOf('retryTask').pathParams.task_id, retried.task_id, 'retryTask: the task of the sample');
  assert.equal(curlOf('cancelTask').pathParams.task_id, cancelled.task_id, 'cancelTask: the task of the sample');
  assert.equal(curlOf('resolveTask').pathParams.task_id, resolved.task_id, 'resolveTask: the task of the sample');
});

test("schedules in the examples fire at their cron's or interval's points, and a create answers its request", () => {
  const schedules = ALL_OBJECTS.filter(({ object }) => 'schedule_id' in object && 'misfire_policy' in object);
  assert.ok(schedules.length >= 4, `schedules found: ${schedules.length}`);
  for (const { object: s, where } of schedules) {
    const at = `${where}: schedule ${s.name}`;
    assert.notEqual('cron' in s, 'interval_seconds' in s, `${at}: exactly one of cron and interval_seconds`);
    const points = [s.last_fire_at, s.next_fire_at].filter((p) => p !== undefined).map(ms);
    if ('cron' in s)
      for (const p of points)
        assert.equal(cronPointFrom(s.cron as string, s.timezone as string, p), p, `${at}: ${new Date(p).toISOString()} is a trigger point`);
    else {
      const origin = 'start_at' in s ? ms(s.start_at) : (points[0] as number);
      for (const p of points)
        assert.equal((p - origin) % ((s.interval_seconds as number) * 1000), 0, `${at}: ${new Date(p).toISOString()} is a whole number of intervals`);
    }
    if ('last_fire_at' in s && 'next_fire_at' in s) assert.ok(ms(s.last_fire_at) < ms(s.next_fire_at), `${at}: last before next`);
    assert.equal('last_fire_at' in s, s.fired !== '0', `${at}: fired iff it has a last trigger point`);
    if ('next_fire_at' in s) assert.ok(ms(s.next_fire_at) >= ms(s.created_at), `${at}: fires after it was created`);
  }
  const { schedule } = dataOf('createSchedule') as { schedule: JsonObject };
  const request = requestExamples('createSchedule').find((r) => r.name === schedule.name);
  assert.ok(request, 'a createSchedule request example makes the schedule of its 200 example');
  for (const field of ['cron', 'interval_seconds', 'payload', 'resource_key']) assert.deepEqual(schedule[field], request[field], `createSchedule: ${field}`);
  assert.equal(schedule.timezone, request.timezone ?? SCHEDULE_DEFAULTS.timezone);
  assert.equal(schedule.misfire_policy, request.misfire_policy ?? SCHEDULE_DEFAULTS.misfire_policy);
  assert.equal(schedule.misfire_window_seconds, request.misfire_window_seconds ?? SCHEDULE_DEFAULTS.misfire_window_seconds);
  for (const field of ['priority', 'max_attempts', 'deadline_seconds', 'on_unknown_outcome'] as const)
    assert.equal(schedule[field], request[field] ?? TASK_DEFAULTS[field], `createSchedule: ${field}`);
  assert.equal(schedule.state, 'ACTIVE');
  assert.equal(schedule.fired, '0');
  if (typeof request.cron === 'string')
    assert.equal(
      ms(schedule.next_fire_at),
      cronPointFrom(request.cron, schedule.timezone as string, ms(schedule.created_at)),
      'the first trigger point after creation',
    );
  // A task a schedule made is of one of its trigger points.
  for (const { object: t, where } of ALL_OBJECTS.filter(({ object }) => 'scheduled_for' in object)) {
    const maker = schedules.find(({ object }) => object.schedule_id === t.schedule_id)?.object;
    assert.ok(maker, `${where}: the schedule of task ${t.task_id} is in the examples`);
    assert.equal(t.queue, maker.queue, `${where}: in its schedule's queue`);
    if (typeof maker.cron === 'string')
      assert.equal(cronPointFrom(maker.cron, maker.timezone as string, ms(t.scheduled_for)), ms(t.scheduled_for), `${where}: scheduled_for is a trigger point`);
  }
});

test('events in the examples: in sequence order, next_after the last one, task events about their subject', () => {
  for (const { object, where } of ALL_OBJECTS.filter(({ object }) => Array.isArray(object.events))) {
    const events = object.events as JsonObject[];
    const sequences = events.map((e) => BigInt(e.sequence as string));
    for (let i = 1; i < events.length; i++) {
      assert.ok((sequences[i] as bigint) > (sequences[i - 1] as bigint), `${where}: sequences increase`);
      assert.ok(ms(events[i]?.occurred_at) >= ms(events[i - 1]?.occurred_at), `${where}: a later sequence did not occur earlier`);
    }
    if ('next_after' in object && events.length > 0) assert.equal(object.next_after, events.at(-1)?.sequence, `${where}: next_after is the last sequence`);
    for (const e of events) {
      if (typeof e.type === 'string' && e.type.startsWith('task.') && isObject(e.data)) {
        assert.equal(e.data.task_id, e.subject, `${where}: ${e.type} is about its task`);
        assert.equal(typeof e.data.queue, 'string', `${where}: ${e.type} names its queue`);
      }
    }
  }
  const [ack] = requestExamples('ackSubscription');
  assert.equal((dataOf('ackSubscription').subscription as JsonObject).acked_sequence, ack?.sequence, 'ackSubscription: the position acknowledged');
  const afterText = curlOf('listEvents').query.after;
  assert.ok(afterText !== undefined, 'the listEvents sample pages with after');
  const after = BigInt(afterText);
  for (const e of dataOf('listEvents').events as JsonObject[]) assert.ok(BigInt(e.sequence as string) > after, 'listEvents: only events after `after`');
});

/** The key a page's cursor continues after, per list (audit records page by a sequence they do not show). */
const PAGES: Record<string, { items: string; key?: string; order: 'ascending' | 'descending'; by: string }> = {
  listQueues: { items: 'queues', key: 'queue', order: 'ascending', by: 'queue' },
  listTasks: { items: 'tasks', key: 'task_id', order: 'ascending', by: 'task_id' },
  listAllTasks: { items: 'tasks', key: 'task_id', order: 'descending', by: 'task_id' },
  listSchedules: { items: 'schedules', key: 'name', order: 'ascending', by: 'name' },
  listSubscriptions: { items: 'subscriptions', key: 'name', order: 'ascending', by: 'name' },
  listAuditEvents: { items: 'audit_events', order: 'ascending', by: 'created_at' },
};

test('page examples: in their documented order, within the limit of their sample, the cursor that of their last item', () => {
  for (const [operationId, page] of Object.entries(PAGES)) {
    const data = dataOf(operationId);
    const items = data[page.items] as JsonObject[];
    const { query, pathParams } = curlOf(operationId);
    const keys = items.map((i) => String(i[page.by]));
    const sorted = [...keys].sort();
    assert.deepEqual(keys, page.order === 'ascending' ? sorted : sorted.reverse(), `${operationId}: ${page.order} by ${page.by}`);
    if (page.by === 'task_id')
      for (let i = 1; i < items.length; i++)
        assert.ok(
          (ms(items[i]?.created_at) - ms(items[i - 1]?.created_at)) * (page.order === 'ascending' ? 1 : -1) >= 0,
          `${operationId}: task ids in creation order`,
        );
    const limit = query.limit === undefined ? 50 : Number(query.limit);
    assert.ok(items.length <= limit, `${operationId}: at most limit=${limit} items`);
    if ('next_cursor' in data) {
      assert.equal(items.length, limit, `${operationId}: a next_cursor only after a full page`);
      if (page.key)
        assert.deepEqual(
          JSON.parse(Buffer.from(data.next_cursor as string, 'base64url').toString('utf8')),
          [items.at(-1)?.[page.key]],
          `${operationId}: the cursor of the last item`,
        );
    }
    // The sample's filters hold for what the example lists.
    for (const item of items) {
      if (query.state !== undefined) assert.equal(item.state, query.state, `${operationId}: state=${query.state}`);
      const queue = query.queue ?? pathParams.queue;
      if (queue !== undefined && 'queue' in item) assert.equal(item.queue, queue, `${operationId}: queue ${queue}`);
    }
  }
});

test("a configure's expected_revision is the revision its read shows, and its answer the next one with what it asked for", () => {
  const pairs = [
    { configure: 'configureApplicationResources', read: 'getApplicationResources', result: 'resources' },
    { configure: 'configureRetention', read: 'getRetention', result: 'retention' },
    { configure: 'configureQueue', read: 'getQueue', result: 'queue' },
  ];
  for (const { configure, read, result } of pairs) {
    const before = dataOf(read);
    const after = dataOf(configure)[result] as JsonObject;
    const request = requestExamples(configure).find(
      (r) => r.dry_run === undefined && Object.keys(r).every((k) => ['expected_revision', 'reason'].includes(k) || isDeepStrictEqual(r[k], after[k])),
    );
    assert.ok(request, `${configure}: a request example whose values are those of its answer`);
    assert.equal(request.expected_revision, before.revision, `${configure}: expected_revision is what ${read} shows`);
    assert.equal(after.revision, String(BigInt(before.revision as string) + 1n), `${configure}: the next revision`);
    for (const example of requestExamples(configure))
      assert.equal(example.expected_revision, before.revision, `${configure}: every example starts from the revision read`);
  }
  const resources = dataOf('getApplicationResources');
  assert.ok(BigInt(resources.unfinished_tasks as string) <= BigInt(resources.max_unfinished_tasks as number), 'unfinished within the limit');
  assert.ok(BigInt(resources.active_attempts as string) <= BigInt(resources.max_concurrency as number), 'active within the limit');
});

// ---------------------------------------------------------------------------------------------
// Summaries, tags, code samples

interface OperationDoc {
  summary?: string;
  description?: string;
  tags?: string[];
  'x-codeSamples'?: Array<{ lang: string; label?: string; source: string }>;
}
const docOf = (op: SpecOperation) => op.operation as unknown as OperationDoc;
const topTags = (spec as unknown as { tags: Array<{ name: string; description?: string }> }).tags;
const tagGroups = (spec as unknown as { 'x-tagGroups': Array<{ name: string; tags: string[] }> })['x-tagGroups'];
const isSystem = (op: SpecOperation) => SYSTEM_TAGS.has(docOf(op).tags?.[0] ?? '');

test('the tags are in the order a user needs them, each described and in one group; every operation has one', () => {
  assert.deepEqual(
    topTags.map((t) => t.name),
    TAG_ORDER,
  );
  for (const tag of topTags) assert.ok((tag.description ?? '').length > 40, `tag ${tag.name} is described`);
  assert.deepEqual(
    tagGroups.flatMap((g) => g.tags),
    TAG_ORDER,
    'x-tagGroups hold every tag once, in the same order (Redoc hides a tag in no group)',
  );
  const used = new Set<string>();
  for (const op of operations) {
    const tags = docOf(op).tags ?? [];
    assert.equal(tags.length, 1, `${op.operationId}: one tag`);
    assert.ok(TAG_ORDER.includes(tags[0] as string), `${op.operationId}: tag ${tags[0]} is in the top-level list`);
    used.add(tags[0] as string);
    // The system's operations are exactly those that need no credential.
    assert.equal(isSystem(op), !op.authenticated, `${op.operationId}: in a system tag iff it needs no credential`);
  }
  assert.deepEqual(
    TAG_ORDER.filter((t) => !used.has(t)),
    [],
    'every tag has operations',
  );
});

test('every operation has a short summary, and a description naming its credential action', () => {
  for (const op of operations) {
    const { summary, description } = docOf(op);
    assert.ok(summary && summary.trim() === summary, `${op.operationId}: a summary`);
    assert.ok(summary.split(/\s+/).length <= 6, `${op.operationId}: "${summary}" is at most 6 words`);
    assert.ok(!/[.;:]$/.test(summary) && /^[A-Z]/.test(summary), `${op.operationId}: "${summary}" reads as a menu entry`);
    assert.ok(description && description.length > summary.length, `${op.operationId}: a description with the detail`);
    if (op.action !== null) assert.ok(description.includes(`\`${op.action}\``), `${op.operationId}: its description names the action ${op.action}`);
  }
  const summaries = operations.map((op) => docOf(op).summary);
  assert.equal(new Set(summaries).size, summaries.length, 'summaries are unique');
});

test('the introduction and the descriptions are written for users, not contributors', () => {
  const texts = [
    ['info.description', (spec as unknown as { info: { description: string } }).info.description],
    ...topTags.map((t) => [`tag ${t.name}`, t.description ?? '']),
    ...operations.map((op) => [op.operationId, docOf(op).description ?? '']),
  ] as Array<[string, string]>;
  for (const [where, text] of texts) assert.doesNotMatch(text, /codegen|x-orbit-|server\/generated|sdk\/generated|npm run/, where);
  const intro = texts[0]?.[1] ?? '';
  for (const topic of [
    'Authorization: Bearer',
    'orbit-admin bootstrap',
    '--output',
    '`token`',
    'request_id',
    'Idempotency-Key',
    'next_cursor',
    '1 MiB',
    'QUEUE_FULL',
  ])
    assert.ok(intro.includes(topic), `info.description covers ${topic}`);
});

// ---------------------------------------------------------------------------------------------
// The curl samples

interface Curl {
  method: string;
  path: string;
  pathParams: Record<string, string>;
  query: Record<string, string>;
  /** Lowercase names. */
  headers: Record<string, string>;
  body?: unknown;
}

/** The words of one shell command: `\`-newline continues it, `#` lines are comments, '…' is literal, "…" keeps `$` as written. */
function shellWords(source: string): string[] {
  const text = source
    .split('\n')
    .filter((line) => !line.trim().startsWith('#'))
    .join('\n')
    .replace(/\\\n/g, ' ');
  const words: string[] = [];
  let word: string | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    if (/\s/.test(c)) {
      if (word !== null) words.push(word);
      word = null;
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1);
      assert.ok(end > i, `unterminated ' in ${source}`);
      word = (word ?? '') + text.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      let j = i + 1;
      let part = '';
      for (; j < text.length && text[j] !== '"'; j++) part += text[j] === '\\' ? (text[++j] as string) : text[j];
      assert.ok(j < text.length, `unterminated " in ${source}`);
      word = (word ?? '') + part;
      i = j;
    } else word = (word ?? '') + c;
  }
  if (word !== null) words.push(word);
  return words;
}

function parseCurl(source: string): Curl {
  const words = shellWords(source);
  assert.equal(words[0], 'curl', `a curl command: ${source}`);
  let method = 'GET';
  let url: string | null = null;
  const headers: Record<string, string> = {};
  let body: string | undefined;
  for (let i = 1; i < words.length; i++) {
    const w = words[i] as string;
    if (w === '-X' || w === '--request') method = words[++i] as string;
    else if (w === '-H' || w === '--header') {
      const [name, ...value] = (words[++i] as string).split(':');
      headers[(name as string).trim().toLowerCase()] = value.join(':').trim();
    } else if (w === '--data' || w === '-d' || w === '--data-raw') body = words[++i];
    else if (w === '-o' || w === '--output' || w === '--max-time') i++;
    else if (['--include', '-i', '--no-buffer', '-N', '-s', '--silent', '--fail'].includes(w)) continue;
    else {
      assert.ok(!w.startsWith('-'), `an option the test knows: ${w}`);
      assert.equal(url, null, `one URL: ${source}`);
      url = w;
    }
  }
  assert.ok(url?.startsWith(URL_PREFIX), `the URL starts with ${URL_PREFIX}: ${url}`);
  const [path, search = ''] = (url as string).slice(URL_PREFIX.length).split('?') as [string, string?];
  const query = Object.fromEntries(new URLSearchParams(search));
  return { method, path, pathParams: {}, query, headers, body: body === undefined ? undefined : JSON.parse(body) };
}

const samplesOf = (op: SpecOperation) => docOf(op)['x-codeSamples'] ?? [];
const curlCache = new Map<string, Curl>();
/** The operation's curl sample, parsed, with its path parameters. */
function curlOf(operationId: string): Curl {
  let curl = curlCache.get(operationId);
  if (!curl) {
    const op = operationById(operationId);
    const sample = samplesOf(op).find((s) => s.label === 'curl');
    assert.ok(sample, `${operationId}: a curl sample`);
    curl = parseCurl(sample.source);
    const names = [...op.path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] as string);
    const values = op.matcher.exec(curl.path)?.slice(1) ?? [];
    curl.pathParams = Object.fromEntries(names.map((n, i) => [n, decodeURIComponent(values[i] as string)]));
    curlCache.set(operationId, curl);
  }
  return curl;
}

test('every operation has a curl sample that is a valid request of it', () => {
  for (const op of operations) {
    const samples = samplesOf(op);
    assert.equal(samples[0]?.lang, 'Shell', `${op.operationId}: the curl sample comes first, as Shell`);
    const curl = curlOf(op.operationId);
    const at = `${op.operationId} curl`;
    assert.equal(curl.method, op.method, `${at}: method`);
    assert.equal(findOperation(curl.method, curl.path)?.operationId, op.operationId, `${at}: ${curl.method} ${curl.path} is this operation`);
    for (const param of op.parameters) {
      const value = param.in === 'path' ? curl.pathParams[param.name] : param.in === 'query' ? curl.query[param.name] : curl.headers[param.name.toLowerCase()];
      if (param.required) assert.ok(value !== undefined, `${at}: ${param.in} parameter ${param.name} is given`);
      if (value === undefined) continue;
      const typed = (param.schema as { type?: string }).type === 'integer' ? Number(value) : value;
      assert.deepEqual(schemaErrors(param.schema, typed), [], `${at}: ${param.name}=${value}`);
    }
    for (const name of Object.keys(curl.query))
      assert.ok(
        op.parameters.some((p) => p.in === 'query' && p.name === name),
        `${at}: query parameter ${name} is declared`,
      );
    if (op.authenticated) assert.equal(curl.headers.authorization, 'Bearer $ORBIT_TOKEN', `${at}: the token`);
    else assert.equal(curl.headers.authorization, undefined, `${at}: no credential needed`);
    if (op.requestSchema === null) assert.equal(curl.body, undefined, `${at}: no body`);
    else {
      assert.equal(curl.headers['content-type'], 'application/json', `${at}: Content-Type`);
      const verdict = bodyVerdict(op.operationId, curl.body);
      assert.ok(verdict.valid && (verdict.items ?? []).every((v) => v.valid), `${at}: the body is valid: ${JSON.stringify(verdict)}`);
      assert.ok(
        requestExamples(op.operationId).some((example) => isDeepStrictEqual(example, curl.body)),
        `${at}: the body is one of the request examples (one story)`,
      );
    }
  }
});

// ---------------------------------------------------------------------------------------------
// The SDK samples

const PLACEHOLDERS = new WeakSet<object>();
/** A stand-in for any name a sample uses (a variable, `current.revision`): any property of it is one too. */
function placeholder(): unknown {
  const value: unknown = new Proxy(() => undefined, {
    get: (_target, key) => (key === Symbol.toPrimitive ? () => 'placeholder' : key === 'then' ? undefined : value),
    apply: () => value,
  });
  PLACEHOLDERS.add(value as object);
  return value;
}
const hasPlaceholder = (v: unknown): boolean =>
  (typeof v === 'function' || (typeof v === 'object' && v !== null)) && (PLACEHOLDERS.has(v as object) || Object.values(v as object).some(hasPlaceholder));

/** The text of the first argument of the call that starts at `from` (just after its `(`). */
function argumentText(source: string, from: number): string {
  let depth = 0;
  for (let i = from; i < source.length; i++) {
    const c = source[i] as string;
    if (c === '/' && source[i + 1] === '/') i = source.indexOf('\n', i);
    else if (c === '/' && source[i + 1] === '*') i = source.indexOf('*/', i) + 1;
    else if (c === "'" || c === '`' || c === '"') {
      for (i++; i < source.length && source[i] !== c; i++) if (source[i] === '\\') i++;
    } else if ('([{'.includes(c)) depth++;
    else if (')]}'.includes(c)) {
      if (depth === 0) return source.slice(from, i);
      depth--;
    }
  }
  assert.fail(`unbalanced call in ${source}`);
}

/** The value of a sample's argument: a literal object whose names of the sample's own variables are placeholders. */
function evaluateArgument(text: string): Record<string, unknown> {
  if (text.trim() === '') return {};
  const scope = new Proxy({}, { has: () => true, get: (_t, key) => (key === Symbol.unscopables ? undefined : placeholder()) });
  // TypeScript to JavaScript (`token!`, type annotations), then sloppy-mode `with`: every free
  // name of the literal resolves through the scope.
  const js = ts.transpileModule(`(${text});`, { compilerOptions: { target: ts.ScriptTarget.ES2022 } }).outputText.replace(/;\s*$/, '');
  const value = new Function('scope', `with (scope) { return ${js}; }`)(scope) as unknown;
  assert.ok(isObject(value as Json), `one object argument: ${text}`);
  return value as Record<string, unknown>;
}

test('every operation but the system ones has a TypeScript SDK sample calling its method with one object named as in the spec', () => {
  for (const op of operations) {
    const sample = samplesOf(op).find((s) => s.label === 'TypeScript SDK');
    if (isSystem(op)) {
      assert.equal(sample, undefined, `${op.operationId}: a system operation has a curl sample only`);
      continue;
    }
    assert.ok(sample, `${op.operationId}: an SDK sample`);
    assert.equal(sample.lang, 'JavaScript', `${op.operationId}: highlighted as JavaScript (Redoc has no TypeScript grammar)`);
    const at = `${op.operationId} SDK sample`;
    if (op.operationId === 'connectWorker') {
      assert.match(sample.source, /import \{ OrbitWorker \} from '@orbit-tasks\/sdk\/worker';/, at);
      const call = sample.source.indexOf('new OrbitWorker(');
      assert.ok(call >= 0, `${at}: new OrbitWorker(…)`);
      const options = evaluateArgument(argumentText(sample.source, call + 'new OrbitWorker('.length));
      assert.deepEqual(Object.keys(options).sort(), ['baseUrl', 'capacity', 'handler', 'node_id', 'queues', 'token'], at);
      continue;
    }
    assert.match(sample.source, /import \{ createOrbitClient \} from '@orbit-tasks\/sdk';/, at);
    assert.match(
      sample.source,
      /createOrbitClient\(\{\s*baseUrl: process\.env\.ORBIT_URL \?\? 'http:\/\/127\.0\.0\.1:8080',\s*token: process\.env\.ORBIT_TOKEN!/,
      at,
    );
    const call = sample.source.indexOf(`orbit.${op.operationId}(`);
    assert.ok(call >= 0, `${at}: calls orbit.${op.operationId}(…)`);
    const args = evaluateArgument(argumentText(sample.source, call + `orbit.${op.operationId}(`.length));
    const bodyProps = Object.keys((op.requestSchema?.properties ?? {}) as object);
    const keyHeader = op.parameters.find((p) => p.in === 'header' && p.name === 'Idempotency-Key');
    const named = new Map<string, unknown>([
      ...op.parameters.filter((p) => p.in !== 'header').map((p) => [p.name, p.schema] as [string, unknown]),
      ...bodyProps.map((p) => [p, null] as [string, unknown]),
      ...(keyHeader ? [['idempotency_key', keyHeader.schema] as [string, unknown]] : []),
    ]);
    for (const key of Object.keys(args)) assert.ok(named.has(key), `${at}: ${key} is a parameter or body field of ${op.operationId}`);
    const required = [
      ...op.parameters.filter((p) => p.required && p.in !== 'header').map((p) => p.name),
      ...((op.requestSchema?.required ?? []) as string[]),
      ...(keyHeader?.required ? ['idempotency_key'] : []),
    ];
    for (const key of required) assert.ok(key in args, `${at}: gives ${key}`);
    // Literal parameters are valid; a literal body is the curl sample's (the same story).
    for (const [key, schema] of named) {
      if (schema === null || !(key in args) || hasPlaceholder(args[key])) continue;
      assert.deepEqual(schemaErrors(schema, args[key]), [], `${at}: ${key}`);
      const curl = curlOf(op.operationId);
      const inCurl = key === 'idempotency_key' ? curl.headers['idempotency-key'] : key in curl.pathParams ? curl.pathParams[key] : curl.query[key];
      if (inCurl !== undefined) assert.equal(String(args[key]), inCurl, `${at}: ${key} as in the curl sample`);
    }
    if (op.requestSchema !== null) {
      const body = Object.fromEntries(bodyProps.filter((p) => p in args).map((p) => [p, args[p]]));
      const curlBody = curlOf(op.operationId).body as Record<string, unknown>;
      for (const [key, value] of Object.entries(body))
        if (!hasPlaceholder(value)) assert.deepEqual(value, curlBody[key], `${at}: body field ${key} as in the curl sample`);
      if (!hasPlaceholder(body)) assert.ok(bodyVerdict(op.operationId, body).valid, `${at}: the body is valid`);
    }
  }
});

test('every SDK sample type-checks against the SDK (sdk/index.ts, sdk/worker.ts)', () => {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const dir = mkdtempSync(join(tmpdir(), 'orbit-sdk-samples-'));
  try {
    // What a sample leaves to the reader's own code.
    const prelude =
      'declare function sendEmail(payload: unknown, options: { signal: AbortSignal }): Promise<string>;\ndeclare function markSent(id: unknown): Promise<void>;\n';
    const files: string[] = [];
    for (const op of operations) {
      const sample = samplesOf(op).find((s) => s.label === 'TypeScript SDK');
      if (!sample) continue;
      const file = join(dir, `${op.operationId}.ts`);
      writeFileSync(file, `${sample.source.replace(/^((?:import [^\n]*\n)+)/, `$1${prelude}`)}\nexport {};\n`);
      files.push(file);
    }
    writeFileSync(join(dir, 'package.json'), '{"type": "module"}');
    assert.ok(files.length >= 30, `SDK samples: ${files.length}`);
    const program = ts.createProgram(files, {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      lib: ['lib.es2023.d.ts', 'lib.dom.d.ts'],
      types: ['node'],
      typeRoots: [join(root, 'node_modules/@types')],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      allowImportingTsExtensions: true,
      paths: { '@orbit-tasks/sdk': [join(root, 'sdk/index.ts')], '@orbit-tasks/sdk/worker': [join(root, 'sdk/worker.ts')] },
    });
    const problems = ts
      .getPreEmitDiagnostics(program)
      .map((d) => `${d.file ? d.file.fileName.slice(dir.length + 1) : ''}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`);
    assert.deepEqual(problems, [], 'the SDK samples compile against the SDK as it is');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
