/**
 * The HTTP SDK against a real server (HTTP over a socket, real MariaDB): every method once, in
 * the one-options-object convention with openapi.yaml's names (checked against the spec for
 * every operation), counts as numbers and tokens as strings (everything returned survives
 * JSON), OrbitError for each error class, replays, middleware and token functions, and the
 * failures where no Orbit answer arrives at all.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { parse } from 'yaml';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';
import { NAMESPACE_ACTIONS } from '../../server/domain/actions.ts';
import { createOrbitClient, isOrbitError, OrbitError, type OrbitClient, type OrbitMiddleware } from '../../sdk/index.ts';
import { NonRetryableError, OrbitWorker } from '../../sdk/worker.ts';

const REQUEST_ID = /^[0-9a-f]{32}$/;

/** What the SDK returns survives JSON: no bigint, nothing lost (and it hands the value back). */
function json<T>(value: T): T {
  assert.deepEqual(JSON.parse(JSON.stringify(value)), value, 'survives JSON.stringify');
  return value;
}

/** A fetch that answers every request with `body` (status 200 unless said) and records the requests. */
function fakeFetch(body: unknown, status = 200) {
  const requests: Array<{ method: string; url: URL; headers: Headers; body: string }> = [];
  const fetch = async (request: Request) => {
    requests.push({ method: request.method, url: new URL(request.url), headers: request.headers, body: await request.text() });
    return Response.json(body, { status, headers: { 'x-request-id': 'f'.repeat(32) } });
  };
  return { fetch, requests };
}

/**
 * Type-level checks (compiled by `npm run typecheck`, never run): positional arguments and
 * swapped or misnamed fields do not compile.
 */
export function callingConventionTypes(orbit: OrbitClient): void {
  // @ts-expect-error - one options object, not (key, queue, body)
  void orbit.submitTask('welcome-42', 'emails', { payload: {} });
  // @ts-expect-error - the header is idempotency_key, as everywhere else
  void orbit.submitTask({ queue: 'emails', idempotencyKey: 'welcome-42', payload: {} });
  // @ts-expect-error - an operation with an Idempotency-Key requires it
  void orbit.cancelTask({ task_id: 'x', reason: 'r' });
  // @ts-expect-error - getTask's path parameter is task_id
  void orbit.getTask({ taskId: 'x' });
  // @ts-expect-error - subscriptions are addressed by subscription_id
  void orbit.readSubscription({ name: 'billing' });
  // @ts-expect-error - counts are numbers
  const wrong: bigint = ({} as Awaited<ReturnType<OrbitClient['getApplicationResources']>>).unfinished_tasks;
  void wrong;
  // @ts-expect-error - revisions are decimal strings
  const revision: number = ({} as Awaited<ReturnType<OrbitClient['getApplicationResources']>>).revision;
  void revision;
}

