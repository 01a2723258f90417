/**
 * `dry_run: true` on the two limit configures (application resources and a queue), against a
 * real orbit-server process and MariaDB: the answer is the configure's answer as it would be
 * (new limits, revision + 1) with `effects` computed from real usage - tasks submitted over
 * HTTP, attempts reserved by a worker over the WebSocket - and nothing at all is written
 * (no limits, revision, audit record, event or receipt: the tables are read and the whole
 * database fingerprinted around each dry run). The usual checks answer as a real configure
 * does (400, 401 for a revoked credential even while its authentication is cached, 403, 404,
 * 409 STATE_CONFLICT on a stale revision), a key used by a dry run is free for the real change
 * afterwards, and a dry run with the key of an earlier real configure is not a replay.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw, type RawSession } from '../helpers/ws-session.ts';
import { assertWritesNothing } from '../helpers/fuzz-common.ts';
import { NAMESPACE_ACTIONS } from '../../server/domain/actions.ts';
import { credentialRevoke } from '../../server/store/tenancy/credentials.ts';
import { createOrbitClient } from '../../sdk/index.ts';

const APP_CONFIGURE = '/v1/application/resources:configure';
const QUEUE = 'mail';
const QUEUE_CONFIGURE = `/v1/queues/${QUEUE}:configure`;
/** A worker session's heartbeat moves its liveness columns while the test runs: not a write of any request. */
const FINGERPRINT = { partial: { orbit_worker_sessions: ['session_id', 'state', 'capacity', 'node_id', 'queues', 'closed_at'] } };

