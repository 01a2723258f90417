/**
 * The usage gauges of /metrics against a real server process: the same figures the API returns
 * for the application and each queue, window starts, the oldest WAITING task, open worker
 * sessions; the queue series capped by ORBIT_METRICS_MAX_QUEUES.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw } from '../helpers/ws-session.ts';

/** `name{labels} value` lines of the Prometheus text format, for one metric name. */
async function series(url: string, name: string): Promise<Array<{ labels: Record<string, string>; value: number }>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1] as string, l[2] as string]));
    out.push({ labels, value: Number(m[3]) });
  }
  return out;
}

describe('usage gauges in /metrics', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let capped: ServerProcess;
  let tenant: TestTenant;
  let applicationName: string;

  before(async () => {
    t = await freshDatabase('usage_metrics');
    tenant = await createTenant(t.db, { namespace: 'gauges', queues: ['busy', 'idle'], resourceAccess: true });
    [server, capped] = await Promise.all([startServerProcess(t.url), startServerProcess(t.url, { ORBIT_METRICS_MAX_QUEUES: '1' })]);
    const [row] = await t.db.rows<{ name: string }>('SELECT name FROM orbit_applications WHERE application_id = ?', [Buffer.from(tenant.applicationId, 'hex')]);
    applicationName = row!.name;
  });
  after(async () => {
    await Promise.all([server.stop(), capped.stop()]);
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  test('application and queue gauges equal what the API returns', async () => {
    for (const n of [1, 2, 3]) {
      assert.equal((await call(server.url, 'POST', '/v1/queues/busy/tasks', { token: tenant.token, key: `g-${n}`, body: { payload: { n } } })).status, 200);
    }
    const worker = await connectRaw(server.url, tenant.token);
    await worker.request({ type: 'hello', node_id: 'gauges', queues: ['busy'], capacity: 2 });
    const granted = await worker.request({ type: 'claim', claim_id: 'c1', max: 1, start: true });
    assert.equal(granted.attempts.length, 1);
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // the oldest WAITING task has waited > 1 s; the gauge cache (1 s) has expired

    const app = (await call(server.url, 'GET', '/v1/application/resources', { token: tenant.token })).body.data;
    const busy = (await call(server.url, 'GET', '/v1/queues/busy', { token: tenant.token })).body.data;
    const one = async (name: string, labels: Record<string, string>) => {
      const found = (await series(server.url, name)).filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v));
      assert.equal(found.length, 1, `${name} ${JSON.stringify(labels)}: ${JSON.stringify(found)}`);
      return found[0]!.value;
    };
    const a = { application: applicationName };
    assert.equal(await one('orbit_application_unfinished_tasks', a), Number(app.unfinished_tasks));
    assert.equal(await one('orbit_application_unfinished_tasks', a), 3);
    assert.equal(await one('orbit_application_max_unfinished_tasks', a), app.max_unfinished_tasks);
    assert.equal(await one('orbit_application_active_attempts', a), 1);
    assert.equal(await one('orbit_application_max_concurrency', a), app.max_concurrency);
    assert.equal(await one('orbit_application_rate_per_second', a), app.rate_per_second);
    assert.equal(await one('orbit_application_open_sessions', a), 1);
    const q = { application: applicationName, namespace: 'gauges', queue: 'busy' };
    assert.equal(await one('orbit_queue_unfinished_tasks', q), Number(busy.unfinished_tasks));
    assert.equal(await one('orbit_queue_active_attempts', q), 1);
    assert.equal(await one('orbit_queue_max_unfinished_tasks', q), busy.max_unfinished_tasks);
    assert.equal(await one('orbit_queue_paused', q), 0);
    assert.ok((await one('orbit_queue_oldest_waiting_seconds', q)) >= 1, 'two tasks have waited more than a second');
    assert.equal(await one('orbit_queue_oldest_waiting_seconds', { ...q, queue: 'idle' }), 0);
    await worker.close();
  });

  test('subscription lag: events behind the acknowledged position and their age; 0 once acknowledged to the head', async () => {
    const created = await call(server.url, 'POST', '/v1/subscriptions', {
      token: tenant.token,
      key: 'lag-sub',
      body: { name: 'lagging', reason: 'lag', from: 'beginning' },
    });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const id = created.body.data.subscription.subscription_id;
    await new Promise((resolve) => setTimeout(resolve, 1_050));
    const lag = async (name: string) =>
      (await series(server.url, name)).find((s) => s.labels.subscription === 'lagging' && s.labels.namespace === 'gauges')?.value;
    const events = (await call(server.url, 'GET', '/v1/events?limit=100', { token: tenant.token })).body.data.events;
    assert.equal(await lag('orbit_subscription_lag_events'), events.length);
    assert.ok(((await lag('orbit_subscription_lag_seconds')) ?? 0) > 0);
    const head = events.at(-1).sequence;
    assert.equal(
      (await call(server.url, 'POST', `/v1/subscriptions/${id}:ack`, { token: tenant.token, key: 'lag-ack', body: { sequence: head } })).status,
      200,
    );
    await new Promise((resolve) => setTimeout(resolve, 1_050));
    assert.equal(await lag('orbit_subscription_lag_events'), 0);
    assert.equal(await lag('orbit_subscription_lag_seconds'), 0);
  });

  test('the window starts right after a start, and the queue series are capped', async () => {
    const worker = await connectRaw(server.url, tenant.token);
    await worker.request({ type: 'hello', node_id: 'gauges-2', queues: ['busy'], capacity: 5 });
    // The gauge shows the current one-second window, so it must be read within a second of the
    // start: the start and the scrape's read both happen between the two clock readings below. A
    // slower round (a loaded machine) proves nothing - the window may have ended before the
    // scrape - and another task is started and read, up to five times.
    let starts: { labels: Record<string, string>; value: number } | undefined;
    for (let round = 1; ; round++) {
      const submitted = await call(server.url, 'POST', '/v1/queues/busy/tasks', { token: tenant.token, key: `window-${round}`, body: { payload: { round } } });
      assert.equal(submitted.status, 200);
      await new Promise((resolve) => setTimeout(resolve, 1_050)); // the gauge cache (1 s) has expired: a scrape now reads afresh
      const sent = Date.now();
      const granted = await worker.request({ type: 'claim', claim_id: `c-window-${round}`, max: 1, start: true });
      assert.equal(granted.attempts.length, 1);
      [starts] = await series(server.url, 'orbit_application_window_starts').then((s) => s.filter((x) => x.labels.application === applicationName));
      if (Date.now() - sent < 1_000) break;
      assert.ok(round < 5, 'five rounds of claim and scrape each took a second or more');
    }
    assert.ok(starts && starts.value >= 1, JSON.stringify(starts));
    const queues = await series(capped.url, 'orbit_queue_unfinished_tasks');
    assert.equal(queues.length, 1, 'ORBIT_METRICS_MAX_QUEUES=1: one queue series');
    assert.equal(queues[0]!.labels.queue, 'busy', 'the busiest queue');
    await worker.close();
  });
});
