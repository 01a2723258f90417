/**
 * Refusals a user sees, beyond field validation: full quotas name the level and the limit (and
 * no usage of other namespaces), a write with the right secret of a credential that may no
 * longer act names the cause exactly as a fresh read does, and a refused worker upgrade is an
 * ordinary HTTP response in the error envelope.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { request as httpRequest } from 'node:http';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { testApp } from '../helpers/app.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { configureQueue } from '../helpers/server-process.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';
import { credentialRevoke } from '../../server/store/tenancy/credentials.ts';
import { applicationSetEnabled, namespaceSetEnabled } from '../../server/store/tenancy/tenancy.ts';
import { NAMESPACE_ACTIONS } from '../../server/domain/actions.ts';

describe('refusals name what is wrong, and no more', () => {
  let t: TestDatabase;
  let server: RunningServer;

  before(async () => {
    t = await freshDatabase('hardening');
    server = await startServer({ ...testConfig(), databaseUrl: t.url, listenPort: 0 }, { log: silentLogger() });
  });
  after(async () => {
    await server.close();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const submit = (url: string, token: string, queue: string, key: string) =>
    fetch(`${url}/v1/queues/${queue}/tasks`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', 'Idempotency-Key': key },
      body: JSON.stringify({ payload: {} }),
    }).then(async (r) => ({ status: r.status, retryAfter: r.headers.get('retry-after'), body: (await r.json()) as any }));

  test('APPLICATION_FULL and QUEUE_FULL carry the level and the limit in details, and no usage figures', async () => {
    const first = await createTenant(t.db, { namespace: 'first', queues: ['a', 'b'], resourceAccess: true });
    const second = await createTenant(t.db, { applicationId: first.applicationId, namespace: 'second', queues: ['c'] });
    const resources = (await (await fetch(`${server.url}/v1/application/resources`, { headers: { Authorization: `Bearer ${first.token}` } })).json()) as any;
    const configured = await fetch(`${server.url}/v1/application/resources:configure`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${first.token}`, 'Content-Type': 'application/json', 'Idempotency-Key': 'full-details' },
      body: JSON.stringify({ expected_revision: resources.data.revision, reason: 'test', max_unfinished_tasks: 2, max_concurrency: 10, rate_per_second: 10 }),
    });
    assert.equal(configured.status, 200);
    await configureQueue(server.url, first.token, 'a', { max_unfinished_tasks: 1 });

    assert.equal((await submit(server.url, first.token, 'a', 'a-1')).status, 200);
    const queueFull = await submit(server.url, first.token, 'a', 'a-2');
    assert.equal(queueFull.status, 429);
    assert.equal(queueFull.retryAfter, '1');
    assert.deepEqual(queueFull.body.error.details, { level: 'queue', queue: 'a', limit: 'max_unfinished_tasks' });

    assert.equal((await submit(server.url, first.token, 'b', 'b-1')).status, 200);
    // The other namespace learns that the shared budget is full, not what uses it.
    const appFull = await submit(server.url, second.token, 'c', 'c-1');
    assert.equal(appFull.status, 429);
    assert.equal(appFull.body.error.code, 'APPLICATION_FULL');
    assert.deepEqual(appFull.body.error.details, { level: 'application', limit: 'max_unfinished_tasks' });
    assert.doesNotMatch(JSON.stringify(appFull.body), /unfinished_tasks"?\s*:\s*"?\d/);
  });

  test('a write with the right secret names the same cause as a fresh read: revoked, disabled application, disabled namespace', async () => {
    // The production cache (1 s): the first read authenticates and is cached, so the write
    // below is let through authentication and refused inside its transaction.
    const cached = await testApp(t.db, { authCacheMs: 60_000 });
    const fresh = await testApp(t.db, { authCacheMs: 0 });
    const cases: Array<{ expected: string; make(tenant: TestTenant): Promise<unknown> }> = [
      { expected: 'the credential was revoked', make: (x) => credentialRevoke(t.db, Buffer.from(x.credentialId, 'hex')) },
      { expected: 'the application is disabled', make: (x) => applicationSetEnabled(t.db, Buffer.from(x.applicationId, 'hex'), false) },
      { expected: 'the namespace is disabled', make: (x) => namespaceSetEnabled(t.db, Buffer.from(x.namespaceId, 'hex'), false) },
    ];
    for (const [i, c] of cases.entries()) {
      const tenant = await createTenant(t.db, { namespace: `revoked-${i}`, queues: ['q'] });
      assert.equal((await cached.request('GET', '/v1/queues/q', { token: tenant.token })).status, 200);
      await c.make(tenant);
      const write = await cached.request('POST', '/v1/queues/q/tasks', { token: tenant.token, key: `k-${i}`, body: { payload: {} } });
      assert.equal(write.status, 401);
      assert.equal(write.body.error.message, c.expected);
      const read = await fresh.request('GET', '/v1/queues/q', { token: tenant.token });
      assert.equal(read.status, 401);
      assert.equal(read.body.error.message, c.expected);
      const configure = await cached.request('POST', '/v1/queues/q:configure', {
        token: tenant.token,
        key: `c-${i}`,
        body: { expected_revision: '1', reason: 'x', max_unfinished_tasks: 1, max_concurrency: 1, rate_per_second: 1, key_concurrency: 1, paused: false },
      });
      assert.equal(configure.status, 401);
      assert.equal(configure.body.error.message, c.expected);
      // A wrong secret for the same credential learns nothing.
      const wrong = await fresh.request('GET', '/v1/queues/q', { token: `${tenant.token.slice(0, -4)}AAAA` });
      assert.equal(wrong.status, 401);
      assert.equal(wrong.body.error.message, 'the bearer token is not valid');
    }
    const [{ n }] = (await t.db.rows<{ n: string }>(
      "SELECT COUNT(*) AS n FROM orbit_tasks t JOIN orbit_namespaces s ON s.namespace_id = t.namespace_id WHERE s.name LIKE 'revoked-%'",
    )) as [{ n: string }];
    assert.equal(n, '0', 'no refused write left a task');
  });

  test('an idle connection outlives the 60 s of usual clients and proxies, so they always close it first', async () => {
    // With Node's 5 s, a client reusing a connection as the server closed it got ECONNRESET.
    const response = await fetch(`${server.url}/healthz`);
    await response.arrayBuffer();
    assert.equal(response.status, 200);
    assert.match(response.headers.get('keep-alive') ?? '', /^timeout=65\b/);
  });

  test('a refused worker upgrade is an HTTP response in the error envelope with its request id', async () => {
    const tenant = await createTenant(t.db, { namespace: 'upgrade', queues: ['q'] });
    const noConsume = await createCredential(
      t.db,
      tenant,
      NAMESPACE_ACTIONS.filter((a) => a !== 'workers:consume'),
    );
    const cases: Array<{ headers: Record<string, string>; status: number; code: string }> = [
      { headers: {}, status: 401, code: 'UNAUTHENTICATED' },
      { headers: { Authorization: 'Bearer orbit_nonsense' }, status: 401, code: 'UNAUTHENTICATED' },
      { headers: { Authorization: `Bearer ${noConsume}` }, status: 403, code: 'PERMISSION_DENIED' },
    ];
    for (const c of cases) {
      const answer = await new Promise<{ status: number; requestId: string | undefined; nosniff: unknown; body: any }>((resolve, reject) => {
        const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/workers/connect`, { headers: c.headers });
        socket.on('open', () => reject(new Error('the upgrade was accepted')));
        socket.on('error', () => {});
        socket.on('unexpected-response', (_req, res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              requestId: res.headers['x-request-id'] as string | undefined,
              nosniff: res.headers['x-content-type-options'],
              body: JSON.parse(text),
            }),
          );
        });
      });
      assert.equal(answer.status, c.status);
      assert.equal(answer.body.error.code, c.code);
      assert.match(answer.body.request_id, /^[0-9a-f]{32}$/);
      assert.equal(answer.requestId, answer.body.request_id);
      assert.equal(answer.nosniff, 'nosniff', "the app's headers, as on every answer");
    }
    // The right credential still connects.
    await new Promise<void>((resolve, reject) => {
      const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/workers/connect`, { headers: { Authorization: `Bearer ${tenant.token}` } });
      socket.on('open', () => {
        socket.close();
        resolve();
      });
      socket.on('unexpected-response', (_req, res) => reject(new Error(`refused with ${res.statusCode}`)));
    });
  });

  /** A raw request with exactly these headers; the status and the parsed body. */
  function raw(method: string, path: string, headers: Record<string, string>): Promise<{ status: number; body: any; requestId: string | undefined }> {
    return new Promise((resolve, reject) => {
      const req = httpRequest(`${server.url}${path}`, { method, headers });
      req.on('response', (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString()));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined, requestId: res.headers['x-request-id'] as string | undefined }),
        );
      });
      req.on('upgrade', () => reject(new Error('upgraded')));
      req.on('error', reject);
      req.end();
    });
  }

  test('only the worker endpoint takes an upgrade, and only a well-formed one; every refusal is the envelope', async () => {
    const tenant = await createTenant(t.db, { namespace: 'upgrade-only', queues: ['q'] });
    const auth = { Authorization: `Bearer ${tenant.token}` };
    const key = { 'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==', 'Sec-WebSocket-Version': '13' };
    // A request sent with Connection: Upgrade is answered as what it is - not run as a GET -
    // and another operation refuses the upgrade.
    const deleted = await raw('DELETE', '/v1/queues/q', { ...auth, Connection: 'Upgrade', Upgrade: 'h2c' });
    assert.equal(deleted.status, 405);
    const otherPath = await raw('GET', '/v1/queues/q', { ...auth, Connection: 'Upgrade', Upgrade: 'h2c' });
    assert.equal(otherPath.status, 400);
    assert.equal(otherPath.body.error.details.field, 'Upgrade');
    const asList = await raw('POST', '/v1/queues', { ...auth, Connection: 'Upgrade', Upgrade: 'websocket', ...key });
    assert.equal(asList.status, 400);
    assert.equal(asList.body.error.details.field, 'Upgrade');
    // The worker endpoint without `Connection: Upgrade` is not half-upgraded into a 200.
    const notUpgrade = await raw('GET', '/v1/workers/connect', { ...auth, Upgrade: 'websocket', ...key });
    assert.equal(notUpgrade.status, 400);
    assert.equal(notUpgrade.body.error.details.field, 'Connection');
    for (const [name, value] of [
      ['Sec-WebSocket-Version', '12'],
      ['Sec-WebSocket-Key', 'short'],
    ] as const) {
      const bad = await raw('GET', '/v1/workers/connect', { ...auth, Connection: 'Upgrade', Upgrade: 'websocket', ...key, [name]: value });
      assert.equal(bad.status, 400, name);
      assert.equal(bad.body.error.details.field, name);
      assert.equal(bad.requestId, bad.body.request_id);
    }
    // Names of Object.prototype are no query parameters either.
    for (const name of ['__proto__', 'constructor', 'toString']) {
      const r = await raw('GET', `/v1/queues?${name}=1`, auth);
      assert.equal(r.status, 400, name);
      assert.equal(r.body.error.details.location, 'query');
    }
    const [{ n }] = (await t.db.rows<{ n: string }>(
      "SELECT COUNT(*) AS n FROM orbit_worker_sessions s JOIN orbit_namespaces ns ON ns.namespace_id = s.namespace_id WHERE ns.name = 'upgrade-only'",
    )) as [{ n: string }];
    assert.equal(n, '0', 'no refused upgrade opened a session');
  });
});
