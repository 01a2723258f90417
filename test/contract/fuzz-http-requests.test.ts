/**
 * Property-based fuzzing of everything around the body (fast-check, fixed seed; ORBIT_FUZZ_SEED
 * replays another): path parameters, query strings, headers and methods. For EVERY generated
 * request: never a 5xx; a refusal is the error envelope with the same id in X-Request-Id; a 400
 * names the offending parameter with its location; a refused request changes nothing
 * (CHECKSUM TABLE and row counts of every orbit_ table before and after).
 *
 *   paths    random strings percent-encoded, fully encoded and raw; malformed escapes (`%zz`,
 *            `%E0%A4%A`, overlong and surrogate UTF-8); double encoding (`%2561` is the text
 *            `%61`, never `a`); on GET and POST routes and the colon custom methods; the
 *            real task, schedule and subscription ids are among the values (each is 404 on
 *            the others' routes), and a POST's body is refused, so nothing - a schedule's or a
 *            subscription's state, a subscription's position neither - is ever changed
 *   query    unknown and repeated parameters, encoded names, bad escapes, huge values, crafted
 *            cursors, `limit` and `wait_seconds` in and out of range, on every GET (with and
 *            without declared parameters); the targets answer at once whatever `wait_seconds`
 *            says (a CANCELLED task, a subscription with events to read), and each request is
 *            cut off after 5 s, so none waits for long: one that took more than 2.5 s fails
 *   headers  Authorization (garbage, valid-looking tokens, wrong secrets, very long, scheme
 *            case and spacing), Content-Type variants, Idempotency-Key of 0..200 characters
 *            with control and non-ASCII characters, X-Request-Id input (never echoed)
 *   methods  every method a known path does not serve is 405 METHOD_NOT_ALLOWED with `Allow`;
 *            unknown paths are 404 NOT_FOUND
 *
 * The file ends by checking every counter against a recount.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { testApp, type TestResponse } from '../helpers/app.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import {
  FUZZ_SEED,
  LogCapture,
  assertNever5xx,
  assertRefused,
  dbFingerprint,
  fieldNames,
  nastyString,
  runProperty,
  sendRaw,
  summarize,
} from '../helpers/fuzz-common.ts';
import { bodyVerdict, parameterVerdict } from '../helpers/fuzz-spec.ts';
import { findOperation, operations, type SpecOperation } from './spec-validator.ts';
import { ALL_ACTIONS } from '../../server/domain/actions.ts';

const QUEUES = ['fuzz', 'a', 'q.x', 'q-1', '0'];
const HEX = /^[0-9a-f]{32}$/;

/** Invalid on purpose for each POST route, so a path that passes ends in a body 400 and nothing is written. */
const REFUSED_BODY: Record<string, string> = {
  submitTask: '{"payload":{},"priority":99}',
  // An empty batch is refused as a whole (an invalid item would only be refused in its result, with 200).
  submitTasks: '{"tasks":[]}',
  configureQueue: '{"expected_revision":"0"}',
  cancelTask: '{"reason":""}',
  retryTask: '{"reason":""}',
  resolveTask: '{"outcome":"nope","reason":"x"}',
  createQueue: '{"name":"BAD NAME","reason":"x"}',
  configureApplicationResources: '{"expected_revision":"0"}',
  configureNamespaceResources: '{"expected_revision":"0"}',
  configureRetention: '{"expected_revision":"0"}',
  createSchedule: '{"name":"BAD NAME","reason":"x","payload":{},"interval_seconds":86400}',
  // Refused before the handler, so the schedule's state never flips (whatever the path fuzzing sends).
  pauseSchedule: '{"reason":""}',
  resumeSchedule: '{"reason":""}',
  createSubscription: '{"name":"BAD NAME","reason":"x"}',
  // Likewise: the subscription's state and position never change.
  pauseSubscription: '{"reason":""}',
  resumeSubscription: '{"reason":""}',
  ackSubscription: '{"sequence":"-1"}',
};

const paramOperations = operations.filter((op) => op.parameters.some((p) => p.in === 'path'));
const paramOperationIds = paramOperations.map((op) => op.operationId);
const opById = (id: string) => operations.find((op) => op.operationId === id) as SpecOperation;
const specPaths = [...new Set(operations.map((op) => op.path))];

/** The methods the spec serves at a concrete path (every template matching it; `{x}` is one segment). */
function specMethodsAt(path: string): string[] {
  return [...new Set(operations.filter((op) => op.matcher.test(path)).map((op) => op.method))].sort();
}

/** No unpaired surrogates (encodeURIComponent throws on them; the malformed-escape property covers invalid UTF-8). */
const wellFormed = (s: string) => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, 'x');

/** Every UTF-8 byte as %XX, with random hex case. */
function encodeAll(s: string, upper: boolean[]): string {
  return [...Buffer.from(s, 'utf8')]
    .map((b, i) => `%${upper[i % Math.max(1, upper.length)] ? b.toString(16).toUpperCase().padStart(2, '0') : b.toString(16).padStart(2, '0')}`)
    .join('');
}

