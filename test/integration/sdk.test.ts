/**
 * The HTTP SDK against a real server process (HTTP over a socket, real MariaDB): every method
 * once, bigint conversion, OrbitError for each error class, replays, and the failures where
 * no Orbit answer arrives at all.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';
import { NAMESPACE_ACTIONS } from '../../server/domain/actions.ts';
import { createOrbitClient, isOrbitError, type OrbitError, type OrbitClient } from '../../sdk/index.ts';

const REQUEST_ID = /^[0-9a-f]{32}$/;

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
    assert.doesNotThrow(() => createOrbitClient({ baseUrl: 'https://orbit.example/prefix/', token }));
  });

  test('application resources: get, configure, replay with bigint counters and revisions', async () => {
    const before = await orbit.getApplicationResources();
    assert.equal(before.application_id, tenant.applicationId);
    assert.equal(typeof before.revision, 'bigint');
    assert.equal(before.unfinished_tasks, 0n);
    assert.equal(before.active_attempts, 0n);
    assert.equal(before.pending_starts, 0n);
    assert.equal(before.max_concurrency, 10000); // configured limits stay numbers

    const request = { expected_revision: before.revision, reason: 'sdk test', max_unfinished_tasks: 500, max_concurrency: 50, rate_per_second: 5000 };
    const changed = await orbit.configureApplicationResources('sdk-app-1', request);
    assert.equal(changed.deduplicated, false);
    assert.deepEqual(changed.resources, { ...before, revision: before.revision + 1n, max_unfinished_tasks: 500, max_concurrency: 50, rate_per_second: 5000 });

    // A replay, with the revision given as its decimal string this time (the same content on the wire).
    const replay = await orbit.configureApplicationResources('sdk-app-1', { ...request, expected_revision: String(before.revision) });
    assert.deepEqual(replay, { resources: changed.resources, deduplicated: true });
  });

  test('queues: create, get, list, configure, replay', async () => {
    const created = await orbit.createQueue('sdk-queue-1', { name: 'sdk-jobs', reason: 'sdk test', max_concurrency: 7 });
    assert.equal(created.deduplicated, false);
    assert.equal(created.queue.queue, 'sdk-jobs');
    assert.equal(created.queue.revision, 1n);
    assert.equal(created.queue.unfinished_tasks, 0n);
    assert.equal(created.queue.max_concurrency, 7);
    assert.deepEqual(await orbit.createQueue('sdk-queue-1', { name: 'sdk-jobs', reason: 'sdk test', max_concurrency: 7 }), {
      queue: created.queue,
      deduplicated: true,
    });

    assert.deepEqual(await orbit.getQueue('sdk-jobs'), created.queue);
    const page = await orbit.listQueues({ limit: 100 });
    assert.deepEqual(
      page.queues.map((q) => q.queue),
      ['default', 'sdk-jobs'],
    );
    assert.equal(typeof page.queues[0]?.active_attempts, 'bigint');

    const { queue: q } = created;
    const configured = await orbit.configureQueue('sdk-queue-2', 'sdk-jobs', {
      expected_revision: q.revision,
      reason: 'sdk test',
      max_unfinished_tasks: q.max_unfinished_tasks,
      max_concurrency: 9,
      rate_per_second: q.rate_per_second,
      key_concurrency: 2,
      paused: false,
    });
    assert.equal(configured.deduplicated, false);
    assert.equal(configured.queue.revision, 2n);
    assert.equal(configured.queue.key_concurrency, 2);
  });

  test('tasks: submit, replay, get, list, cancel, resolve', async () => {
    const payload = { order: 42, nested: { revision: '7', nothing: null } }; // user data with a "revision": left as is
    const submitted = await orbit.submitTask('sdk-task-1', 'sdk-jobs', { payload, priority: 7, resource_key: 'customer-1' });
    assert.equal(submitted.deduplicated, false);
    const task = submitted.task;
    assert.match(task.task_id, REQUEST_ID);
    assert.equal(task.state, 'WAITING');
    assert.deepEqual(task.payload, payload);
    assert.deepEqual(await orbit.submitTask('sdk-task-1', 'sdk-jobs', { payload, priority: 7, resource_key: 'customer-1' }), { task, deduplicated: true });

    assert.deepEqual(await orbit.getTask(task.task_id), task);
    assert.deepEqual((await orbit.listTasks('sdk-jobs', { state: 'WAITING' })).tasks, [task]);
    assert.deepEqual((await orbit.listTasks('sdk-jobs', { state: 'SUCCEEDED' })).tasks, []);
    assert.equal((await orbit.getQueue('sdk-jobs')).unfinished_tasks, 1n);

    const cancelled = await orbit.cancelTask('sdk-cancel-1', task.task_id, { reason: 'sdk test' });
    assert.equal(cancelled.task.state, 'CANCELLED');
    assert.equal(cancelled.deduplicated, false);
    assert.equal((await orbit.cancelTask('sdk-cancel-1', task.task_id, { reason: 'sdk test' })).deduplicated, true);

    // Only a worker's lost lease makes NEEDS_REVIEW; with no attempt involved, the state alone is enough (counters are unchanged: both states are unfinished).
    const review = (await orbit.submitTask('sdk-task-2', 'sdk-jobs', { payload: {}, on_unknown_outcome: 'review' })).task;
    await t.db.exec(`UPDATE orbit_tasks SET state = 'NEEDS_REVIEW' WHERE task_id = UNHEX(?)`, [review.task_id]);
    const resolved = await orbit.resolveTask('sdk-resolve-1', review.task_id, {
      outcome: 'succeeded',
      reason: 'checked by hand',
      result: { ok: true, list: [1, null] },
    });
    assert.equal(resolved.task.state, 'SUCCEEDED');
    assert.deepEqual(resolved.task.result, { ok: true, list: [1, null] });
    assert.equal((await orbit.getQueue('sdk-jobs')).unfinished_tasks, 0n);
  });

  test('audit events and the event feed', async () => {
    const audit = await orbit.listAuditEvents({ limit: 100 });
    assert.deepEqual(
      audit.audit_events.map((a) => a.action),
      ['application.resources.configure', 'queue.create', 'queue.configure', 'task.cancel', 'task.resolve'],
    );
    assert.equal(audit.audit_events[0]?.idempotency_key, 'sdk-app-1');

    const feed = await orbit.listEvents({ after: 0n, limit: 100 });
    assert.ok(feed.events.length >= 5);
    for (const e of feed.events) assert.equal(typeof e.sequence, 'bigint');
    assert.equal(typeof feed.next_after, 'bigint');
    assert.equal(feed.next_after, feed.events.at(-1)?.sequence);
    const rest = await orbit.listEvents({ after: feed.next_after });
    assert.deepEqual(rest.events, []);
    assert.equal(rest.next_after, feed.next_after);
    // `after` as a decimal string works the same.
    assert.deepEqual((await orbit.listEvents({ after: String(feed.events[0]?.sequence), limit: 1 })).events, [feed.events[1]]);
  });

  test('tasks: bulk submit with one result per item', async () => {
    const result = await orbit.submitTasks('sdk-jobs', [
      { idempotency_key: 'sdk-bulk-1', payload: { n: 1 }, priority: 2 },
      { idempotency_key: 'sdk-bulk-2', payload: { n: 2 }, max_attempts: 101 },
      { idempotency_key: 'sdk-bulk-1', payload: { n: 1 }, priority: 2 },
    ]);
    assert.deepEqual([result.accepted, result.replayed, result.refused], [1, 1, 1]);
    assert.deepEqual(
      result.results.map((r) => r.status),
      ['accepted', 'refused', 'replayed'],
    );
    assert.equal(result.results[1]?.error?.details?.field, 'tasks[1].max_attempts');
    const task = result.results[0]?.task;
    assert.ok(task);
    assert.equal((await orbit.getTask(task.task_id)).priority, 2);
    // The single submit with the same key and content is the same submission.
    assert.equal((await orbit.submitTask('sdk-bulk-1', 'sdk-jobs', { payload: { n: 1 }, priority: 2 })).deduplicated, true);
    await orbit.cancelTask('sdk-bulk-cleanup', task.task_id, { reason: 'sdk test cleanup' });
  });

  test('400 INVALID_ARGUMENT names the field', async () => {
    // priority is 0-9 in the spec; the type is just number, so the server is the one to refuse it.
    const error = await orbitError(() => orbit.submitTask('sdk-bad-1', 'sdk-jobs', { payload: {}, priority: 99 }));
    assert.equal(error.code, 'INVALID_ARGUMENT');
    assert.equal(error.status, 400);
    assert.match(error.requestId ?? '', REQUEST_ID);
    assert.equal(error.details?.field, 'priority');
    assert.equal(error.retryAfter, undefined);
    assert.ok(error instanceof Error && error.name === 'OrbitError');
  });

  test('401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND', async () => {
    const stranger = createOrbitClient({ baseUrl: server.url, token: 'orbit_00000000000000000000000000000000_nope' });
    const unauthenticated = await orbitError(() => stranger.listQueues());
    assert.deepEqual([unauthenticated.code, unauthenticated.status], ['UNAUTHENTICATED', 401]);
    assert.match(unauthenticated.requestId ?? '', REQUEST_ID);

    const readOnly = createOrbitClient({ baseUrl: server.url, token: await createCredential(t.db, tenant, ['queues:read']) });
    const denied = await orbitError(() => readOnly.getApplicationResources());
    assert.deepEqual([denied.code, denied.status], ['PERMISSION_DENIED', 403]);

    const missing = await orbitError(() => orbit.getTask('0'.repeat(32)));
    assert.deepEqual([missing.code, missing.status], ['NOT_FOUND', 404]);
    const noQueue = await orbitError(() => orbit.getQueue('no-such-queue'));
    assert.deepEqual([noQueue.code, noQueue.status], ['NOT_FOUND', 404]);
  });

  test('409 STATE_CONFLICT and IDEMPOTENCY_CONFLICT', async () => {
    const current = await orbit.getApplicationResources();
    const limits = { reason: 'sdk test', max_unfinished_tasks: 500, max_concurrency: 50, rate_per_second: 5000 };
    const stale = await orbitError(() => orbit.configureApplicationResources('sdk-stale', { ...limits, expected_revision: 1n }));
    assert.deepEqual([stale.code, stale.status], ['STATE_CONFLICT', 409]);
    assert.equal(stale.details?.current_revision, String(current.revision));

    await orbit.submitTask('sdk-conflict', 'default', { payload: { n: 1 } });
    const conflict = await orbitError(() => orbit.submitTask('sdk-conflict', 'default', { payload: { n: 2 } }));
    assert.deepEqual([conflict.code, conflict.status], ['IDEMPOTENCY_CONFLICT', 409]);
  });

  test('429 APPLICATION_FULL with Retry-After; a replay of the accepted submission still succeeds', async () => {
    const current = await orbit.getApplicationResources();
    const full = {
      reason: 'sdk test: room for one more',
      max_unfinished_tasks: Number(current.unfinished_tasks) + 1,
      max_concurrency: 50,
      rate_per_second: 5000,
    };
    const narrowed = await orbit.configureApplicationResources('sdk-narrow', { ...full, expected_revision: current.revision });

    const accepted = await orbit.submitTask('sdk-full-1', 'default', { payload: { n: 1 } });
    const refused = await orbitError(() => orbit.submitTask('sdk-full-2', 'default', { payload: { n: 2 } }));
    assert.equal(refused.code, 'APPLICATION_FULL');
    assert.equal(refused.status, 429);
    assert.equal(refused.retryAfter, 1);
    assert.match(refused.requestId ?? '', REQUEST_ID);
    assert.deepEqual(await orbit.submitTask('sdk-full-1', 'default', { payload: { n: 1 } }), { task: accepted.task, deduplicated: true });

    // Make room again and clean up, so the recount sees no stray work.
    await orbit.configureApplicationResources('sdk-widen', { ...full, max_unfinished_tasks: 500, expected_revision: narrowed.resources.revision });
    const retried = await orbit.submitTask('sdk-full-2', 'default', { payload: { n: 2 } }); // a refused key leaves no receipt
    assert.equal(retried.deduplicated, false);
    for (const { task_id } of (await orbit.listTasks('default', { state: 'WAITING' })).tasks) {
      await orbit.cancelTask(`sdk-cleanup-${task_id}`, task_id, { reason: 'sdk test cleanup' });
    }
    assert.equal((await orbit.getApplicationResources()).unfinished_tasks, 0n);
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
    const error = await orbitError(() => offline.submitTask('sdk-offline-1', 'default', { payload: {} }));
    assert.equal(error.code, 'UNAVAILABLE');
    assert.equal(error.status, 0);
    assert.equal(error.requestId, undefined);
    assert.match(error.message, /outcome is unknown/);
    assert.match(error.message, /same Idempotency-Key/);
    assert.ok(error.cause instanceof Error);
    assert.equal(calls, 1);
  });

  test('a response that is not an Orbit envelope is UNAVAILABLE with its status', async () => {
    const proxied = (response: () => Response) => createOrbitClient({ baseUrl: server.url, token: tenant.token, fetch: async () => response() });
    const html = await orbitError(() =>
      proxied(() => new Response('<html>502 Bad Gateway</html>', { status: 502, headers: { 'content-type': 'text/html', 'retry-after': '30' } })).getTask(
        '0'.repeat(32),
      ),
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
      const error = await orbitError(() => counted.submitTask(key, 'default', { payload: {} }));
      assert.deepEqual([error.code, error.status, error.details?.field], ['INVALID_ARGUMENT', 0, 'Idempotency-Key']);
    }
    const dots = await orbitError(() => counted.getQueue('..'));
    assert.deepEqual([dots.code, dots.details?.field], ['INVALID_ARGUMENT', 'queue']);
    const unserialisable = await orbitError(() => counted.submitTask('sdk-bigint', 'default', { payload: { n: 1n } }));
    assert.deepEqual([unserialisable.code, unserialisable.status], ['INVALID_ARGUMENT', 0]);
    assert.equal(calls, 0);
  });

  test('usage counters match a recount', async () => {
    await assertCountersMatchRecount(t.db);
  });
});
