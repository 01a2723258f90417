/**
 * Retention: the policy's API (defaults, full replacement, compare-and-set, idempotency, dry run,
 * bounds, actions, audit and event), and pruning by it - what goes, what never goes (unfinished
 * tasks and their receipts, events an ACTIVE subscription needs within its lag), a subscription
 * lagging past the lag told plainly and moved on explicitly, `orbit-admin prune --dry-run`, and
 * two server processes pruning one database at once, each row removed once.
 *
 * History is made old by moving its timestamps back in the database (as leases are ended in the
 * database elsewhere): the rule compares times, and no test waits for a minute to pass.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { testApp } from '../helpers/app.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { adminEnv, adminInProcess, lines } from '../helpers/programs.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { NAMESPACE_ACTIONS } from '../../server/domain/actions.ts';
import { PruneLoop } from '../../server/loops/prune.ts';
import { silentLogger } from '../../server/log.ts';
import { retentionPoliciesList } from '../../server/store/retention/retention-policies.ts';
import { createOrbitClient } from '../../sdk/index.ts';

const GET = '/v1/application/retention';
const CONFIGURE = '/v1/application/retention:configure';
const DEFAULTS = {
  finished_task_retention_seconds: 604800,
  event_retention_seconds: 604800,
  receipt_retention_seconds: 604800,
  audit_retention_seconds: 31536000,
  subscription_max_lag_seconds: 2592000,
};
/** Every duration at its minimum: history an hour old is due. */
const ALL_60 = {
  finished_task_retention_seconds: 60,
  event_retention_seconds: 60,
  receipt_retention_seconds: 60,
  audit_retention_seconds: 60,
  subscription_max_lag_seconds: 60,
};

let keys = 0;
const key = (label: string) => `${label}-${++keys}`;

/** Moves an application's history an hour back: finished tasks, receipts, events, audit records, closed sessions. */
async function age(t: TestDatabase, tenant: TestTenant, hours = 1): Promise<void> {
  const app = tenant.applicationId;
  const back = `INTERVAL ${hours} HOUR`;
  await t.db.exec(`UPDATE orbit_tasks SET finished_at = finished_at - ${back} WHERE application_id = UNHEX(?) AND finished_at IS NOT NULL`, [app]);
  await t.db.exec(`UPDATE orbit_idempotency_receipts SET created_at = created_at - ${back} WHERE application_id = UNHEX(?)`, [app]);
  await t.db.exec(`UPDATE orbit_events SET occurred_at = occurred_at - ${back} WHERE application_id = UNHEX(?)`, [app]);
  await t.db.exec(`UPDATE orbit_audit_events SET created_at = created_at - ${back} WHERE application_id = UNHEX(?)`, [app]);
}

async function countOf(t: TestDatabase, table: string, tenant: TestTenant): Promise<number> {
  const [row] = await t.db.rows<{ n: string }>(`SELECT COUNT(*) AS n FROM ${table} WHERE application_id = UNHEX(?)`, [tenant.applicationId]);
  return Number(row?.n);
}

function loop(t: TestDatabase, batchRows = 500): PruneLoop {
  return new PruneLoop({ db: t.db, log: silentLogger(), metrics: null, intervalMs: 1000, batchRows, maxShare: 1 });
}

/** The application's whole turn, repeated until nothing due is left (as `orbit-admin prune` does). */
async function pruneAll(t: TestDatabase, tenant: TestTenant, batchRows = 500) {
  const [{ policy } = { policy: null }] = await retentionPoliciesList(t.db, Buffer.from(tenant.applicationId, 'hex'));
  assert.ok(policy);
  const l = loop(t, batchRows);
  const total: Record<string, number> = {};
  for (let more = true; more; ) {
    const turn = await l.turn(Buffer.from(tenant.applicationId, 'hex'), policy);
    for (const [table, n] of Object.entries(turn.counts)) total[table] = (total[table] ?? 0) + n;
    more = turn.more;
  }
  return total;
}

