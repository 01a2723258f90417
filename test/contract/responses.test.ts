/**
 * Contract: every HTTP operation of openapi.yaml, driven through realistic success and error
 * paths, and EVERY response body validated against the spec (the declared status, else
 * `default`). Also: `X-Request-Id` equals `request_id`, declared response headers are present
 * (`Retry-After: 1` on 429), and the set of operations exercised equals the spec's — a new
 * operation without contract coverage fails here, as does a declared status code never seen.
 *
 * The HTTP operations run through `app.request()` (test/helpers/app.ts); the WebSocket upgrade
 * (`connectWorker`, 101) needs a real socket, so a real server is started for it. A schedule's
 * task is made by one round of the real schedule loop, run here; every other schedule made in
 * this file starts in 2099 or an hour after its creation (or is paused), so the real server's
 * schedule loop finds nothing due.
 *
 * Requests that may wait (`getTask` and `readSubscription` with `wait_seconds`) go through
 * `timedGet`, which measures them and cuts them off after 25 s: they ask for 0 or 1 seconds, or
 * for 30 where the test checks that something answers them sooner (an event, a settled task,
 * events already there). The times they are held to are generous for a loaded machine, and
 * still far from the wait they would have taken: an answer "at once" within 10 s where a wait
 * would last until the cut-off, one woken by an event within 20 s where it asked for 30.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { testApp, type TestResponse } from '../helpers/app.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import WebSocket from 'ws';
import { connectRaw } from '../helpers/ws-session.ts';
import { waitFor } from '../helpers/wait.ts';
import { LogCapture, dbFingerprint } from '../helpers/fuzz-common.ts';
import { ScheduleLoop } from '../../server/loops/schedules.ts';
import { sqlToMillis } from '../../server/time.ts';
import { ALL_ACTIONS, NAMESPACE_ACTIONS } from '../../server/domain/actions.ts';
import { createApp } from '../../server/http/app.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';
import {
  OPENAPI_FILE,
  STATUS_OF_CODE,
  spec as openapi,
  assertErrorEnvelope,
  assertHeadersMatchSpec,
  assertMatchesSpec,
  declaredContentType,
  declaredResponse,
  declaredStatuses,
  findOperation,
  operationIds,
  operations,
  type SpecOperation,
} from './spec-validator.ts';

const HEX32 = /^[0-9a-f]{32}$/;
/** Only to let a long-poll start waiting before what answers it; never to wait for something. */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A start far enough away that a schedule never fires during the tests. */
const FAR_START = '2099-01-01T00:00:00Z';

/** Free JSON owned by the user (or free-form details): nulls and any keys are allowed inside. */
const USER_DATA_KEYS = new Set(['payload', 'result', 'before', 'after', 'details']);
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/**
 * What the spec says in words about Orbit's own values: absent values are omitted, never `null`
 * (docs/http-api.md#envelope-and-request-ids), and times are "RFC 3339, UTC, millisecond precision"
 * (`Timestamp`).
 */
function assertOrbitValues(value: unknown, where: string, path = ''): void {
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) assertOrbitValues(item, where, `${path}[${i}]`);
    return;
  }
  if (value === null || typeof value !== 'object') return;
  const object = value as Record<string, unknown>;
  const isTask = 'task_id' in object && 'state' in object;
  const isEvent = 'event_id' in object && 'sequence' in object;
  for (const [key, member] of Object.entries(object)) {
    const at = path === '' ? key : `${path}.${key}`;
    if (USER_DATA_KEYS.has(key) || (isTask && key === 'error') || (isEvent && key === 'data')) continue;
    assert.notEqual(member, null, `${where}: ${at} is null; absent values are omitted`);
    if (key.endsWith('_at')) assert.match(String(member), TIMESTAMP, `${where}: ${at} is not RFC 3339 UTC with milliseconds`);
    assertOrbitValues(member, where, at);
  }
}

