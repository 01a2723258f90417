/**
 * The namespaces' floors through the HTTP API, against a real orbit-server process and MariaDB:
 * GET /v1/application/namespaces (every namespace of the application by name, floors, revision
 * and live usage - tasks submitted over HTTP, attempts reserved and started by a worker over
 * the WebSocket), POST /v1/application/namespaces/{namespace}:configure (any namespace of the
 * caller's application; the answer, a replay, IDEMPOTENCY_CONFLICT, 409 on a stale revision and
 * 409 on floors whose sum would exceed the application's limit - naming both figures - each
 * writing nothing and keeping no receipt; the audit record and the event in the caller's
 * namespace), the application's configure refused below the floors' sum (and its dry run),
 * GET /v1/application/resources showing the sums and their idle part, an APPLICATION_FULL held
 * by another namespace's floor saying so, and the dry run: the answer and its effects, nothing
 * at all written (the database fingerprinted around it), the same 409s. 401/403/404 as usual.
 * Ends with the recount of every level, the floors' figures included.
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
import { createOrbitClient } from '../../sdk/index.ts';

const LIST = '/v1/application/namespaces';
const configurePath = (namespace: string) => `/v1/application/namespaces/${namespace}:configure`;
/** A worker session's heartbeat moves its liveness columns while the test runs: not a write of any request. */
const FINGERPRINT = { partial: { orbit_worker_sessions: ['session_id', 'state', 'capacity', 'node_id', 'queues', 'closed_at'] } };
const NO_FLOORS = { reserved_unfinished_tasks: 0, reserved_concurrency: 0, reserved_rate_per_second: 0 };