describe('configure dry run', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let tenant: TestTenant;
  let worker: RawSession;
  let attempts: string[] = [];
  let keys = 0;
  const key = (label: string) => `${label}-${++keys}`;

  const http = (method: string, path: string, options: { key?: string; body?: unknown; token?: string } = {}) =>
    call(server.url, method, path, { token: options.token ?? tenant.token, key: options.key, body: options.body });
  const resources = async () => (await http('GET', '/v1/application/resources')).body.data;
  const queue = async () => (await http('GET', `/v1/queues/${QUEUE}`)).body.data;

  /** What a dry run must leave as it was: the rows a configure writes, counted and read. */
  async function written() {
    const app = [Buffer.from(tenant.applicationId, 'hex')];
    const count = async (table: string) => Number((await t.db.rows<{ n: string }>(`SELECT COUNT(*) AS n FROM ${table} WHERE application_id = ?`, app))[0]?.n);
    const [appRow] = await t.db.rows(
      'SELECT revision, max_unfinished_tasks, max_concurrency, rate_per_second, updated_at FROM orbit_application_resources WHERE application_id = ?',
      app,
    );
    const [queueRow] = await t.db.rows(
      'SELECT revision, max_unfinished_tasks, max_concurrency, rate_per_second, key_concurrency, paused, updated_at FROM orbit_queues WHERE application_id = ? AND name = ?',
      [...app, QUEUE],
    );
    return {
      appRow,
      queueRow,
      audit: await count('orbit_audit_events'),
      events: await count('orbit_events'),
      receipts: await count('orbit_idempotency_receipts'),
    };
  }

  /** Runs `fn` (dry runs) and proves it wrote nothing: the rows above, and the whole database. */
  async function writesNothing<T>(fn: () => Promise<T>): Promise<T> {
    return assertWritesNothing(t.db, { readable: written, what: 'no limit, revision, audit record, event or receipt', fingerprint: FINGERPRINT }, fn);
  }

  const appBody = (revision: string, limits: Record<string, unknown>): Record<string, unknown> => ({
    expected_revision: revision,
    reason: '试运行：收紧应用额度',
    max_unfinished_tasks: 1000000,
    max_concurrency: 10000,
    rate_per_second: 100000,
    ...limits,
  });
  const queueBody = (q: Record<string, any>, limits: Record<string, unknown>): Record<string, unknown> => ({
    expected_revision: q.revision,
    reason: '试运行：收紧队列额度',
    max_unfinished_tasks: q.max_unfinished_tasks,
    max_concurrency: q.max_concurrency,
    rate_per_second: q.rate_per_second,
    key_concurrency: q.key_concurrency,
    paused: q.paused,
    ...limits,
  });

  before(async () => {
    t = await freshDatabase('dryrun');
    tenant = await createTenant(t.db, { namespace: 'shop', queues: [QUEUE, 'other'], resourceAccess: true });
    // Reservations outlive the test's steps; authentications are cached for the whole file, so
    // that a revoked credential is refused only by the re-check a write (and a dry run) makes.
    server = await startServerProcess(t.url, { ORBIT_LEASE_SECONDS: '600', ORBIT_AUTH_CACHE_MS: '60000' });
    // Real usage: 5 unfinished tasks, 3 of them reserved by a worker (not started: pending).
    for (let i = 0; i < 5; i++) {
      const r = await http('POST', `/v1/queues/${QUEUE}/tasks`, { key: key('task'), body: { payload: { n: i } } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    worker = await connectRaw(server.url, tenant.token);
    const welcome = await worker.request({ type: 'hello', node_id: 'dry-run-node', queues: [QUEUE], capacity: 3 });
    assert.equal(welcome.type, 'welcome', JSON.stringify(welcome));
    const claimed = await worker.request({ type: 'claim', claim_id: 'c1', max: 3 });
    assert.equal(claimed.type, 'claimed', JSON.stringify(claimed));
    assert.equal(claimed.attempts.length, 3);
    attempts = claimed.attempts.map((a: { attempt_id: string }) => a.attempt_id);
    const usage = await resources();
    assert.deepEqual([usage.unfinished_tasks, usage.active_attempts, usage.pending_starts], ['5', '3', '3']);
  });
  after(async () => {
    // Closing the session releases its reservations (the recount then sees them released).
    await worker?.close();
    await server?.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  test('application: the answer is the configure as it would be, with effects from real usage, and nothing is written', async () => {
    const before = await resources();
    const body = appBody(before.revision, { max_unfinished_tasks: 4, max_concurrency: 2, rate_per_second: 3, dry_run: true });
    const k = key('app-dry');
    const r = await writesNothing(() => http('POST', APP_CONFIGURE, { key: k, body }));
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.data, {
      resources: { ...before, revision: String(BigInt(before.revision) + 1n), max_unfinished_tasks: 4, max_concurrency: 2, rate_per_second: 3 },
      deduplicated: false,
      dry_run: true,
      effects: [
        {
          limit: 'max_unfinished_tasks',
          current: 1000000,
          proposed: 4,
          usage: '5',
          effect: 'unfinished tasks 5 > new max_unfinished_tasks 4: submissions refused (APPLICATION_FULL) until 2 finish',
        },
        {
          limit: 'max_concurrency',
          current: 10000,
          proposed: 2,
          usage: '3',
          effect: 'active attempts 3 > new max_concurrency 2: no new claims until 2 finish',
        },
        {
          limit: 'rate_per_second',
          current: 100000,
          proposed: 3,
          // No attempt has started: the rate is held by the 3 reservations alone.
          usage: '3',
          effect:
            'reservations not yet started 3 = new rate_per_second 3: no new claims until 1 of them has started or been released; starts beyond 3 a second answer RATE_LIMITED',
        },
      ],
    });

    // The same key again, still a dry run: the same answer, not a replay (no receipt was kept).
    const again = await writesNothing(() => http('POST', APP_CONFIGURE, { key: k, body }));
    assert.deepEqual(again.body.data, r.body.data);

    // The real change under the same key applies (no receipt was kept), and does what the dry run said.
    const { dry_run: _, ...real } = body;
    const applied = await http('POST', APP_CONFIGURE, { key: k, body: real });
    assert.equal(applied.status, 200, JSON.stringify(applied.body));
    assert.deepEqual(applied.body.data, { resources: r.body.data.resources, deduplicated: false });
    const refused = await http('POST', `/v1/queues/other/tasks`, { key: key('task'), body: { payload: {} } });
    assert.equal(refused.status, 429);
    assert.equal(refused.body.error.code, 'APPLICATION_FULL');

    // Back to the defaults.
    const restored = await http('POST', APP_CONFIGURE, { key: key('app-restore'), body: appBody(applied.body.data.resources.revision, {}) });
    assert.equal(restored.status, 200, JSON.stringify(restored.body));
  });

  test("queue: the answer is the configure as it would be, with the queue's effects, and nothing is written", async () => {
    const before = await queue();
    const body = queueBody(before, { max_unfinished_tasks: 5, max_concurrency: 10, paused: true, dry_run: true });
    const k = key('queue-dry');
    const r = await writesNothing(() => http('POST', QUEUE_CONFIGURE, { key: k, body }));
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const { updated_at, ...would } = r.body.data.queue;
    const { updated_at: updatedBefore, ...was } = before;
    assert.deepEqual(would, { ...was, revision: String(BigInt(before.revision) + 1n), max_unfinished_tasks: 5, max_concurrency: 10, paused: true });
    assert.ok(updated_at >= updatedBefore, 'updated_at is now, as the change would set it');
    assert.equal(r.body.data.deduplicated, false);
    assert.equal(r.body.data.dry_run, true);
    assert.deepEqual(r.body.data.effects, [
      {
        limit: 'max_unfinished_tasks',
        current: before.max_unfinished_tasks,
        proposed: 5,
        usage: '5',
        effect: 'unfinished tasks 5 = new max_unfinished_tasks 5: submissions refused (QUEUE_FULL) until 1 finishes',
      },
      { limit: 'max_concurrency', current: before.max_concurrency, proposed: 10, usage: '3', effect: 'room for 7 more active attempts' },
      { limit: 'rate_per_second', current: before.rate_per_second, proposed: before.rate_per_second, usage: '3', effect: 'unchanged' },
    ]);

    // The real change under the same key applies, and answers what the dry run showed (but updated_at).
    const { dry_run: _, ...real } = body;
    const applied = await http('POST', QUEUE_CONFIGURE, { key: k, body: real });
    assert.equal(applied.status, 200, JSON.stringify(applied.body));
    assert.equal(applied.body.data.deduplicated, false);
    assert.equal(applied.body.data.dry_run, undefined);
    assert.equal(applied.body.data.effects, undefined);
    const { updated_at: _updated, ...appliedQueue } = applied.body.data.queue;
    assert.deepEqual(appliedQueue, would);
    const refused = await http('POST', `/v1/queues/${QUEUE}/tasks`, { key: key('task'), body: { payload: {} } });
    assert.equal(refused.status, 429);
    assert.equal(refused.body.error.code, 'QUEUE_FULL');

    const restored = await http('POST', QUEUE_CONFIGURE, {
      key: key('queue-restore'),
      body: queueBody(applied.body.data.queue, { max_unfinished_tasks: before.max_unfinished_tasks, max_concurrency: before.max_concurrency, paused: false }),
    });
    assert.equal(restored.status, 200, JSON.stringify(restored.body));
  });

  test('a stale expected_revision is 409 STATE_CONFLICT, as for a real configure, and writes nothing', async () => {
    const app = await resources();
    const stale = appBody('1', { max_concurrency: 7 });
    assert.notEqual(app.revision, '1');
    const dryApp = await writesNothing(() => http('POST', APP_CONFIGURE, { key: key('stale'), body: { ...stale, dry_run: true } }));
    const realApp = await http('POST', APP_CONFIGURE, { key: key('stale'), body: stale });
    for (const answer of [dryApp, realApp]) {
      assert.equal(answer.status, 409);
      assert.equal(answer.body.error.code, 'STATE_CONFLICT');
      assert.equal(answer.body.error.details.current_revision, app.revision);
    }
    assert.equal(dryApp.body.error.message, realApp.body.error.message);

    const q = await queue();
    const staleQueue = queueBody({ ...q, revision: '1' }, {});
    const dryQueue = await writesNothing(() => http('POST', QUEUE_CONFIGURE, { key: key('stale'), body: { ...staleQueue, dry_run: true } }));
    const realQueue = await http('POST', QUEUE_CONFIGURE, { key: key('stale'), body: staleQueue });
    for (const answer of [dryQueue, realQueue]) {
      assert.equal(answer.status, 409);
      assert.equal(answer.body.error.code, 'STATE_CONFLICT');
      assert.equal(answer.body.error.details.current_revision, q.revision);
    }
  });

  test('a dry run with the key of an earlier real configure is no replay: it answers what that change would do now', async () => {
    const before = await resources();
    const body = appBody(before.revision, { max_concurrency: 9000 });
    const k = key('real-then-dry');
    const real = await http('POST', APP_CONFIGURE, { key: k, body });
    assert.equal(real.status, 200);
    // The same request again is a replay...
    assert.equal((await http('POST', APP_CONFIGURE, { key: k, body })).body.data.deduplicated, true);
    // ...but as a dry run it is checked now: its revision is stale.
    const dry = await writesNothing(() => http('POST', APP_CONFIGURE, { key: k, body: { ...body, dry_run: true } }));
    assert.equal(dry.status, 409);
    assert.equal(dry.body.error.code, 'STATE_CONFLICT');
    // And with the current revision (other content under a used key), it answers the would-be change, no IDEMPOTENCY_CONFLICT.
    const now = real.body.data.resources.revision;
    const other = await writesNothing(() => http('POST', APP_CONFIGURE, { key: k, body: appBody(now, { max_concurrency: 8000, dry_run: true }) }));
    assert.equal(other.status, 200, JSON.stringify(other.body));
    assert.equal(other.body.data.resources.revision, String(BigInt(now) + 1n));
    assert.equal(other.body.data.effects[1].effect, 'room for 7997 more active attempts');
    const restored = await http('POST', APP_CONFIGURE, { key: key('app-restore'), body: appBody(now, {}) });
    assert.equal(restored.status, 200);
  });

  test('the usual refusals: 400 for a bad body or no Idempotency-Key, 403 without the action, 404 for a queue out of reach', async () => {
    const app = await resources();
    const q = await queue();
    const readOnly = await createCredential(
      t.db,
      tenant,
      [...NAMESPACE_ACTIONS].filter((a) => a !== 'queues:manage'),
    );
    const scoped = await createCredential(t.db, tenant, [...NAMESPACE_ACTIONS], ['other']);
    await writesNothing(async () => {
      const dryApp = { ...appBody(app.revision, {}), dry_run: true };
      const dryQueue = { ...queueBody(q, {}), dry_run: true };
      const cases: Array<[string, Awaited<ReturnType<typeof http>>, number, string, string?]> = [
        ['app: no key', await http('POST', APP_CONFIGURE, { body: dryApp }), 400, 'INVALID_ARGUMENT', 'Idempotency-Key'],
        ['app: bad key', await http('POST', APP_CONFIGURE, { key: 'has space', body: dryApp }), 400, 'INVALID_ARGUMENT', 'Idempotency-Key'],
        [
          'app: bad limit',
          await http('POST', APP_CONFIGURE, { key: key('bad'), body: { ...dryApp, max_concurrency: 0 } }),
          400,
          'INVALID_ARGUMENT',
          'max_concurrency',
        ],
        ['app: bad dry_run', await http('POST', APP_CONFIGURE, { key: key('bad'), body: { ...dryApp, dry_run: 'yes' } }), 400, 'INVALID_ARGUMENT', 'dry_run'],
        ['app: no reason', await http('POST', APP_CONFIGURE, { key: key('bad'), body: { ...dryApp, reason: undefined } }), 400, 'INVALID_ARGUMENT', 'reason'],
        ['app: no action', await http('POST', APP_CONFIGURE, { key: key('denied'), body: dryApp, token: readOnly }), 403, 'PERMISSION_DENIED'],
        ['queue: no key', await http('POST', QUEUE_CONFIGURE, { body: dryQueue }), 400, 'INVALID_ARGUMENT', 'Idempotency-Key'],
        ['queue: bad flag', await http('POST', QUEUE_CONFIGURE, { key: key('bad'), body: { ...dryQueue, paused: 1 } }), 400, 'INVALID_ARGUMENT', 'paused'],
        ['queue: no action', await http('POST', QUEUE_CONFIGURE, { key: key('denied'), body: dryQueue, token: readOnly }), 403, 'PERMISSION_DENIED'],
        ['queue: missing', await http('POST', '/v1/queues/nope:configure', { key: key('nf'), body: dryQueue }), 404, 'NOT_FOUND'],
        ['queue: out of scope', await http('POST', QUEUE_CONFIGURE, { key: key('nf'), body: dryQueue, token: scoped }), 404, 'NOT_FOUND'],
      ];
      for (const [what, answer, status, code, field] of cases) {
        assert.equal(answer.status, status, `${what}: ${JSON.stringify(answer.body)}`);
        assert.equal(answer.body.error.code, code, what);
        if (field !== undefined) assert.equal(answer.body.error.details.field, field, what);
      }
    });
  });

  test('a revoked credential is refused even while its authentication is cached, as a real configure is', async () => {
    const app = await resources();
    const q = await queue();
    const token = await createCredential(t.db, tenant, [...NAMESPACE_ACTIONS, 'application:resources:read', 'application:resources:manage']);
    // Authenticated once, so the process caches it; then revoked in the database.
    assert.equal((await http('GET', '/v1/application/resources', { token })).status, 200);
    await credentialRevoke(t.db, Buffer.from(token.slice(6, 38), 'hex'));
    assert.equal((await http('GET', '/v1/application/resources', { token })).status, 200, 'a read trusts the cached authentication');
    await writesNothing(async () => {
      for (const [path, body] of [
        [APP_CONFIGURE, { ...appBody(app.revision, {}), dry_run: true }],
        [QUEUE_CONFIGURE, { ...queueBody(q, {}), dry_run: true }],
      ] as const) {
        const r = await http('POST', path, { key: key('revoked'), body, token });
        assert.equal(r.status, 401, `${path}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error.code, 'UNAUTHENTICATED');
      }
    });
  });

  test('the SDK: dry_run is an option of both configure methods, and usage comes back as a number', async () => {
    const orbit = createOrbitClient({ baseUrl: server.url, token: tenant.token });
    const q = await orbit.getQueue({ queue: QUEUE });
    const preview = await writesNothing(() =>
      orbit.configureQueue({
        queue: QUEUE,
        idempotency_key: key('sdk'),
        expected_revision: q.revision,
        reason: 'preview',
        max_unfinished_tasks: q.max_unfinished_tasks,
        max_concurrency: 2,
        rate_per_second: q.rate_per_second,
        key_concurrency: q.key_concurrency,
        paused: q.paused,
        dry_run: true,
      }),
    );
    assert.equal(preview.dry_run, true);
    assert.deepEqual(preview.effects?.[1], {
      limit: 'max_concurrency',
      current: q.max_concurrency,
      proposed: 2,
      usage: 3,
      effect: 'active attempts 3 > new max_concurrency 2: no new claims until 2 finish',
    });
    const app = await orbit.getApplicationResources();
    const appPreview = await writesNothing(() =>
      orbit.configureApplicationResources({
        idempotency_key: key('sdk'),
        expected_revision: app.revision,
        reason: 'preview',
        max_unfinished_tasks: app.max_unfinished_tasks,
        max_concurrency: app.max_concurrency,
        rate_per_second: app.rate_per_second,
        dry_run: true,
      }),
    );
    assert.deepEqual(
      appPreview.effects?.map((e) => [e.limit, e.usage, e.effect]),
      [
        ['max_unfinished_tasks', 5, 'unchanged'],
        ['max_concurrency', 3, 'unchanged'],
        ['rate_per_second', 3, 'unchanged'],
      ],
    );
  });

  test('the rate counts the Starts of the current window beside the reservations not yet started (last: it starts an attempt)', async () => {
    const started = await worker.request({ type: 'start', attempt_id: attempts[0] });
    assert.equal(started.type, 'started', JSON.stringify(started));
    const app = Buffer.from(tenant.applicationId, 'hex');
    // The window is made current, then ended, in the database (as tests move time elsewhere): no wait for the clock.
    const rate = async () => {
      const now = await resources();
      const r = await writesNothing(() =>
        http('POST', APP_CONFIGURE, { key: key('rate'), body: appBody(now.revision, { rate_per_second: 3, dry_run: true }) }),
      );
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body.data.effects[2];
    };
    await t.db.exec('UPDATE orbit_application_resources SET window_started_at = NOW(6) + INTERVAL 1 HOUR WHERE application_id = ?', [app]);
    assert.deepEqual(await rate(), {
      limit: 'rate_per_second',
      current: 100000,
      proposed: 3,
      usage: '3',
      effect: "starts this second 1 + reservations not yet started 2 = new rate_per_second 3: no new claims until this second's window ends",
    });
    await t.db.exec('UPDATE orbit_application_resources SET window_started_at = NOW(6) - INTERVAL 1 HOUR WHERE application_id = ?', [app]);
    assert.deepEqual(await rate(), { limit: 'rate_per_second', current: 100000, proposed: 3, usage: '2', effect: 'room for 1 more start in this second' });
  });
});