/** Runs `fn`, which must fail with an OrbitError, and returns that error. */
async function orbitError(fn: () => Promise<unknown>): Promise<OrbitError> {
  try {
    await fn();
  } catch (error) {
    assert.ok(isOrbitError(error), `expected an OrbitError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected an OrbitError');
}

/** A port nothing listens on: bind one, then close it. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  assert.ok(address && typeof address === 'object');
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return address.port;
}

describe('HTTP SDK', () => {
  let t: TestDatabase;
  let server: RunningServer;
  let tenant: TestTenant;
  let orbit: OrbitClient;

  before(async () => {
    t = await freshDatabase('sdk');
    server = await startServer({ ...testConfig(), databaseUrl: t.url, listenPort: 0, databasePoolSize: 8, logLevel: 'silent' }, { log: silentLogger() });
    tenant = await createTenant(t.db, { namespace: 'sdk', queues: ['default'], resourceAccess: true });
    // Every action on every queue, so the test can create queues the bootstrap credential does not cover.
    const token = await createCredential(t.db, tenant, [...NAMESPACE_ACTIONS, 'application:resources:read', 'application:resources:manage'], ['*']);
    orbit = createOrbitClient({ baseUrl: `${server.url}/`, token }); // trailing slash on purpose
  });
  after(async () => {
    await server?.close();
    await t?.drop();
  });

  test('options are validated up front', () => {
    const token = tenant.token;
    for (const baseUrl of ['not a url', 'ftp://127.0.0.1/', 'http://user:pw@127.0.0.1/', 'http://127.0.0.1/?x=1']) {
      assert.throws(
        () => createOrbitClient({ baseUrl, token }),
        (e) => isOrbitError(e) && e.code === 'INVALID_ARGUMENT' && e.details?.field === 'baseUrl',
        baseUrl,
      );
    }
    for (const bad of ['', 'has space', 'line\nbreak']) {
      assert.throws(
        () => createOrbitClient({ baseUrl: server.url, token: bad }),
        (e) => isOrbitError(e) && e.details?.field === 'token',
      );
    }
    assert.throws(
      () => createOrbitClient({ baseUrl: server.url, token, middleware: [{} as OrbitMiddleware] }),
      (e) => isOrbitError(e) && e.details?.field === 'middleware',
    );
    assert.doesNotThrow(() => createOrbitClient({ baseUrl: 'https://orbit.example/prefix/', token }));
    assert.doesNotThrow(() => createOrbitClient({ baseUrl: 'https://orbit.example/', token: () => 'later' }));
  });

  test('every operation of openapi.yaml is a method taking its parameters by their spec names', async () => {
    type Parameter = { name: string; in: string };
    const spec = parse(readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8')) as {
      paths: Record<
        string,
        Record<string, { operationId: string; parameters?: Array<Parameter | { $ref: string }>; requestBody?: unknown; 'x-orbit-raw'?: boolean }>
      >;
      components: { parameters: Record<string, Parameter> };
    };
    const resolve = (p: Parameter | { $ref: string }): Parameter => ('$ref' in p ? spec.components.parameters[p.$ref.split('/').at(-1)!]! : p);
    const { fetch, requests } = fakeFetch({ request_id: 'f'.repeat(32), error: { code: 'INTERNAL', message: 'fake' } }, 500);
    const client = createOrbitClient({ baseUrl: 'http://orbit.test/prefix', token: 'orbit_test', fetch });
    const covered: string[] = [];
    for (const [path, methods] of Object.entries(spec.paths)) {
      if (!path.startsWith('/v1/')) continue;
      for (const [method, op] of Object.entries(methods)) {
        if (op['x-orbit-raw']) continue;
        const name = op.operationId;
        const found = (client as unknown as Record<string, ((input: Record<string, unknown>) => Promise<unknown>) | undefined>)[name];
        assert.ok(typeof found === 'function', `the client has ${name}`);
        const method_ = found;
        const parameters = (op.parameters ?? []).map(resolve);
        const input: Record<string, unknown> = {};
        for (const p of parameters) {
          if (p.in === 'path') input[p.name] = `v-${p.name}`;
          else if (p.in === 'query') input[p.name] = p.name === 'state' ? 'WAITING' : 7;
          else if (p.in === 'header' && p.name === 'Idempotency-Key') input.idempotency_key = `key-${name}`;
          else assert.fail(`${name}: a parameter the SDK does not know: ${p.in} ${p.name}`);
        }
        if (op.requestBody) input.reason = `body of ${name}`;
        requests.length = 0;
        await assert.rejects(method_.call(client, input), (e: unknown) => isOrbitError(e) && e.code === 'INTERNAL' && e.status === 500, name);
        assert.equal(requests.length, 1, name);
        const sent = requests[0]!;
        assert.equal(sent.method, method.toUpperCase(), name);
        const expectedPath = path.replace(/\{([a-z_]+)\}/g, (_, p: string) => `v-${p}`);
        assert.equal(decodeURIComponent(sent.url.pathname), `/prefix${expectedPath}`, name);
        assert.deepEqual(
          [...sent.url.searchParams.keys()].sort(),
          parameters
            .filter((p) => p.in === 'query')
            .map((p) => p.name)
            .sort(),
          `${name}: the query parameters`,
        );
        assert.equal(sent.headers.get('idempotency-key'), parameters.some((p) => p.name === 'Idempotency-Key') ? `key-${name}` : null, name);
        assert.equal(sent.headers.get('authorization'), 'Bearer orbit_test');
        assert.deepEqual(sent.body === '' ? undefined : JSON.parse(sent.body), op.requestBody ? { reason: `body of ${name}` } : undefined, `${name}: the body`);
        covered.push(name);

        // Every required part missing at once: refused before anything is sent, naming one.
        if (parameters.some((p) => p.in === 'path' || p.name === 'Idempotency-Key')) {
          requests.length = 0;
          await assert.rejects(
            method_.call(client, op.requestBody ? { reason: 'r' } : {}),
            (e: unknown) => isOrbitError(e) && e.code === 'INVALID_ARGUMENT' && e.status === 0,
          );
          // The old positional style is refused with a hint, not sent.
          await assert.rejects(
            (method_ as unknown as (...args: unknown[]) => Promise<unknown>).call(client, 'a-key', 'a-queue', {}),
            (e: unknown) => isOrbitError(e) && e.code === 'INVALID_ARGUMENT' && /one options object/.test(e.message),
          );
          assert.equal(requests.length, 0, `${name}: nothing sent`);
        }
        // A field a GET does not have is refused, naming it (a body's unknown fields the server refuses).
        if (!op.requestBody) {
          await assert.rejects(method_.call(client, { ...input, wait: 1 }), (e: unknown) => isOrbitError(e) && e.details?.field === 'wait');
        }
      }
    }
    assert.ok(covered.length >= 32, covered.join(', '));
    // The helpers beyond the operations.
    const own = Object.keys(client)
      .filter((k) => !covered.includes(k))
      .sort();
    assert.deepEqual(own, ['eject', 'getSubscriptionByName', 'subscribe', 'use', 'waitForTask']);
  });

  test('application resources: counts are numbers, the revision a string; configure, replay', async () => {
    const before = json(await orbit.getApplicationResources());
    assert.equal(before.application_id, tenant.applicationId);
    assert.equal(typeof before.revision, 'string');
    assert.equal(before.unfinished_tasks, 0);
    assert.equal(before.active_attempts, 0);
    assert.equal(before.pending_starts, 0);
    assert.equal(before.max_concurrency, 10000); // configured limits are numbers too

    const request = {
      idempotency_key: 'sdk-app-1',
      expected_revision: before.revision,
      reason: 'sdk test',
      max_unfinished_tasks: 500,
      max_concurrency: 50,
      rate_per_second: 5000,
    };
    const changed = json(await orbit.configureApplicationResources(request));
    assert.equal(changed.deduplicated, false);
    assert.deepEqual(changed.resources, {
      ...before,
      revision: String(BigInt(before.revision) + 1n),
      max_unfinished_tasks: 500,
      max_concurrency: 50,
      rate_per_second: 5000,
    });
    assert.deepEqual(await orbit.configureApplicationResources(request), { resources: changed.resources, deduplicated: true });
  });

  test('a count above Number.MAX_SAFE_INTEGER is an OrbitError, never a wrong number', async () => {
    const { fetch } = fakeFetch({
      request_id: 'f'.repeat(32),
      data: {
        application_id: 'a'.repeat(32),
        revision: '9007199254740993',
        max_unfinished_tasks: 1,
        unfinished_tasks: '9007199254740993',
        max_concurrency: 1,
        active_attempts: '0',
        pending_starts: '0',
        rate_per_second: 1,
      },
    });
    const faked = createOrbitClient({ baseUrl: 'http://orbit.test', token: 'orbit_test', fetch });
    const error = await orbitError(() => faked.getApplicationResources());
    assert.deepEqual([error.code, error.status, error.details?.field, error.details?.value], ['INTERNAL', 200, 'unfinished_tasks', '9007199254740993']);
    assert.match(error.message, /MAX_SAFE_INTEGER/);
    assert.deepEqual(JSON.parse(JSON.stringify(error)).code, 'INTERNAL', 'an OrbitError survives JSON too');
  });

  test('queues: create, get, list, configure, replay', async () => {
    const create = { idempotency_key: 'sdk-queue-1', name: 'sdk-jobs', reason: 'sdk test', max_concurrency: 7 };
    const created = json(await orbit.createQueue(create));
    assert.equal(created.deduplicated, false);
    assert.equal(created.queue.queue, 'sdk-jobs');
    assert.equal(created.queue.revision, '1');
    assert.equal(created.queue.unfinished_tasks, 0);
    assert.equal(created.queue.max_concurrency, 7);
    assert.deepEqual(await orbit.createQueue(create), { queue: created.queue, deduplicated: true });

    assert.deepEqual(json(await orbit.getQueue({ queue: 'sdk-jobs' })), created.queue);
    const page = json(await orbit.listQueues({ limit: 100 }));
    assert.deepEqual(
      page.queues.map((q) => q.queue),
      ['default', 'sdk-jobs'],
    );
    assert.equal(typeof page.queues[0]?.active_attempts, 'number');
    assert.deepEqual(await orbit.listQueues(), page, 'no options at all: the defaults');

    const { queue: q } = created;
    const configured = json(
      await orbit.configureQueue({
        queue: 'sdk-jobs',
        idempotency_key: 'sdk-queue-2',
        expected_revision: q.revision,
        reason: 'sdk test',
        max_unfinished_tasks: q.max_unfinished_tasks,
        max_concurrency: 9,
        rate_per_second: q.rate_per_second,
        key_concurrency: 2,
        paused: false,
      }),
    );
    assert.equal(configured.deduplicated, false);
    assert.equal(configured.queue.revision, '2');
    assert.equal(configured.queue.key_concurrency, 2);
  });

  test('tasks: submit, replay, get, list, cancel, resolve', async () => {
    const payload = { order: 42, nested: { revision: '7', nothing: null } }; // user data with a "revision": left as is
    const submit = { queue: 'sdk-jobs', idempotency_key: 'sdk-task-1', payload, priority: 7, resource_key: 'customer-1' };
    const submitted = json(await orbit.submitTask(submit));
    assert.equal(submitted.deduplicated, false);
    const task = submitted.task;
    assert.match(task.task_id, REQUEST_ID);
    assert.equal(task.state, 'WAITING');
    assert.deepEqual(task.payload, payload);
    assert.deepEqual(await orbit.submitTask(submit), { task, deduplicated: true });

    assert.deepEqual(json(await orbit.getTask({ task_id: task.task_id })), task);
    assert.deepEqual((await orbit.listTasks({ queue: 'sdk-jobs', state: 'WAITING' })).tasks, [task]);
    assert.deepEqual((await orbit.listTasks({ queue: 'sdk-jobs', state: 'SUCCEEDED' })).tasks, []);
    assert.equal((await orbit.getQueue({ queue: 'sdk-jobs' })).unfinished_tasks, 1);

    const cancel = { task_id: task.task_id, idempotency_key: 'sdk-cancel-1', reason: 'sdk test' };
    const cancelled = json(await orbit.cancelTask(cancel));
    assert.equal(cancelled.task.state, 'CANCELLED');
    assert.equal(cancelled.deduplicated, false);
    assert.equal((await orbit.cancelTask(cancel)).deduplicated, true);

    // Only a worker's lost lease makes NEEDS_REVIEW; with no attempt involved, the state alone is enough (counters are unchanged: both states are unfinished).
    const review = (await orbit.submitTask({ queue: 'sdk-jobs', idempotency_key: 'sdk-task-2', payload: {}, on_unknown_outcome: 'review' })).task;
    await t.db.exec(`UPDATE orbit_tasks SET state = 'NEEDS_REVIEW' WHERE task_id = UNHEX(?)`, [review.task_id]);
    const resolved = json(
      await orbit.resolveTask({
        task_id: review.task_id,
        idempotency_key: 'sdk-resolve-1',
        outcome: 'succeeded',
        reason: 'checked by hand',
        result: { ok: true, list: [1, null] },
      }),
    );
    assert.equal(resolved.task.state, 'SUCCEEDED');
    assert.deepEqual(resolved.task.result, { ok: true, list: [1, null] });
    assert.equal((await orbit.getQueue({ queue: 'sdk-jobs' })).unfinished_tasks, 0);
  });

  test('audit events and the event feed: sequences are decimal strings, passed back as they came', async () => {
    const audit = json(await orbit.listAuditEvents({ limit: 100 }));
    assert.deepEqual(
      audit.audit_events.map((a) => a.action),
      ['application.resources.configure', 'queue.create', 'queue.configure', 'task.cancel', 'task.resolve'],
    );
    assert.equal(audit.audit_events[0]?.idempotency_key, 'sdk-app-1');

    const feed = json(await orbit.listEvents({ after: '0', limit: 100 }));
    assert.ok(feed.events.length >= 5);
    for (const e of feed.events) assert.match(e.sequence, /^[1-9][0-9]*$/);
    assert.equal(typeof feed.next_after, 'string');
    assert.equal(feed.next_after, feed.events.at(-1)?.sequence);
    const rest = await orbit.listEvents({ after: feed.next_after });
    assert.deepEqual(rest.events, []);
    assert.equal(rest.next_after, feed.next_after);
    assert.deepEqual((await orbit.listEvents({ after: feed.events[0]!.sequence, limit: 1 })).events, [feed.events[1]]);
  });

  test('tasks: bulk submit with one result per item, each item with its own idempotency_key', async () => {
    const result = json(
      await orbit.submitTasks({
        queue: 'sdk-jobs',
        tasks: [
          { idempotency_key: 'sdk-bulk-1', payload: { n: 1 }, priority: 2 },
          { idempotency_key: 'sdk-bulk-2', payload: { n: 2 }, max_attempts: 101 },
          { idempotency_key: 'sdk-bulk-1', payload: { n: 1 }, priority: 2 },
        ],
      }),
    );
    assert.deepEqual([result.accepted, result.replayed, result.refused], [1, 1, 1]);
    assert.deepEqual(
      result.results.map((r) => r.status),
      ['accepted', 'refused', 'replayed'],
    );
    assert.equal(result.results[1]?.error?.details?.field, 'tasks[1].max_attempts');
    const task = result.results[0]?.task;
    assert.ok(task);
    assert.equal((await orbit.getTask({ task_id: task.task_id })).priority, 2);
    // The single submit with the same key and content is the same submission.
    assert.equal((await orbit.submitTask({ queue: 'sdk-jobs', idempotency_key: 'sdk-bulk-1', payload: { n: 1 }, priority: 2 })).deduplicated, true);
    await orbit.cancelTask({ task_id: task.task_id, idempotency_key: 'sdk-bulk-cleanup', reason: 'sdk test cleanup' });
  });

  test('task history: listAllTasks newest first, listTaskAttempts, listTaskEvents, retryTask; waitForTask says whether it settled', async () => {
    const a = (await orbit.submitTask({ queue: 'default', idempotency_key: 'sdk-history-a', payload: { fail: true }, max_attempts: 1 })).task;
    const b = (await orbit.submitTask({ queue: 'sdk-jobs', idempotency_key: 'sdk-history-b', payload: {} })).task;
    const all = json(await orbit.listAllTasks({ state: 'WAITING', limit: 100 }));
    assert.deepEqual(
      all.tasks.map((x) => x.task_id),
      [b.task_id, a.task_id],
      'newest first, across queues',
    );
    assert.deepEqual(
      (await orbit.listAllTasks({ queue: 'default', state: 'WAITING' })).tasks.map((x) => x.task_id),
      [a.task_id],
    );
    const firstPage = await orbit.listAllTasks({ limit: 1 });
    assert.equal(firstPage.tasks.length, 1);
    assert.ok(firstPage.next_cursor);
    const secondPage = await orbit.listAllTasks({ limit: 1, cursor: firstPage.next_cursor });
    assert.notEqual(secondPage.tasks[0]?.task_id, firstPage.tasks[0]?.task_id);

    // While nothing runs it, a wait runs out: timed_out (the server's X-Orbit-Wait: timed_out).
    const waited = json(await orbit.waitForTask({ task_id: a.task_id, timeoutMs: 1_000 }));
    assert.deepEqual([waited.task.state, waited.timed_out], ['WAITING', true]);

    // A worker fails it for good; waitForTask resolves when it is FAILED, with timed_out false.
    const worker = new OrbitWorker({
      baseUrl: server.url,
      token: tenant.token,
      node_id: 'sdk-history',
      queues: ['default'],
      capacity: 1,
      maxPollIntervalMs: 50,
      handler: async () => {
        throw new NonRetryableError('no');
      },
    });
    await worker.start();
    const failed = await orbit.waitForTask({ task_id: a.task_id, timeoutMs: 30_000 });
    await worker.stop();
    assert.deepEqual([failed.task.state, failed.timed_out], ['FAILED', false]);

    const attempts = json(await orbit.listTaskAttempts({ task_id: a.task_id }));
    assert.deepEqual(
      attempts.attempts.map((x) => [x.attempt_number, x.state, x.node_id]),
      [[1, 'FAILED', 'sdk-history']],
    );
    const retry = { task_id: a.task_id, idempotency_key: 'sdk-retry-a', reason: 'fixed the input' };
    const retried = json(await orbit.retryTask(retry));
    assert.deepEqual([retried.task.state, retried.deduplicated], ['WAITING', false]);
    assert.equal((await orbit.retryTask(retry)).deduplicated, true);
    assert.equal((await orbit.getApplicationResources()).unfinished_tasks, 2, 'the retried task counts again');

    const events = json(await orbit.listTaskEvents({ task_id: a.task_id }));
    assert.deepEqual(
      events.events.map((e) => e.type),
      ['task.submitted', 'task.started', 'task.failed', 'task.retried'],
    );
    assert.ok(events.events.every((e) => e.subject === a.task_id && typeof e.sequence === 'string'));
    const later = await orbit.listTaskEvents({ task_id: a.task_id, after: events.events[1]!.sequence, limit: 1 });
    assert.deepEqual(
      later.events.map((e) => e.type),
      ['task.failed'],
    );
    assert.equal(later.next_after, events.events[2]!.sequence);

    const stateConflict = await orbitError(() => orbit.retryTask({ task_id: b.task_id, idempotency_key: 'sdk-retry-b', reason: 'not failed' }));
    assert.deepEqual([stateConflict.code, stateConflict.status], ['STATE_CONFLICT', 409]);
    for (const task of [a, b])
      await orbit.cancelTask({ task_id: task.task_id, idempotency_key: `sdk-history-cleanup-${task.task_id}`, reason: 'sdk test cleanup' });
  });

  test('middleware and hooks: a token function asked per request, logging, tracing, answering, recovering; use and eject', async () => {
    // The token as a function: rotated (or refreshed) between calls without a new client.
    let current = tenant.token;
    let asked = 0;
    const rotating = createOrbitClient({
      baseUrl: server.url,
      token: async () => {
        asked += 1;
        return current;
      },
    });
    assert.equal((await rotating.getQueue({ queue: 'default' })).queue, 'default');
    current = `orbit_${'0'.repeat(32)}_revoked`;
    assert.equal((await orbitError(() => rotating.getQueue({ queue: 'default' }))).code, 'UNAUTHENTICATED');
    current = tenant.token;
    assert.equal((await rotating.getQueue({ queue: 'default' })).queue, 'default');
    assert.equal(asked, 3);
    const badToken = createOrbitClient({ baseUrl: server.url, token: () => 'has space' });
    assert.equal((await orbitError(() => badToken.listQueues())).details?.field, 'token');

    // Logging: every request and every answer (errors too, before they become an OrbitError), correlated by id.
    const log: Array<Record<string, unknown>> = [];
    const sent: Headers[] = [];
    const tracing: OrbitMiddleware = {
      onRequest({ request }) {
        request.headers.set('traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
        log.push({ step: 'trace' });
      },
    };
    const logged = createOrbitClient({
      baseUrl: server.url,
      token: tenant.token,
      fetch: (request) => {
        sent.push(request.headers);
        return fetch(request);
      },
      middleware: [tracing],
      hooks: {
        onRequest({ request, operation, schemaPath, id }) {
          log.push({ step: 'request', operation, schemaPath, method: request.method, authorization: request.headers.has('authorization'), id });
        },
        async onResponse({ response, operation, id }) {
          log.push({
            step: 'response',
            operation,
            status: response.status,
            request_id: response.headers.get('x-request-id'),
            code: ((await response.clone().json()) as { error?: { code?: string } }).error?.code,
            id,
          });
        },
      },
    });
    const missing = await orbitError(() => logged.getTask({ task_id: '0'.repeat(32) }));
    assert.equal(missing.code, 'NOT_FOUND');
    assert.deepEqual(log.slice(0, 2), [
      { step: 'trace' },
      { step: 'request', operation: 'getTask', schemaPath: '/v1/tasks/{task_id}', method: 'GET', authorization: true, id: log[1]?.id },
    ]);
    assert.deepEqual(log[2], { step: 'response', operation: 'getTask', status: 404, request_id: missing.requestId, code: 'NOT_FOUND', id: log[1]?.id });
    assert.equal(sent[0]?.get('traceparent'), '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'the header went out');
    assert.match(sent[0]?.get('authorization') ?? '', /^Bearer orbit_/);

    // eject removes; use adds (for the calls from then on).
    logged.eject(tracing);
    log.length = 0;
    await logged.listQueues();
    assert.deepEqual(
      log.map((l) => l.step),
      ['request', 'response'],
    );
    const order: string[] = [];
    logged.use({ onRequest: () => void order.push('request: added later'), onResponse: () => void order.push('response: added later') });
    await logged.listQueues();
    assert.deepEqual(order, ['request: added later', 'response: added later']);

    // onRequest may answer without sending; onResponse may replace an answer.
    let calls = 0;
    const canned = createOrbitClient({
      baseUrl: server.url,
      token: tenant.token,
      fetch: (request) => ((calls += 1), fetch(request)),
      hooks: {
        onRequest: ({ operation }) =>
          operation === 'getRetention' ? Response.json({ request_id: 'c'.repeat(32), data: { application_id: 'cached', revision: '1' } }) : undefined,
        onResponse: ({ response, operation }) => (operation === 'listQueues' ? Response.json({ request_id: 'c'.repeat(32), data: { queues: [] } }) : response),
      },
    });
    assert.deepEqual(await canned.getRetention(), { application_id: 'cached', revision: '1' });
    assert.equal(calls, 0);
    assert.deepEqual(await canned.listQueues(), { queues: [] });
    assert.equal(calls, 1);

    // onError sees a request that got no answer (an OrbitError UNAVAILABLE) and may replace the error.
    const port = await closedPort();
    const errors: unknown[] = [];
    const offline = createOrbitClient({
      baseUrl: `http://127.0.0.1:${port}`,
      token: tenant.token,
      hooks: {
        onError({ error, operation }) {
          errors.push(error);
          return new Error(`${operation}: offline`);
        },
      },
    });
    await assert.rejects(offline.listQueues(), /listQueues: offline/);
    assert.ok(isOrbitError(errors[0]) && errors[0].code === 'UNAVAILABLE');
  });

  test('400 INVALID_ARGUMENT names the field', async () => {
    // priority is 0-9 in the spec; the type is just number, so the server is the one to refuse it.
    const error = await orbitError(() => orbit.submitTask({ queue: 'sdk-jobs', idempotency_key: 'sdk-bad-1', payload: {}, priority: 99 }));
    assert.equal(error.code, 'INVALID_ARGUMENT');
    assert.equal(error.status, 400);
    assert.match(error.requestId ?? '', REQUEST_ID);
    assert.equal(error.details?.field, 'priority');
    assert.equal(error.retryAfter, undefined);
    assert.ok(error instanceof Error && error.name === 'OrbitError');
    // A field the body does not have: the server names it too.
    const unknown = await orbitError(() =>
      orbit.submitTask({ queue: 'sdk-jobs', idempotency_key: 'sdk-bad-2', payload: {}, ...({ queue_name: 'x' } as Record<string, unknown>) }),
    );
    assert.deepEqual([unknown.code, unknown.details?.field], ['INVALID_ARGUMENT', 'queue_name']);
  });

  test('401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND', async () => {
    const stranger = createOrbitClient({ baseUrl: server.url, token: 'orbit_00000000000000000000000000000000_nope' });
    const unauthenticated = await orbitError(() => stranger.listQueues());
    assert.deepEqual([unauthenticated.code, unauthenticated.status], ['UNAUTHENTICATED', 401]);
    assert.match(unauthenticated.requestId ?? '', REQUEST_ID);

    const readOnly = createOrbitClient({ baseUrl: server.url, token: await createCredential(t.db, tenant, ['queues:read']) });
    const denied = await orbitError(() => readOnly.getApplicationResources());
    assert.deepEqual([denied.code, denied.status], ['PERMISSION_DENIED', 403]);

    const missing = await orbitError(() => orbit.getTask({ task_id: '0'.repeat(32) }));
    assert.deepEqual([missing.code, missing.status], ['NOT_FOUND', 404]);
    const noQueue = await orbitError(() => orbit.getQueue({ queue: 'no-such-queue' }));
    assert.deepEqual([noQueue.code, noQueue.status], ['NOT_FOUND', 404]);
    // Swapping the queue and the key cannot happen by position any more; a wrong queue is still a clear 404.
    const swapped = await orbitError(() => orbit.submitTask({ queue: 'welcome-42', idempotency_key: 'default', payload: {} }));
    assert.deepEqual([swapped.code, swapped.status], ['NOT_FOUND', 404]);
  });

  test('409 STATE_CONFLICT and IDEMPOTENCY_CONFLICT', async () => {
    const current = await orbit.getApplicationResources();
    const limits = { reason: 'sdk test', max_unfinished_tasks: 500, max_concurrency: 50, rate_per_second: 5000 };
    const stale = await orbitError(() => orbit.configureApplicationResources({ idempotency_key: 'sdk-stale', ...limits, expected_revision: '1' }));
    assert.deepEqual([stale.code, stale.status], ['STATE_CONFLICT', 409]);
    assert.equal(stale.details?.current_revision, current.revision);

    await orbit.submitTask({ queue: 'default', idempotency_key: 'sdk-conflict', payload: { n: 1 } });
    const conflict = await orbitError(() => orbit.submitTask({ queue: 'default', idempotency_key: 'sdk-conflict', payload: { n: 2 } }));
    assert.deepEqual([conflict.code, conflict.status], ['IDEMPOTENCY_CONFLICT', 409]);
  });

  test('429 APPLICATION_FULL with Retry-After; a replay of the accepted submission still succeeds', async () => {
    const current = await orbit.getApplicationResources();
    const full = {
      reason: 'sdk test: room for one more',
      max_unfinished_tasks: current.unfinished_tasks + 1,
      max_concurrency: 50,
      rate_per_second: 5000,
    };
    const narrowed = await orbit.configureApplicationResources({ idempotency_key: 'sdk-narrow', ...full, expected_revision: current.revision });

    const accepted = await orbit.submitTask({ queue: 'default', idempotency_key: 'sdk-full-1', payload: { n: 1 } });
    const refused = await orbitError(() => orbit.submitTask({ queue: 'default', idempotency_key: 'sdk-full-2', payload: { n: 2 } }));
    assert.equal(refused.code, 'APPLICATION_FULL');
    assert.equal(refused.status, 429);
    assert.equal(refused.retryAfter, 1);
    assert.match(refused.requestId ?? '', REQUEST_ID);
    assert.deepEqual(await orbit.submitTask({ queue: 'default', idempotency_key: 'sdk-full-1', payload: { n: 1 } }), {
      task: accepted.task,
      deduplicated: true,
    });

    // Make room again and clean up, so the recount sees no stray work.
    await orbit.configureApplicationResources({
      idempotency_key: 'sdk-widen',
      ...full,
      max_unfinished_tasks: 500,
      expected_revision: narrowed.resources.revision,
    });
    const retried = await orbit.submitTask({ queue: 'default', idempotency_key: 'sdk-full-2', payload: { n: 2 } }); // a refused key leaves no receipt
    assert.equal(retried.deduplicated, false);
    for (const { task_id } of (await orbit.listAllTasks({ state: 'WAITING', limit: 100 })).tasks) {
      await orbit.cancelTask({ task_id, idempotency_key: `sdk-cleanup-${task_id}`, reason: 'sdk test cleanup' });
    }
    assert.equal((await orbit.getApplicationResources()).unfinished_tasks, 0);
  });

  test('no answer from the server is UNAVAILABLE with status 0, and nothing is retried', async () => {
    let calls = 0;
    const port = await closedPort();
    const offline = createOrbitClient({
      baseUrl: `http://127.0.0.1:${port}`,
      token: tenant.token,
      fetch: (request) => {
        calls += 1;
        return fetch(request);
      },
    });
    const error = await orbitError(() => offline.submitTask({ queue: 'default', idempotency_key: 'sdk-offline-1', payload: {} }));
    assert.equal(error.code, 'UNAVAILABLE');
    assert.equal(error.status, 0);
    assert.equal(error.requestId, undefined);
    assert.match(error.message, /outcome is unknown/);
    assert.match(error.message, /same idempotency_key/);
    assert.ok(error.cause instanceof Error);
    assert.equal(calls, 1);

    // An aborted call: UNAVAILABLE too (it may have been applied), with the abort as its cause.
    const abort = new AbortController();
    abort.abort();
    const aborted = await orbitError(() => orbit.getTask({ task_id: '0'.repeat(32), signal: abort.signal }));
    assert.deepEqual([aborted.code, aborted.status], ['UNAVAILABLE', 0]);
  });

  test('a response that is not an Orbit envelope is UNAVAILABLE with its status', async () => {
    const proxied = (response: () => Response) => createOrbitClient({ baseUrl: server.url, token: tenant.token, fetch: async () => response() });
    const html = await orbitError(() =>
      proxied(() => new Response('<html>502 Bad Gateway</html>', { status: 502, headers: { 'content-type': 'text/html', 'retry-after': '30' } })).getTask({
        task_id: '0'.repeat(32),
      }),
    );
    assert.deepEqual([html.code, html.status, html.retryAfter, html.requestId], ['UNAVAILABLE', 502, 30, undefined]);
    assert.match(html.message, /outcome is unknown/);

    const truncated = await orbitError(() => proxied(() => new Response('{"request_id":', { status: 200 })).listQueues());
    assert.deepEqual([truncated.code, truncated.status], ['UNAVAILABLE', 200]);

    // JSON, but not Orbit's: an error body without the envelope.
    const foreign = await orbitError(() => proxied(() => Response.json({ message: 'Too Many Requests' }, { status: 429 })).listQueues());
    assert.deepEqual([foreign.code, foreign.status], ['UNAVAILABLE', 429]);
  });

  test('mistakes caught before sending are INVALID_ARGUMENT with status 0, and nothing is sent', async () => {
    let calls = 0;
    const counted = createOrbitClient({ baseUrl: server.url, token: tenant.token, fetch: (request) => ((calls += 1), fetch(request)) });
    for (const key of ['', 'has space', 'x'.repeat(129), 'line\nbreak']) {
      const error = await orbitError(() => counted.submitTask({ queue: 'default', idempotency_key: key, payload: {} }));
      assert.deepEqual([error.code, error.status, error.details?.field], ['INVALID_ARGUMENT', 0, 'idempotency_key']);
    }
    const dots = await orbitError(() => counted.getQueue({ queue: '..' }));
    assert.deepEqual([dots.code, dots.details?.field], ['INVALID_ARGUMENT', 'queue']);
    const unserialisable = await orbitError(() => counted.submitTask({ queue: 'default', idempotency_key: 'sdk-bigint', payload: { n: 1n } }));
    assert.deepEqual([unserialisable.code, unserialisable.status], ['INVALID_ARGUMENT', 0]);
    const noSignal = await orbitError(async () => {
      for await (const _ of counted.subscribe({ subscription_id: '0'.repeat(32) } as Parameters<OrbitClient['subscribe']>[0])) assert.fail('no events');
    });
    assert.deepEqual([noSignal.code, noSignal.details?.field], ['INVALID_ARGUMENT', 'signal']);
    assert.equal(calls, 0);
  });

  test('isOrbitError knows an OrbitError by its brand, too (the other module format of the package)', () => {
    const other = Object.assign(new Error('from the CommonJS build'), { [Symbol.for('@orbit-tasks/sdk.OrbitError')]: true });
    assert.equal(isOrbitError(other), true);
    assert.equal(isOrbitError(new Error('plain')), false);
    assert.equal(isOrbitError(new OrbitError('INTERNAL', 'x', { status: 0 })), true);
  });

  test('usage counters match a recount', async () => {
    await assertCountersMatchRecount(t.db);
  });
});