describe('namespace floors through the API', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let alpha: TestTenant;
  let beta: TestTenant;
  /** alpha's worker: 2 reservations in alpha. */
  let worker: RawSession;
  let attempts: string[] = [];
  let keys = 0;
  const key = (label: string) => `${label}-${++keys}`;

  const http = (method: string, path: string, options: { key?: string; body?: unknown; token?: string } = {}) =>
    call(server.url, method, path, { token: options.token ?? alpha.token, key: options.key, body: options.body });
  const list = async (token = alpha.token) => {
    const r = await http('GET', LIST, { token });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.namespaces as Array<Record<string, any>>;
  };
  const byName = async (name: string) => (await list()).find((n) => n.namespace === name) as Record<string, any>;
  const resources = async () => (await http('GET', '/v1/application/resources')).body.data;
  const floorsBody = (revision: string, floors: Record<string, unknown>) => ({
    expected_revision: revision,
    reason: '保底：夜间批处理',
    ...NO_FLOORS,
    ...floors,
  });
  const submit = (tenant: TestTenant, label: string) =>
    http('POST', '/v1/queues/q/tasks', { token: tenant.token, key: key(label), body: { payload: { label } } });

  /** What a refused configure must leave as it was: the floors, the application row, the records. */
  async function written() {
    const app = [Buffer.from(alpha.applicationId, 'hex')];
    const count = async (table: string) => Number((await t.db.rows<{ n: string }>(`SELECT COUNT(*) AS n FROM ${table} WHERE application_id = ?`, app))[0]?.n);
    return {
      namespaces: await t.db.rows('SELECT * FROM orbit_namespace_resources WHERE application_id = ? ORDER BY namespace_id', app),
      application: await t.db.rows('SELECT * FROM orbit_application_resources WHERE application_id = ?', app),
      audit: await count('orbit_audit_events'),
      events: await count('orbit_events'),
      receipts: await count('orbit_idempotency_receipts'),
    };
  }
  async function writesNothing<T>(fn: () => Promise<T>): Promise<T> {
    return assertWritesNothing(t.db, { readable: written, what: 'no floor, revision, sum, audit record, event or receipt', fingerprint: FINGERPRINT }, fn);
  }

  before(async () => {
    t = await freshDatabase('floorsapi');
    alpha = await createTenant(t.db, { namespace: 'alpha', queues: ['q'], resourceAccess: true });
    beta = await createTenant(t.db, { applicationId: alpha.applicationId, namespace: 'beta', queues: ['q'], resourceAccess: true });
    // Reservations outlive the test's steps.
    server = await startServerProcess(t.url, { ORBIT_LEASE_SECONDS: '600' });
    const current = await resources();
    const limits = await http('POST', '/v1/application/resources:configure', {
      key: key('limits'),
      body: { expected_revision: current.revision, reason: '小额度', max_unfinished_tasks: 10, max_concurrency: 5, rate_per_second: 100 },
    });
    assert.equal(limits.status, 200, JSON.stringify(limits.body));
    // Real usage: 3 tasks in alpha (2 of them reserved by a worker), 1 in beta.
    for (let i = 0; i < 3; i++) assert.equal((await submit(alpha, 'alpha-task')).status, 200);
    assert.equal((await submit(beta, 'beta-task')).status, 200);
    worker = await connectRaw(server.url, alpha.token);
    assert.equal((await worker.request({ type: 'hello', node_id: 'floors-api', queues: ['q'], capacity: 2 })).type, 'welcome');
    const claimed = await worker.request({ type: 'claim', claim_id: 'c1', max: 2 });
    assert.equal(claimed.attempts?.length, 2, JSON.stringify(claimed));
    attempts = claimed.attempts.map((a: { attempt_id: string }) => a.attempt_id);
  });
  after(async () => {
    await worker?.close();
    await server?.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  test('the list: every namespace of the application by name, with its floors, revision and live usage', async () => {
    const namespaces = await list();
    assert.deepEqual(namespaces, [
      {
        namespace: 'alpha',
        namespace_id: alpha.namespaceId,
        environment: 'development',
        revision: '1',
        ...NO_FLOORS,
        unfinished_tasks: '3',
        active_attempts: '2',
        pending_starts: '2',
        starts_this_second: '0',
      },
      {
        namespace: 'beta',
        namespace_id: beta.namespaceId,
        environment: 'development',
        revision: '1',
        ...NO_FLOORS,
        unfinished_tasks: '1',
        active_attempts: '0',
        pending_starts: '0',
        starts_this_second: '0',
      },
    ]);
    // Every namespace of the application sees all of them.
    assert.deepEqual(await list(beta.token), namespaces);
    const app = await resources();
    assert.deepEqual([app.reserved_unfinished_tasks, app.reserved_concurrency, app.reserved_rate_per_second], [0, 0, 0], 'no floors: the sums are 0');
    // 401 and 403 as everywhere: no token; a credential without application:resources:read.
    assert.equal((await http('GET', LIST, { token: '' })).status, 401);
    const noRead = await createCredential(t.db, alpha, [...NAMESPACE_ACTIONS]);
    const denied = await http('GET', LIST, { token: noRead });
    assert.equal(denied.status, 403, JSON.stringify(denied.body));
    assert.equal(denied.body.error.details.action, 'application:resources:read');
  });

  test("configure another namespace's floors: the answer, the sums and idle part, the audit record and event in the caller's namespace, a replay", async () => {
    const auditBefore = (await http('GET', '/v1/audit-events?limit=100')).body.data.audit_events.length;
    const body = floorsBody('1', { reserved_unfinished_tasks: 4, reserved_concurrency: 2, reserved_rate_per_second: 10 });
    const k = key('floors-beta');
    const r = await http('POST', configurePath('beta'), { key: k, body });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const expected = {
      namespace: 'beta',
      namespace_id: beta.namespaceId,
      environment: 'development',
      revision: '2',
      reserved_unfinished_tasks: 4,
      reserved_concurrency: 2,
      reserved_rate_per_second: 10,
      unfinished_tasks: '1',
      active_attempts: '0',
      pending_starts: '0',
      starts_this_second: '0',
    };
    assert.deepEqual(r.body.data, { namespace_resources: expected, deduplicated: false });
    assert.deepEqual(await byName('beta'), expected);
    // The application's row: the sums, and what beta does not use of them (no window open: all its rate floor).
    const app = await resources();
    assert.deepEqual(
      {
        reserved: [app.reserved_unfinished_tasks, app.reserved_concurrency, app.reserved_rate_per_second],
        idle: [app.idle_reserved_unfinished_tasks, app.idle_reserved_concurrency, app.idle_reserved_rate_per_second],
      },
      { reserved: [4, 2, 10], idle: ['3', '2', '10'] },
    );

    // The audit record and the event are the caller's (alpha's), about beta.
    const audit = (await http('GET', '/v1/audit-events?limit=100')).body.data.audit_events;
    assert.equal(audit.length, auditBefore + 1);
    const record = audit.at(-1);
    assert.deepEqual(
      [record.action, record.resource_type, record.resource, record.namespace, record.reason, record.idempotency_key, record.before, record.after],
      [
        'namespace.resources.configure',
        'namespace_resources',
        'beta',
        'alpha',
        '保底：夜间批处理',
        k,
        { revision: '1', ...NO_FLOORS },
        { revision: '2', reserved_unfinished_tasks: 4, reserved_concurrency: 2, reserved_rate_per_second: 10 },
      ],
    );
    const events = (await http('GET', '/v1/events?after=0&limit=100')).body.data.events;
    const event = events.filter((e: { type: string }) => e.type === 'namespace.resources.configured').at(-1);
    assert.deepEqual(
      [event?.subject, event?.namespace, event?.data],
      [
        'beta',
        'alpha',
        {
          namespace: 'beta',
          namespace_id: beta.namespaceId,
          revision: '2',
          reserved_unfinished_tasks: 4,
          reserved_concurrency: 2,
          reserved_rate_per_second: 10,
        },
      ],
    );
    const betaEvents = (await http('GET', '/v1/events?after=0&limit=100', { token: beta.token })).body.data.events;
    assert.equal(betaEvents.filter((e: { type: string }) => e.type === 'namespace.resources.configured').length, 0, "only the caller's feed");

    // The same key and body: the original answer; another body under it: IDEMPOTENCY_CONFLICT; nothing written either way.
    await writesNothing(async () => {
      const replay = await http('POST', configurePath('beta'), { key: k, body });
      assert.deepEqual([replay.status, replay.body.data], [200, { namespace_resources: expected, deduplicated: true }]);
      const conflict = await http('POST', configurePath('beta'), { key: k, body: { ...body, reserved_concurrency: 1 } });
      assert.deepEqual([conflict.status, conflict.body.error.code], [409, 'IDEMPOTENCY_CONFLICT']);
    });
  });

  test('409 STATE_CONFLICT: a stale revision, and floors whose sum would exceed the limit - naming both figures; nothing written, the key free', async () => {
    const stale = await writesNothing(() =>
      http('POST', configurePath('alpha'), { key: 'alpha-floors', body: floorsBody('7', { reserved_unfinished_tasks: 6 }) }),
    );
    assert.equal(stale.status, 409, JSON.stringify(stale.body));
    assert.deepEqual([stale.body.error.code, stale.body.error.details], ['STATE_CONFLICT', { field: 'expected_revision', current_revision: '1' }]);

    // beta reserves 2 of max_concurrency 5: 4 more in alpha would make 6.
    const concurrency = await writesNothing(() =>
      http('POST', configurePath('alpha'), { key: 'alpha-floors', body: floorsBody('1', { reserved_unfinished_tasks: 6, reserved_concurrency: 4 }) }),
    );
    assert.equal(concurrency.status, 409, JSON.stringify(concurrency.body));
    assert.deepEqual(concurrency.body.error, {
      code: 'STATE_CONFLICT',
      message: "the namespaces' reserved_concurrency would total 6, above the application's max_concurrency 5",
      details: { field: 'reserved_concurrency', limit: 'max_concurrency', reserved_sum: 6, application_limit: 5 },
    });
    // beta reserves 4 of max_unfinished_tasks 10: 7 would make 11 (the first limit in the API's order is named).
    const unfinished = await writesNothing(() =>
      http('POST', configurePath('alpha'), { key: 'alpha-floors', body: floorsBody('1', { reserved_unfinished_tasks: 7, reserved_concurrency: 4 }) }),
    );
    assert.deepEqual(unfinished.body.error.details, {
      field: 'reserved_unfinished_tasks',
      limit: 'max_unfinished_tasks',
      reserved_sum: 11,
      application_limit: 10,
    });

    // Exactly the limit fits; the key the refusals used is free.
    const fits = await http('POST', configurePath('alpha'), {
      key: 'alpha-floors',
      body: floorsBody('1', { reserved_unfinished_tasks: 6, reserved_concurrency: 3, reserved_rate_per_second: 5 }),
    });
    assert.equal(fits.status, 200, JSON.stringify(fits.body));
    assert.equal(fits.body.data.deduplicated, false);
    const app = await resources();
    assert.deepEqual(
      {
        reserved: [app.reserved_unfinished_tasks, app.reserved_concurrency, app.reserved_rate_per_second],
        // alpha: 6 - 3 unfinished, 3 - 2 active; beta: 4 - 1, 2 - 0.
        idle: [app.idle_reserved_unfinished_tasks, app.idle_reserved_concurrency, app.idle_reserved_rate_per_second],
      },
      { reserved: [10, 5, 15], idle: ['6', '3', '15'] },
    );

    // 404 for a namespace the application has not (as a real configure and as a dry run), 400 for a floor out of range.
    const missing = await writesNothing(() => http('POST', configurePath('gamma'), { key: key('gamma'), body: floorsBody('1', {}) }));
    assert.deepEqual([missing.status, missing.body.error.code], [404, 'NOT_FOUND']);
    const missingDry = await http('POST', configurePath('gamma'), { key: key('gamma'), body: { ...floorsBody('1', {}), dry_run: true } });
    assert.deepEqual([missingDry.status, missingDry.body.error.code], [404, 'NOT_FOUND']);
    const range = await http('POST', configurePath('alpha'), { key: key('range'), body: floorsBody('2', { reserved_concurrency: 1000001 }) });
    assert.deepEqual([range.status, range.body.error.details.field], [400, 'reserved_concurrency']);
    // 403 without application:resources:configure (reading is not enough).
    const readOnly = await createCredential(t.db, alpha, [...NAMESPACE_ACTIONS, 'application:resources:read']);
    const denied = await http('POST', configurePath('alpha'), { token: readOnly, key: key('denied'), body: floorsBody('2', {}) });
    assert.deepEqual([denied.status, denied.body.error.details.action], [403, 'application:resources:configure']);
  });

  test("the application's configure: a limit below the floors' sum is refused (and so is its dry run); the dry run's effects say what floors hold", async () => {
    const current = await resources();
    const body = { expected_revision: current.revision, reason: '收紧', max_unfinished_tasks: 10, max_concurrency: 4, rate_per_second: 100 };
    for (const dryRun of [false, true]) {
      const refused = await writesNothing(() =>
        http('POST', '/v1/application/resources:configure', { key: key('app-below'), body: dryRun ? { ...body, dry_run: true } : body }),
      );
      assert.equal(refused.status, 409, JSON.stringify(refused.body));
      assert.deepEqual(refused.body.error, {
        code: 'STATE_CONFLICT',
        message: "the namespaces' reserved_concurrency total 5, above the new max_concurrency 4: lower the reservations first",
        details: { field: 'max_concurrency', limit: 'max_concurrency', reserved_sum: 5, application_limit: 4 },
      });
    }
    const dry = await writesNothing(() =>
      http('POST', '/v1/application/resources:configure', { key: key('app-dry'), body: { ...body, max_concurrency: 8, dry_run: true } }),
    );
    assert.equal(dry.status, 200, JSON.stringify(dry.body));
    assert.deepEqual(dry.body.data.resources, { ...current, revision: String(BigInt(current.revision) + 1n), max_concurrency: 8 });
    assert.deepEqual(
      dry.body.data.effects.map((e: { effect: string }) => e.effect),
      ['unchanged', "room for 6 more active attempts; the namespaces' floors reserve 5 of it, 3 of them unused (kept for their namespaces)", 'unchanged'],
    );
  });

  test("a submission refused because of another namespace's floor says so; the floor's owner still has its room", async () => {
    // max 10, usage 4 (alpha 3, beta 1); idle floors: alpha 3, beta 3. alpha has 10 - 4 - 6 + 3 = 3.
    for (let i = 0; i < 3; i++) assert.equal((await submit(alpha, 'alpha-more')).status, 200);
    const refused = await submit(alpha, 'alpha-refused');
    assert.equal(refused.status, 429, JSON.stringify(refused.body));
    assert.deepEqual(
      [refused.body.error.code, refused.body.error.details],
      ['APPLICATION_FULL', { level: 'application', limit: 'max_unfinished_tasks', reserved_by_other_namespaces: true }],
    );
    assert.equal((await submit(beta, 'beta-more')).status, 200, 'beta uses its own floor');
    assert.deepEqual([(await byName('alpha')).unfinished_tasks, (await byName('beta')).unfinished_tasks], ['6', '2']);
  });

  test('the dry run: the floors as they would be and what each would mean now; nothing written; the same 409s; the key free after', async () => {
    const betaNow = await byName('beta');
    const body = { ...floorsBody(betaNow.revision, { reserved_unfinished_tasks: 2, reserved_concurrency: 2, reserved_rate_per_second: 0 }), dry_run: true };
    const k = key('beta-lower');
    const dry = await writesNothing(() => http('POST', configurePath('beta'), { key: k, body }));
    assert.equal(dry.status, 200, JSON.stringify(dry.body));
    assert.deepEqual(dry.body.data, {
      namespace_resources: { ...betaNow, revision: String(BigInt(betaNow.revision) + 1n), reserved_unfinished_tasks: 2, reserved_rate_per_second: 0 },
      deduplicated: false,
      dry_run: true,
      effects: [
        {
          limit: 'reserved_unfinished_tasks',
          current: 4,
          proposed: 2,
          usage: '2',
          effect:
            "namespace uses 2 of a new reserved_unfinished_tasks 2: all of it in use, none kept idle; the namespaces' reserved_unfinished_tasks would total 8 of the application's max_unfinished_tasks 10",
        },
        { limit: 'reserved_concurrency', current: 2, proposed: 2, usage: '0', effect: 'unchanged' },
        {
          limit: 'reserved_rate_per_second',
          current: 10,
          proposed: 0,
          usage: '0',
          effect:
            "no reserved_rate_per_second: the namespace shares what the other namespaces' floors leave; the 10 kept for it until now go back to the shared room; the namespaces' reserved_rate_per_second would total 5 of the application's rate_per_second 100",
        },
      ],
    });
    // A raise: what is kept for it, off limits to the others.
    const raise = await writesNothing(() =>
      http('POST', configurePath('beta'), {
        key: key('beta-raise'),
        body: { ...body, reserved_unfinished_tasks: 4, reserved_concurrency: 2, reserved_rate_per_second: 30 },
      }),
    );
    assert.equal(
      raise.body.data.effects[2].effect,
      "namespace uses 0 of a new reserved_rate_per_second 30: 30 kept for it, off limits to other namespaces; the namespaces' reserved_rate_per_second would total 35 of the application's rate_per_second 100",
    );
    // The refusals of a real configure: above the limit, a stale revision.
    const above = await writesNothing(() => http('POST', configurePath('beta'), { key: k, body: { ...body, reserved_concurrency: 3 } }));
    assert.deepEqual(
      [above.status, above.body.error.details],
      [409, { field: 'reserved_concurrency', limit: 'max_concurrency', reserved_sum: 6, application_limit: 5 }],
    );
    const stale = await writesNothing(() => http('POST', configurePath('beta'), { key: k, body: { ...body, expected_revision: '1' } }));
    assert.deepEqual([stale.status, stale.body.error.details?.current_revision], [409, betaNow.revision]);
    // The dry run's key makes the real change afterwards.
    const { dry_run: _dry, ...real } = body;
    const applied = await http('POST', configurePath('beta'), { key: k, body: real });
    assert.deepEqual([applied.status, applied.body.data.deduplicated, applied.body.data.namespace_resources], [200, false, dry.body.data.namespace_resources]);
  });

  test("starts this second: a namespace's starts in the application's open window, and the idle rate floors", async () => {
    for (const attempt of attempts) assert.equal((await worker.request({ type: 'start', attempt_id: attempt })).type, 'started');
    // Keep the window of those two starts open for the test (no waiting on the clock): the
    // application's window and alpha's, equal, moved an hour ahead together.
    const app = [Buffer.from(alpha.applicationId, 'hex')];
    const shift = async (sign: '+' | '-') => {
      await t.db.exec(`UPDATE orbit_application_resources SET window_started_at = window_started_at ${sign} INTERVAL 1 HOUR WHERE application_id = ?`, app);
      await t.db.exec(
        `UPDATE orbit_namespace_resources SET window_started_at = window_started_at ${sign} INTERVAL 1 HOUR WHERE application_id = ? AND window_started_at IS NOT NULL`,
        app,
      );
    };
    await shift('+');
    try {
      // Both starts are in one window unless the machine took a second between them: the window
      // alpha's row names (the application's) holds what it started in it.
      const [row] = await t.db.rows<{ window_starts: number }>('SELECT window_starts FROM orbit_namespace_resources WHERE namespace_id = ?', [
        Buffer.from(alpha.namespaceId, 'hex'),
      ]);
      const started = Number(row?.window_starts);
      assert.ok(started === 1 || started === 2, `alpha started ${started} in the application's window`);
      assert.deepEqual([(await byName('alpha')).starts_this_second, (await byName('beta')).starts_this_second], [String(started), '0']);
      // Rate floors 5 (alpha, which used `started` of it) and 0 (beta).
      const resourcesNow = await resources();
      assert.deepEqual([resourcesNow.reserved_rate_per_second, resourcesNow.idle_reserved_rate_per_second], [5, String(5 - started)]);
      const alphaNow = await byName('alpha');
      const dry = await http('POST', configurePath('alpha'), {
        key: key('alpha-rate'),
        body: { ...floorsBody(alphaNow.revision, { reserved_unfinished_tasks: 6, reserved_concurrency: 3, reserved_rate_per_second: 1 }), dry_run: true },
      });
      assert.deepEqual(dry.body.data.effects[2], {
        limit: 'reserved_rate_per_second',
        current: 5,
        proposed: 1,
        usage: String(started),
        effect: `namespace uses ${started} of a new reserved_rate_per_second 1: all of it in use, none kept idle; the namespaces' reserved_rate_per_second would total 1 of the application's rate_per_second 100`,
      });
    } finally {
      await shift('-');
    }
    for (const attempt of attempts) {
      const done = await worker.request({ type: 'complete', attempt_id: attempt, outcome: 'succeeded' });
      assert.equal(done.type, 'completed', JSON.stringify(done));
    }
  });

  test('two configures of different namespaces at once, each fitting alone but not together: exactly one is applied (the application row serialises them)', async () => {
    // max_concurrency 5; alpha reserves 3, beta (set here) 0. alpha to 4 fits beside beta's 0,
    // beta to 2 beside alpha's 3 - not both.
    const bodyOf = (n: Record<string, any>, concurrency: number) =>
      floorsBody(n.revision, {
        reserved_unfinished_tasks: n.reserved_unfinished_tasks,
        reserved_concurrency: concurrency,
        reserved_rate_per_second: n.reserved_rate_per_second,
      });
    const set = async (index: 0 | 1, concurrency: number) => {
      const n = (await list())[index] as Record<string, any>;
      const r = await http('POST', configurePath(n.namespace), { key: key('race-set'), body: bodyOf(n, concurrency) });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    };
    await set(1, 0);
    assert.deepEqual(
      (await list()).map((n) => n.reserved_concurrency),
      [3, 0],
    );
    const winners: string[] = [];
    for (let round = 0; round < 5; round++) {
      const [alphaNow, betaNow] = await list();
      const [a, b] = await Promise.all([
        http('POST', configurePath('alpha'), { key: key('race-alpha'), body: bodyOf(alphaNow!, 4) }),
        http('POST', configurePath('beta'), { key: key('race-beta'), body: bodyOf(betaNow!, 2) }),
      ]);
      assert.deepEqual([a.status, b.status].sort(), [200, 409], `round ${round}: ${JSON.stringify([a.body, b.body])}`);
      const refused = a.status === 409 ? a : b;
      assert.deepEqual(refused.body.error.details, { field: 'reserved_concurrency', limit: 'max_concurrency', reserved_sum: 6, application_limit: 5 });
      winners.push(a.status === 200 ? 'alpha' : 'beta');
      const app = await resources();
      assert.equal(app.reserved_concurrency, a.status === 200 ? 4 : 5, `round ${round}: the sum is the winner's`);
      // Back to alpha 3, beta 0 for the next round.
      await set(0, 3);
      await set(1, 0);
    }
    assert.deepEqual(
      (await list()).map((n) => n.reserved_concurrency),
      [3, 0],
      `winners: ${winners.join(', ')}`,
    );
  });

  test('the SDK: listNamespaceResources and configureNamespaceResources, counts as numbers', async () => {
    const orbit = createOrbitClient({ baseUrl: server.url, token: alpha.token });
    const { namespaces } = await orbit.listNamespaceResources();
    // (alpha's starts of the test before may still be in the current window: only their type is sure.)
    assert.deepEqual(
      namespaces.map((n) => [n.namespace, n.unfinished_tasks, n.active_attempts, n.pending_starts, typeof n.starts_this_second]),
      [
        ['alpha', 4, 0, 0, 'number'],
        ['beta', 2, 0, 0, 'number'],
      ],
    );
    const beta = namespaces[1]!;
    const dry = await orbit.configureNamespaceResources({
      namespace: 'beta',
      idempotency_key: 'sdk-floors',
      expected_revision: beta.revision,
      reason: 'sdk',
      ...NO_FLOORS,
      dry_run: true,
    });
    assert.deepEqual([dry.dry_run, dry.effects?.map((e) => e.usage)], [true, [2, 0, 0]]);
    const done = await orbit.configureNamespaceResources({
      namespace: 'beta',
      idempotency_key: 'sdk-floors',
      expected_revision: beta.revision,
      reason: 'sdk',
      ...NO_FLOORS,
    });
    assert.deepEqual([done.deduplicated, done.namespace_resources.reserved_unfinished_tasks, done.namespace_resources.unfinished_tasks], [false, 0, 2]);
  });
});