describe('contract: every operation answers what openapi.yaml says', () => {
  let t: TestDatabase;
  let api: Awaited<ReturnType<typeof testApp>>;
  let owner: TestTenant;
  let other: TestTenant;
  /** All actions, every queue. */
  let admin: string;
  /** Namespace actions, queue scope ["default"] only. */
  let scoped: string;
  let onlyEvents: string;
  let onlyAudit: string;
  let server: RunningServer | null = null;
  let keyCounter = 0;
  const key = (label = 'k') => `${label}-${++keyCounter}-${randomBytes(3).toString('hex')}`;

  /** operationId → statuses seen. */
  const seen = new Map<string, Set<number>>();
  /** The task the schedule loop made (schedules test): its events carry schedule_id and scheduled_for. */
  let scheduledTask: { task_id: string; schedule_id: string; scheduled_for: string } | null = null;

  /** The checks every response gets; returns the spec operation it answered. */
  function check(method: string, path: string, response: TestResponse): SpecOperation {
    const op = findOperation(method, path);
    assert.ok(op, `${method} ${path} is no operation of openapi.yaml`);
    const where = `${op.operationId} ${method} ${path} → ${response.status}`;
    const contentType = declaredContentType(op.operationId, response.status);
    const isJson = contentType === 'application/json';
    if (isJson) {
      assert.match(response.headers.get('content-type') ?? '', /^application\/json\b/, `${where}: Content-Type`);
      assert.ok(response.body !== undefined, `${where}: the body is not JSON: ${response.text.slice(0, 200)}`);
    }
    assertMatchesSpec(op.operationId, response.status, isJson ? response.body : response.text);
    assertHeadersMatchSpec(op.operationId, response.status, response.headers);
    // Every answer, whoever made it (a handler, a refusal, the error handler): the app's
    // middleware sets it once. (The 101 of an upgrade is the WebSocket server's, no content.)
    if (response.status !== 101) assert.equal(response.headers.get('x-content-type-options'), 'nosniff', `${where}: X-Content-Type-Options`);
    // Raw operations answer with their own bodies, except errors, which use the `default` envelope.
    const isEnvelope = isJson && (!op.raw || declaredResponse(op.operationId, response.status).declaredAs === 'default');
    if (isEnvelope) {
      // The envelope: the request id is in the body and in the header.
      assert.match(response.body.request_id, HEX32, `${where}: request_id`);
      assert.equal(response.headers.get('x-request-id'), response.body.request_id, `${where}: X-Request-Id must equal body.request_id`);
    }
    if (response.status === 429) assert.equal(response.headers.get('retry-after'), '1', `${where}: Retry-After`);
    if (isJson) assertOrbitValues(response.body, where);
    if (response.status >= 400 && isEnvelope) {
      const code = response.body.error.code as string;
      assert.equal(response.status, STATUS_OF_CODE[code], `${where}: ${code} is HTTP ${STATUS_OF_CODE[code]}`);
    }
    if (!seen.has(op.operationId)) seen.set(op.operationId, new Set());
    seen.get(op.operationId)?.add(response.status);
    return op;
  }

  interface CallOptions {
    token?: string;
    body?: unknown;
    key?: string;
    headers?: Record<string, string>;
  }

  /** One request through the app, checked against the spec; `status` is what this call expects. */
  async function call(method: string, path: string, options: CallOptions, status: number, code?: string): Promise<TestResponse> {
    const response = await api.request(method, path, options);
    check(method, path, response);
    assert.equal(
      response.status,
      status,
      `${method} ${path}: expected ${status}${code ? ` ${code}` : ''}, got ${response.status}: ${response.text.slice(0, 500)}`,
    );
    if (code !== undefined) assert.equal(response.body?.error?.code, code, `${method} ${path}: ${response.text.slice(0, 500)}`);
    return response;
  }

  const get = (path: string, status = 200, token = admin, code?: string) => call('GET', path, token === '' ? {} : { token }, status, code);
  const post = (path: string, body: unknown, status = 200, options: { token?: string; key?: string; code?: string } = {}) =>
    call('POST', path, { token: options.token ?? admin, key: options.key ?? key(), body }, status, options.code);

  async function resources() {
    return (await get('/v1/application/resources')).body.data;
  }
  async function queue(name: string) {
    return (await get(`/v1/queues/${name}`)).body.data;
  }
  async function submit(queueName = 'default', body: Record<string, unknown> = {}) {
    return (await post(`/v1/queues/${queueName}/tasks`, { payload: { order: keyCounter }, ...body })).body.data.task;
  }
  /** A daily schedule from 2099 (it never fires here). */
  async function schedule(queueName = 'default', token = admin) {
    return (
      await post(
        `/v1/queues/${queueName}/schedules`,
        { name: key('sched'), reason: '计划', interval_seconds: 86400, start_at: FAR_START, payload: { n: keyCounter } },
        200,
        { token },
      )
    ).body.data.schedule;
  }

  /** A subscription under a fresh name (from `now` unless the body says otherwise). */
  async function subscription(body: Record<string, unknown> = {}, token = admin) {
    return (await post('/v1/subscriptions', { name: key('sub'), reason: '订阅', ...body }, 200, { token })).body.data.subscription;
  }
  /** The newest event sequence of the owner's namespace (what an ack is checked against). */
  async function namespaceHead(): Promise<string> {
    const [row] = await t.db.rows<{ head: string | number | null }>('SELECT MAX(sequence) AS head FROM orbit_events WHERE namespace_id = UNHEX(?)', [
      owner.namespaceId,
    ]);
    return row?.head === null || row?.head === undefined ? '0' : String(row.head);
  }
  /**
   * A GET that may wait (a long-poll), checked against the spec, and how long it took. The
   * request is aborted after `guardMs` (the server then answers at once), so a wait that does
   * not end as it should fails the test instead of holding it for up to 30 s.
   */
  async function timedGet(path: string, token = admin, guardMs = 25_000): Promise<{ response: TestResponse; ms: number }> {
    const started = Date.now();
    const raw = await api.app.request(path, { headers: { Authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(guardMs) });
    const text = await raw.text();
    const ms = Date.now() - started;
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    const response: TestResponse = { status: raw.status, headers: raw.headers, text, body };
    check('GET', path, response);
    return { response, ms };
  }

  before(async () => {
    t = await freshDatabase('contract');
    api = await testApp(t.db);
    owner = await createTenant(t.db, { namespace: 'contract', queues: ['default', 'orders'], resourceAccess: true });
    other = await createTenant(t.db, { namespace: 'elsewhere', queues: ['default'], resourceAccess: true });
    admin = await createCredential(t.db, owner, [...ALL_ACTIONS], ['*']);
    scoped = await createCredential(t.db, owner, [...NAMESPACE_ACTIONS], ['default']);
    onlyEvents = await createCredential(t.db, owner, ['events:read']);
    onlyAudit = await createCredential(t.db, owner, ['audit:read']);
  });

  after(async () => {
    if (server) await server.close();
    if (!t) return;
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  test('system endpoints: health, readiness (ready and not), the spec, metrics', async () => {
    assert.deepEqual((await get('/healthz', 200, '')).body, { status: 'ok' });
    assert.deepEqual((await get('/readyz', 200, '')).body, { status: 'ok' });
    const spec = await get('/openapi.yaml', 200, '');
    assert.equal(spec.text, readFileSync(OPENAPI_FILE, 'utf8'));
    assert.match(spec.headers.get('content-type') ?? '', /^application\/yaml/);
    const metrics = await get('/metrics', 200, '');
    assert.match(metrics.headers.get('content-type') ?? '', /^text\/plain/);
    assert.match(metrics.text, /^# (HELP|TYPE) /m);

    // Not ready: the same app with a failing readiness probe answers 503 with the Health shape.
    const notReady = createApp({ ...api.deps, ready: async () => ({ ok: false, detail: 'pending migrations: 0099_next' }) });
    const raw = await notReady.request('/readyz');
    const text = await raw.text();
    const response: TestResponse = { status: raw.status, headers: raw.headers, text, body: JSON.parse(text) };
    check('GET', '/readyz', response);
    assert.equal(response.status, 503);
    assert.deepEqual(response.body, { status: 'unavailable', detail: 'pending migrations: 0099_next' });
  });

  test('pages: the worker protocol document, the API reference and the console, with their assets and icon (and 503 when not built)', async () => {
    const asyncapi = await get('/asyncapi.yaml', 200, '');
    assert.equal(asyncapi.text, readFileSync(new URL('../../asyncapi.yaml', import.meta.url), 'utf8'));
    assert.match(asyncapi.headers.get('content-type') ?? '', /^application\/yaml/);
    const docs = await get('/docs', 200, '');
    assert.match(docs.headers.get('content-type') ?? '', /^text\/html/);
    assert.match(docs.text, /<redoc spec-url="\/openapi.yaml"/);
    assert.match(docs.text, /href="\/asyncapi.yaml"/);
    const redoc = await get('/docs/redoc.standalone.js', 200, '');
    assert.match(redoc.headers.get('content-type') ?? '', /^text\/javascript/);
    assert.ok(redoc.text.length > 100_000);
    const page = await get('/console', 200, '');
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    assert.match(page.headers.get('content-security-policy') ?? '', /default-src 'self'/);
    assert.match(page.text, /src="\/console\/console.js"/);
    assert.match((await get('/console/console.js', 200, '')).headers.get('content-type') ?? '', /^text\/javascript/);
    assert.match((await get('/console/console.css', 200, '')).headers.get('content-type') ?? '', /^text\/css/);
    const icon = await get('/favicon.ico', 200, '');
    assert.match(icon.headers.get('content-type') ?? '', /^image\/svg\+xml/);
    assert.match(icon.text, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);

    // Not built: the same app without the console bundle says so, 503 in plain text.
    const unbuilt = createApp({ ...api.deps, pages: { ...api.deps.pages, consoleScript: null, consoleStylesheet: null } });
    for (const path of ['/console/console.js', '/console/console.css']) {
      const raw = await unbuilt.request(path);
      const response: TestResponse = { status: raw.status, headers: raw.headers, text: await raw.text(), body: undefined };
      check('GET', path, response);
      assert.equal(response.status, 503);
      assert.match(response.text, /npm run build/);
    }
  });

  test('application resources: get, configure, dry run, replay, conflicts, bad input', async () => {
    const before = await resources();
    assert.equal(before.application_id, owner.applicationId);
    const body = {
      expected_revision: before.revision,
      reason: '合同测试：调整预算',
      max_unfinished_tasks: 500000,
      max_concurrency: 5000,
      rate_per_second: 50000,
    };
    // A dry run under the key the change then uses: nothing is written, no receipt is kept.
    const dry = await post('/v1/application/resources:configure', { ...body, dry_run: true }, 200, { key: 'app-config-1' });
    assert.equal(dry.body.data.dry_run, true);
    assert.deepEqual(
      dry.body.data.effects.map((e: { limit: string }) => e.limit),
      ['max_unfinished_tasks', 'max_concurrency', 'rate_per_second'],
    );
    assert.deepEqual(await resources(), before, 'a dry run writes nothing');
    await post('/v1/application/resources:configure', { ...body, expected_revision: String(BigInt(before.revision) + 7n), dry_run: true }, 409, {
      code: 'STATE_CONFLICT',
    });
    const changed = await post('/v1/application/resources:configure', body, 200, { key: 'app-config-1' });
    assert.equal(changed.body.data.deduplicated, false);
    assert.equal(changed.body.data.resources.revision, String(BigInt(before.revision) + 1n));
    const replay = await post('/v1/application/resources:configure', body, 200, { key: 'app-config-1' });
    assert.equal(replay.body.data.deduplicated, true);
    await post('/v1/application/resources:configure', { ...body, rate_per_second: 1 }, 409, { key: 'app-config-1', code: 'IDEMPOTENCY_CONFLICT' });
    const stale = await post('/v1/application/resources:configure', body, 409, { code: 'STATE_CONFLICT' });
    assert.ok(stale.body.error.details, 'a STATE_CONFLICT names the current revision');
    const bad = await post('/v1/application/resources:configure', { ...body, max_concurrency: 0 }, 400, { code: 'INVALID_ARGUMENT' });
    assert.equal(bad.body.error.details.field, 'max_concurrency');
    const query = await get('/v1/application/resources?verbose=1', 400, admin, 'INVALID_ARGUMENT');
    assert.deepEqual([query.body.error.details.field, query.body.error.details.location], ['verbose', 'query']);
    const twice = await get('/v1/queues?limit=1&limit=2', 400, admin, 'INVALID_ARGUMENT');
    assert.deepEqual([twice.body.error.details.field, twice.body.error.details.location], ['limit', 'query']);
  });

  test("namespaces' floors: list, configure, dry run, replay, conflicts (revision, sum above the limit), unknown namespace, bad input", async () => {
    const list = async () => (await get('/v1/application/namespaces')).body.data.namespaces;
    const [own] = await list();
    assert.equal(own.namespace, 'contract');
    assert.equal(own.namespace_id, owner.namespaceId);
    const app = await resources();
    const path = '/v1/application/namespaces/contract:configure';
    const body = {
      expected_revision: own.revision,
      reason: '合同测试：保底',
      reserved_unfinished_tasks: 10,
      reserved_concurrency: 2,
      reserved_rate_per_second: 3,
    };
    const dry = await post(path, { ...body, dry_run: true }, 200, { key: 'floors-1' });
    assert.deepEqual(
      dry.body.data.effects.map((e: { limit: string }) => e.limit),
      ['reserved_unfinished_tasks', 'reserved_concurrency', 'reserved_rate_per_second'],
    );
    assert.deepEqual(await list(), [own], 'a dry run writes nothing');
    const changed = await post(path, body, 200, { key: 'floors-1' });
    assert.deepEqual(changed.body.data, {
      namespace_resources: {
        ...own,
        revision: String(BigInt(own.revision) + 1n),
        reserved_unfinished_tasks: 10,
        reserved_concurrency: 2,
        reserved_rate_per_second: 3,
      },
      deduplicated: false,
    });
    assert.equal((await post(path, body, 200, { key: 'floors-1' })).body.data.deduplicated, true);
    await post(path, { ...body, reserved_concurrency: 1 }, 409, { key: 'floors-1', code: 'IDEMPOTENCY_CONFLICT' });
    const stale = await post(path, body, 409, { code: 'STATE_CONFLICT' });
    assert.equal(stale.body.error.details.current_revision, changed.body.data.namespace_resources.revision);
    const current = changed.body.data.namespace_resources.revision;
    const above = await post(path, { ...body, expected_revision: current, reserved_concurrency: app.max_concurrency + 1 }, 409, { code: 'STATE_CONFLICT' });
    assert.deepEqual(above.body.error.details, {
      field: 'reserved_concurrency',
      limit: 'max_concurrency',
      reserved_sum: app.max_concurrency + 1,
      application_limit: app.max_concurrency,
    });
    await post('/v1/application/namespaces/nowhere:configure', { ...body, expected_revision: current }, 404, { code: 'NOT_FOUND' });
    const bad = await post(path, { ...body, reserved_concurrency: -1 }, 400, { code: 'INVALID_ARGUMENT' });
    assert.equal(bad.body.error.details.field, 'reserved_concurrency');
    const withFloors = await resources();
    assert.deepEqual([withFloors.reserved_unfinished_tasks, withFloors.reserved_concurrency, withFloors.reserved_rate_per_second], [10, 2, 3]);
    // Back to no floors: the later tests tighten the application's limits.
    await post(path, { ...body, expected_revision: current, reserved_unfinished_tasks: 0, reserved_concurrency: 0, reserved_rate_per_second: 0 }, 200);
    await get('/v1/application/namespaces?verbose=1', 400, admin, 'INVALID_ARGUMENT');
  });

  test('retention: get, configure (full replacement), replay, dry run, conflicts, bad input', async () => {
    const before = (await get('/v1/application/retention')).body.data;
    assert.equal(before.application_id, owner.applicationId);
    const body = { expected_revision: before.revision, reason: '合同测试：保留策略', finished_task_retention_seconds: 86400, event_retention_seconds: 86400 };
    const dry = await post('/v1/application/retention:configure', { ...body, dry_run: true }, 200);
    assert.equal(dry.body.data.dry_run, true);
    assert.deepEqual((await get('/v1/application/retention')).body.data, before, 'a dry run writes nothing');
    const changed = await post('/v1/application/retention:configure', body, 200, { key: 'retention-1' });
    assert.deepEqual(changed.body.data, {
      retention: {
        application_id: owner.applicationId,
        revision: String(BigInt(before.revision) + 1n),
        finished_task_retention_seconds: 86400,
        event_retention_seconds: 86400,
      },
      deduplicated: false,
    });
    const replay = await post('/v1/application/retention:configure', body, 200, { key: 'retention-1' });
    assert.equal(replay.body.data.deduplicated, true);
    await post('/v1/application/retention:configure', { ...body, event_retention_seconds: 60 }, 409, { key: 'retention-1', code: 'IDEMPOTENCY_CONFLICT' });
    await post('/v1/application/retention:configure', body, 409, { code: 'STATE_CONFLICT' });
    const bad = await post('/v1/application/retention:configure', { ...body, audit_retention_seconds: 59 }, 400, { code: 'INVALID_ARGUMENT' });
    assert.equal(bad.body.error.details.field, 'audit_retention_seconds');
    // Back to the defaults, so that nothing else here is pruned sooner (no prune loop runs in-process anyway).
    await post('/v1/application/retention:configure', {
      expected_revision: changed.body.data.retention.revision,
      reason: '恢复默认',
      finished_task_retention_seconds: 604800,
      event_retention_seconds: 604800,
      receipt_retention_seconds: 604800,
      audit_retention_seconds: 31536000,
      subscription_max_lag_seconds: 2592000,
    });
  });

  test('queues: create, replay, get, list with pages, configure, and their errors', async () => {
    for (const name of ['q-a', 'q-b', 'q-c']) {
      const created = await post('/v1/queues', { name, reason: '新建队列', max_concurrency: 50, key_concurrency: 2 }, 200, { key: `create-${name}` });
      assert.equal(created.body.data.queue.queue, name);
      assert.equal(created.body.data.queue.namespace, owner.namespace);
      assert.equal(created.body.data.queue.revision, '1');
    }
    const replay = await post('/v1/queues', { name: 'q-a', reason: '新建队列', max_concurrency: 50, key_concurrency: 2 }, 200, { key: 'create-q-a' });
    assert.equal(replay.body.data.deduplicated, true);
    await post('/v1/queues', { name: 'q-a', reason: 'again' }, 409, { code: 'STATE_CONFLICT' });
    await post('/v1/queues', { name: 'Not A Name', reason: 'x' }, 400, { code: 'INVALID_ARGUMENT' });

    const q = await queue('q-b');
    assert.equal(q.max_concurrency, 50);
    await get('/v1/queues/no-such-queue', 404, admin, 'NOT_FOUND');
    await get('/v1/queues/orders', 404, scoped, 'NOT_FOUND'); // outside the credential's queue scope
    const badName = await get('/v1/queues/Bad!Name', 400, admin, 'INVALID_ARGUMENT');
    assert.deepEqual([badName.body.error.details.field, badName.body.error.details.location], ['queue', 'path']);

    // Pages of two, followed to the end: every queue exactly once, by name.
    const names: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const r = await get(`/v1/queues?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      names.push(...r.body.data.queues.map((x: { queue: string }) => x.queue));
      cursor = r.body.data.next_cursor;
      if (!cursor) break;
    }
    assert.deepEqual(names, ['default', 'orders', 'q-a', 'q-b', 'q-c']);
    await get('/v1/queues?cursor=not!a!cursor', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/queues?cursor=AAAA', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/queues?limit=0', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/queues?limit=101', 400, admin, 'INVALID_ARGUMENT');

    const configure = {
      expected_revision: q.revision,
      reason: '调整队列',
      max_unfinished_tasks: q.max_unfinished_tasks,
      max_concurrency: 60,
      rate_per_second: q.rate_per_second,
      key_concurrency: q.key_concurrency,
      paused: true,
    };
    const dry = await post('/v1/queues/q-b:configure', { ...configure, dry_run: true }, 200);
    assert.equal(dry.body.data.dry_run, true);
    assert.equal(dry.body.data.queue.revision, '2');
    assert.equal(dry.body.data.effects.length, 3);
    assert.deepEqual(await queue('q-b'), q, 'a dry run writes nothing');
    await post('/v1/queues/no-such-queue:configure', { ...configure, dry_run: true }, 404, { code: 'NOT_FOUND' });
    const configured = await post('/v1/queues/q-b:configure', configure, 200);
    assert.equal(configured.body.data.queue.revision, '2');
    assert.equal(configured.body.data.queue.paused, true);
    await post('/v1/queues/q-b:configure', configure, 409, { code: 'STATE_CONFLICT' });
    await post('/v1/queues/no-such-queue:configure', configure, 404, { code: 'NOT_FOUND' });
    await post('/v1/queues/q-b:configure', { ...configure, paused: 'yes' }, 400, { code: 'INVALID_ARGUMENT' });
  });

  test('tasks: submit, replay, get, list with pages and state, cancel, and their errors', async () => {
    const full = {
      payload: { order: 42, lines: [{ sku: 'A-1', qty: 2 }], note: null },
      priority: 7,
      resource_key: 'customer-42',
      max_attempts: 5,
      deadline_seconds: 3600,
      delay_seconds: 10,
      on_unknown_outcome: 'review',
    };
    const submitted = await post('/v1/queues/orders/tasks', full, 200, { key: 'order-42' });
    const task = submitted.body.data.task;
    assert.equal(submitted.body.data.deduplicated, false);
    assert.equal(task.state, 'WAITING');
    assert.deepEqual(task.payload, full.payload);
    assert.equal(task.resource_key, 'customer-42');
    assert.equal(task.namespace, owner.namespace);
    const replay = await post('/v1/queues/orders/tasks', full, 200, { key: 'order-42' });
    assert.equal(replay.body.data.deduplicated, true);
    assert.equal(replay.body.data.task.task_id, task.task_id);
    await post('/v1/queues/orders/tasks', { ...full, priority: 1 }, 409, { key: 'order-42', code: 'IDEMPOTENCY_CONFLICT' });
    await post('/v1/queues/no-such-queue/tasks', { payload: {} }, 404, { code: 'NOT_FOUND' });
    await post('/v1/queues/orders/tasks', { payload: {} }, 404, { token: scoped, code: 'NOT_FOUND' });
    const delay = await post('/v1/queues/orders/tasks', { payload: {}, deadline_seconds: 10, delay_seconds: 10 }, 400, { code: 'INVALID_ARGUMENT' });
    assert.equal(delay.body.error.details.field, 'delay_seconds');

    const fetched = await get(`/v1/tasks/${task.task_id}`);
    assert.deepEqual(fetched.body.data, task);
    await get(`/v1/tasks/${'0'.repeat(32)}`, 404, admin, 'NOT_FOUND');
    await get(`/v1/tasks/${task.task_id}`, 404, scoped, 'NOT_FOUND'); // its queue is outside the scope
    const badId = await get(`/v1/tasks/${task.task_id.toUpperCase()}`, 400, admin, 'INVALID_ARGUMENT');
    assert.deepEqual([badId.body.error.details.field, badId.body.error.details.location], ['task_id', 'path']);
    const foreign = (await api.request('POST', '/v1/queues/default/tasks', { token: other.token, key: 'foreign', body: { payload: {} } })).body.data.task;
    await get(`/v1/tasks/${foreign.task_id}`, 404, admin, 'NOT_FOUND'); // another application's task

    const more = [await submit('orders'), await submit('orders'), await submit('orders')];
    const ids: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const r = await get(`/v1/queues/orders/tasks?state=WAITING&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      ids.push(...r.body.data.tasks.map((x: { task_id: string }) => x.task_id));
      cursor = r.body.data.next_cursor;
      if (!cursor) break;
    }
    assert.deepEqual(ids, [task.task_id, ...more.map((m) => m.task_id)]);
    await get('/v1/queues/orders/tasks?state=DONE', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/queues/orders/tasks?cursor=AAAA', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/queues/no-such-queue/tasks', 404, admin, 'NOT_FOUND');

    const cancelled = await post(`/v1/tasks/${more[0]?.task_id}:cancel`, { reason: '客户撤单' }, 200, { key: 'cancel-1' });
    assert.equal(cancelled.body.data.task.state, 'CANCELLED');
    assert.ok(cancelled.body.data.task.finished_at);
    const cancelReplay = await post(`/v1/tasks/${more[0]?.task_id}:cancel`, { reason: '客户撤单' }, 200, { key: 'cancel-1' });
    assert.equal(cancelReplay.body.data.deduplicated, true);
    const terminal = await post(`/v1/tasks/${more[0]?.task_id}:cancel`, { reason: 'again' }, 409, { code: 'STATE_CONFLICT' });
    assert.equal(terminal.body.error.details.state, 'CANCELLED');
    await post(`/v1/tasks/${'0'.repeat(32)}:cancel`, { reason: 'x' }, 404, { code: 'NOT_FOUND' });
    await post(`/v1/tasks/${more[1]?.task_id}:cancel`, { reason: '   ' }, 400, { code: 'INVALID_ARGUMENT' });
  });

  test("task history: every queue's tasks newest first, a task's attempts and events, retry, and their errors", async () => {
    const first = await submit('orders');
    const second = await submit('default');
    const page = await get('/v1/tasks?limit=2');
    assert.deepEqual(
      page.body.data.tasks.map((x: { task_id: string }) => x.task_id),
      [second.task_id, first.task_id],
    );
    assert.ok(page.body.data.next_cursor);
    await get(`/v1/tasks?cursor=${page.body.data.next_cursor}&queue=orders&state=WAITING&limit=100`);
    await get('/v1/tasks?queue=no-such-queue', 404, admin, 'NOT_FOUND');
    await get('/v1/tasks?state=DONE', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/tasks?cursor=AAAA', 400, admin, 'INVALID_ARGUMENT');
    const attempts = await get(`/v1/tasks/${first.task_id}/attempts`);
    assert.deepEqual(attempts.body.data, { attempts: [] });
    await get(`/v1/tasks/${'0'.repeat(32)}/attempts`, 404, admin, 'NOT_FOUND');
    const events = await get(`/v1/tasks/${first.task_id}/events?after=0&limit=10`);
    assert.deepEqual(
      events.body.data.events.map((e: { type: string }) => e.type),
      ['task.submitted'],
    );
    await get(`/v1/tasks/${first.task_id}/events`, 404, scoped, 'NOT_FOUND');
    await post(`/v1/tasks/${first.task_id}:retry`, { reason: 'not finished' }, 409, { code: 'STATE_CONFLICT' });
    await post(`/v1/tasks/${first.task_id}:cancel`, { reason: '撤销' }, 200);
    const retried = await post(`/v1/tasks/${first.task_id}:retry`, { reason: '重试' }, 200, { key: 'retry-1' });
    assert.deepEqual([retried.body.data.task.state, retried.body.data.deduplicated], ['WAITING', false]);
    await post(`/v1/tasks/${first.task_id}:retry`, { reason: '' }, 400, { code: 'INVALID_ARGUMENT' });
    await post(`/v1/tasks/${'0'.repeat(32)}:retry`, { reason: 'x' }, 404, { code: 'NOT_FOUND' });
    for (const id of [first.task_id, second.task_id]) await post(`/v1/tasks/${id}:cancel`, { reason: '收尾' }, 200);
  });

  test('resolve: NEEDS_REVIEW → SUCCEEDED / back to WAITING; anything else is 409', async () => {
    const a = await submit('orders', { on_unknown_outcome: 'review' });
    const b = await submit('orders', { on_unknown_outcome: 'review' });
    // A running attempt whose lease expired is how a task reaches NEEDS_REVIEW; the worker path
    // is tested elsewhere, so the state is set directly (both states count as unfinished).
    await t.db.exec("UPDATE orbit_tasks SET state = 'NEEDS_REVIEW' WHERE task_id IN (UNHEX(?), UNHEX(?))", [a.task_id, b.task_id]);
    const resolved = await post(
      `/v1/tasks/${a.task_id}:resolve`,
      { outcome: 'succeeded', reason: '人工核实已完成', result: { invoice: 'INV-1', extra: null } },
      200,
      {
        key: 'resolve-a',
      },
    );
    assert.equal(resolved.body.data.task.state, 'SUCCEEDED');
    assert.deepEqual(resolved.body.data.task.result, { invoice: 'INV-1', extra: null });
    const replay = await post(
      `/v1/tasks/${a.task_id}:resolve`,
      { outcome: 'succeeded', reason: '人工核实已完成', result: { invoice: 'INV-1', extra: null } },
      200,
      {
        key: 'resolve-a',
      },
    );
    assert.equal(replay.body.data.deduplicated, true);
    const retried = await post(`/v1/tasks/${b.task_id}:resolve`, { outcome: 'retry', reason: '重试一次' }, 200);
    assert.equal(retried.body.data.task.state, 'WAITING');
    const conflict = await post(`/v1/tasks/${b.task_id}:resolve`, { outcome: 'failed', reason: '不再需要' }, 409, { code: 'STATE_CONFLICT' });
    assert.equal(conflict.body.error.details.state, 'WAITING');
    await post(`/v1/tasks/${a.task_id}:resolve`, { outcome: 'failed', reason: '已终结' }, 409, { code: 'STATE_CONFLICT' });
    await post(`/v1/tasks/${'0'.repeat(32)}:resolve`, { outcome: 'failed', reason: 'x' }, 404, { code: 'NOT_FOUND' });
    await post(`/v1/tasks/${b.task_id}:resolve`, { outcome: 'done', reason: 'x' }, 400, { code: 'INVALID_ARGUMENT' });
  });

  test('bulk submit: one result per item, in order - accepted, replayed, conflicting, invalid, a queue full mid-batch - and the errors of the request itself', async () => {
    // No Idempotency-Key header: each item carries its own key.
    const batch = (queueName: string, tasks: unknown, status = 200, token = admin, code?: string) =>
      call('POST', `/v1/queues/${queueName}/tasks:batch`, { token, body: { tasks } }, status, code);
    const statuses = (r: TestResponse) =>
      r.body.data.results.map((x: { idempotency_key: string; status: string; error?: { code: string } }) => [
        x.idempotency_key,
        x.status,
        x.error?.code ?? null,
      ]);
    const items = [
      { idempotency_key: 'bulk-1', payload: { n: 1, lines: [{ sku: 'A', qty: 1 }] }, priority: 7, resource_key: 'customer-7' },
      { idempotency_key: 'bulk-2', payload: { n: 2 }, on_unknown_outcome: 'review', max_attempts: 1, deadline_seconds: 3600, delay_seconds: 5 },
    ];
    const first = await batch('orders', items);
    assert.deepEqual(statuses(first), [
      ['bulk-1', 'accepted', null],
      ['bulk-2', 'accepted', null],
    ]);
    assert.deepEqual([first.body.data.accepted, first.body.data.replayed, first.body.data.refused], [2, 0, 0]);
    const [one, two] = first.body.data.results.map((x: { task: Record<string, any> }) => x.task);
    assert.deepEqual(
      [one.queue, one.state, one.priority, one.resource_key, one.max_attempts, one.on_unknown_outcome],
      ['orders', 'WAITING', 7, 'customer-7', 3, 'retry'],
    );
    assert.deepEqual(one.payload, items[0]?.payload);
    assert.deepEqual(
      [
        two.priority,
        two.max_attempts,
        two.on_unknown_outcome,
        Date.parse(two.available_at) - Date.parse(two.created_at),
        Date.parse(two.deadline_at) - Date.parse(two.created_at),
      ],
      [5, 1, 'review', 5000, 3_600_000],
    );
    assert.deepEqual((await get(`/v1/tasks/${one.task_id}`)).body.data, one);

    const again = await batch('orders', [
      items[0],
      { ...items[1], payload: { n: 'changed' } },
      { idempotency_key: 'bulk-3', payload: {}, priority: 10 },
      { idempotency_key: 'bulk-4', payload: {}, deadline_seconds: 5, delay_seconds: 5 },
      { payload: {} },
    ]);
    assert.deepEqual(statuses(again), [
      ['bulk-1', 'replayed', null],
      ['bulk-2', 'refused', 'IDEMPOTENCY_CONFLICT'],
      ['bulk-3', 'refused', 'INVALID_ARGUMENT'],
      ['bulk-4', 'refused', 'INVALID_ARGUMENT'],
      ['', 'refused', 'INVALID_ARGUMENT'],
    ]);
    assert.deepEqual([again.body.data.accepted, again.body.data.replayed, again.body.data.refused], [0, 1, 4]);
    assert.equal(again.body.data.results[0].task.task_id, one.task_id);
    assert.deepEqual(
      again.body.data.results
        .slice(2)
        .map((x: { error: { details: { field: string; location: string } } }) => [x.error.details.field, x.error.details.location]),
      [
        ['tasks[2].priority', 'body'],
        ['tasks[3].delay_seconds', 'body'],
        ['tasks[4].idempotency_key', 'body'],
      ],
    );
    // The same key and content sent singly is the same submission (defaults filled in).
    const single = await post('/v1/queues/orders/tasks', { payload: items[0]?.payload, priority: 7, resource_key: 'customer-7', max_attempts: 3 }, 200, {
      key: 'bulk-1',
    });
    assert.equal(single.body.data.deduplicated, true);
    assert.equal(single.body.data.task.task_id, one.task_id);

    // The queue fills in the middle: the items before stay accepted, it and the ones after are QUEUE_FULL.
    await post('/v1/queues', { name: 'bulk-tiny', reason: '批量容量', max_unfinished_tasks: 2 }, 200);
    const full = await batch(
      'bulk-tiny',
      [1, 2, 3, 4].map((i) => ({ idempotency_key: `bulk-tiny-${i}`, payload: { i } })),
    );
    assert.deepEqual(statuses(full), [
      ['bulk-tiny-1', 'accepted', null],
      ['bulk-tiny-2', 'accepted', null],
      ['bulk-tiny-3', 'refused', 'QUEUE_FULL'],
      ['bulk-tiny-4', 'refused', 'QUEUE_FULL'],
    ]);
    assert.deepEqual(full.body.data.results[2].error.details, { level: 'queue', queue: 'bulk-tiny', limit: 'max_unfinished_tasks' });
    assert.equal((await queue('bulk-tiny')).unfinished_tasks, '2');

    // The request itself: refused as a whole only when the body is invalid, the queue unknown or out of scope.
    const empty = await batch('orders', [], 400, admin, 'INVALID_ARGUMENT');
    assert.deepEqual([empty.body.error.details.field, empty.body.error.details.location], ['tasks', 'body']);
    const tooMany = await batch(
      'orders',
      Array.from({ length: 1001 }, (_, i) => ({ idempotency_key: `many-${i}`, payload: {} })),
      400,
      admin,
      'INVALID_ARGUMENT',
    );
    assert.equal(tooMany.body.error.details.field, 'tasks');
    const notObject = await batch('orders', [{ idempotency_key: 'x', payload: {} }, 'x'], 400, admin, 'INVALID_ARGUMENT');
    assert.equal(notObject.body.error.details.field, 'tasks[1]');
    await batch('no-such-queue', [{ idempotency_key: 'nq', payload: {} }], 404, admin, 'NOT_FOUND');
    await batch('orders', [{ idempotency_key: 'scope', payload: {} }], 404, scoped, 'NOT_FOUND'); // outside the credential's queue scope
    await batch('Bad!Name', [{ idempotency_key: 'bad', payload: {} }], 400, admin, 'INVALID_ARGUMENT');
  });

  test('429: QUEUE_FULL and APPLICATION_FULL, with Retry-After: 1, and nothing written', async () => {
    await post('/v1/queues', { name: 'tiny', reason: '容量为一的队列', max_unfinished_tasks: 1 }, 200);
    const earlier = await submit('tiny');
    await post(`/v1/tasks/${earlier.task_id}:cancel`, { reason: '先撤销' }, 200);
    await submit('tiny');
    const countBefore = (await t.db.rows<{ n: number }>('SELECT COUNT(*) AS n FROM orbit_tasks'))[0]?.n;
    const queueFull = await post('/v1/queues/tiny/tasks', { payload: { n: 2 } }, 429, { key: 'tiny-2', code: 'QUEUE_FULL' });
    assert.equal(queueFull.headers.get('retry-after'), '1');
    // A retry is admitted like a submission.
    const retryFull = await post(`/v1/tasks/${earlier.task_id}:retry`, { reason: '重试' }, 429, { code: 'QUEUE_FULL' });
    assert.equal(retryFull.headers.get('retry-after'), '1');

    const current = await resources();
    const limits = { max_unfinished_tasks: current.max_unfinished_tasks, max_concurrency: current.max_concurrency, rate_per_second: current.rate_per_second };
    const tightened = await post('/v1/application/resources:configure', {
      expected_revision: current.revision,
      reason: '压满应用额度',
      ...limits,
      max_unfinished_tasks: Number(current.unfinished_tasks),
    });
    try {
      const appFull = await post('/v1/queues/default/tasks', { payload: { n: 3 } }, 429, { code: 'APPLICATION_FULL' });
      assert.equal(appFull.headers.get('retry-after'), '1');
      // Both full: APPLICATION_FULL is reported.
      const both = await post('/v1/queues/tiny/tasks', { payload: { n: 4 } }, 429, { code: 'APPLICATION_FULL' });
      assert.equal(both.headers.get('retry-after'), '1');
      await post(`/v1/tasks/${earlier.task_id}:retry`, { reason: '重试' }, 429, { code: 'APPLICATION_FULL' });
    } finally {
      await post('/v1/application/resources:configure', { expected_revision: tightened.body.data.resources.revision, reason: '恢复应用额度', ...limits });
    }
    const countAfter = (await t.db.rows<{ n: number }>('SELECT COUNT(*) AS n FROM orbit_tasks'))[0]?.n;
    assert.equal(countAfter, countBefore, 'a refused submission writes no task');
  });

  test('schedules: create (cron and interval), replay, get, list with pages, pause, resume, a task made by the schedule loop, and their errors', async () => {
    const count = async () => Number((await t.db.rows<{ n: number }>('SELECT COUNT(*) AS n FROM orbit_schedules'))[0]?.n);
    // Every option given; a cron in a time zone, from 2099 (never due here).
    const nightly = {
      name: 'nightly-report',
      reason: '每晚对账',
      cron: '0 2 * * *',
      timezone: 'Asia/Shanghai',
      payload: { report: 'nightly', lines: [{ sku: 'A-1', qty: 2 }], note: null },
      priority: 7,
      resource_key: 'customer-7',
      max_attempts: 5,
      deadline_seconds: 3600,
      on_unknown_outcome: 'review',
      misfire_policy: 'fire_once',
      misfire_window_seconds: 300,
      start_at: '2099-01-01T00:00:00+08:00',
    };
    const created = await post('/v1/queues/orders/schedules', nightly, 200, { key: 'sched-nightly' });
    assert.equal(created.body.data.deduplicated, false);
    const s = created.body.data.schedule;
    assert.match(s.schedule_id, HEX32);
    assert.deepEqual(
      [
        s.queue,
        s.namespace,
        s.name,
        s.cron,
        s.interval_seconds,
        s.timezone,
        s.priority,
        s.resource_key,
        s.max_attempts,
        s.deadline_seconds,
        s.on_unknown_outcome,
      ],
      ['orders', owner.namespace, 'nightly-report', '0 2 * * *', undefined, 'Asia/Shanghai', 7, 'customer-7', 5, 3600, 'review'],
    );
    assert.deepEqual(
      [s.misfire_policy, s.misfire_window_seconds, s.state, s.fired, s.skipped_misfire, s.deferred_full, s.last_fire_at],
      ['fire_once', 300, 'ACTIVE', '0', '0', '0', undefined],
    );
    assert.deepEqual(s.payload, nightly.payload);
    // start_at in UTC, and the first point at or after it: 02:00 in Shanghai is 18:00 UTC the day before.
    assert.equal(s.start_at, '2098-12-31T16:00:00.000Z');
    assert.equal(s.next_fire_at, '2098-12-31T18:00:00.000Z');

    // The same key and body: the original snapshot; another body under the key; the name taken.
    const replay = await post('/v1/queues/orders/schedules', nightly, 200, { key: 'sched-nightly' });
    assert.equal(replay.body.data.deduplicated, true);
    assert.deepEqual(replay.body.data.schedule, s);
    await post('/v1/queues/orders/schedules', { ...nightly, priority: 1 }, 409, { key: 'sched-nightly', code: 'IDEMPOTENCY_CONFLICT' });
    const taken = await post('/v1/queues/orders/schedules', nightly, 409, { code: 'STATE_CONFLICT' });
    assert.equal(taken.body.error.details.field, 'name');

    // An interval schedule with the defaults: "for an interval, ... one interval after the creation time when start_at is left out".
    const h = (await post('/v1/queues/orders/schedules', { name: 'hourly', reason: '每小时', interval_seconds: 3600, payload: {} }, 200)).body.data.schedule;
    assert.deepEqual(
      [
        h.interval_seconds,
        h.cron,
        h.timezone,
        h.priority,
        h.max_attempts,
        h.deadline_seconds,
        h.on_unknown_outcome,
        h.misfire_window_seconds,
        h.start_at,
        h.resource_key,
      ],
      [3600, undefined, 'UTC', 5, 3, 86400, 'retry', 60, undefined, undefined],
    );
    assert.equal(Date.parse(h.next_fire_at) - Date.parse(h.created_at), 3_600_000);

    // Refused, naming the field, and nothing written.
    const before = await count();
    const refused: Array<[Record<string, unknown>, string]> = [
      [{ ...nightly, name: 'both', interval_seconds: 60 }, 'cron'],
      [{ name: 'neither', reason: 'x', payload: {} }, 'cron'],
      [{ ...nightly, name: 'bad-cron', cron: '61 * * * *' }, 'cron'],
      [{ ...nightly, name: 'four', cron: '* * * *' }, 'cron'],
      [{ ...nightly, name: 'zone', timezone: 'Mars/Olympus' }, 'timezone'],
      [{ name: 'zone-interval', reason: 'x', payload: {}, interval_seconds: 60, timezone: 'Nowhere/City' }, 'timezone'],
      [{ ...nightly, name: 'no-such-day', start_at: '2099-02-30T00:00:00Z' }, 'start_at'],
      [{ ...nightly, name: 'year-10000', start_at: '9999-12-31T23:59:59-01:00' }, 'start_at'],
      [{ ...nightly, name: 'Not A Name' }, 'name'],
      [{ ...nightly, name: 'policy', misfire_policy: 'sometimes' }, 'misfire_policy'],
      [{ ...nightly, name: 'list', payload: [1] }, 'payload'],
    ];
    for (const [body, field] of refused) {
      const r = await post('/v1/queues/orders/schedules', body, 400, { code: 'INVALID_ARGUMENT' });
      assert.deepEqual([r.body.error.details.field, r.body.error.details.location], [field, 'body'], `${JSON.stringify(body)} → ${r.text}`);
    }
    await post('/v1/queues/no-such-queue/schedules', { ...nightly, name: 'nq' }, 404, { code: 'NOT_FOUND' });
    await post('/v1/queues/orders/schedules', { ...nightly, name: 'scope' }, 404, { token: scoped, code: 'NOT_FOUND' }); // outside the credential's queue scope
    const badQueue = await post('/v1/queues/Bad!Name/schedules', { ...nightly, name: 'bad-queue' }, 400, { code: 'INVALID_ARGUMENT' });
    assert.deepEqual([badQueue.body.error.details.field, badQueue.body.error.details.location], ['queue', 'path']);
    assert.equal(await count(), before, 'a refused creation writes no schedule');

    // Get: the schedule as created; unknown, out of scope, another application's, a malformed id.
    assert.deepEqual((await get(`/v1/schedules/${s.schedule_id}`)).body.data, s);
    await get(`/v1/schedules/${'0'.repeat(32)}`, 404, admin, 'NOT_FOUND');
    await get(`/v1/schedules/${s.schedule_id}`, 404, scoped, 'NOT_FOUND'); // its queue is outside the scope
    const foreign = await schedule('default', other.token);
    await get(`/v1/schedules/${foreign.schedule_id}`, 404, admin, 'NOT_FOUND');
    const badId = await get(`/v1/schedules/${s.schedule_id.toUpperCase()}`, 400, admin, 'INVALID_ARGUMENT');
    assert.deepEqual([badId.body.error.details.field, badId.body.error.details.location], ['schedule_id', 'path']);

    // Pages of two, followed to the end: every schedule of the queue exactly once, by name.
    for (const name of ['a-first', 'm-middle', 'z-last'])
      await post('/v1/queues/orders/schedules', { name, reason: '分页', interval_seconds: 86400, start_at: FAR_START, payload: {} }, 200);
    const names: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const r = await get(`/v1/queues/orders/schedules?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      assert.ok(r.body.data.schedules.length <= 2);
      names.push(...r.body.data.schedules.map((x: { name: string }) => x.name));
      cursor = r.body.data.next_cursor;
      if (!cursor) break;
    }
    assert.deepEqual(names, ['a-first', 'hourly', 'm-middle', 'nightly-report', 'z-last']);
    assert.deepEqual((await get('/v1/queues/orders/schedules')).body.data.schedules[3], s);
    assert.deepEqual((await get('/v1/queues/default/schedules')).body.data, { schedules: [] }, "another application's schedule is not listed");
    await get('/v1/queues/orders/schedules?cursor=AAAA', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/queues/orders/schedules?limit=0', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/queues/orders/schedules?limit=101', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/queues/no-such-queue/schedules', 404, admin, 'NOT_FOUND');
    await get('/v1/queues/orders/schedules', 404, scoped, 'NOT_FOUND');

    // Pause and resume: each only from the other state; a replay is the original snapshot and changes nothing.
    const paused = await post(`/v1/schedules/${s.schedule_id}:pause`, { reason: '暂停对账' }, 200, { key: 'sched-pause-1' });
    assert.equal(paused.body.data.deduplicated, false);
    assert.deepEqual(paused.body.data.schedule, { ...s, state: 'PAUSED' }, 'pausing changes the state only (the misfire policy is frozen)');
    const pausedTwice = await post(`/v1/schedules/${s.schedule_id}:pause`, { reason: '再暂停' }, 409, { code: 'STATE_CONFLICT' });
    assert.equal(pausedTwice.body.error.details.state, 'PAUSED');
    const blank = await post(`/v1/schedules/${s.schedule_id}:resume`, { reason: '   ' }, 400, { code: 'INVALID_ARGUMENT' });
    assert.equal(blank.body.error.details.field, 'reason');
    const resumed = await post(`/v1/schedules/${s.schedule_id}:resume`, { reason: '恢复对账' }, 200, { key: 'sched-resume-1' });
    assert.deepEqual(resumed.body.data.schedule, s);
    const resumedTwice = await post(`/v1/schedules/${s.schedule_id}:resume`, { reason: '再恢复' }, 409, { code: 'STATE_CONFLICT' });
    assert.equal(resumedTwice.body.error.details.state, 'ACTIVE');
    const pauseReplay = await post(`/v1/schedules/${s.schedule_id}:pause`, { reason: '暂停对账' }, 200, { key: 'sched-pause-1' });
    assert.equal(pauseReplay.body.data.deduplicated, true);
    assert.deepEqual(pauseReplay.body.data.schedule, paused.body.data.schedule);
    assert.equal((await get(`/v1/schedules/${s.schedule_id}`)).body.data.state, 'ACTIVE', 'a replay changes nothing');
    await post(`/v1/schedules/${s.schedule_id}:pause`, { reason: '另一个理由' }, 409, { key: 'sched-pause-1', code: 'IDEMPOTENCY_CONFLICT' });
    await post(`/v1/schedules/${'0'.repeat(32)}:pause`, { reason: 'x' }, 404, { code: 'NOT_FOUND' });
    await post(`/v1/schedules/${s.schedule_id}:pause`, { reason: 'x' }, 404, { token: scoped, code: 'NOT_FOUND' });
    await post(`/v1/schedules/${foreign.schedule_id}:pause`, { reason: 'x' }, 404, { code: 'NOT_FOUND' });
    await post(`/v1/schedules/${foreign.schedule_id}:resume`, { reason: 'x' }, 404, { code: 'NOT_FOUND' });
    const badResume = await post(`/v1/schedules/${s.schedule_id.toUpperCase()}:resume`, { reason: 'x' }, 400, { code: 'INVALID_ARGUMENT' });
    assert.deepEqual([badResume.body.error.details.field, badResume.body.error.details.location], ['schedule_id', 'path']);
    assert.equal(
      (await get(`/v1/schedules/${foreign.schedule_id}`, 200, other.token)).body.data.state,
      'ACTIVE',
      "another application's schedule is untouched",
    );

    // A task made by a schedule: one round of the schedule loop (an orbit-server runs it every
    // 500 ms) after the first point, which for an interval is start_at itself - when start_at is
    // not in the past at the creation. It is set 1.5 s ahead of the database's clock (the one the
    // creation and the loop use); a creation that comes later than that (a loaded machine) gets
    // its first point an interval after it instead, and is paused and made again further ahead.
    let startAt = '';
    let fires: { schedule_id: string; next_fire_at: string } | undefined;
    for (let ahead = 1500; !fires; ahead *= 2) {
      const [row] = await t.db.rows<{ now: string }>('SELECT NOW(3) AS now');
      startAt = new Date(sqlToMillis(row!.now) + ahead).toISOString();
      const made = (
        await post(
          '/v1/queues/default/schedules',
          { name: `fires-once-${ahead}`, reason: '触发', interval_seconds: 3600, start_at: startAt, payload: { from: 'schedule' }, priority: 8 },
          200,
        )
      ).body.data.schedule;
      if (made.next_fire_at === startAt) fires = made;
      else {
        assert.equal(Date.parse(made.next_fire_at), Date.parse(made.created_at) + 3_600_000, 'a start_at in the past: an interval after the creation');
        assert.ok(ahead < 30_000, `the creation came ${ahead} ms or more after the clock was read`);
        await post(`/v1/schedules/${made.schedule_id}:pause`, { reason: '来得太晚' }, 200);
      }
    }
    assert.equal(fires.next_fire_at, startAt);
    const log = new LogCapture();
    const loop = new ScheduleLoop({ db: t.db, log: log.logger, metrics: api.deps.metrics, intervalMs: 500 });
    const counts = await waitFor(async () => {
      const round = await loop.round();
      return round.fired > 0 ? round : null;
    }).catch((error: Error) => assert.fail(`${error.message}: the schedule never fired; ${log.last()}`));
    assert.deepEqual(counts, { fired: 1, deferred: 0, skipped: 0 }, 'only the one due point fired');
    const made = (await get('/v1/queues/default/tasks?limit=100')).body.data.tasks.filter((x: { schedule_id?: string }) => x.schedule_id === fires.schedule_id);
    assert.equal(made.length, 1);
    const task = made[0];
    scheduledTask = task;
    assert.deepEqual(
      [task.queue, task.state, task.priority, task.max_attempts, task.on_unknown_outcome, task.scheduled_for],
      ['default', 'WAITING', 8, 3, 'retry', startAt],
    );
    assert.deepEqual(task.payload, { from: 'schedule' });
    assert.deepEqual((await get(`/v1/tasks/${task.task_id}`)).body.data, task);
    const fired = (await get(`/v1/schedules/${fires.schedule_id}`)).body.data;
    assert.deepEqual([fired.fired, fired.last_fire_at, fired.next_fire_at], ['1', startAt, new Date(Date.parse(startAt) + 3_600_000).toISOString()]);
    const direct = await submit('default');
    assert.deepEqual([direct.schedule_id, direct.scheduled_for], [undefined, undefined], 'a direct submission carries neither');
    await post(`/v1/schedules/${fires.schedule_id}:pause`, { reason: '测试结束' }, 200);
  });

  test('getTask with wait_seconds: a settled task at once, a WAITING one as it is once the time is up, one cancelled meanwhile as soon as it is; bad values are 400', async () => {
    const waiting = await submit('default');
    const none = await timedGet(`/v1/tasks/${waiting.task_id}?wait_seconds=0`);
    assert.equal(none.response.status, 200, none.response.text);
    assert.deepEqual(none.response.body.data, waiting);
    assert.ok(none.ms < 10_000, `wait_seconds=0 waited ${none.ms} ms`);
    // The time is up: the task as it is.
    const one = await timedGet(`/v1/tasks/${waiting.task_id}?wait_seconds=1`);
    assert.equal(one.response.status, 200, one.response.text);
    assert.deepEqual(one.response.body.data, waiting);
    assert.ok(one.ms >= 900 && one.ms < 15_000, `wait_seconds=1 answered after ${one.ms} ms`);
    // Cancelled while the request waits: answered as soon as it is, not when the time is up.
    const cancelling = (async () => {
      await sleep(300); // time for the request to start waiting (had it not, it reads CANCELLED at once: the checks hold)
      await post(`/v1/tasks/${waiting.task_id}:cancel`, { reason: '等待中取消' });
    })();
    const woken = await timedGet(`/v1/tasks/${waiting.task_id}?wait_seconds=30`, admin, 40_000);
    await cancelling;
    assert.equal(woken.response.status, 200, woken.response.text);
    assert.equal(woken.response.body.data.state, 'CANCELLED');
    assert.ok(woken.ms >= 250 && woken.ms < 20_000, `answered ${woken.ms} ms after the request (the cancel came after 300 ms), not when its 30 s were up`);
    // Terminal or NEEDS_REVIEW: at once, whatever wait_seconds says (30, the maximum, included).
    const settled = await timedGet(`/v1/tasks/${waiting.task_id}?wait_seconds=30`);
    assert.deepEqual([settled.response.status, settled.response.body.data.state], [200, 'CANCELLED']);
    assert.ok(settled.ms < 10_000, `a CANCELLED task waited ${settled.ms} ms`);
    const review = await submit('default', { on_unknown_outcome: 'review' });
    await t.db.exec("UPDATE orbit_tasks SET state = 'NEEDS_REVIEW' WHERE task_id = UNHEX(?)", [review.task_id]);
    const reviewing = await timedGet(`/v1/tasks/${review.task_id}?wait_seconds=30`);
    assert.deepEqual([reviewing.response.status, reviewing.response.body.data.state], [200, 'NEEDS_REVIEW']);
    assert.ok(reviewing.ms < 10_000, `a NEEDS_REVIEW task waited ${reviewing.ms} ms`);
    await post(`/v1/tasks/${review.task_id}:resolve`, { outcome: 'retry', reason: '测试结束' });
    // Not visible: 404 at once, without waiting (30 asked for; timedGet cuts a wait off after 25 s).
    const ordersTask = await submit('orders');
    for (const [id, token] of [
      ['0'.repeat(32), admin],
      [ordersTask.task_id, scoped],
    ] as const) {
      const missing = await timedGet(`/v1/tasks/${id}?wait_seconds=30`, token);
      assert.deepEqual([missing.response.status, missing.response.body.error.code], [404, 'NOT_FOUND']);
      assert.ok(missing.ms < 10_000, `a 404 waited ${missing.ms} ms`);
    }
    for (const query of ['wait_seconds=31', 'wait_seconds=-1', 'wait_seconds=1.5', 'wait_seconds=abc', 'wait_seconds=0&wait_seconds=0']) {
      const bad = await get(`/v1/tasks/${ordersTask.task_id}?${query}`, 400, admin, 'INVALID_ARGUMENT');
      assert.deepEqual([bad.body.error.details.field, bad.body.error.details.location], ['wait_seconds', 'query'], `${query}: ${bad.text}`);
    }
  });

  test('subscriptions: create (filters, from), replay, conflicts, get, list with pages and scope, read (filters, limit, reader scope, wait_seconds), ack (forward, again, below, beyond the head), pause, resume, and their errors', async () => {
    const count = async () =>
      Number((await t.db.rows<{ n: number }>('SELECT COUNT(*) AS n FROM orbit_subscriptions WHERE namespace_id = UNHEX(?)', [owner.namespaceId]))[0]?.n);
    const at = (id: string, suffix = '') => `/v1/subscriptions/${id}${suffix}`;
    const ack = (id: string, sequence: string, status = 200, options: { token?: string; key?: string; code?: string } = {}) =>
      post(at(id, ':ack'), { sequence }, status, options);
    const read = async (id: string, query = '', token = admin) =>
      (await get(at(id, `/events${query}`), 200, token)).body.data.events as Array<Record<string, any>>;
    const feed = async (token: string, limit: number) => (await get(`/v1/events?after=0&limit=${limit}`, 200, token)).body.data.events;

    // Every option: both filters, from the beginning (position 0).
    const everything = { name: 'orders-feed', reason: '订单事件', types: ['task.submitted', 'task.cancelled'], queues: ['orders'], from: 'beginning' };
    const created = await post('/v1/subscriptions', everything, 200, { key: 'sub-orders' });
    assert.equal(created.body.data.deduplicated, false);
    const s = created.body.data.subscription;
    assert.match(s.subscription_id, HEX32);
    const { subscription_id: _id, created_at: _created, ...rest } = s;
    assert.deepEqual(rest, {
      namespace: owner.namespace,
      name: 'orders-feed',
      types: ['task.submitted', 'task.cancelled'],
      queues: ['orders'],
      state: 'ACTIVE',
      acked_sequence: '0',
    });

    // The same key and body: the original snapshot; another body under the key; the name taken (in this namespace only).
    const replay = await post('/v1/subscriptions', everything, 200, { key: 'sub-orders' });
    assert.deepEqual(replay.body.data, { subscription: s, deduplicated: true });
    await post('/v1/subscriptions', { ...everything, types: ['task.submitted'] }, 409, { key: 'sub-orders', code: 'IDEMPOTENCY_CONFLICT' });
    const taken = await post('/v1/subscriptions', { ...everything, from: 'now' }, 409, { code: 'STATE_CONFLICT' });
    assert.equal(taken.body.error.details.field, 'name');
    const foreign = (await post('/v1/subscriptions', { name: 'orders-feed', reason: '另一个应用' }, 200, { token: other.token })).body.data.subscription;

    // `from` left out is `now`: after the newest event of the namespace, the subscription's own creation included.
    const fromNow = await post('/v1/subscriptions', { name: 'from-now', reason: '从现在起' }, 200, { key: 'sub-now' });
    const n = fromNow.body.data.subscription;
    assert.equal(n.acked_sequence, await namespaceHead());
    assert.deepEqual([n.types, n.queues, n.state], [undefined, undefined, 'ACTIVE']);
    const explicit = await post('/v1/subscriptions', { name: 'from-now', reason: '从现在起', from: 'now' }, 200, { key: 'sub-now' });
    assert.deepEqual(explicit.body.data, { subscription: n, deduplicated: true }, 'the default filled in, the same request');

    // Refused, and nothing written: a queue that does not exist or is outside the scope is 404 (like a queue); bad fields are 400 naming them.
    const before = await count();
    await post('/v1/subscriptions', { name: 'nq', reason: 'x', queues: ['no-such-queue'] }, 404, { code: 'NOT_FOUND' });
    await post('/v1/subscriptions', { name: 'nq-2', reason: 'x', queues: ['orders', 'no-such-queue'] }, 404, { code: 'NOT_FOUND' });
    await post('/v1/subscriptions', { name: 'scope', reason: 'x', queues: ['orders'] }, 404, { token: scoped, code: 'NOT_FOUND' });
    await post('/v1/subscriptions', { name: 'scope-2', reason: 'x', queues: ['default', 'orders'] }, 404, { token: scoped, code: 'NOT_FOUND' });
    await post('/v1/subscriptions', { name: 'elsewhere', reason: 'x', queues: ['orders'] }, 404, { token: other.token, code: 'NOT_FOUND' }); // another namespace's queue
    const refused: Array<[Record<string, unknown>, string]> = [
      [{ name: 'Not A Name', reason: 'x' }, 'name'],
      [{ name: 'blank', reason: '   ' }, 'reason'],
      [{ name: 'no-types', reason: 'x', types: [] }, 'types'],
      [{ name: 'bad-type', reason: 'x', types: ['Task.Submitted'] }, 'types[0]'],
      [{ name: 'twice', reason: 'x', types: ['task.submitted', 'task.submitted'] }, 'types'],
      [{ name: 'twice-2', reason: 'x', queues: ['orders', 'orders'] }, 'queues'],
      [{ name: 'bad-queue', reason: 'x', queues: ['Bad!Name'] }, 'queues[0]'],
      [{ name: 'when', reason: 'x', from: 'yesterday' }, 'from'],
      [{ name: 'cursor', reason: 'x', acked_sequence: '0' }, 'acked_sequence'],
    ];
    for (const [body, field] of refused) {
      const r = await post('/v1/subscriptions', body, 400, { code: 'INVALID_ARGUMENT' });
      assert.deepEqual([r.body.error.details.field, r.body.error.details.location], [field, 'body'], `${JSON.stringify(body)} → ${r.text}`);
    }
    assert.equal(await count(), before, 'a refused creation writes no subscription');

    // Get: as created; a queue filter outside the credential's scope hides it (no filter: every credential of the namespace sees it).
    assert.deepEqual((await get(at(s.subscription_id))).body.data, s);
    assert.deepEqual((await get(at(n.subscription_id), 200, scoped)).body.data, n);

    // List: pages of two followed to the end, each subscription once, by name; what the credential may not see is left out.
    for (const name of ['a-first', 'z-last']) await post('/v1/subscriptions', { name, reason: '分页' }, 200);
    const names = async (token: string) => {
      const out: string[] = [];
      let cursor: string | undefined;
      for (let page = 0; page < 10; page++) {
        const r = await get(`/v1/subscriptions?limit=2${cursor ? `&cursor=${cursor}` : ''}`, 200, token);
        assert.ok(r.body.data.subscriptions.length <= 2);
        out.push(...r.body.data.subscriptions.map((x: { name: string }) => x.name));
        cursor = r.body.data.next_cursor;
        if (!cursor) break;
      }
      return out;
    };
    assert.deepEqual(await names(admin), ['a-first', 'from-now', 'orders-feed', 'z-last']);
    assert.deepEqual(await names(scoped), ['a-first', 'from-now', 'z-last'], 'a subscription of queues outside the scope is not listed');
    assert.deepEqual(await names(other.token), ['orders-feed'], "another application's subscriptions only");
    assert.deepEqual((await get('/v1/subscriptions')).body.data.subscriptions[2], s);
    for (const query of ['cursor=AAAA', 'limit=0', 'limit=101', 'state=ACTIVE']) {
      const bad = await get(`/v1/subscriptions?${query}`, 400, admin, 'INVALID_ARGUMENT');
      assert.deepEqual([bad.body.error.details.field, bad.body.error.details.location], [query.split('=')[0], 'query']);
    }

    // Read: the events after the position that match the filters, in sequence order; reading does not move the position.
    const watch = (
      await post('/v1/subscriptions', { name: 'orders-watch', reason: '监视', types: ['task.submitted', 'task.cancelled'], queues: ['orders'] }, 200)
    ).body.data.subscription;
    assert.deepEqual(await read(watch.subscription_id), []);
    const task = await submit('orders');
    await post(`/v1/tasks/${task.task_id}:cancel`, { reason: '产生事件' });
    await submit('default'); // another queue
    await schedule('orders'); // another type (schedule.created)
    const events = await read(watch.subscription_id);
    assert.deepEqual(
      events.map((e) => [e.type, e.subject, e.data.task_id, e.data.queue]),
      [
        ['task.submitted', task.task_id, task.task_id, 'orders'],
        ['task.cancelled', task.task_id, task.task_id, 'orders'],
      ],
    );
    assert.equal(events[0]?.data.priority, task.priority, 'task.submitted carries the priority');
    assert.ok(BigInt(watch.acked_sequence) < BigInt(events[0]?.sequence) && BigInt(events[0]?.sequence) < BigInt(events[1]?.sequence));
    assert.deepEqual(await read(watch.subscription_id), events, 'reading does not move the position');
    assert.deepEqual(await read(watch.subscription_id, '?limit=1'), events.slice(0, 1));
    assert.deepEqual(await read(watch.subscription_id, '?limit=100&wait_seconds=0'), events);

    // Ack: forward; the position again changes nothing; below it, or beyond the newest event, is 409 naming `sequence`, changing nothing.
    const first = events[0]?.sequence as string;
    const acked = await ack(watch.subscription_id, first, 200, { key: 'sub-ack-1' });
    assert.deepEqual(acked.body.data, { subscription: { ...watch, acked_sequence: first }, deduplicated: false });
    assert.deepEqual(await read(watch.subscription_id), events.slice(1));
    assert.deepEqual((await ack(watch.subscription_id, first)).body.data.subscription, { ...watch, acked_sequence: first }, 'the position again: unchanged');
    const below = await ack(watch.subscription_id, String(BigInt(first) - 1n), 409, { code: 'STATE_CONFLICT' });
    assert.equal(below.body.error.details.field, 'sequence');
    const head = await namespaceHead();
    const beyond = await ack(watch.subscription_id, String(BigInt(head) + 1n), 409, { code: 'STATE_CONFLICT' });
    assert.equal(beyond.body.error.details.field, 'sequence');
    await ack(watch.subscription_id, '18446744073709551615', 409, { code: 'STATE_CONFLICT' });
    await ack(watch.subscription_id, '0', 409, { code: 'STATE_CONFLICT' });
    assert.equal((await get(at(watch.subscription_id))).body.data.acked_sequence, first, 'a refused ack moves nothing');
    const ackReplay = await ack(watch.subscription_id, first, 200, { key: 'sub-ack-1' });
    assert.deepEqual(ackReplay.body.data, { subscription: { ...watch, acked_sequence: first }, deduplicated: true });
    await ack(watch.subscription_id, events[1]?.sequence as string, 409, { key: 'sub-ack-1', code: 'IDEMPOTENCY_CONFLICT' });
    // Up to the newest event (past the ones the filters leave out): nothing left to read.
    assert.equal((await ack(watch.subscription_id, head)).body.data.subscription.acked_sequence, head);
    assert.deepEqual(await read(watch.subscription_id), []);

    // Long-poll: [] once wait_seconds are up; answered soon after a matching event (an event the filters leave out does not answer it).
    const idle = await timedGet(at(watch.subscription_id, '/events?wait_seconds=1'));
    assert.deepEqual([idle.response.status, idle.response.body.data], [200, { events: [] }]);
    assert.ok(idle.ms >= 900 && idle.ms < 15_000, `wait_seconds=1 answered after ${idle.ms} ms`);
    // The events come while the read waits (had it not started waiting yet, it reads the matching one at once: the checks hold).
    const making = (async () => {
      await sleep(300);
      await submit('default');
      await sleep(200);
      return submit('orders');
    })();
    const woken = await timedGet(at(watch.subscription_id, '/events?wait_seconds=30'), admin, 40_000);
    const made = await making;
    assert.equal(woken.response.status, 200, woken.response.text);
    assert.deepEqual(
      woken.response.body.data.events.map((e: { type: string; subject: string }) => [e.type, e.subject]),
      [['task.submitted', made.task_id]],
    );
    assert.ok(
      woken.ms >= 450 && woken.ms < 20_000,
      `answered ${woken.ms} ms after the request (the matching event came after 500 ms), not when its 30 s were up`,
    );
    await ack(watch.subscription_id, woken.response.body.data.events[0].sequence);

    // The reader's scope: without a queue filter, a subscription shows exactly what /v1/events shows the reader.
    const all = (await post('/v1/subscriptions', { name: 'everything', reason: '全部', from: 'beginning' }, 200, { token: scoped })).body.data.subscription;
    assert.deepEqual(await read(all.subscription_id, '?limit=100', scoped), await feed(scoped, 100));
    assert.deepEqual(await read(all.subscription_id, '?limit=100'), await feed(admin, 100));
    const scopedEvents = await read(all.subscription_id, '?limit=100', scoped);
    assert.ok(scopedEvents.some((e) => e.type === 'task.submitted'));
    for (const e of scopedEvents.filter((x) => x.type.startsWith('task.')))
      assert.equal(e.data.queue, 'default', `${e.type} of another queue in a scoped read`);
    const pending = await timedGet(at(all.subscription_id, '/events?limit=1&wait_seconds=30'), scoped);
    assert.equal(pending.response.body.data.events.length, 1);
    assert.ok(pending.ms < 10_000, `events were there, yet the read waited ${pending.ms} ms`);

    // Pause and resume: each only from the other state; a PAUSED subscription is not read; events made meanwhile are read after resuming.
    const current = (await get(at(watch.subscription_id))).body.data;
    const paused = await post(at(watch.subscription_id, ':pause'), { reason: '暂停消费' }, 200, { key: 'sub-pause-1' });
    assert.deepEqual(paused.body.data, { subscription: { ...current, state: 'PAUSED' }, deduplicated: false });
    const pausedTwice = await post(at(watch.subscription_id, ':pause'), { reason: '再暂停' }, 409, { code: 'STATE_CONFLICT' });
    assert.equal(pausedTwice.body.error.details.state, 'PAUSED');
    await get(at(watch.subscription_id, '/events'), 409, admin, 'STATE_CONFLICT');
    const pausedRead = await timedGet(at(watch.subscription_id, '/events?wait_seconds=30'));
    assert.deepEqual([pausedRead.response.status, pausedRead.response.body.error?.code], [409, 'STATE_CONFLICT']);
    assert.ok(pausedRead.ms < 10_000, `a PAUSED subscription's read waited ${pausedRead.ms} ms`);
    const meanwhile = await submit('orders');
    const blank = await post(at(watch.subscription_id, ':resume'), { reason: '   ' }, 400, { code: 'INVALID_ARGUMENT' });
    assert.equal(blank.body.error.details.field, 'reason');
    const resumed = await post(at(watch.subscription_id, ':resume'), { reason: '恢复消费' }, 200, { key: 'sub-resume-1' });
    assert.deepEqual(resumed.body.data, { subscription: current, deduplicated: false });
    const resumedTwice = await post(at(watch.subscription_id, ':resume'), { reason: '再恢复' }, 409, { code: 'STATE_CONFLICT' });
    assert.equal(resumedTwice.body.error.details.state, 'ACTIVE');
    assert.deepEqual(
      (await read(watch.subscription_id)).map((e) => [e.type, e.subject]),
      [['task.submitted', meanwhile.task_id]],
      'nothing is lost while it is paused',
    );
    const pauseReplay = await post(at(watch.subscription_id, ':pause'), { reason: '暂停消费' }, 200, { key: 'sub-pause-1' });
    assert.deepEqual(pauseReplay.body.data, { subscription: paused.body.data.subscription, deduplicated: true });
    assert.equal((await get(at(watch.subscription_id))).body.data.state, 'ACTIVE', 'a replay changes nothing');
    await post(at(watch.subscription_id, ':pause'), { reason: '另一个理由' }, 409, { key: 'sub-pause-1', code: 'IDEMPOTENCY_CONFLICT' });

    // Every operation on one subscription: unknown, a queue filter outside the scope, another application's (404), a malformed id (400).
    const operationsOnOne: Array<[string, string, unknown]> = [
      ['GET', '', undefined],
      ['GET', '/events', undefined],
      ['POST', ':pause', { reason: 'x' }],
      ['POST', ':resume', { reason: 'x' }],
      ['POST', ':ack', { sequence: '0' }],
    ];
    for (const [method, suffix, body] of operationsOnOne) {
      const targets: Array<[string, string, number]> = [
        ['0'.repeat(32), admin, 404],
        [s.subscription_id, scoped, 404],
        [foreign.subscription_id, admin, 404],
        [s.subscription_id.toUpperCase(), admin, 400],
      ];
      for (const [id, token, status] of targets) {
        const r = await call(method, at(id, suffix), method === 'POST' ? { token, key: key(), body } : { token }, status);
        if (status === 400) assert.deepEqual([r.body.error.details.field, r.body.error.details.location], ['subscription_id', 'path']);
        else assert.equal(r.body.error.code, 'NOT_FOUND');
      }
    }
    assert.deepEqual((await get(at(foreign.subscription_id), 200, other.token)).body.data, foreign, "another application's subscription is untouched");
    assert.deepEqual((await get(at(s.subscription_id))).body.data, s, 'and so is the one out of the scope');

    // The query of a read: limit 1-100, wait_seconds 0-30, nothing else, each once.
    for (const query of [
      'limit=0',
      'limit=101',
      'limit=x',
      'wait_seconds=31',
      'wait_seconds=-1',
      'wait_seconds=1.5',
      'wait_seconds=abc',
      'limit=1&limit=2',
      'after=0',
    ]) {
      const bad = await get(at(watch.subscription_id, `/events?${query}`), 400, admin, 'INVALID_ARGUMENT');
      assert.deepEqual([bad.body.error.details.field, bad.body.error.details.location], [query.split('=')[0], 'query'], `${query}: ${bad.text}`);
    }
  });

  test('audit events and events: pages, cursors, and bad queries', async () => {
    const pages: unknown[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 50; page++) {
      const r = await get(`/v1/audit-events?limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      pages.push(...r.body.data.audit_events);
      cursor = r.body.data.next_cursor;
      if (!cursor) break;
    }
    const all = (await get('/v1/audit-events?limit=100')).body.data.audit_events;
    assert.deepEqual(pages, all);
    assert.ok(all.length >= 8, `audit records of the changes made so far, got ${all.length}`);
    assert.ok(all.some((e: { action: string }) => e.action === 'application.resources.configure'));
    assert.ok(all.some((e: { action: string }) => e.action === 'task.cancel'));
    assert.ok(all.some((e: { action: string }) => e.action === 'task.resolve'));
    for (const action of ['schedule.create', 'schedule.pause', 'schedule.resume', 'subscription.create', 'subscription.pause', 'subscription.resume']) {
      const type = action.split('.')[0];
      assert.ok(
        all.some((e: { action: string; resource_type: string; resource: string }) => e.action === action && e.resource_type === type && HEX32.test(e.resource)),
        `an audit record of ${action} (resource_type ${type}, the id as resource)`,
      );
    }
    assert.ok(!all.some((e: { action: string }) => e.action.startsWith('subscription.ack')), 'an ack is a consumer position, not a management change');
    await get('/v1/audit-events?cursor=AAAA', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/audit-events?limit=abc', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/audit-events?after=0', 400, admin, 'INVALID_ARGUMENT');

    const first = await get('/v1/events?limit=2');
    assert.equal(first.body.data.events.length, 2);
    const rest = await get(`/v1/events?after=${first.body.data.next_after}&limit=100`);
    const sequences = [...first.body.data.events, ...rest.body.data.events].map((e: { sequence: string }) => BigInt(e.sequence));
    assert.deepEqual(
      sequences,
      [...sequences].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)),
      'events in sequence order',
    );
    const empty = await get(`/v1/events?after=${rest.body.data.next_after}`);
    assert.deepEqual(empty.body.data.events, []);
    assert.equal(empty.body.data.next_after, rest.body.data.next_after);
    const events: Array<{ type: string; subject: string; data: Record<string, unknown> }> = [];
    for (let after = '0', page = 0; page < 100; page++) {
      const r = await get(`/v1/events?after=${after}&limit=100`);
      events.push(...r.body.data.events);
      if (r.body.data.events.length === 0) break;
      after = r.body.data.next_after;
    }
    const types = new Set(events.map((e) => e.type));
    const management = ['schedule.created', 'schedule.paused', 'schedule.resumed', 'subscription.created', 'subscription.paused', 'subscription.resumed'];
    const lifecycle = ['task.submitted', 'task.cancelled', 'task.resolved'];
    for (const type of [...management, ...lifecycle]) assert.ok(types.has(type), `an event ${type}`);
    // Every type in the feed is one Event.type's description names.
    const eventSchema = openapi.components.schemas?.Event as { properties: { type: { description: string } } } | undefined;
    assert.ok(eventSchema, 'openapi.yaml has an Event schema');
    const documented = new Set([...eventSchema.properties.type.description.matchAll(/`([a-z]+(?:\.[a-z_]+)+)`/g)].map((m) => m[1] as string));
    for (const type of [...management, ...lifecycle]) assert.ok(documented.has(type), `Event.type's description lists ${type}`);
    assert.deepEqual(
      [...types].filter((type) => !documented.has(type)),
      [],
      "event types in the feed that Event.type's description does not name",
    );
    // A task event: the task id as subject and in data, with its queue; a task the schedule loop made also names the schedule and the point.
    for (const e of events.filter((x) => x.type.startsWith('task.'))) {
      assert.equal(e.data.task_id, e.subject, `${e.type}: data.task_id is the subject`);
      assert.equal(typeof e.data.queue, 'string', `${e.type}: data.queue`);
    }
    const submitted = events.filter((e) => e.type === 'task.submitted');
    assert.ok(
      submitted.every((e) => Number.isInteger(e.data.priority)),
      'task.submitted carries the priority',
    );
    for (const e of events.filter((x) => x.type === 'task.resolved')) {
      assert.ok(['succeeded', 'failed', 'retry'].includes(e.data.outcome as string), `task.resolved: data.outcome ${JSON.stringify(e.data)}`);
      assert.equal(typeof e.data.state, 'string', 'task.resolved: data.state');
    }
    assert.ok(scheduledTask, 'the schedules test made a task through the schedule loop');
    const ofScheduled = events.filter((e) => e.subject === scheduledTask?.task_id);
    assert.deepEqual(
      ofScheduled.map((e) => [e.type, e.data.queue, e.data.schedule_id, e.data.scheduled_for]),
      [['task.submitted', 'default', scheduledTask.schedule_id, scheduledTask.scheduled_for]],
    );
    const direct = submitted.find((e) => e.subject !== scheduledTask?.task_id);
    assert.deepEqual([direct?.data.schedule_id, direct?.data.scheduled_for], [undefined, undefined], 'a direct submission names no schedule');
    await get('/v1/events?after=abc', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/events?after=-1', 400, admin, 'INVALID_ARGUMENT');
    await get('/v1/events?cursor=AAAA', 400, admin, 'INVALID_ARGUMENT');
  });

  /** One plausible request per operation, for the authentication and permission sweeps. */
  function sampleRequest(op: SpecOperation, taskId: string, scheduleId: string, subscriptionId: string): { path: string; body?: unknown } {
    const path = op.path
      .replace('{queue}', 'default')
      .replace('{namespace}', 'contract')
      .replace('{task_id}', taskId)
      .replace('{schedule_id}', scheduleId)
      .replace('{subscription_id}', subscriptionId);
    const bodies: Record<string, unknown> = {
      configureApplicationResources: { expected_revision: '1', reason: 'x', max_unfinished_tasks: 1, max_concurrency: 1, rate_per_second: 1 },
      configureRetention: { expected_revision: '1', reason: 'x' },
      configureNamespaceResources: { expected_revision: '1', reason: 'x', reserved_unfinished_tasks: 0, reserved_concurrency: 0, reserved_rate_per_second: 0 },
      createQueue: { name: 'never', reason: 'x' },
      configureQueue: {
        expected_revision: '1',
        reason: 'x',
        max_unfinished_tasks: 1,
        max_concurrency: 1,
        rate_per_second: 1,
        key_concurrency: 1,
        paused: false,
      },
      submitTask: { payload: {} },
      submitTasks: { tasks: [{ idempotency_key: 'never', payload: {} }] },
      cancelTask: { reason: 'x' },
      retryTask: { reason: 'x' },
      resolveTask: { outcome: 'failed', reason: 'x' },
      createSchedule: { name: 'never', reason: 'x', interval_seconds: 86400, start_at: FAR_START, payload: {} },
      pauseSchedule: { reason: 'x' },
      resumeSchedule: { reason: 'x' },
      createSubscription: { name: 'never', reason: 'x', queues: ['default'], from: 'beginning' },
      pauseSubscription: { reason: 'x' },
      resumeSubscription: { reason: 'x' },
      ackSubscription: { sequence: '1' },
    };
    if (op.requestSchema === null) return { path };
    const body = bodies[op.operationId];
    assert.ok(body !== undefined, `no sample body for ${op.operationId}: add one here`);
    return { path, body };
  }

  test('401 UNAUTHENTICATED on every authenticated operation: no token, a malformed one, a wrong secret', async () => {
    const task = await submit('default');
    const target = await schedule('default');
    const feed = await subscription({ queues: ['default'], from: 'beginning' });
    const wrongSecret = `${admin.slice(0, -4)}${admin.endsWith('AAAA') ? 'BBBB' : 'AAAA'}`;
    const before = await dbFingerprint(t.db);
    for (const op of operations.filter((o) => o.authenticated)) {
      const { path, body } = sampleRequest(op, task.task_id, target.schedule_id, feed.subscription_id);
      for (const headers of [{}, { Authorization: 'Basic dXNlcjpwYXNz' }, { Authorization: `Bearer ${wrongSecret}` }] as Array<Record<string, string>>) {
        const response = await api.request(op.method, path, { headers, key: op.method === 'POST' ? key() : undefined, body });
        check(op.method, path, response);
        assert.equal(response.status, 401, `${op.operationId} with ${JSON.stringify(headers)}: ${response.text}`);
        assert.equal(response.body.error.code, 'UNAUTHENTICATED');
      }
    }
    assert.deepEqual(await dbFingerprint(t.db), before, 'a request refused with 401 changed the database');
  });

  test('403 PERMISSION_DENIED on every operation with an action, naming it', async () => {
    const task = await submit('default');
    const target = await schedule('default');
    const feed = await subscription({ queues: ['default'], from: 'beginning' });
    const before = await dbFingerprint(t.db);
    for (const op of operations.filter((o) => o.action !== null)) {
      const { path, body } = sampleRequest(op, task.task_id, target.schedule_id, feed.subscription_id);
      const token = op.action === 'events:read' ? onlyAudit : onlyEvents;
      const response = await api.request(op.method, path, { token, key: op.method === 'POST' ? key() : undefined, body });
      check(op.method, path, response);
      assert.equal(response.status, 403, `${op.operationId}: ${response.text}`);
      assert.equal(response.body.error.code, 'PERMISSION_DENIED');
      assert.equal(response.body.error.details.action, op.action);
    }
    assert.deepEqual(await dbFingerprint(t.db), before, 'a request refused with 403 changed the database');
  });

  test('an unknown route is 404 NOT_FOUND in the error envelope; a method a path does not serve is 405', async () => {
    const response = await api.request('GET', '/v1/nothing-here', { token: admin });
    assert.equal(response.status, 404);
    assertErrorEnvelope(response.body);
    assert.equal(response.body.error.code, 'NOT_FOUND');
    assert.equal(response.headers.get('x-request-id'), response.body.request_id);
    assert.equal(response.headers.get('x-content-type-options'), 'nosniff');
    const method = await api.request('DELETE', '/v1/queues', { token: admin });
    assert.equal(method.status, 405);
    assertErrorEnvelope(method.body);
    assert.equal(method.body.error.code, 'METHOD_NOT_ALLOWED');
    assert.equal(method.headers.get('x-content-type-options'), 'nosniff');
  });

  test('connectWorker over a real socket: 101 and hello/welcome; 400 without an upgrade; 401; 403', async () => {
    server = await startServer({ ...testConfig(), databaseUrl: t.url, listenPort: 0 }, { log: silentLogger() });
    const base = server.url;
    const fetchChecked = async (token: string | null, status: number) => {
      const raw = await fetch(`${base}/v1/workers/connect`, { headers: token === null ? {} : { Authorization: `Bearer ${token}` } });
      const text = await raw.text();
      const response: TestResponse = { status: raw.status, headers: raw.headers, text, body: JSON.parse(text) };
      check('GET', '/v1/workers/connect', response);
      assert.equal(response.status, status, text);
      return response;
    };
    const plain = await fetchChecked(admin, 400);
    assert.equal(plain.body.error.details.field, 'Upgrade');
    await fetchChecked(null, 401);
    await fetchChecked(onlyEvents, 403);

    const session = await connectRaw(base, admin);
    // The upgrade answered 101 Switching Protocols (the spec's only success).
    check('GET', '/v1/workers/connect', { status: 101, headers: new Headers(), text: '', body: undefined });
    const welcome = await session.request({ type: 'hello', node_id: 'contract-node', queues: ['default'], capacity: 1 });
    assert.equal(welcome.type, 'welcome', JSON.stringify(welcome));
    assert.match(welcome.session_id, HEX32);
    await session.close();
    await assert.rejects(connectRaw(base, onlyEvents), (e: { status?: number }) => e.status === 403);
    // A refused upgrade is written to the socket by server/worker/upgrade.ts from the app's own
    // response: the same envelope and headers as any other answer (nosniff included, in check).
    for (const [token, status] of [
      [null, 401],
      [onlyEvents, 403],
    ] as const) {
      const refused = await new Promise<TestResponse>((resolve, reject) => {
        const socket = new WebSocket(`${base.replace(/^http/, 'ws')}/v1/workers/connect`, {
          headers: token === null ? {} : { Authorization: `Bearer ${token}` },
        });
        socket.on('open', () => reject(new Error('the upgrade was accepted')));
        socket.on('error', () => {});
        socket.on('unexpected-response', (_request, res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => {
            const headers = new Headers();
            for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') headers.set(name, value);
            resolve({ status: res.statusCode ?? 0, headers, text, body: JSON.parse(text) });
          });
        });
      });
      check('GET', '/v1/workers/connect', refused);
      assert.equal(refused.status, status, refused.text);
    }
  });

  test('coverage: every operation of openapi.yaml was exercised, with every status it declares', () => {
    const exercised = new Set(seen.keys());
    const missing = [...operationIds].filter((id) => !exercised.has(id));
    const unknown = [...exercised].filter((id) => !operationIds.has(id));
    assert.deepEqual({ missing, unknown }, { missing: [], unknown: [] }, 'operations without contract coverage (add them to this file)');
    const statusGaps: string[] = [];
    for (const id of operationIds) {
      for (const status of declaredStatuses(id)) {
        if (!seen.get(id)?.has(status)) statusGaps.push(`${id} ${status}`);
      }
    }
    assert.deepEqual(statusGaps, [], 'declared status codes never observed');
  });
});