/** Usable unencoded in a path segment: the URL parser keeps it a single segment and its decoding is the text itself. */
const rawSafe = (s: string) => s.length > 0 && s !== '.' && s !== '..' && !/[/?#%\\\u0000-\u0020\u007f]/.test(s) && wellFormed(s) === s;

describe(`fuzz: HTTP paths, query strings, headers and methods (ORBIT_FUZZ_SEED=${FUZZ_SEED})`, () => {
  let t: TestDatabase;
  let api: Awaited<ReturnType<typeof testApp>>;
  let tenant: TestTenant;
  let token: string;
  /** A CANCELLED task of queue `fuzz` (getTask answers at once, whatever wait_seconds says). */
  let taskId: string;
  /** A schedule of queue `fuzz` (daily, from 2099: it never fires). */
  let scheduleId: string;
  /** A subscription read from the beginning (a read answers at once, with events, whatever wait_seconds says). */
  let subscriptionId: string;
  const log = new LogCapture();
  let keyCounter = 0;
  const freshKey = () => `fz-${++keyCounter}-${randomBytes(3).toString('hex')}`;

  before(async () => {
    t = await freshDatabase('fuzzrequests');
    api = await testApp(t.db);
    api.deps.log = log.logger;
    tenant = await createTenant(t.db, { namespace: 'fuzz-requests', queues: QUEUES, resourceAccess: true });
    token = await createCredential(t.db, tenant, [...ALL_ACTIONS], ['*']);
    const submitted = await api.request('POST', '/v1/queues/fuzz/tasks', { token, key: freshKey(), body: { payload: { n: 1 } } });
    assert.equal(submitted.status, 200, submitted.text);
    taskId = submitted.body.data.task.task_id;
    const cancelled = await api.request('POST', `/v1/tasks/${taskId}:cancel`, { token, key: freshKey(), body: { reason: 'fuzz target: settled' } });
    assert.equal(cancelled.status, 200, cancelled.text);
    const schedule = await api.request('POST', '/v1/queues/fuzz/schedules', {
      token,
      key: freshKey(),
      body: { name: 'fz-daily', reason: 'fuzz target', interval_seconds: 86400, start_at: '2099-01-01T00:00:00Z', payload: { n: 1 } },
    });
    assert.equal(schedule.status, 200, schedule.text);
    scheduleId = schedule.body.data.schedule.schedule_id;
    const subscription = await api.request('POST', '/v1/subscriptions', {
      token,
      key: freshKey(),
      body: { name: 'fz-feed', reason: 'fuzz target', from: 'beginning' },
    });
    assert.equal(subscription.status, 200, subscription.text);
    subscriptionId = subscription.body.data.subscription.subscription_id;
  });

  /** 'TASK', 'SCHEDULE' and 'SUBSCRIPTION' stand for the real task, schedule and subscription; anything else is itself. */
  const realValue = (name: string) => (name === 'TASK' ? taskId : name === 'SCHEDULE' ? scheduleId : name === 'SUBSCRIPTION' ? subscriptionId : name);
  /** Every concrete path of a template, its parameters filled with real values (`fuzz`, the task, the schedule) or with `param`. */
  const fill = (template: string, param?: string) =>
    template
      .replace('{queue}', param ?? 'fuzz')
      .replace('{namespace}', param ?? tenant.namespace)
      .replace('{task_id}', param ?? taskId)
      .replace('{schedule_id}', param ?? scheduleId)
      .replace('{subscription_id}', param ?? subscriptionId);

  after(async () => {
    if (!t) return;
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  /**
   * One request: never 5xx; a refusal is the envelope and changes nothing; an operation that may
   * wait answers at once (its targets here are settled or have events to read): within 10 s,
   * generous for a loaded machine, where a request that waits is cut off after 20 s (it then
   * answers at once) - so a wait of 10 s or more asked for and taken fails, and no run waits longer.
   */
  async function exchange(where: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<TestResponse> {
    const before = await dbFingerprint(t.db);
    log.clear();
    let response: TestResponse;
    const started = Date.now();
    try {
      response = await sendRaw(api.app, method, path, headers, body, AbortSignal.timeout(20_000));
    } catch (error) {
      assert.fail(`${where}: the request could not be made (${(error as Error).message}); the generator produced something fetch refuses`);
    }
    const ms = Date.now() - started;
    assertNever5xx(response, where, log);
    if (findOperation(method, path)?.parameters.some((p) => p.name === 'wait_seconds'))
      assert.ok(
        ms < 10_000,
        `${where}: answered ${response.status} after ${ms} ms; nothing here should wait (a settled task, a subscription with events to read)`,
      );
    if (response.status >= 400) {
      assertRefused(response, where, {}, log);
      assert.deepEqual(
        await dbFingerprint(t.db),
        before,
        `${where}: a refused request (${response.status} ${response.body?.error?.code}) changed the database`,
      );
    }
    return response;
  }

  const authorized = (extra: Record<string, string> = {}) => ({ Authorization: `Bearer ${token}`, ...extra });
  const postHeaders = (): Record<string, string> => authorized({ 'Content-Type': 'application/json', 'Idempotency-Key': freshKey() });

  /** The request for an operation with its one path parameter set to `encoded` (already in path form). */
  function requestFor(op: SpecOperation, encoded: string): { path: string; headers: Record<string, string>; body?: string } {
    const name = op.parameters.find((p) => p.in === 'path')?.name as string;
    const path = op.path.replace(`{${name}}`, encoded);
    if (op.method === 'POST') {
      const body = REFUSED_BODY[op.operationId];
      assert.ok(body !== undefined, `no REFUSED_BODY for ${op.operationId}: add one`);
      // Only operations that declare it get an Idempotency-Key (a bulk submit has none: each item carries its key).
      const headers = postHeaders();
      if (!op.parameters.some((p) => p.in === 'header' && p.name === 'Idempotency-Key')) delete headers['Idempotency-Key'];
      return { path, headers, body };
    }
    return { path, headers: authorized() };
  }

  /** What a request whose path parameter decodes (exactly once) to `value` must get. */
  function expectForValue(where: string, op: SpecOperation, value: string, response: TestResponse): void {
    const name = op.parameters.find((p) => p.in === 'path')?.name as string;
    if (!parameterVerdict(op.operationId, name, value)) {
      assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: name, location: 'path' }, log);
      return;
    }
    if (op.method === 'POST') {
      assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', location: 'body' }, log);
      return;
    }
    const real: Record<string, () => boolean> = {
      queue: () => QUEUES.includes(value),
      task_id: () => value === taskId,
      schedule_id: () => value === scheduleId,
      subscription_id: () => value === subscriptionId,
    };
    assert.ok(real[name], `${op.operationId}: no model of which ${name} exists; add it here`);
    if (!real[name]()) {
      assertRefused(response, where, { status: 404, code: 'NOT_FOUND' }, log);
      return;
    }
    assert.equal(response.status, 200, `${where}: ${response.text.slice(0, 300)}`);
    if (op.operationId === 'getQueue') assert.equal(response.body.data.queue, value, `${where}: answered for another queue`);
    if (op.operationId === 'getTask') assert.equal(response.body.data.task_id, value, `${where}: answered for another task`);
    if (op.operationId === 'getSchedule') assert.equal(response.body.data.schedule_id, value, `${where}: answered for another schedule`);
    if (op.operationId === 'getSubscription') assert.equal(response.body.data.subscription_id, value, `${where}: answered for another subscription`);
    if (op.operationId === 'readSubscription')
      assert.ok(response.body.data.events.length > 0, `${where}: a subscription from the beginning has events to read`);
    if (op.operationId === 'listSchedules') {
      const queues = (response.body.data.schedules as Array<{ queue: string }>).map((x) => x.queue);
      assert.deepEqual(
        queues,
        queues.map(() => value),
        `${where}: schedules of another queue`,
      );
      assert.equal(queues.length, value === 'fuzz' ? 1 : 0, `${where}: the schedules of the queue`);
    }
  }

  test('every operation with a body has a REFUSED_BODY here, and openapi.yaml refuses each as a whole', () => {
    const withBody = operations.filter((op) => op.requestSchema !== null).map((op) => op.operationId);
    assert.deepEqual(Object.keys(REFUSED_BODY).sort(), [...withBody].sort());
    for (const id of withBody)
      assert.equal(bodyVerdict(id, JSON.parse(REFUSED_BODY[id] as string)).valid, false, `${id}: its REFUSED_BODY is valid per openapi.yaml`);
  });

  // -------------------------------------------------------------------------------------------
  // Path parameters
  // -------------------------------------------------------------------------------------------

  const parameterValue = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...QUEUES) },
    { weight: 2, arbitrary: fc.constant('TASK') },
    { weight: 2, arbitrary: fc.constant('SCHEDULE') },
    { weight: 2, arbitrary: fc.constant('SUBSCRIPTION') },
    { weight: 3, arbitrary: nastyString(40) },
    { weight: 2, arbitrary: fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,62}$/) },
    { weight: 2, arbitrary: fc.stringMatching(/^[0-9a-fA-F]{30,34}$/) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        'a:configure',
        'fuzz:cancel',
        'fuzz/tasks',
        'FUZZ',
        'fuzz ',
        ' fuzz',
        'fuzz\u0000',
        'ｆｕｚｚ',
        'fuzz%',
        '%61',
        'a'.repeat(64),
        'a'.repeat(5000),
        'é',
        '😀',
        '..',
        '.',
        '',
      ),
    },
  );

  test('path parameters: random strings percent-encoded, fully encoded or raw decode exactly once; invalid ones are 400 naming the parameter (location path)', async () => {
    await runProperty(
      'path parameters decoded once',
      fc.record({
        op: fc.constantFrom(...paramOperationIds),
        raw: parameterValue,
        mode: fc.constantFrom('component', 'all', 'raw'),
        upper: fc.array(fc.boolean(), { minLength: 1, maxLength: 8 }),
      }),
      async ({ op: id, raw, mode, upper }) => {
        const op = opById(id);
        let value = wellFormed(realValue(raw));
        if (value === '' || value === '.' || value === '..') value = `${value}x`;
        const effective = mode === 'raw' && !rawSafe(value) ? 'component' : mode;
        const encoded = effective === 'raw' ? value : effective === 'all' ? encodeAll(value, upper) : encodeURIComponent(value);
        const { path, headers, body } = requestFor(op, encoded);
        const where = `${op.method} ${summarize(path, 200)} (${op.operationId}, ${effective}, value ${summarize(value, 80)})`;
        const response = await exchange(where, op.method, path, headers, body);
        expectForValue(where, op, value, response);
      },
      { numRuns: 500 },
    );
  });

  test('path parameters: double and triple encoding is decoded once (`%2561` is the text `%61`, never `a`)', async () => {
    await runProperty(
      'no double decoding of path parameters',
      fc.record({
        op: fc.constantFrom(...paramOperationIds),
        name: fc.constantFrom(...QUEUES, 'TASK', 'SCHEDULE', 'SUBSCRIPTION'),
        at: fc.nat(),
        times: fc.integer({ min: 2, max: 3 }),
        upper: fc.boolean(),
      }),
      async ({ op: id, name, at, times, upper }) => {
        const op = opById(id);
        const value = realValue(name);
        const i = at % value.length;
        let percent = `%${value.charCodeAt(i).toString(16).padStart(2, '0')}`;
        if (upper) percent = percent.toUpperCase();
        for (let k = 1; k < times; k++) percent = percent.replace(/%/g, '%25');
        const encoded = value.slice(0, i) + percent + value.slice(i + 1);
        const { path, headers, body } = requestFor(op, encoded);
        const decodedOnce = decodeURIComponent(encoded);
        const where = `${op.method} ${path} (${op.operationId}: decodes once to ${JSON.stringify(decodedOnce)})`;
        const response = await exchange(where, op.method, path, headers, body);
        expectForValue(where, op, decodedOnce, response);
      },
      { numRuns: 200 },
    );
  });

  test('path parameters: malformed escapes and invalid UTF-8 are 400 INVALID_ARGUMENT naming the parameter, on GET, POST and the colon methods', async () => {
    const malformed = fc.constantFrom(
      '%zz',
      '%E0%A4%A',
      '%25zz',
      '%',
      '%a',
      '%G0',
      '%C0%AF',
      '%ED%A0%80',
      '%F4%90%80%80',
      '%FF',
      '%80',
      '%E0%A4',
      '%F0%9F%98',
      '%%',
      '%0',
      '%u0061',
    );
    await runProperty(
      'malformed percent escapes in path parameters',
      fc.record({
        op: fc.constantFrom(...paramOperationIds),
        name: fc.constantFrom(...QUEUES, 'TASK', 'SCHEDULE', 'SUBSCRIPTION'),
        bad: malformed,
        at: fc.nat(),
      }),
      async ({ op: id, name, bad, at }) => {
        const op = opById(id);
        const value = realValue(name);
        const i = at % (value.length + 1);
        const encoded = value.slice(0, i) + bad + value.slice(i);
        const { path, headers, body } = requestFor(op, encoded);
        const where = `${op.method} ${path} (${op.operationId})`;
        const response = await exchange(where, op.method, path, headers, body);
        let decoded: string | null;
        try {
          decoded = decodeURIComponent(encoded);
        } catch {
          decoded = null;
        }
        if (decoded === null) {
          const param = op.parameters.find((p) => p.in === 'path')?.name as string;
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: param, location: 'path' }, log);
        } else expectForValue(where, op, decoded, response);
      },
      { numRuns: 250 },
    );
  });

  test('malformed escapes outside parameters (in literal segments) are a clean 404 or the route, never 5xx', async () => {
    await runProperty(
      'malformed escapes in literal path segments',
      fc.record({
        path: fc.constantFrom(...specPaths),
        bad: fc.constantFrom('%zz', '%E0%A4%A', '%', '%C0%AF', '%2F', '%2f', '%00', '%2e'),
        at: fc.nat(),
        method: fc.constantFrom('GET', 'POST'),
      }),
      async ({ path: template, bad, at, method }) => {
        const concrete = fill(template);
        const i = 1 + (at % (concrete.length - 1));
        const path = concrete.slice(0, i) + bad + concrete.slice(i);
        const headers = method === 'POST' ? postHeaders() : authorized();
        await exchange(`${method} ${path}`, method, path, headers, method === 'POST' ? '{}' : undefined);
      },
      { numRuns: 120 },
    );
  });

  // -------------------------------------------------------------------------------------------
  // Query strings
  // -------------------------------------------------------------------------------------------

  /** A query parameter's name as `details.field` may spell it (plain, or as a quoted index when it is not a plain name). */
  const queryFieldNames = (name: string) => [...new Set([...fieldNames([name], 'query'), ...fieldNames([name], '')])];

  const getOperations = operations.filter((op) => op.method === 'GET' && !op.raw);

  /** Whether the server's reading of a declared query parameter (integers converted when they look like one) is valid per the spec. */
  function queryValueValid(op: SpecOperation, name: string, value: string): boolean | 'maybe' {
    const param = op.parameters.find((p) => p.in === 'query' && p.name === name);
    if (!param) return false;
    const typed = param.schema.type === 'integer' && /^-?(0|[1-9]\d{0,14})$/.test(value) ? Number(value) : value;
    if (!parameterVerdict(op.operationId, name, typed)) return false;
    // A cursor that matches its pattern may still not be one this operation returned.
    return name === 'cursor' ? 'maybe' : true;
  }

  const queryName = (op: SpecOperation) => {
    const declared = op.parameters.filter((p) => p.in === 'query').map((p) => p.name);
    return fc.oneof(
      { weight: 4, arbitrary: declared.length > 0 ? fc.constantFrom(...declared) : fc.constant('limit') },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          'LIMIT',
          'Limit',
          'cursor ',
          'state[]',
          'after',
          'verbose',
          'limit\u0000',
          'li%6Dit',
          '%zz',
          '',
          'a'.repeat(3000),
          'wait_seconds',
          'WAIT_SECONDS',
          'wait-seconds',
          'wait_seconds ',
          'wait',
        ),
      },
      { weight: 1, arbitrary: nastyString(12) },
    );
  };
  const queryValue = fc.oneof(
    fc.constantFrom(
      '1',
      '50',
      '100',
      '0',
      '101',
      '-1',
      '29',
      '30',
      '31',
      '-0',
      '1.0',
      '01',
      '+5',
      ' 5',
      '5 ',
      '1e1',
      '5.0',
      '0x10',
      '99999999999999999999',
      'WAITING',
      'waiting',
      'DONE',
      'RUNNING',
      '18446744073709551615',
      '18446744073709551616',
      '',
    ),
    fc.constantFrom('%zz', '%E0%A4%A', '%25', '%ED%A0%80', 'a%00b', '%2B5', 'WAIT%49NG'),
    fc.stringMatching(/^[A-Za-z0-9_-]{1,40}$/),
    fc.string({ maxLength: 40 }).map((s) => Buffer.from(JSON.stringify([s])).toString('base64url')),
    fc.constant(Buffer.from(JSON.stringify(['0'.repeat(32)])).toString('base64url')),
    nastyString(40),
    fc.integer({ min: 5000, max: 60_000 }).map((n) => '9'.repeat(n)),
  );

  test('query strings: unknown and repeated parameters, bad encodings, huge values - 400 naming the parameter (location query), else 200', async () => {
    const arbitrary = fc.constantFrom(...getOperations).chain((op) =>
      fc.record({
        op: fc.constant(op.operationId),
        pairs: fc.array(fc.record({ name: queryName(op), value: queryValue, encode: fc.constantFrom('component', 'raw') }), { minLength: 1, maxLength: 4 }),
      }),
    );
    await runProperty(
      'query strings',
      arbitrary,
      async ({ op: id, pairs }) => {
        const op = opById(id);
        const enc = (s: string, mode: string) => (mode === 'raw' ? s.replace(/[&#=+]/g, (c) => encodeURIComponent(c)) : encodeURIComponent(wellFormed(s)));
        const query = pairs.map((p) => `${enc(p.name, p.encode)}=${enc(p.value, p.encode)}`).join('&');
        const base = fill(op.path);
        const path = `${base}?${query}`;
        const where = `GET ${summarize(path, 300)} (${op.operationId})`;
        const response = await exchange(where, 'GET', path, authorized());
        // The server reads the query as the URL parser does; so does this model.
        const params = new URL(path, 'http://orbit.test').searchParams;
        const names = [...new Set(params.keys())];
        for (const name of names) {
          const declared = op.parameters.some((p) => p.in === 'query' && p.name === name);
          if (!declared || params.getAll(name).length > 1) {
            assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: queryFieldNames(name), location: 'query' }, log);
            return;
          }
        }
        const verdicts = names.map((name) => [name, queryValueValid(op, name, params.get(name) as string)] as const);
        const invalid = verdicts.filter(([, v]) => v === false).map(([n]) => n);
        const maybe = verdicts.filter(([, v]) => v === 'maybe').map(([n]) => n);
        if (invalid.length > 0) {
          assertRefused(
            response,
            where,
            { status: 400, code: 'INVALID_ARGUMENT', field: [...invalid, ...maybe].flatMap(queryFieldNames), location: 'query' },
            log,
          );
        } else if (maybe.length > 0 && response.status !== 200) {
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: maybe, location: 'query' }, log);
        } else {
          assert.equal(response.status, 200, `${where}: every parameter is valid, got ${response.status}: ${response.text.slice(0, 300)}`);
          if (op.operationId === 'readSubscription') {
            const events = response.body.data.events as unknown[];
            const limit = Number(params.get('limit') ?? 50);
            assert.ok(events.length >= 1 && events.length <= limit, `${where}: ${events.length} events for limit ${limit} (there are events to read)`);
          }
        }
      },
      { numRuns: 500 },
    );
  });

  test('wait_seconds (0-30) and limit (1-100) of the operations that may wait: 400 naming the parameter, else 200 at once from a settled task or a subscription with events', async () => {
    const integerText = fc.oneof(
      { weight: 4, arbitrary: fc.integer({ min: -3, max: 33 }).map(String) },
      { weight: 2, arbitrary: fc.integer({ min: -2, max: 103 }).map(String) },
      {
        weight: 2,
        arbitrary: fc.constantFrom(
          '',
          '030',
          '01',
          '+1',
          ' 1',
          '1 ',
          '1e1',
          '1.0',
          '1.5',
          '0x1',
          'abc',
          '١',
          '99999999999999999999',
          '-0',
          '%31',
          'null',
          'true',
        ),
      },
    );
    const outcomes = new Map<string, number>();
    const tally = (outcome: string) => outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    await runProperty(
      'wait_seconds and limit',
      fc.record({
        op: fc.constantFrom('getTask', 'readSubscription'),
        wait: fc.option(integerText, { nil: undefined, freq: 5 }),
        limit: fc.option(integerText, { nil: undefined, freq: 2 }),
        repeat: fc.constantFrom(null, null, null, null, 'wait_seconds', 'limit'),
        order: fc.boolean(),
      }),
      async ({ op: id, wait, limit, repeat, order }) => {
        const op = opById(id);
        const pairs: Array<[string, string]> = [];
        if (wait !== undefined) pairs.push(['wait_seconds', wait]);
        if (limit !== undefined) pairs.push(['limit', limit]);
        if (repeat !== null) pairs.push([repeat, (repeat === 'limit' ? limit : wait) ?? '1']);
        if (order) pairs.reverse();
        const query = pairs.map(([name, value]) => `${name}=${encodeURIComponent(value)}`).join('&');
        const path = `${fill(op.path)}${query ? `?${query}` : ''}`;
        const where = `GET ${path} (${op.operationId})`;
        const response = await exchange(where, 'GET', path, authorized());
        const params = new URL(path, 'http://orbit.test').searchParams;
        const names = [...new Set(params.keys())];
        const undeclared = names.filter((name) => !op.parameters.some((p) => p.in === 'query' && p.name === name));
        const repeated = names.filter((name) => params.getAll(name).length > 1);
        const invalid = names.filter((name) => queryValueValid(op, name, params.get(name) as string) === false);
        const refused = [...undeclared, ...repeated, ...invalid];
        if (refused.length > 0) {
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: refused, location: 'query' }, log);
          tally(`${id} 400 ${response.body.error.details.field}`);
          return;
        }
        assert.equal(response.status, 200, `${where}: every parameter is valid, got ${response.status}: ${response.text.slice(0, 300)}`);
        tally(`${id} 200${params.has('wait_seconds') && params.get('wait_seconds') !== '0' ? ' waiting' : ''}`);
        if (id === 'getTask') {
          assert.deepEqual([response.body.data.task_id, response.body.data.state], [taskId, 'CANCELLED'], where);
          return;
        }
        const [row] = await t.db.rows<{ n: number | string }>('SELECT COUNT(*) AS n FROM orbit_events WHERE namespace_id = UNHEX(?)', [tenant.namespaceId]);
        const expected = Math.min(Number(params.get('limit') ?? 50), Number(row?.n));
        assert.equal(response.body.data.events.length, expected, `${where}: the first ${expected} events after the beginning`);
      },
      { numRuns: 200 },
    );
    console.log(
      `# fuzz: wait_seconds and limit outcomes: ${[...outcomes]
        .sort()
        .map(([k, v]) => `${k} ×${v}`)
        .join(', ')}`,
    );
    for (const outcome of [
      'getTask 200 waiting',
      'getTask 400 wait_seconds',
      'readSubscription 200 waiting',
      'readSubscription 400 wait_seconds',
      'readSubscription 400 limit',
    ])
      assert.ok(outcomes.has(outcome), `no run met "${outcome}"`);
  });

  // -------------------------------------------------------------------------------------------
  // Headers
  // -------------------------------------------------------------------------------------------

  /** Latin-1 text without NUL, CR, LF: what a header value can carry. */
  const headerText = (maxLength: number) =>
    fc.string({
      maxLength,
      unit: fc
        .oneof(
          fc.integer({ min: 0x20, max: 0x7e }),
          fc.integer({ min: 0x01, max: 0xff }).filter((c) => c !== 0x0a && c !== 0x0d),
        )
        .map((c) => String.fromCharCode(c)),
    });

  test('Authorization: garbage, valid-looking tokens, wrong secrets, very long, scheme variants - 401 in the envelope unless it is exactly the credential', async () => {
    const secretLike = fc.stringMatching(/^[A-Za-z0-9_-]{43}$/);
    const idLike = fc.stringMatching(/^[0-9a-f]{32}$/);
    const tokenVariant = fc.oneof(
      fc.constant('REAL'),
      fc.constant('REAL'),
      fc.tuple(fc.nat(), fc.constantFrom('A', 'z', '_', '-', '0')).map(([at, c]) => `CHANGE:${at}:${c}`),
      fc.constantFrom('TRUNCATE', 'EXTRA', 'UPPER', 'SPLIT'),
      secretLike.map((s) => `OWN_ID:${s}`),
      fc.tuple(idLike, secretLike).map(([id, s]) => `orbit_${id}_${s}`),
      headerText(60),
      fc.integer({ min: 1000, max: 30_000 }).map((n) => `orbit_${'a'.repeat(n)}`),
    );
    const scheme = fc.constantFrom('Bearer', 'bearer', 'BEARER', 'Basic', 'Token', 'Bearer:', '', 'Bearerx');
    const separator = fc.constantFrom(' ', '  ', '\t', '', ' \t ');
    await runProperty(
      'Authorization header',
      fc.record({
        absent: fc.constantFrom(false, false, false, false, true),
        scheme,
        separator,
        token: tokenVariant,
        trailing: fc.constantFrom('', ' ', '\t', ' x'),
        write: fc.constantFrom(false, true, 'bulk' as const),
      }),
      async ({ absent, scheme: s, separator: sep, token: variant, trailing, write }) => {
        const [prefix, idHex, secret] = /^orbit_([0-9a-f]{32})_(.*)$/.exec(token) as unknown as [string, string, string];
        void prefix;
        let presented: string;
        if (variant === 'REAL') presented = token;
        else if (variant === 'TRUNCATE') presented = token.slice(0, -1);
        else if (variant === 'EXTRA') presented = `${token}A`;
        else if (variant === 'UPPER') presented = token.toUpperCase();
        else if (variant === 'SPLIT') presented = `${token.slice(0, 20)} ${token.slice(20)}`;
        else if (variant.startsWith('CHANGE:')) {
          const [, at, c] = variant.split(':') as [string, string, string];
          const i = `orbit_${idHex}_`.length + (Number(at) % secret.length);
          presented = token.slice(0, i) + (token[i] === c ? (c === 'A' ? 'B' : 'A') : c) + token.slice(i + 1);
        } else if (variant.startsWith('OWN_ID:')) presented = `orbit_${idHex}_${variant.slice(7)}`;
        else presented = variant;
        const header = `${s}${sep}${presented}${trailing}`;
        // Exactly the credential: the scheme in any case, spaces or tabs before it, optional whitespace after.
        const valid = !absent && /^bearer$/i.test(s) && sep.length > 0 && presented === token && /^[ \t]*$/.test(trailing);
        const where = `${absent ? 'no Authorization' : `Authorization ${summarize(header, 160)}`}${write === 'bulk' ? ' on submitTasks' : write ? ' on submitTask' : ' on getApplicationResources'}`;
        const headers: Record<string, string> = absent ? {} : { Authorization: header };
        const response =
          write === 'bulk'
            ? await exchange(
                where,
                'POST',
                '/v1/queues/fuzz/tasks:batch',
                { ...headers, 'Content-Type': 'application/json' },
                JSON.stringify({ tasks: [{ idempotency_key: freshKey(), payload: { auth: true } }] }),
              )
            : write
              ? await exchange(
                  where,
                  'POST',
                  '/v1/queues/fuzz/tasks',
                  { ...headers, 'Content-Type': 'application/json', 'Idempotency-Key': freshKey() },
                  '{"payload":{"auth":true}}',
                )
              : await exchange(where, 'GET', '/v1/application/resources', headers);
        if (valid) {
          assert.equal(response.status, 200, `${where}: the real credential was refused: ${response.text.slice(0, 300)}`);
          if (write === 'bulk') assert.equal(response.body.data.results[0].status, 'accepted', `${where}: ${response.text.slice(0, 300)}`);
        } else {
          assertRefused(response, where, { status: 401, code: 'UNAUTHENTICATED' }, log);
          assert.doesNotMatch(
            response.body.error.message,
            /revoked|expired|disabled/,
            `${where}: a 401 without the right secret must not say why the credential is not valid`,
          );
        }
      },
      { numRuns: 400 },
    );
  });

  test('Content-Type variants: application/json (any case, optional charset=utf-8) reaches the body check; anything else is 400 naming Content-Type', async () => {
    const type = fc.constantFrom('application', 'APPLICATION', 'Application', 'text', 'multipart', '');
    const subtype = fc.constantFrom('json', 'JSON', 'Json', 'jsonx', 'json-seq', 'x-www-form-urlencoded', 'vnd.api+json', 'problem+json', '*', 'plain', '');
    const parameter = fc.constantFrom(
      '',
      ';charset=utf-8',
      '; charset=utf-8',
      ' ; charset=UTF-8',
      '; CHARSET=utf-8',
      '; charset=latin1',
      '; charset=utf8',
      '; charset="utf-8"',
      '; foo=bar',
      '; charset=utf-8; foo=bar',
      ';',
      '; charset=utf-8,text/plain',
    );
    await runProperty(
      'Content-Type header',
      fc.record({ type, subtype, parameter, pad: fc.constantFrom('', ' ', '\t'), absent: fc.constantFrom(false, false, false, false, true) }),
      async ({ type: ty, subtype: sub, parameter: par, pad, absent }) => {
        const value = `${pad}${ty}/${sub}${par}${pad}`;
        const headers: Record<string, string> = { ...authorized(), 'Idempotency-Key': freshKey() };
        if (!absent) headers['Content-Type'] = value;
        const where = absent ? 'no Content-Type' : `Content-Type ${JSON.stringify(value)}`;
        const response = await exchange(where, 'POST', '/v1/queues', headers, REFUSED_BODY.createQueue);
        const json = /^application$/i.test(ty) && /^json$/i.test(sub);
        const accepted = !absent && json && /^(|\s*;\s*charset=utf-8)$/i.test(par);
        const ambiguous = !absent && json && /charset="utf-8"/i.test(par);
        if (accepted) assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: 'name', location: 'body' }, log);
        else if (ambiguous) assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: ['name', 'Content-Type'] }, log);
        else assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: 'Content-Type', location: 'header' }, log);
      },
      { numRuns: 250 },
    );
  });

  test('Idempotency-Key of 0..200 characters with spaces, control and non-ASCII characters: 1-128 of [!-~] or 400 naming the header', async () => {
    const unit = fc
      .oneof(
        { weight: 8, arbitrary: fc.integer({ min: 0x21, max: 0x7e }) },
        { weight: 1, arbitrary: fc.constantFrom(0x20, 0x09, 0x01, 0x1f, 0x7f, 0x0b, 0x0c) },
        { weight: 1, arbitrary: fc.integer({ min: 0x80, max: 0xff }) },
      )
      .map((c) => String.fromCharCode(c));
    const key = fc.oneof(
      fc.string({ unit, minLength: 0, maxLength: 200 }),
      fc.integer({ min: 120, max: 136 }).map((n) => 'k'.repeat(n)),
      fc.string({ maxLength: 20, unit: 'grapheme' }).map((s) => Buffer.from(s, 'utf8').toString('latin1')),
      fc.constantFrom('', ' ', 'k', ' k', 'k ', 'a b', 'clé', '\tk\t'),
    );
    await runProperty(
      'Idempotency-Key header',
      fc.record({ key, absent: fc.constantFrom(false, false, false, true) }),
      async ({ key: k, absent }) => {
        const headers: Record<string, string> = { ...authorized(), 'Content-Type': 'application/json' };
        if (!absent) headers['Idempotency-Key'] = k;
        const where = absent ? 'no Idempotency-Key' : `Idempotency-Key ${JSON.stringify(k).slice(0, 160)} (${k.length} characters)`;
        const response = await exchange(where, 'POST', '/v1/queues/fuzz/tasks', headers, REFUSED_BODY.submitTask);
        // What the server receives: header values lose leading and trailing spaces and tabs (fetch's normalisation).
        const received = k.replace(/^[ \t]+|[ \t]+$/g, '');
        const valid = !absent && /^[!-~]{1,128}$/.test(received);
        if (valid) assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: 'priority', location: 'body' }, log);
        else assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: 'Idempotency-Key', location: 'header' }, log);
      },
      { numRuns: 300 },
    );
  });

  test('X-Request-Id from the client is never echoed: every answer carries a fresh 32-hex id, the same in the body and the header', async () => {
    await runProperty(
      'X-Request-Id input',
      fc.record({
        input: fc.oneof(
          headerText(80),
          fc.stringMatching(/^[0-9a-f]{32}$/),
          fc.integer({ min: 100, max: 8000 }).map((n) => 'f'.repeat(n)),
        ),
        request: fc.constantFrom('ok', 'unauthenticated', 'invalid', 'not-found'),
      }),
      async ({ input, request }) => {
        const headers: Record<string, string> = { 'X-Request-Id': input };
        if (request !== 'unauthenticated') headers.Authorization = `Bearer ${token}`;
        const path = request === 'invalid' ? '/v1/queues?limit=0' : request === 'not-found' ? '/v1/queues/nope' : '/v1/queues';
        const where = `X-Request-Id ${JSON.stringify(input).slice(0, 100)} on ${request}`;
        const response = await exchange(where, 'GET', path, headers);
        assert.match(String(response.body?.request_id), HEX, `${where}: request_id`);
        assert.equal(response.headers.get('x-request-id'), response.body.request_id, `${where}: X-Request-Id must equal request_id`);
        assert.notEqual(response.body.request_id, input.trim(), `${where}: the client's X-Request-Id was echoed instead of a fresh id`);
      },
      { numRuns: 150 },
    );
  });

  // -------------------------------------------------------------------------------------------
  // Methods
  // -------------------------------------------------------------------------------------------

  const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'patch', 'FOO', 'PROPFIND'];

  test('a method a known path does not serve is 405 METHOD_NOT_ALLOWED with an Allow header listing the methods served, in the envelope', async () => {
    await runProperty(
      'wrong methods on known paths',
      fc.record({
        template: fc.constantFrom(...specPaths),
        method: fc.constantFrom(...METHODS),
        param: fc.oneof(
          fc.constantFrom('fuzz', 'TASK', 'SCHEDULE', 'SUBSCRIPTION', 'q.x'),
          nastyString(12).map((s) => encodeURIComponent(wellFormed(s)) || 'x'),
          fc.constantFrom('%zz', '%2561', 'a:b'),
        ),
      }),
      async ({ template, method, param }) => {
        const path = fill(template, realValue(param));
        const served = specMethodsAt(path);
        const upper = method.toUpperCase();
        const where = `${method} ${path} (served: ${served.join(', ')})`;
        const isServed = served.includes(upper) || (upper === 'HEAD' && served.includes('GET'));
        // The in-process app serves no worker sockets (its `workers` is null): only wrong methods are checked there.
        fc.pre(!(template === '/v1/workers/connect' && isServed));
        const headers = upper === 'GET' || upper === 'HEAD' ? authorized() : postHeaders();
        if (upper === 'HEAD') {
          // No body by definition: the status and the Allow header are what can be checked.
          const head = await sendRaw(api.app, method, path, headers);
          assertNever5xx(head, where, log);
          if (isServed) assert.notEqual(head.status, 405, `${where}: HEAD of a GET route was refused with 405`);
          else {
            assert.equal(head.status, 405, `${where}: expected 405`);
            assert.ok(head.headers.get('allow'), `${where}: 405 without Allow`);
          }
          return;
        }
        const response = await exchange(where, method, path, headers, upper === 'GET' ? undefined : '{}');
        if (isServed) {
          assert.notEqual(response.status, 405, `${where}: a method the path serves was refused with 405`);
          return;
        }
        if (upper === 'OPTIONS' && response.status < 300) {
          assert.ok(response.headers.get('allow'), `${where}: an OPTIONS answer without Allow`);
          return;
        }
        assertRefused(response, where, { status: 405, code: 'METHOD_NOT_ALLOWED' }, log);
        const allow = (response.headers.get('allow') ?? '')
          .split(',')
          .map((m) => m.trim())
          .filter(Boolean);
        assert.ok(allow.length > 0, `${where}: 405 without an Allow header`);
        for (const m of served) assert.ok(allow.includes(m), `${where}: Allow (${allow.join(', ')}) lacks ${m}`);
        assert.ok(!allow.includes(upper), `${where}: Allow lists the refused method`);
        const details = response.body.error.details as { allow?: string[] } | undefined;
        if (details?.allow !== undefined)
          assert.deepEqual([...details.allow].sort(), [...allow].sort(), `${where}: details.allow differs from the Allow header`);
      },
      { numRuns: 400 },
    );
  });

  test('an unknown path is 404 NOT_FOUND in the envelope, whatever the method', async () => {
    const segment = fc.stringMatching(/^[a-z0-9_-]{1,12}$/);
    await runProperty(
      'unknown paths',
      fc.record({
        segments: fc.array(segment, { minLength: 1, maxLength: 5 }),
        prefix: fc.constantFrom('/v1/', '/', '/v2/', '/v1/queues/fuzz/', '/v1/tasks/'),
        trailingSlash: fc.boolean(),
        method: fc.constantFrom('GET', 'POST', 'DELETE'),
      }),
      async ({ segments, prefix, trailingSlash, method }) => {
        const path = `${prefix}${segments.join('/')}${trailingSlash ? '/' : ''}`;
        fc.pre(specMethodsAt(path).length === 0);
        const where = `${method} ${path}`;
        const response = await exchange(where, method, path, method === 'GET' ? authorized() : postHeaders(), method === 'GET' ? undefined : '{}');
        assertRefused(response, where, { status: 404, code: 'NOT_FOUND' }, log);
      },
      { numRuns: 150 },
    );
  });
});
