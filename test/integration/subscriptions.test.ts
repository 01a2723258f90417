/**
 * Durable subscriptions against two real server processes on one database: the management
 * operations (idempotency, names, scope, pause and resume with their audit records and events);
 * reading after the acknowledged position through the subscription's filters and the reader's
 * queue scope; acknowledging (forward, again, backwards, beyond the head) and a position that
 * survives a SIGKILL; long-polls that answer soon after an event and hold no database
 * connection while they wait; and the SDK's subscribe loop and waitForTask.
 *
 * Events are made with management operations and cancels, so the tests hold whether or not the
 * feed also carries the task lifecycle events (task.submitted, …): every check either filters by
 * type or compares with what /v1/events says.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { createOrbitClient, type Event } from '../../sdk/index.ts';

/**
 * Only to let a request start waiting before what should answer it, or to leave a state in place
 * for a while; never to wait for something (the checks hold whether or not the time sufficed).
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** The second server runs with a pool of 4 connections: 40 long-polls must not take them. */
const SMALL_POOL = { ORBIT_DB_POOL_SIZE: '4' };

describe('subscriptions, two server processes', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  let keys = 0;

  before(async () => {
    t = await freshDatabase('subscriptions');
    servers = await Promise.all([startServerProcess(t.url), startServerProcess(t.url, SMALL_POOL)]);
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const url = (n = 0) => servers[n % servers.length]!.url;
  const key = (label: string) => `${label}-${++keys}`;

  async function create(tenant: TestTenant, body: Record<string, unknown>, n = 0) {
    const r = await call(url(n), 'POST', '/v1/subscriptions', { token: tenant.token, key: key('create'), body: { reason: 'test', ...body } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.data.deduplicated, false);
    return r.body.data.subscription;
  }
  async function read(token: string, id: string, query = '', n = 0) {
    const r = await call(url(n), 'GET', `/v1/subscriptions/${id}/events${query}`, { token });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.events as any[];
  }
  async function ack(token: string, id: string, sequence: string, n = 0) {
    return call(url(n), 'POST', `/v1/subscriptions/${id}:ack`, { token, key: key('ack'), body: { sequence } });
  }
  /** Submits a task to `queue` and cancels it: a task.cancelled event about that queue. */
  async function cancelledTask(tenant: TestTenant, queue: string, n = 1): Promise<string> {
    const submitted = await call(url(n), 'POST', `/v1/queues/${queue}/tasks`, { token: tenant.token, key: key('submit'), body: { payload: { n: keys } } });
    assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
    const id = submitted.body.data.task.task_id as string;
    const cancelled = await call(url(n), 'POST', `/v1/tasks/${id}:cancel`, { token: tenant.token, key: key('cancel'), body: { reason: 'make an event' } });
    assert.equal(cancelled.status, 200, JSON.stringify(cancelled.body));
    return id;
  }
  /** The whole feed of the token's namespace (as its scope shows it), after `after`. */
  async function feed(token: string, after = '0'): Promise<any[]> {
    const out: any[] = [];
    for (;;) {
      const page = (await call(url(), 'GET', `/v1/events?limit=100&after=${after}`, { token })).body.data;
      out.push(...page.events);
      if (page.events.length < 100) return out;
      after = page.next_after;
    }
  }
  const head = async (token: string) => (await feed(token)).at(-1)?.sequence ?? '0';

  test('create (replay, conflicts, duplicate name), get, list with a cursor, pause and resume; audit records and events', async () => {
    const tenant = await createTenant(t.db, { namespace: 'manage', queues: ['q1', 'q2'] });
    const body = { name: 'orders', reason: 'test', types: ['task.cancelled'], queues: ['q1'] };
    const k = key('create');
    const first = await call(url(), 'POST', '/v1/subscriptions', { token: tenant.token, key: k, body });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.body.data.deduplicated, false);
    const sub = first.body.data.subscription;
    assert.deepEqual(Object.keys(sub).sort(), ['acked_sequence', 'created_at', 'name', 'namespace', 'queues', 'state', 'subscription_id', 'types']);
    assert.equal(sub.namespace, 'manage');
    assert.equal(sub.state, 'ACTIVE');
    assert.deepEqual(sub.types, ['task.cancelled']);
    assert.deepEqual(sub.queues, ['q1']);
    // `from` defaults to now: the position is the newest event of the namespace - its own creation.
    const events0 = await feed(tenant.token);
    assert.equal(events0.at(-1).type, 'subscription.created');
    assert.equal(events0.at(-1).subject, sub.subscription_id);
    assert.equal(sub.acked_sequence, events0.at(-1).sequence);

    const replay = await call(url(1), 'POST', '/v1/subscriptions', { token: tenant.token, key: k, body });
    assert.equal(replay.status, 200);
    assert.equal(replay.body.data.deduplicated, true);
    assert.deepEqual(replay.body.data.subscription, sub);
    const conflict = await call(url(), 'POST', '/v1/subscriptions', { token: tenant.token, key: k, body: { ...body, name: 'other' } });
    assert.equal(conflict.status, 409);
    assert.equal(conflict.body.error.code, 'IDEMPOTENCY_CONFLICT');
    const sameName = await call(url(1), 'POST', '/v1/subscriptions', { token: tenant.token, key: key('dup'), body: { name: 'orders', reason: 'again' } });
    assert.equal(sameName.status, 409);
    assert.equal(sameName.body.error.code, 'STATE_CONFLICT');
    assert.equal(sameName.body.error.details.field, 'name');

    // No filters, from the beginning: nothing absent is shown, the position is 0.
    const all = await create(tenant, { name: 'all', from: 'beginning' });
    assert.deepEqual(Object.keys(all).sort(), ['acked_sequence', 'created_at', 'name', 'namespace', 'state', 'subscription_id']);
    assert.equal(all.acked_sequence, '0');

    // Queues must exist and be in the creating credential's scope; both answer the same 404.
    const before = await t.db.rows('SELECT COUNT(*) AS n FROM orbit_subscriptions');
    const unknown = await call(url(), 'POST', '/v1/subscriptions', {
      token: tenant.token,
      key: key('q'),
      body: { name: 'x', reason: 'x', queues: ['q1', 'nope'] },
    });
    assert.equal(unknown.status, 404);
    assert.match(unknown.body.error.message, /"nope"/);
    const q1Only = await createCredential(t.db, tenant, ['subscriptions:manage', 'events:read'], ['q1']);
    const outOfScope = await call(url(), 'POST', '/v1/subscriptions', { token: q1Only, key: key('q'), body: { name: 'x', reason: 'x', queues: ['q2'] } });
    assert.equal(outOfScope.status, 404);
    assert.equal(outOfScope.body.error.message, 'queue "q2" not found');
    const noSuch = await call(url(), 'POST', '/v1/subscriptions', { token: q1Only, key: key('q'), body: { name: 'x', reason: 'x', queues: ['q3'] } });
    assert.equal(noSuch.body.error.message, 'queue "q3" not found', 'out of scope reads exactly like absent');
    for (const [bad, field] of [
      [{ name: 'x', reason: 'x', from: 'later' }, 'from'],
      [{ name: 'x', reason: 'x', types: ['Task.Cancelled'] }, 'types[0]'],
      [{ name: 'x', reason: 'x', types: [] }, 'types'],
      [{ name: '-x', reason: 'x' }, 'name'],
      [{ name: 'x', reason: ' ' }, 'reason'],
    ] as const) {
      const r = await call(url(), 'POST', '/v1/subscriptions', { token: tenant.token, key: key('bad'), body: bad });
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(r.body.error.details.field, field, JSON.stringify(r.body));
    }
    assert.deepEqual(await t.db.rows('SELECT COUNT(*) AS n FROM orbit_subscriptions'), before, 'refused requests write nothing');

    // Get on either server; another namespace, a scope without the subscription's queue, a missing action.
    const got = await call(url(1), 'GET', `/v1/subscriptions/${sub.subscription_id}`, { token: tenant.token });
    assert.deepEqual(got.body.data, sub);
    const stranger = await createTenant(t.db, { namespace: 'stranger', queues: ['q1'] });
    assert.equal((await call(url(), 'GET', `/v1/subscriptions/${sub.subscription_id}`, { token: stranger.token })).status, 404);
    assert.equal(
      (await call(url(), 'POST', `/v1/subscriptions/${sub.subscription_id}:pause`, { token: stranger.token, key: key('p'), body: { reason: 'x' } })).status,
      404,
    );
    const q2Only = await createCredential(t.db, tenant, ['subscriptions:manage'], ['q2']);
    assert.equal((await call(url(), 'GET', `/v1/subscriptions/${sub.subscription_id}`, { token: q2Only })).status, 404, 'it names a queue out of scope');
    assert.equal((await call(url(), 'GET', `/v1/subscriptions/${all.subscription_id}`, { token: q2Only })).status, 200);
    const readerOnly = await createCredential(t.db, tenant, ['events:read']);
    const denied = await call(url(), 'GET', `/v1/subscriptions/${sub.subscription_id}`, { token: readerOnly });
    assert.equal(denied.status, 403);
    assert.equal(denied.body.error.details.action, 'subscriptions:manage');

    // Listing by name with a cursor (binary order), only what the credential may see.
    for (const name of ['c', 'b', 'a']) await create(tenant, { name });
    const page1 = (await call(url(), 'GET', '/v1/subscriptions?limit=2', { token: tenant.token })).body.data;
    assert.deepEqual(
      page1.subscriptions.map((s: any) => s.name),
      ['a', 'all'],
    );
    const page2 = (await call(url(1), 'GET', `/v1/subscriptions?limit=2&cursor=${page1.next_cursor}`, { token: tenant.token })).body.data;
    assert.deepEqual(
      page2.subscriptions.map((s: any) => s.name),
      ['b', 'c'],
    );
    const page3 = (await call(url(), 'GET', `/v1/subscriptions?limit=2&cursor=${page2.next_cursor}`, { token: tenant.token })).body.data;
    assert.deepEqual(
      page3.subscriptions.map((s: any) => s.name),
      ['orders'],
    );
    assert.equal(page3.next_cursor, undefined);
    const scoped = (await call(url(), 'GET', '/v1/subscriptions?limit=100', { token: q2Only })).body.data;
    assert.deepEqual(
      scoped.subscriptions.map((s: any) => s.name),
      ['a', 'all', 'b', 'c'],
    );
    assert.equal((await call(url(), 'GET', '/v1/subscriptions', { token: stranger.token })).body.data.subscriptions.length, 0);
    assert.equal((await call(url(), 'GET', '/v1/subscriptions?cursor=bm90LWEtY3Vyc29y', { token: tenant.token })).status, 400);

    // Pause and resume, each a 409 from the state it already is in, replayable with its key.
    const pk = key('pause');
    const paused = await call(url(), 'POST', `/v1/subscriptions/${sub.subscription_id}:pause`, {
      token: tenant.token,
      key: pk,
      body: { reason: 'maintenance' },
    });
    assert.equal(paused.status, 200, JSON.stringify(paused.body));
    assert.deepEqual(paused.body.data, { subscription: { ...sub, state: 'PAUSED' }, deduplicated: false });
    const pausedReplay = await call(url(1), 'POST', `/v1/subscriptions/${sub.subscription_id}:pause`, {
      token: tenant.token,
      key: pk,
      body: { reason: 'maintenance' },
    });
    assert.equal(pausedReplay.body.data.deduplicated, true);
    const twice = await call(url(1), 'POST', `/v1/subscriptions/${sub.subscription_id}:pause`, {
      token: tenant.token,
      key: key('p'),
      body: { reason: 'twice' },
    });
    assert.equal(twice.status, 409);
    assert.equal(twice.body.error.code, 'STATE_CONFLICT');
    assert.equal(twice.body.error.details.field, 'state');
    const readPaused = await call(url(), 'GET', `/v1/subscriptions/${sub.subscription_id}/events`, { token: tenant.token });
    assert.equal(readPaused.status, 409);
    assert.equal(readPaused.body.error.code, 'STATE_CONFLICT');
    const longPaused = await call(url(), 'GET', `/v1/subscriptions/${sub.subscription_id}/events?wait_seconds=5`, { token: tenant.token });
    assert.equal(longPaused.status, 409, 'a long-poll of a paused subscription is refused at once too');
    const resumed = await call(url(), 'POST', `/v1/subscriptions/${sub.subscription_id}:resume`, {
      token: tenant.token,
      key: key('r'),
      body: { reason: 'done' },
    });
    assert.equal(resumed.status, 200);
    assert.equal(resumed.body.data.subscription.state, 'ACTIVE');
    const again = await call(url(), 'POST', `/v1/subscriptions/${sub.subscription_id}:resume`, {
      token: tenant.token,
      key: key('r'),
      body: { reason: 'again' },
    });
    assert.equal(again.status, 409);
    assert.equal(again.body.error.details.field, 'state');

    const events = (await feed(tenant.token)).filter((e) => e.subject === sub.subscription_id);
    assert.deepEqual(
      events.map((e) => e.type),
      ['subscription.created', 'subscription.paused', 'subscription.resumed'],
    );
    assert.equal(events[0].data.name, 'orders');
    assert.equal(events[1].data.state, 'PAUSED');
    const audit = (await call(url(), 'GET', '/v1/audit-events?limit=100', { token: tenant.token })).body.data.audit_events.filter(
      (a: any) => a.resource === sub.subscription_id,
    );
    assert.deepEqual(
      audit.map((a: any) => [a.action, a.resource_type, a.reason]),
      [
        ['subscription.create', 'subscription', 'test'],
        ['subscription.pause', 'subscription', 'maintenance'],
        ['subscription.resume', 'subscription', 'done'],
      ],
    );
    assert.deepEqual(audit[1].before, { state: 'ACTIVE' });
    assert.deepEqual(audit[1].after, { state: 'PAUSED' });
    assert.equal(audit[0].after.name, 'orders');
    assert.equal(audit[0].idempotency_key, k);
  });

  test('reading: the events after the position in order, through the filters and the reader scope; other namespaces see nothing', async () => {
    const tenant = await createTenant(t.db, { namespace: 'reading', queues: ['q1', 'q2'] });
    const everything = await create(tenant, { name: 'everything' });
    const q1Cancels = await create(tenant, { name: 'q1-cancels', types: ['task.cancelled'], queues: ['q1'] });
    const cancels = await create(tenant, { name: 'cancels', types: ['task.cancelled'] }, 1);
    assert.deepEqual(await read(tenant.token, q1Cancels.subscription_id), [], 'from now: nothing yet');
    const t1 = await cancelledTask(tenant, 'q1');
    const t2 = await cancelledTask(tenant, 'q2');
    await configureQueue(url(), tenant.token, 'q2', { max_concurrency: 7 });
    const t3 = await cancelledTask(tenant, 'q1', 0);

    // No filter: exactly what the feed shows after the position, the same objects, in order.
    const expected = await feed(tenant.token, everything.acked_sequence);
    const got = await read(tenant.token, everything.subscription_id, '?limit=100', 1);
    assert.deepEqual(got, expected);
    const sequences = got.map((e) => BigInt(e.sequence));
    assert.deepEqual(
      sequences,
      [...sequences].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
    );
    assert.ok(got.some((e) => e.type === 'queue.configured'));
    assert.deepEqual(
      got.filter((e) => e.type === 'task.cancelled').map((e) => e.subject),
      [t1, t2, t3],
    );
    assert.equal((await read(tenant.token, everything.subscription_id, '?limit=2')).length, 2);
    assert.deepEqual(await read(tenant.token, everything.subscription_id, '?limit=1'), [got[0]], 'limit takes the first');

    // Types and queues filters.
    assert.deepEqual(
      (await read(tenant.token, cancels.subscription_id)).map((e) => e.subject),
      [t1, t2, t3],
    );
    const q1 = await read(tenant.token, q1Cancels.subscription_id);
    assert.deepEqual(
      q1.map((e) => [e.type, e.subject]),
      [
        ['task.cancelled', t1],
        ['task.cancelled', t3],
      ],
    );

    // The reader's queue scope: a credential limited to q1 sees none of q2's task events, on any subscription.
    const q1Reader = await createCredential(t.db, tenant, ['events:read'], ['q1']);
    const scoped = await read(q1Reader, everything.subscription_id, '?limit=100');
    assert.ok(
      scoped.every((e) => e.subject !== t2 && e.data.queue !== 'q2'),
      JSON.stringify(scoped.map((e) => [e.type, e.subject])),
    );
    assert.deepEqual(
      scoped.filter((e) => e.type === 'task.cancelled').map((e) => e.subject),
      [t1, t3],
    );
    assert.ok(
      scoped.some((e) => e.type === 'subscription.created'),
      'events about no queue are seen by every reader',
    );
    assert.deepEqual(
      (await read(q1Reader, cancels.subscription_id)).map((e) => e.subject),
      [t1, t3],
    );
    // Reading moves nothing.
    assert.equal(
      (await call(url(), 'GET', `/v1/subscriptions/${everything.subscription_id}`, { token: tenant.token })).body.data.acked_sequence,
      everything.acked_sequence,
    );

    // Another namespace: the subscription is 404, and its own subscription sees none of these events.
    const stranger = await createTenant(t.db, { namespace: 'stranger-reading', queues: ['q1'] });
    for (const path of [`/v1/subscriptions/${everything.subscription_id}/events`, `/v1/subscriptions/${everything.subscription_id}/events?wait_seconds=1`]) {
      const r = await call(url(), 'GET', path, { token: stranger.token });
      assert.equal(r.status, 404, path);
      assert.equal(r.body.error.code, 'NOT_FOUND');
    }
    assert.equal((await ack(stranger.token, everything.subscription_id, '1')).status, 404);
    const own = await create(stranger, { name: 'everything', from: 'beginning' });
    const theirs = await read(stranger.token, own.subscription_id, '?limit=100');
    assert.ok(theirs.length >= 1);
    assert.ok(theirs.every((e) => e.namespace === 'stranger-reading' && e.subject !== t1 && e.subject !== t3));
    const missing = await call(url(), 'GET', `/v1/subscriptions/${'0'.repeat(32)}/events`, { token: tenant.token });
    assert.equal(missing.status, 404);
  });

  test('ack: forward, the same again, backwards and beyond the head; a read starts after it; the position survives a SIGKILL', async () => {
    const tenant = await createTenant(t.db, { namespace: 'acking', queues: ['q1'] });
    const sub = await create(tenant, { name: 'acks', types: ['task.cancelled'], from: 'beginning' });
    const ids = [await cancelledTask(tenant, 'q1'), await cancelledTask(tenant, 'q1'), await cancelledTask(tenant, 'q1')];
    const [e1, e2, e3] = await read(tenant.token, sub.subscription_id);
    assert.deepEqual(
      [e1, e2, e3].map((e) => e.subject),
      ids,
    );

    const k = key('ack');
    const forward = await call(url(), 'POST', `/v1/subscriptions/${sub.subscription_id}:ack`, { token: tenant.token, key: k, body: { sequence: e1.sequence } });
    assert.equal(forward.status, 200, JSON.stringify(forward.body));
    assert.deepEqual(forward.body.data, { subscription: { ...sub, acked_sequence: e1.sequence }, deduplicated: false });
    assert.deepEqual(
      (await read(tenant.token, sub.subscription_id, '', 1)).map((e) => e.subject),
      ids.slice(1),
      'the next read starts after the ack',
    );
    const replay = await call(url(1), 'POST', `/v1/subscriptions/${sub.subscription_id}:ack`, { token: tenant.token, key: k, body: { sequence: e1.sequence } });
    assert.equal(replay.body.data.deduplicated, true);
    const same = await ack(tenant.token, sub.subscription_id, e1.sequence, 1);
    assert.equal(same.status, 200, 'the current position again is accepted');
    assert.equal(same.body.data.deduplicated, false);
    assert.equal(same.body.data.subscription.acked_sequence, e1.sequence);

    const backwards = await ack(tenant.token, sub.subscription_id, (BigInt(e1.sequence) - 1n).toString());
    assert.equal(backwards.status, 409);
    assert.equal(backwards.body.error.code, 'STATE_CONFLICT');
    assert.equal(backwards.body.error.details.field, 'sequence');
    assert.equal(backwards.body.error.details.acked_sequence, e1.sequence);
    const newest = BigInt(await head(tenant.token));
    for (const beyond of [(newest + 1n).toString(), '18446744073709551615']) {
      const r = await ack(tenant.token, sub.subscription_id, beyond);
      assert.equal(r.status, 409, beyond);
      assert.equal(r.body.error.code, 'STATE_CONFLICT');
      assert.equal(r.body.error.details.field, 'sequence');
    }
    const wrong = await ack(tenant.token, sub.subscription_id, '-1');
    assert.equal(wrong.status, 400);
    assert.equal(wrong.body.error.details.field, 'sequence');
    // Forward again, through the other server.
    const forwardAgain = await ack(tenant.token, sub.subscription_id, e2.sequence, 1);
    assert.equal(forwardAgain.status, 200);
    assert.equal(forwardAgain.body.data.subscription.acked_sequence, e2.sequence);

    // Only the subscription's events and audit records of the management operations: no audit for an ack.
    const audit = (await call(url(), 'GET', '/v1/audit-events?limit=100', { token: tenant.token })).body.data.audit_events.filter(
      (a: any) => a.resource === sub.subscription_id,
    );
    assert.deepEqual(
      audit.map((a: any) => a.action),
      ['subscription.create'],
    );

    // SIGKILL the server that took the ack; the other reads from the position, and so does a new process.
    await servers[0]!.kill();
    assert.deepEqual(
      (await read(tenant.token, sub.subscription_id, '', 1)).map((e) => e.subject),
      [ids[2]],
    );
    servers[0] = await startServerProcess(t.url);
    const afterRestart = await call(url(0), 'GET', `/v1/subscriptions/${sub.subscription_id}`, { token: tenant.token });
    assert.equal(afterRestart.body.data.acked_sequence, e2.sequence);
    assert.equal((await ack(tenant.token, sub.subscription_id, e3.sequence, 0)).status, 200);
    assert.deepEqual(await read(tenant.token, sub.subscription_id, '', 1), []);
  });

  test('long-poll: answers soon after an event, [] after wait_seconds, 400 beyond 30, and waiters hold no connection', async () => {
    const tenant = await createTenant(t.db, { namespace: 'polling', queues: ['q1'] });
    const sub = await create(tenant, { name: 'poll', types: ['task.cancelled'] });

    // A read that waits (30 s asked for), on one server, for an event written through the other:
    // answered long before the 30 s are up, so by the event. (The bounds below are generous for
    // a loaded machine and still far from 30 s.)
    const started = Date.now();
    const waiting = call(url(0), 'GET', `/v1/subscriptions/${sub.subscription_id}/events?wait_seconds=30`, { token: tenant.token }).then((r) => ({
      ...r,
      at: Date.now(),
    }));
    await sleep(400); // time to start waiting; had it not, it reads the event at once - the checks hold either way
    const id = await cancelledTask(tenant, 'q1', 1);
    const written = Date.now();
    const answer = await waiting;
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.deepEqual(
      answer.body.data.events.map((e: any) => e.subject),
      [id],
    );
    assert.ok(answer.at - started >= 400, 'it waited for the event');
    assert.ok(answer.at - written < 10_000, `answered ${answer.at - written} ms after the event, not when its 30 s were up`);

    // Events the filter leaves out do not answer the read; after wait_seconds it is [] (never before).
    await ack(tenant.token, sub.subscription_id, answer.body.data.events[0].sequence);
    const quiet = Date.now();
    const nothing = call(url(1), 'GET', `/v1/subscriptions/${sub.subscription_id}/events?wait_seconds=2`, { token: tenant.token });
    await sleep(300); // the event below comes while the read waits (or before it: it is no match either way)
    await configureQueue(url(0), tenant.token, 'q1', { max_concurrency: 9 }); // queue.configured: not a type of this subscription
    const empty = await nothing;
    const elapsed = Date.now() - quiet;
    assert.equal(empty.status, 200);
    assert.deepEqual(empty.body.data.events, []);
    assert.ok(elapsed >= 1_900 && elapsed < 15_000, `answered after ${elapsed} ms`);

    const tooLong = await call(url(), 'GET', `/v1/subscriptions/${sub.subscription_id}/events?wait_seconds=31`, { token: tenant.token });
    assert.equal(tooLong.status, 400);
    assert.equal(tooLong.body.error.details.field, 'wait_seconds');
    assert.equal(tooLong.body.error.details.location, 'query');

    // 40 long-polls (30 s each) on the server with 4 database connections; ordinary requests still
    // answer while every one of them waits (were a connection held per poll, they would wait for theirs).
    let answered = 0;
    const pollsStarted = Date.now();
    const polls = Array.from({ length: 40 }, () =>
      call(url(1), 'GET', `/v1/subscriptions/${sub.subscription_id}/events?wait_seconds=30`, { token: tenant.token }).finally(() => {
        answered += 1;
      }),
    );
    await sleep(700); // time for the polls to start waiting (the checks hold whether or not all have)
    for (let i = 0; i < 3; i++) {
      const r = await call(url(1), 'GET', `/v1/subscriptions/${sub.subscription_id}`, { token: tenant.token });
      assert.equal(r.status, 200);
      assert.equal(answered, 0, 'an ordinary GET answered while the 40 long-polls waited');
    }
    const last = await cancelledTask(tenant, 'q1', 0);
    const answers = await Promise.all(polls);
    assert.ok(Date.now() - pollsStarted < 25_000, `the 40 waiters answered ${Date.now() - pollsStarted} ms after they began: woken by the event`);
    for (const r of answers) {
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(
        r.body.data.events.map((e: any) => e.subject),
        [last],
      );
    }
  });

  test('the SDK: subscribe yields events in order and acks each, resumes after the last ack; the methods; waitForTask', async () => {
    const tenant = await createTenant(t.db, { namespace: 'sdk-loop', queues: ['q1'] });
    const orbit = createOrbitClient({ baseUrl: url(0), token: tenant.token });
    const created = await orbit.createSubscription({
      idempotency_key: key('sdk'),
      name: 'loop',
      reason: 'test',
      types: ['task.cancelled'],
      from: 'beginning',
    });
    assert.equal(created.deduplicated, false);
    assert.equal(created.subscription.acked_sequence, '0');
    const id = created.subscription.subscription_id;
    const subscription_id = id;
    assert.equal((await orbit.listSubscriptions({ limit: 10 })).subscriptions[0]?.acked_sequence, '0');
    assert.deepEqual(await orbit.getSubscriptionByName({ name: 'loop' }), created.subscription);
    const ids = [await cancelledTask(tenant, 'q1'), await cancelledTask(tenant, 'q1'), await cancelledTask(tenant, 'q1')];
    const read = await orbit.readSubscription({ subscription_id, limit: 2 });
    assert.equal(read.events.length, 2);
    assert.equal(typeof read.events[0]?.sequence, 'string', 'sequence numbers are tokens: decimal strings');

    // First loop: two events, then abort in the body of the second.
    const got: Event[] = [];
    const first = new AbortController();
    for await (const event of orbit.subscribe({ subscription_id, signal: first.signal, wait_seconds: 2 })) {
      got.push(event);
      if (got.length === 2) {
        // The first event's body returned before this one was handed out: it is acknowledged.
        assert.equal((await orbit.getSubscription({ subscription_id })).acked_sequence, got[0]!.sequence);
        first.abort();
      }
    }
    assert.deepEqual(
      got.map((e) => e.subject),
      ids.slice(0, 2),
    );
    assert.ok(BigInt(got[0]!.sequence) < BigInt(got[1]!.sequence));
    assert.equal(
      (await orbit.getSubscription({ subscription_id })).acked_sequence,
      got[1]!.sequence,
      'the last body returned before the loop ended: acknowledged',
    );

    // Second loop: resumes after the last ack, then long-polls for an event made meanwhile.
    const second = new AbortController();
    const more: Event[] = [];
    let fourth: string | undefined;
    for await (const event of orbit.subscribe({ subscription_id, signal: second.signal, wait_seconds: 5 })) {
      more.push(event);
      if (more.length === 1) fourth = await cancelledTask(tenant, 'q1', 1);
      else second.abort();
    }
    assert.deepEqual(
      more.map((e) => e.subject),
      [ids[2], fourth],
    );
    assert.equal((await orbit.getSubscription({ subscription_id })).acked_sequence, more[1]!.sequence);
    const ackKeys = await t.db.rows<{ idempotency_key: string }>(
      "SELECT idempotency_key FROM orbit_idempotency_receipts WHERE namespace_id = ? AND idempotency_key LIKE 'ack-%' ORDER BY idempotency_key",
      [Buffer.from(tenant.namespaceId, 'hex')],
    );
    assert.deepEqual(ackKeys.map((r) => r.idempotency_key).sort(), [...got, ...more].map((e) => `ack-${id}-${e.sequence}`).sort());

    // A loop that is aborted while it waits ends promptly; breaking out does not acknowledge the event in hand.
    // (Promptly: long before its 30 s wait would be up; generous for a loaded machine.)
    const idle = new AbortController();
    const idleStart = Date.now();
    setTimeout(() => idle.abort(), 300);
    for await (const _ of orbit.subscribe({ subscription_id, signal: idle.signal, wait_seconds: 30 })) assert.fail('nothing to read');
    assert.ok(Date.now() - idleStart < 15_000, `the aborted loop ended after ${Date.now() - idleStart} ms`);
    const fifth = await cancelledTask(tenant, 'q1');
    for await (const event of orbit.subscribe({ subscription_id, signal: new AbortController().signal })) {
      assert.equal(event.subject, fifth);
      break;
    }
    assert.equal((await orbit.getSubscription({ subscription_id })).acked_sequence, more[1]!.sequence, 'a break acknowledges nothing');
    const [again] = (await orbit.readSubscription({ subscription_id })).events;
    assert.equal(again?.subject, fifth, 'it is delivered again');

    // A paused subscription is waited out; the loop goes on once it is resumed.
    await orbit.pauseSubscription({ subscription_id, idempotency_key: key('pause'), reason: 'test' });
    const resume = sleep(500).then(() => orbit.resumeSubscription({ subscription_id, idempotency_key: key('resume'), reason: 'test' })); // paused for a while
    const paused = new AbortController();
    for await (const event of orbit.subscribe({ subscription_id, signal: paused.signal, wait_seconds: 1 })) {
      assert.equal(event.subject, fifth);
      paused.abort();
    }
    assert.equal((await resume).subscription.state, 'ACTIVE');
    assert.equal((await orbit.getSubscription({ subscription_id })).state, 'ACTIVE');
    const acked = await orbit.ackSubscription({ subscription_id, idempotency_key: key('ack'), sequence: again!.sequence });
    assert.equal(acked.subscription.acked_sequence, again!.sequence);

    // A missing subscription is NOT_FOUND, not retried; so is a name nobody gave.
    await assert.rejects(
      async () => {
        for await (const _ of orbit.subscribe({ subscription_id: '0'.repeat(32), signal: new AbortController().signal })) assert.fail('no events');
      },
      (e: any) => e.code === 'NOT_FOUND',
    );
    await assert.rejects(orbit.getSubscriptionByName({ name: 'no-such-name' }), (e: any) => e.code === 'NOT_FOUND');

    // waitForTask: until a cancel settles the task, or as it is when the time is up (not before;
    // the upper bound is generous for a loaded machine).
    const submitted = await orbit.submitTask({ queue: 'q1', idempotency_key: key('submit'), payload: {} });
    const task_id = submitted.task.task_id;
    const waitStart = Date.now();
    const timedOut = await orbit.waitForTask({ task_id, timeoutMs: 1_500 });
    const waited = Date.now() - waitStart;
    assert.deepEqual([timedOut.task.state, timedOut.timed_out], ['WAITING', true]);
    assert.ok(waited >= 1_400 && waited < 15_000, `returned after ${waited} ms`);
    const canceller = sleep(500).then(() => orbit.cancelTask({ task_id, idempotency_key: key('cancel'), reason: 'test' }));
    const settled = await orbit.waitForTask({ task_id, timeoutMs: 60_000 });
    assert.deepEqual([settled.task.state, settled.timed_out], ['CANCELLED', false]);
    await canceller;
  });
});
