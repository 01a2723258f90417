import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { testApp } from '../helpers/app.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { credentialRevoke } from '../../server/store/tenancy/credentials.ts';
import { applicationSetEnabled, namespaceSetEnabled } from '../../server/store/tenancy/tenancy.ts';
import { NAMESPACE_ACTIONS } from '../../server/domain/actions.ts';

const CONFIGURE = '/v1/application/resources:configure';
const GET = '/v1/application/resources';

describe('application resources', () => {
  let t: TestDatabase;
  let api: Awaited<ReturnType<typeof testApp>>;
  let first: TestTenant;
  let second: TestTenant;

  before(async () => {
    t = await freshDatabase('appres');
    api = await testApp(t.db);
    first = await createTenant(t.db, { namespace: 'first', queues: ['first'], resourceAccess: true });
    second = await createTenant(t.db, { applicationId: first.applicationId, namespace: 'second', queues: ['second'], resourceAccess: true });
  });
  after(async () => {
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  async function current(token = first.token) {
    const response = await api.request('GET', GET, { token });
    assert.equal(response.status, 200);
    return response.body.data;
  }

  function configureBody(revision: string, overrides: Record<string, unknown> = {}) {
    return {
      expected_revision: revision,
      reason: '调整应用资源预算',
      max_unfinished_tasks: 2000000,
      max_concurrency: 2000,
      rate_per_second: 5000,
      ...overrides,
    };
  }

  test('GET shows the defaults, decimal-string counters and the request id', async () => {
    const response = await api.request('GET', GET, { token: first.token });
    assert.equal(response.status, 200);
    assert.match(response.body.request_id, /^[0-9a-f]{32}$/);
    assert.equal(response.headers.get('x-request-id'), response.body.request_id);
    assert.deepEqual(response.body.data, {
      application_id: first.applicationId,
      revision: '1',
      max_unfinished_tasks: 1000000,
      unfinished_tasks: '0',
      max_concurrency: 10000,
      active_attempts: '0',
      pending_starts: '0',
      rate_per_second: 100000,
      // No namespace has a floor: their sums and idle part are 0.
      reserved_unfinished_tasks: 0,
      reserved_concurrency: 0,
      reserved_rate_per_second: 0,
      idle_reserved_unfinished_tasks: '0',
      idle_reserved_concurrency: '0',
      idle_reserved_rate_per_second: '0',
    });
    // Both namespaces see the one shared row.
    assert.deepEqual(await current(second.token), response.body.data);
  });

  test('GET takes no query parameters', async () => {
    const response = await api.request('GET', `${GET}?revision=1`, { token: first.token });
    assert.equal(response.status, 400);
    assert.equal(response.body.error.code, 'INVALID_ARGUMENT');
    assert.equal(response.body.error.details.field, 'revision');
  });

  test('configure replaces the limits, bumps the revision, and a replay returns the original snapshot', async () => {
    const before = await current();
    const response = await api.request('POST', CONFIGURE, { token: first.token, key: 'budget-001', body: configureBody(before.revision) });
    assert.equal(response.status, 200, response.text);
    const expected = { ...before, revision: String(BigInt(before.revision) + 1n), max_unfinished_tasks: 2000000, max_concurrency: 2000, rate_per_second: 5000 };
    assert.deepEqual(response.body.data, { resources: expected, deduplicated: false });
    assert.deepEqual(await current(), expected);

    // A later change by the other namespace...
    const later = await api.request('POST', CONFIGURE, {
      token: second.token,
      key: 'budget-002',
      body: configureBody(expected.revision, { max_concurrency: 3000 }),
    });
    assert.equal(later.status, 200, later.text);
    // ...does not change what the replay of the first returns.
    const replay = await api.request('POST', CONFIGURE, { token: first.token, key: 'budget-001', body: configureBody(before.revision) });
    assert.equal(replay.status, 200);
    assert.deepEqual(replay.body.data, { resources: expected, deduplicated: true });
    assert.notEqual(replay.body.request_id, response.body.request_id);
  });

  test('same key with different content is IDEMPOTENCY_CONFLICT and changes nothing', async () => {
    const before = await current();
    const ok = await api.request('POST', CONFIGURE, { token: first.token, key: 'budget-conflict', body: configureBody(before.revision) });
    assert.equal(ok.status, 200);
    const conflict = await api.request('POST', CONFIGURE, {
      token: first.token,
      key: 'budget-conflict',
      body: configureBody(before.revision, { rate_per_second: 7 }),
    });
    assert.equal(conflict.status, 409);
    assert.equal(conflict.body.error.code, 'IDEMPOTENCY_CONFLICT');
    assert.deepEqual(await current(), ok.body.data.resources);
  });

  test('a stale expected_revision is STATE_CONFLICT, leaves no receipt, and the key can be used again', async () => {
    const before = await current();
    const stale = await api.request('POST', CONFIGURE, { token: first.token, key: 'budget-retry', body: configureBody('1', { max_concurrency: 11 }) });
    assert.equal(stale.status, 409);
    assert.equal(stale.body.error.code, 'STATE_CONFLICT');
    assert.equal(stale.body.error.details.current_revision, before.revision);
    assert.deepEqual(await current(), before);
    const retried = await api.request('POST', CONFIGURE, {
      token: first.token,
      key: 'budget-retry',
      body: configureBody(before.revision, { max_concurrency: 11 }),
    });
    assert.equal(retried.status, 200);
    assert.equal(retried.body.data.deduplicated, false);
    assert.equal(retried.body.data.resources.max_concurrency, 11);
  });

  test('the two namespaces have separate key spaces and share the revision', async () => {
    const before = await current();
    const a = await api.request('POST', CONFIGURE, { token: first.token, key: 'shared-key', body: configureBody(before.revision, { max_concurrency: 100 }) });
    assert.equal(a.status, 200);
    // The same key in the other namespace is a different operation, decided by CAS on the shared revision.
    const b = await api.request('POST', CONFIGURE, { token: second.token, key: 'shared-key', body: configureBody(before.revision, { max_concurrency: 100 }) });
    assert.equal(b.status, 409);
    assert.equal(b.body.error.code, 'STATE_CONFLICT');
    const c = await api.request('POST', CONFIGURE, {
      token: second.token,
      key: 'shared-key',
      body: configureBody(a.body.data.resources.revision, { max_concurrency: 200 }),
    });
    assert.equal(c.status, 200);
    assert.equal(c.body.data.deduplicated, false);
    assert.equal(c.body.data.resources.revision, String(BigInt(before.revision) + 2n));
  });

  test('concurrent changes from two namespaces: exactly one wins per revision', async () => {
    for (let round = 0; round < 5; round++) {
      const before = await current();
      const attempts = await Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          api.request('POST', CONFIGURE, {
            token: i % 2 === 0 ? first.token : second.token,
            key: `race-${round}-${i}`,
            body: configureBody(before.revision, { max_concurrency: 1000 + i }),
          }),
        ),
      );
      const winners = attempts.filter((r) => r.status === 200);
      const losers = attempts.filter((r) => r.status === 409);
      assert.equal(winners.length, 1, `round ${round}: ${attempts.map((r) => r.status).join(',')}`);
      assert.equal(losers.length, 15);
      for (const loser of losers) assert.equal(loser.body.error.code, 'STATE_CONFLICT');
      const after = await current();
      assert.equal(after.revision, String(BigInt(before.revision) + 1n));
      assert.deepEqual(after, winners[0]?.body.data.resources);
    }
  });

  test('the same key sent concurrently is applied once; the rest replay it', async () => {
    const before = await current();
    const responses = await Promise.all(
      Array.from({ length: 10 }, () =>
        api.request('POST', CONFIGURE, { token: first.token, key: 'same-key-burst', body: configureBody(before.revision, { max_concurrency: 4242 }) }),
      ),
    );
    assert.deepEqual(
      responses.map((r) => r.status),
      Array(10).fill(200),
    );
    assert.equal(responses.filter((r) => r.body.data.deduplicated === false).length, 1);
    for (const r of responses) assert.deepEqual(r.body.data.resources, responses[0]?.body.data.resources);
    assert.equal((await current()).revision, String(BigInt(before.revision) + 1n));
  });

  test('every change writes an audit record in the initiating namespace and an event', async () => {
    const before = await current();
    const change = await api.request('POST', CONFIGURE, { token: second.token, key: 'audited', body: configureBody(before.revision, { reason: 'audit me' }) });
    assert.equal(change.status, 200);
    const audit = await api.request('GET', '/v1/audit-events?limit=100', { token: second.token });
    const record = audit.body.data.audit_events.find((e: { idempotency_key: string }) => e.idempotency_key === 'audited');
    assert.ok(record, 'audit record in the second namespace');
    assert.equal(record.action, 'application.resources.configure');
    assert.equal(record.reason, 'audit me');
    assert.equal(record.request_id, change.body.request_id);
    assert.equal(record.before.revision, before.revision);
    assert.equal(record.after.revision, change.body.data.resources.revision);
    const firstAudit = await api.request('GET', '/v1/audit-events?limit=100', { token: first.token });
    assert.equal(
      firstAudit.body.data.audit_events.some((e: { idempotency_key: string }) => e.idempotency_key === 'audited'),
      false,
    );
    const events = await api.request('GET', '/v1/events?after=0&limit=100', { token: second.token });
    const event = events.body.data.events.at(-1);
    assert.equal(event.type, 'application.resources.configured');
    assert.equal(event.data.revision, change.body.data.resources.revision);
  });

  test('a failure inside the transaction (the audit insert) rolls back config, revision, event and receipt', async () => {
    const before = await current();
    const eventsBefore = (await t.db.rows<{ n: string }>('SELECT COUNT(*) AS n FROM orbit_events'))[0]?.n;
    await t.db.exec(
      "CREATE TRIGGER orbit_test_audit_fails BEFORE INSERT ON orbit_audit_events FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'audit store down'",
    );
    try {
      const failed = await api.request('POST', CONFIGURE, { token: first.token, key: 'atomic', body: configureBody(before.revision, { max_concurrency: 9 }) });
      assert.ok(failed.status >= 500, failed.text);
    } finally {
      await t.db.exec('DROP TRIGGER orbit_test_audit_fails');
    }
    assert.deepEqual(await current(), before);
    const eventsAfter = (await t.db.rows<{ n: string }>('SELECT COUNT(*) AS n FROM orbit_events'))[0]?.n;
    assert.equal(eventsAfter, eventsBefore);
    const receipts = await t.db.rows("SELECT 1 FROM orbit_idempotency_receipts WHERE idempotency_key = 'atomic'");
    assert.equal(receipts.length, 0);
    // Nothing was left behind, so the same key succeeds now.
    const ok = await api.request('POST', CONFIGURE, { token: first.token, key: 'atomic', body: configureBody(before.revision, { max_concurrency: 9 }) });
    assert.equal(ok.status, 200);
  });

  test('reason: non-blank, at most 1024 Unicode characters', async () => {
    const rev = (await current()).revision;
    const cases: Array<[string, number]> = [
      ['', 400],
      [' \t\u3000', 400],
      ['调'.repeat(1025), 400],
      ['😀'.repeat(1025), 400],
      ['😀'.repeat(1024), 409],
      ['调'.repeat(1024), 409],
    ];
    for (const [reason, status] of cases) {
      const response = await api.request('POST', CONFIGURE, {
        token: first.token,
        key: `reason-${reason.length}-${status}-${reason.codePointAt(0)}`,
        body: configureBody('999999', { reason }),
      });
      assert.equal(response.status, status, `${JSON.stringify(reason.slice(0, 4))}×${reason.length}: ${response.text}`);
      if (status === 400) assert.equal(response.body.error.details.field, 'reason');
    }
    assert.equal((await current()).revision, rev);
  });

  test('limits out of range, wrong types and missing fields are 400 naming the field', async () => {
    const rev = (await current()).revision;
    const bad: Array<[Record<string, unknown>, string]> = [
      [{ max_unfinished_tasks: 0 }, 'max_unfinished_tasks'],
      [{ max_unfinished_tasks: 100000001 }, 'max_unfinished_tasks'],
      [{ max_concurrency: 1000001 }, 'max_concurrency'],
      [{ rate_per_second: 10000001 }, 'rate_per_second'],
      [{ rate_per_second: 1.5 }, 'rate_per_second'],
      [{ rate_per_second: '5' }, 'rate_per_second'],
      [{ expected_revision: 2 }, 'expected_revision'],
      [{ expected_revision: '0' }, 'expected_revision'],
      [{ expected_revision: '18446744073709551616' }, 'expected_revision'],
      [{ expected_revision: '01' }, 'expected_revision'],
      [{ Max_concurrency: 5 }, 'Max_concurrency'],
    ];
    for (const [patch, field] of bad) {
      const response = await api.request('POST', CONFIGURE, { token: first.token, key: `bad-${field}`, body: configureBody(rev, patch) });
      assert.equal(response.status, 400, `${JSON.stringify(patch)}: ${response.text}`);
      assert.equal(response.body.error.details.field, field, JSON.stringify(patch));
    }
    const missing = configureBody(rev) as Record<string, unknown>;
    delete missing.rate_per_second;
    const response = await api.request('POST', CONFIGURE, { token: first.token, key: 'bad-missing', body: missing });
    assert.equal(response.status, 400);
    assert.equal(response.body.error.details.field, 'rate_per_second');
    const boundaries = await api.request('POST', CONFIGURE, {
      token: first.token,
      key: 'boundaries',
      body: configureBody(rev, { max_unfinished_tasks: 100000000, max_concurrency: 1, rate_per_second: 10000000 }),
    });
    assert.equal(boundaries.status, 200, boundaries.text);
  });

  test('403 without the application actions; 401 when revoked, expired, or the application or namespace is disabled', async () => {
    const plain = await createCredential(t.db, first, [...NAMESPACE_ACTIONS], ['*']);
    const get = await api.request('GET', GET, { token: plain });
    assert.equal(get.status, 403);
    assert.equal(get.body.error.code, 'PERMISSION_DENIED');
    const post = await api.request('POST', CONFIGURE, { token: plain, key: 'nope', body: configureBody('1') });
    assert.equal(post.status, 403);
    const readOnly = await createCredential(t.db, first, ['application:resources:read']);
    assert.equal((await api.request('GET', GET, { token: readOnly })).status, 200);
    assert.equal((await api.request('POST', CONFIGURE, { token: readOnly, key: 'ro', body: configureBody('1') })).status, 403);

    const revoked = await createCredential(t.db, first, ['application:resources:read']);
    await credentialRevoke(t.db, Buffer.from(revoked.slice(6, 38), 'hex'));
    const r = await api.request('GET', GET, { token: revoked });
    assert.equal(r.status, 401);
    assert.equal(r.body.error.code, 'UNAUTHENTICATED');

    const wrongSecret = `${first.token.slice(0, -4)}AAAA`;
    assert.equal((await api.request('GET', GET, { token: wrongSecret })).status, 401);
    assert.equal((await api.request('GET', GET, { token: 'garbage' })).status, 401);
    assert.equal((await api.request('GET', GET, {})).status, 401);

    const expiring = await createCredential(t.db, first, ['application:resources:read']);
    await t.db.exec('UPDATE orbit_credentials SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE credential_id = ?', [
      Buffer.from(expiring.slice(6, 38), 'hex'),
    ]);
    assert.equal((await api.request('GET', GET, { token: expiring })).status, 401);

    const other = await createTenant(t.db, { namespace: 'elsewhere', resourceAccess: true });
    assert.equal((await api.request('GET', GET, { token: other.token })).status, 200);
    const configureOther = async (key: string) =>
      api.request('POST', CONFIGURE, {
        token: other.token,
        key,
        body: configureBody(
          (
            await t.db.rows<{ revision: string }>('SELECT revision FROM orbit_application_resources WHERE application_id = ?', [
              Buffer.from(other.applicationId, 'hex'),
            ])
          )[0]!.revision,
        ),
      });
    await namespaceSetEnabled(t.db, Buffer.from(other.namespaceId, 'hex'), false);
    // Writes re-check the credential in their own transaction: refused at once, even though
    // this process still holds the authentication in its cache...
    const write = await configureOther('after-disable');
    assert.equal(write.status, 401, write.text);
    assert.equal((await api.request('POST', '/v1/queues/default/tasks', { token: other.token, key: 'x', body: { payload: {} } })).status, 401);
    // ...and reads follow once the cache entry (ORBIT_AUTH_CACHE_MS, 1 s here) has run out.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    assert.equal((await api.request('GET', GET, { token: other.token })).status, 401);
    await namespaceSetEnabled(t.db, Buffer.from(other.namespaceId, 'hex'), true);
    assert.equal((await api.request('GET', GET, { token: other.token })).status, 200);
    await applicationSetEnabled(t.db, Buffer.from(other.applicationId, 'hex'), false);
    assert.equal((await api.request('POST', '/v1/queues/default/tasks', { token: other.token, key: 'y', body: { payload: {} } })).status, 401);
    assert.equal((await configureOther('after-app-disable')).status, 401);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const disabled = await api.request('GET', GET, { token: other.token });
    assert.equal(disabled.status, 401);
    assert.equal(disabled.body.error.code, 'UNAUTHENTICATED');
    assert.equal(
      (await t.db.rows("SELECT 1 FROM orbit_idempotency_receipts WHERE idempotency_key IN ('after-disable', 'after-app-disable', 'x', 'y')")).length,
      0,
    );
  });
});