/**
 * A fresh database, the in-process app and one tenant for a describe block, read through getters
 * (they exist once `before` has run); `configure` replaces the tenant's policy with `durations`.
 */
function retentionFixture(label: string, namespace: string) {
  let t: TestDatabase;
  let app: Awaited<ReturnType<typeof testApp>>;
  let owner: TestTenant;
  before(async () => {
    t = await freshDatabase(label);
    app = await testApp(t.db);
    owner = await createTenant(t.db, { namespace, queues: ['jobs'], resourceAccess: true });
  });
  after(async () => {
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });
  const fixture = {
    get db() {
      return t;
    },
    get api() {
      return app;
    },
    get tenant() {
      return owner;
    },
    async configure(durations: Record<string, number>) {
      const current = (await app.request('GET', GET, { token: owner.token })).body.data;
      const r = await app.request('POST', CONFIGURE, {
        token: owner.token,
        key: key('cfg'),
        body: { expected_revision: current.revision, reason: 'test', ...durations },
      });
      assert.equal(r.status, 200, r.text);
    },
  };
  return fixture;
}

describe('retention policy API', () => {
  let t: TestDatabase;
  let api: Awaited<ReturnType<typeof testApp>>;
  let tenant: TestTenant;

  before(async () => {
    t = await freshDatabase('retention_api');
    api = await testApp(t.db);
    tenant = await createTenant(t.db, { namespace: 'ops', queues: ['jobs'], resourceAccess: true });
  });
  after(async () => {
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const get = async (token = tenant.token) => {
    const r = await api.request('GET', GET, { token });
    assert.equal(r.status, 200, r.text);
    return r.body.data;
  };

  test('a new application keeps finished tasks, events and receipts 7 days, audit records 365 days; a subscription may lag 30 days', async () => {
    assert.deepEqual(await get(), { application_id: tenant.applicationId, revision: '1', ...DEFAULTS });
  });

  test('configure is a full replacement under compare-and-set; an absent duration keeps forever; a replay answers the original', async () => {
    const before = await get();
    const body = {
      expected_revision: before.revision,
      reason: '缩短保留期',
      finished_task_retention_seconds: 3600,
      event_retention_seconds: 7200,
      receipt_retention_seconds: 86400,
    };
    const k = key('retention');
    const r = await api.request('POST', CONFIGURE, { token: tenant.token, key: k, body });
    assert.equal(r.status, 200, r.text);
    const expected = {
      application_id: tenant.applicationId,
      revision: '2',
      finished_task_retention_seconds: 3600,
      event_retention_seconds: 7200,
      receipt_retention_seconds: 86400,
    };
    assert.deepEqual(r.body.data, { retention: expected, deduplicated: false });
    assert.deepEqual(await get(), expected, 'audit and lag absent: kept forever');

    const replay = await api.request('POST', CONFIGURE, { token: tenant.token, key: k, body });
    assert.deepEqual(replay.body.data, { retention: expected, deduplicated: true });
    const other = await api.request('POST', CONFIGURE, { token: tenant.token, key: k, body: { ...body, event_retention_seconds: 60 } });
    assert.equal(other.status, 409);
    assert.equal(other.body.error.code, 'IDEMPOTENCY_CONFLICT');

    const stale = await api.request('POST', CONFIGURE, { token: tenant.token, key: key('stale'), body });
    assert.equal(stale.status, 409);
    assert.equal(stale.body.error.code, 'STATE_CONFLICT');
    assert.equal(stale.body.error.details.current_revision, '2');

    // The audit record and the event, in the same transaction.
    const audit = await api.request('GET', '/v1/audit-events?limit=100', { token: tenant.token });
    const record = audit.body.data.audit_events.find((a: any) => a.action === 'application.retention.configure');
    assert.ok(record, JSON.stringify(audit.body.data));
    assert.equal(record.reason, '缩短保留期');
    const events = await api.request('GET', '/v1/events?after=0&limit=100', { token: tenant.token });
    const event = events.body.data.events.find((e: any) => e.type === 'application.retention.configured');
    assert.ok(event);
    assert.equal(event.data.revision, '2');
  });

  test('dry run: the answer shows the policy it would set, nothing is written', async () => {
    const before = await get();
    const r = await api.request('POST', CONFIGURE, {
      token: tenant.token,
      key: key('dry'),
      body: { expected_revision: before.revision, reason: 'try', ...ALL_60, dry_run: true },
    });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.body.data, {
      retention: { application_id: tenant.applicationId, revision: String(BigInt(before.revision) + 1n), ...ALL_60 },
      deduplicated: false,
      dry_run: true,
    });
    assert.deepEqual(await get(), before);
  });

  test('bad input is 400 naming the field, and changes nothing', async () => {
    const before = await get();
    for (const [field, value] of [
      ['finished_task_retention_seconds', 59],
      ['event_retention_seconds', 315360001],
      ['receipt_retention_seconds', '3600'],
      ['audit_retention_seconds', 0],
      ['subscription_max_lag_seconds', null],
      ['keep', 1],
    ] as const) {
      const r = await api.request('POST', CONFIGURE, {
        token: tenant.token,
        key: key('bad'),
        body: { expected_revision: before.revision, reason: 'x', [field]: value },
      });
      assert.equal(r.status, 400, `${field}: ${r.text}`);
      assert.equal(r.body.error.details.field, field);
    }
    assert.deepEqual(await get(), before);
  });

  test('actions: reading needs application:resources:read, configuring application:resources:configure (which :manage includes)', async () => {
    const plain = await createCredential(t.db, tenant, NAMESPACE_ACTIONS);
    assert.equal((await api.request('GET', GET, { token: plain })).status, 403);
    const before = await get();
    const body = { expected_revision: before.revision, reason: 'x', ...DEFAULTS };
    const readOnly = await createCredential(t.db, tenant, ['application:resources:read']);
    const denied = await api.request('POST', CONFIGURE, { token: readOnly, key: key('ro'), body });
    assert.equal(denied.status, 403);
    assert.equal(denied.body.error.details.action, 'application:resources:configure');
    const manage = await createCredential(t.db, tenant, ['application:resources:read', 'application:resources:manage']);
    const allowed = await api.request('POST', CONFIGURE, { token: manage, key: key('manage'), body });
    assert.equal(allowed.status, 200, allowed.text);
  });
});

describe('pruning by the policy', () => {
  const fixture = retentionFixture('retention_prune', 'ops');
  const configure = fixture.configure;
  let t: TestDatabase;
  let api: Awaited<ReturnType<typeof testApp>>;
  let tenant: TestTenant;
  before(() => {
    ({ db: t, api, tenant } = fixture);
  });
  async function submit(k: string) {
    const r = await api.request('POST', '/v1/queues/jobs/tasks', { token: tenant.token, key: k, body: { payload: { k } } });
    assert.equal(r.status, 200, r.text);
    return r.body.data as { task: { task_id: string }; deduplicated: boolean };
  }

  test('finished tasks, their receipts, events and audit records go; unfinished tasks and their receipts stay; counters do not move', async () => {
    await configure(ALL_60);
    const finished: string[] = [];
    const waiting: string[] = [];
    for (let i = 0; i < 6; i++) {
      const { task } = await submit(`job-${i}`);
      if (i < 4) {
        const c = await api.request('POST', `/v1/tasks/${task.task_id}:cancel`, { token: tenant.token, key: `cancel-${i}`, body: { reason: 'done' } });
        assert.equal(c.status, 200, c.text);
        finished.push(task.task_id);
      } else waiting.push(task.task_id);
    }
    await age(t, tenant);
    const usageBefore = (await api.request('GET', '/v1/application/resources', { token: tenant.token })).body.data;

    // In process (the output and exit code the program would have): what it counts in the database is what is tested.
    const dry = await adminInProcess(['prune', '--dry-run', '--application-id', tenant.applicationId], adminEnv(t.url));
    assert.equal(dry.code, 0, dry.stderr);
    const [perApp, summary] = lines(dry.stdout);
    assert.match(perApp ?? '', new RegExp(`^application ${tenant.applicationId}: orbit_tasks 4, orbit_attempts 0|orbit_tasks 4, `));
    assert.match(summary ?? '', /^would prune \d+ rows of 1 application \(dry run: nothing removed\)$/);
    assert.equal(await countOf(t, 'orbit_tasks', tenant), 6, 'a dry run removes nothing');

    // Smaller batches than the backlog: the turn goes batch after batch.
    const removed = await pruneAll(t, tenant, 2);
    assert.equal(removed.orbit_tasks, 4);
    // The submissions and cancels of the finished tasks and the configure's receipt go; the 2 waiting tasks keep theirs.
    assert.equal(removed.orbit_idempotency_receipts, 9);
    assert.equal(await countOf(t, 'orbit_idempotency_receipts', tenant), 2);
    assert.ok((removed.orbit_events ?? 0) > 0);
    assert.ok((removed.orbit_audit_events ?? 0) > 0);
    for (const [table, n] of Object.entries(removed)) {
      if (n > 0) assert.equal(Number(perApp?.match(new RegExp(`${table} (\\d+)`))?.[1]), n, `the dry run counted what went from ${table}`);
    }

    for (const id of finished) assert.equal((await api.request('GET', `/v1/tasks/${id}`, { token: tenant.token })).status, 404);
    for (const id of waiting) assert.equal((await api.request('GET', `/v1/tasks/${id}`, { token: tenant.token })).status, 200);
    // The receipt of an unfinished task stays however old: its replay finds it.
    const replay = await submit('job-4');
    assert.equal(replay.deduplicated, true);
    assert.equal(replay.task.task_id, waiting[0]);
    assert.equal(await countOf(t, 'orbit_events', tenant), 0, 'no subscription holds them: every event an hour old went (a replay writes none)');
    const usageAfter = (await api.request('GET', '/v1/application/resources', { token: tenant.token })).body.data;
    assert.deepEqual(usageAfter, usageBefore, 'pruning never changes a counter');
  });
});

describe('a subscription and the events it needs', () => {
  const fixture = retentionFixture('retention_subs', 'feed');
  const configure = fixture.configure;
  let t: TestDatabase;
  let api: Awaited<ReturnType<typeof testApp>>;
  let tenant: TestTenant;
  before(() => {
    ({ db: t, api, tenant } = fixture);
  });
  async function subscribe(name: string, from: 'now' | 'beginning') {
    const r = await api.request('POST', '/v1/subscriptions', { token: tenant.token, key: key('sub'), body: { name, reason: 'test', from } });
    assert.equal(r.status, 200, r.text);
    return r.body.data.subscription as { subscription_id: string; acked_sequence: string };
  }
  const read = (id: string) => api.request('GET', `/v1/subscriptions/${id}/events?limit=100`, { token: tenant.token });
  async function submitSome(n: number, label: string) {
    for (let i = 0; i < n; i++) {
      const r = await api.request('POST', '/v1/queues/jobs/tasks', { token: tenant.token, key: key(label), body: { payload: { i } } });
      assert.equal(r.status, 200, r.text);
    }
  }

  test('an ACTIVE subscription within its lag loses nothing; past the lag it is told, and moves on by acknowledging', async () => {
    // Events an hour old; the subscription may lag two hours.
    await configure({ ...ALL_60, subscription_max_lag_seconds: 7200 });
    const behind = await subscribe('behind', 'beginning');
    await submitSome(5, 'early');
    const upToDate = await subscribe('up-to-date', 'now');
    await age(t, tenant);
    const feed = async () => (await api.request('GET', '/v1/events?after=0&limit=100', { token: tenant.token })).body.data.events as any[];
    const all = await feed();
    await pruneAll(t, tenant);
    const kept = await feed();
    // Every event `behind` has not acknowledged is still there, in order.
    assert.deepEqual(
      kept.map((e) => e.sequence),
      all.filter((e) => BigInt(e.sequence) > BigInt(behind.acked_sequence)).map((e) => e.sequence),
    );
    const within = await read(behind.subscription_id);
    assert.equal(within.status, 200, within.text);
    assert.ok(within.body.data.events.length > 0);

    // Now the lag is one minute: the hour-old events go, and `behind` is told. `up-to-date`
    // acknowledges everything first (the configure wrote an event after its position).
    await configure({ ...ALL_60 });
    const head = (await feed()).at(-1).sequence as string;
    const caughtUp = await api.request('POST', `/v1/subscriptions/${upToDate.subscription_id}:ack`, {
      token: tenant.token,
      key: key('ack'),
      body: { sequence: head },
    });
    assert.equal(caughtUp.status, 200, caughtUp.text);
    await age(t, tenant);
    await pruneAll(t, tenant);
    const told = await read(behind.subscription_id);
    assert.equal(told.status, 409, told.text);
    assert.equal(told.body.error.code, 'STATE_CONFLICT');
    assert.equal(told.body.error.details.reason, 'events_pruned');
    const through = told.body.error.details.pruned_through as string;
    assert.equal(told.body.error.details.oldest_sequence, String(BigInt(through) + 1n));
    const shown = await api.request('GET', `/v1/subscriptions/${behind.subscription_id}`, { token: tenant.token });
    assert.equal(shown.body.data.pruned_through, through);
    // The other subscription had acknowledged them all: nothing to tell it.
    const fine = await read(upToDate.subscription_id);
    assert.equal(fine.status, 200, fine.text);
    const fineShown = await api.request('GET', `/v1/subscriptions/${upToDate.subscription_id}`, { token: tenant.token });
    assert.equal(fineShown.body.data.pruned_through, undefined);

    // Moved on explicitly: acknowledge what was pruned, then read what came after.
    const ack = await api.request('POST', `/v1/subscriptions/${behind.subscription_id}:ack`, {
      token: tenant.token,
      key: key('ack'),
      body: { sequence: through },
    });
    assert.equal(ack.status, 200, ack.text);
    assert.equal(ack.body.data.subscription.pruned_through, undefined);
    await submitSome(2, 'late');
    const after = await read(behind.subscription_id);
    assert.equal(after.status, 200, after.text);
    assert.ok(after.body.data.events.every((e: any) => BigInt(e.sequence) > BigInt(through)));
    assert.ok(after.body.data.events.length >= 2);
  });

  test('the SDK reads and sets the policy', async () => {
    // The SDK against the in-process app: its fetch is the app's own.
    const orbit = createOrbitClient({ baseUrl: 'http://orbit.test', token: tenant.token, fetch: (request) => Promise.resolve(api.app.fetch(request)) });
    const current = await orbit.getRetention();
    assert.equal(typeof current.revision, 'string', 'a revision is a token, a decimal string as on the wire');
    const { retention, deduplicated } = await orbit.configureRetention({
      idempotency_key: key('sdk'),
      expected_revision: current.revision,
      reason: 'sdk',
      ...DEFAULTS,
    });
    assert.equal(deduplicated, false);
    assert.equal(retention.revision, String(BigInt(current.revision) + 1n));
    assert.deepEqual(JSON.parse(JSON.stringify(retention)), retention, 'survives JSON');
    assert.equal(retention.audit_retention_seconds, DEFAULTS.audit_retention_seconds);
    assert.deepEqual(await orbit.getRetention(), retention);
  });
});

describe('two server processes pruning one database', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  let tenants: TestTenant[];

  before(async () => {
    t = await freshDatabase('retention_two');
    tenants = await Promise.all([1, 2, 3].map((n) => createTenant(t.db, { namespace: `ns${n}`, queues: ['jobs'], resourceAccess: true })));
  });
  after(async () => {
    await Promise.all((servers ?? []).map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  test('every due row goes exactly once, across applications, while the servers run; /metrics counts what each removed', async () => {
    // History first (in-process, no pruning yet), then the two servers with a fast loop and small batches.
    const api = await testApp(t.db);
    for (const tenant of tenants) {
      const current = (await api.request('GET', GET, { token: tenant.token })).body.data;
      await api.request('POST', CONFIGURE, { token: tenant.token, key: key('cfg'), body: { expected_revision: current.revision, reason: 'test', ...ALL_60 } });
      for (let i = 0; i < 30; i++) {
        const { body } = await api.request('POST', '/v1/queues/jobs/tasks', { token: tenant.token, key: key('job'), body: { payload: { i } } });
        if (i % 3 !== 0)
          await api.request('POST', `/v1/tasks/${body.data.task.task_id}:cancel`, { token: tenant.token, key: key('cancel'), body: { reason: 'x' } });
      }
      await age(t, tenant);
    }
    const due = Object.fromEntries(
      await Promise.all(
        ['orbit_tasks', 'orbit_idempotency_receipts', 'orbit_events', 'orbit_audit_events'].map(async (table) => {
          const [row] = await t.db.rows<{ n: string }>(`SELECT COUNT(*) AS n FROM ${table}`);
          return [table, Number(row?.n)] as const;
        }),
      ),
    );
    const env = { ORBIT_PRUNE_INTERVAL_MS: '20', ORBIT_PRUNE_BATCH_ROWS: '7', ORBIT_PRUNE_MAX_SHARE: '1' };
    servers = await Promise.all([startServerProcess(t.url, env), startServerProcess(t.url, env)]);
    // Done when every application has only its unfinished tasks (10 each) and their receipts left.
    await waitFor(async () => {
      const [row] = await t.db.rows<{ tasks: string; receipts: string; events: string }>(
        `SELECT (SELECT COUNT(*) FROM orbit_tasks) AS tasks, (SELECT COUNT(*) FROM orbit_idempotency_receipts) AS receipts, (SELECT COUNT(*) FROM orbit_events) AS events`,
      );
      return Number(row?.tasks) === 30 && Number(row?.receipts) === 30 && Number(row?.events) === 0;
    });
    // Each process counts what it removed; together exactly what went.
    const pruned: Record<string, number> = {};
    for (const server of servers) {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      for (const m of text.matchAll(/^orbit_pruned_rows_total\{table="([a-z_]+)"\} (\d+)$/gm))
        pruned[m[1] as string] = (pruned[m[1] as string] ?? 0) + Number(m[2]);
      assert.match(text, /^orbit_retention_oldest_row_age_seconds\{table="orbit_idempotency_receipts"\} /m);
      assert.match(text, /^orbit_table_rows\{table="orbit_tasks"\} /m);
    }
    assert.equal(pruned.orbit_tasks, (due.orbit_tasks ?? 0) - 30);
    assert.equal(pruned.orbit_idempotency_receipts, (due.orbit_idempotency_receipts ?? 0) - 30);
    assert.equal(pruned.orbit_events, due.orbit_events);
    assert.equal(pruned.orbit_audit_events, due.orbit_audit_events);
    // Every unfinished task is still readable, through either server.
    for (const tenant of tenants) {
      const page = await call(servers[1]!.url, 'GET', '/v1/queues/jobs/tasks?limit=100', { token: tenant.token });
      assert.equal(page.status, 200);
      assert.equal(page.body.data.tasks.length, 10);
    }
  });
});
