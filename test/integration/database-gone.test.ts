/**
 * A database that is gone from under a running server (dropped, or the server pointed at one
 * that does not exist any more) is an operator's fault the server reports: every request answers
 * 503 UNAVAILABLE - never 500 INTERNAL - and /readyz says why, while /healthz (the process) stays up.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call } from '../helpers/server-process.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';

describe('a database dropped under a running server', () => {
  let t: TestDatabase;
  let server: RunningServer;
  let tenant: TestTenant;

  before(async () => {
    t = await freshDatabase('database_gone');
    tenant = await createTenant(t.db, { namespace: 'gone', queues: ['jobs'] });
    // No authentication cache: every request reads the credential from the database.
    server = await startServer({ ...testConfig(), databaseUrl: t.url, listenPort: 0, authCacheMs: 0 }, { log: silentLogger() });
  });
  after(async () => {
    await server.close();
  });

  test('answers 503 UNAVAILABLE and /readyz says why; /healthz stays ok', async () => {
    assert.equal((await call(server.url, 'GET', '/v1/queues', { token: tenant.token })).status, 200);
    await assertCountersMatchRecount(t.db);
    await t.drop();
    for (const [method, path, body] of [
      ['GET', '/v1/queues', undefined],
      ['POST', '/v1/queues/jobs/tasks', { payload: {} }],
    ] as const) {
      const r = await call(server.url, method, path, { token: tenant.token, key: method === 'POST' ? 'gone-1' : undefined, body });
      assert.deepEqual([r.status, r.body.error.code], [503, 'UNAVAILABLE'], `${method} ${path}: ${JSON.stringify(r.body)}`);
    }
    const ready = await fetch(`${server.url}/readyz`);
    assert.equal(ready.status, 503);
    assert.match(await ready.text(), /Unknown database/);
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
  });
});
