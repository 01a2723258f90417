/**
 * The pages in a real headless Chromium (Debian's `chromium`, driven by playwright-core) against
 * a real server process: /docs renders the API reference from the served openapi.yaml with
 * nothing from the internet; /console, after pasting a token, shows the figures the API returns,
 * refreshes them live, resolves a NEEDS_REVIEW task (which the API then shows changed), and a
 * credential without application:resources:read sees queues only, with a note. Screenshots are
 * written to .local/screenshots/.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw } from '../helpers/ws-session.ts';
import { waitFor } from '../helpers/wait.ts';

const CHROMIUM = process.env.ORBIT_CHROMIUM ?? '/usr/bin/chromium';
const SCREENSHOTS = fileURLToPath(new URL('../../.local/screenshots/', import.meta.url));

describe('pages in headless Chromium', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let tenant: TestTenant;
  let browser: Browser;
  const external: string[] = [];

  before(async () => {
    assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium), or set ORBIT_CHROMIUM`);
    fs.mkdirSync(SCREENSHOTS, { recursive: true });
    t = await freshDatabase('pages');
    tenant = await createTenant(t.db, { namespace: 'pages', queues: ['billing', 'reports'], resourceAccess: true });
    // A short lease and a quick recovery, so a dropped running attempt becomes NEEDS_REVIEW fast.
    server = await startServerProcess(t.url, { ORBIT_LEASE_SECONDS: '1', ORBIT_RECOVERY_INTERVAL_MS: '100' });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
  });
  after(async () => {
    await browser?.close();
    await server.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  /** A page that records every request leaving for another origin (there must be none). */
  async function page(): Promise<Page> {
    const p = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const origin = new URL(server.url).origin;
    await p.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith(origin) || url.startsWith('data:') || url.startsWith('blob:')) return route.continue();
      external.push(url);
      return route.abort();
    });
    return p;
  }

  test('/docs renders the API reference from the served spec, with the worker protocol linked, offline', async () => {
    const p = await page();
    const errors: string[] = [];
    p.on('pageerror', (error) => errors.push(error.message));
    await p.goto(`${server.url}/docs`);
    // Redoc renders the operations from /openapi.yaml: their summaries appear.
    await p.getByText('Create a cron or interval schedule that submits tasks to the queue.').first().waitFor({ timeout: 20_000 });
    assert.ok(await p.getByText('Submit up to 1,000 tasks in one request').first().isVisible());
    assert.equal(await p.locator('#asyncapi-link').getAttribute('href'), '/asyncapi.yaml');
    const asyncapi = await fetch(`${server.url}/asyncapi.yaml`);
    assert.equal(asyncapi.status, 200);
    assert.match(await asyncapi.text(), /^asyncapi: 3\.0\.0/);
    await p.screenshot({ path: path.join(SCREENSHOTS, 'docs.png') });
    assert.deepEqual(errors, []);
    assert.deepEqual(external, [], 'nothing is loaded from the internet');
    await p.close();
  });

  test('/console shows the figures the API returns, refreshes them, and resolves a NEEDS_REVIEW task', async () => {
    // Figures to show: limits, two submitted tasks, a paused queue, and one task in NEEDS_REVIEW.
    const current = (await call(server.url, 'GET', '/v1/application/resources', { token: tenant.token })).body.data;
    const configured = await call(server.url, 'POST', '/v1/application/resources:configure', {
      token: tenant.token,
      key: 'console-limits',
      body: { expected_revision: current.revision, reason: 'console test', max_unfinished_tasks: 50, max_concurrency: 7, rate_per_second: 30 },
    });
    assert.equal(configured.status, 200);
    await configureQueue(server.url, tenant.token, 'reports', { paused: true, max_unfinished_tasks: 40 });
    for (const n of [1, 2]) {
      const r = await call(server.url, 'POST', '/v1/queues/billing/tasks', { token: tenant.token, key: `console-${n}`, body: { payload: { n } } });
      assert.equal(r.status, 200);
    }
    const review = await call(server.url, 'POST', '/v1/queues/billing/tasks', {
      token: tenant.token,
      key: 'console-review',
      body: { payload: { review: true }, priority: 9, max_attempts: 1, on_unknown_outcome: 'review' },
    });
    const reviewId: string = review.body.data.task.task_id;
    const worker = await connectRaw(server.url, tenant.token);
    await worker.request({ type: 'hello', node_id: 'console-test', queues: ['billing'], capacity: 1 });
    const granted = await worker.request({ type: 'claim', claim_id: 'c1', max: 1, start: true });
    assert.equal(granted.attempts?.[0]?.task_id, reviewId, JSON.stringify(granted));
    await worker.close(); // the running attempt's lease runs out: its outcome is unknown → NEEDS_REVIEW
    await waitFor(async () => {
      const task = (await call(server.url, 'GET', `/v1/tasks/${reviewId}`, { token: tenant.token })).body.data;
      return task.state === 'NEEDS_REVIEW' ? task : null;
    });

    const p = await page();
    await p.goto(`${server.url}/console`);
    await p.locator('#token').fill(tenant.token);
    await p.locator('#login button[type=submit]').click();
    await p.locator('#application [data-limit=unfinished] [data-used]').waitFor();
    assert.equal(await p.evaluate("sessionStorage.getItem('orbit.console.token')"), tenant.token);
    assert.ok(!p.url().includes(tenant.token), 'the token is never in the URL');

    const api = (await call(server.url, 'GET', '/v1/application/resources', { token: tenant.token })).body.data;
    const text = (selector: string) => p.locator(selector).first().innerText();
    assert.equal(await text('#application [data-limit=unfinished] [data-used]'), api.unfinished_tasks);
    assert.equal(await text('#application [data-limit=unfinished] [data-max]'), '50');
    assert.equal(await text('#application [data-limit=active] [data-max]'), '7');
    assert.equal(await text('#application [data-limit=rate] [data-used]'), '30');
    assert.equal(await text('#queues tr[data-queue=billing] [data-field=unfinished]'), `3 / 100000`);
    assert.equal(await text('#queues tr[data-queue=reports] [data-field=paused]'), 'paused');
    assert.equal(await text('#queues tr[data-queue=reports] [data-field=unfinished]'), '0 / 40');
    await p.locator(`#review tr[data-task-id="${reviewId}"]`).waitFor();
    assert.ok((await text('#events')).includes('application.resources.configured'));

    // Live: a submission made elsewhere shows up without reloading.
    await call(server.url, 'POST', '/v1/queues/reports/tasks', { token: tenant.token, key: 'console-3', body: { payload: { n: 3 } } });
    await p.locator('#queues tr[data-queue=reports] [data-field=unfinished]', { hasText: '1 / 40' }).waitFor({ timeout: 10_000 });
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console.png'), fullPage: true });

    // Resolve from the page: the task changes, as the API shows, and leaves the review list.
    const row = p.locator(`#review tr[data-task-id="${reviewId}"]`);
    await row.locator('[data-field=reason]').fill('checked by hand: the charge went through');
    await row.locator('button[data-outcome=succeeded]').click();
    await p.locator(`#review tr[data-task-id="${reviewId}"]`).waitFor({ state: 'detached', timeout: 10_000 });
    const resolved = (await call(server.url, 'GET', `/v1/tasks/${reviewId}`, { token: tenant.token })).body.data;
    assert.equal(resolved.state, 'SUCCEEDED');
    const audit = (await call(server.url, 'GET', '/v1/audit-events?limit=100', { token: tenant.token })).body.data.audit_events;
    assert.ok(audit.some((a: any) => a.action === 'task.resolve' && a.resource === reviewId && a.reason === 'checked by hand: the charge went through'));
    await p.locator('#events', { hasText: 'task.resolved' }).waitFor({ timeout: 10_000 });

    await p.locator('#sign-out').click();
    assert.equal(await p.evaluate("sessionStorage.getItem('orbit.console.token')"), null);
    await p.locator('#token').waitFor();
    assert.deepEqual(external, []);
    await p.close();
  });

  test('/console with a credential without application:resources:read: queues only, with a note', async () => {
    const limited = await createCredential(t.db, tenant, ['queues:read', 'tasks:read'], ['billing']);
    const p = await page();
    await p.goto(`${server.url}/console`);
    await p.locator('#token').fill(limited);
    await p.locator('#login button[type=submit]').click();
    await p.locator('#resources-note').waitFor();
    assert.match(await p.locator('#resources-note').innerText(), /application:resources:read/);
    assert.equal(await p.locator('#application').count(), 0);
    await p.locator('#queues tr[data-queue=billing]').waitFor();
    assert.equal(await p.locator('#queues tr[data-queue=reports]').count(), 0, 'only the queues in its scope');
    assert.match(await p.locator('#events').innerText(), /events:read/);
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console-queues-only.png'), fullPage: true });
    await p.close();
  });

  test('a refused token is said on the sign-in form, and nothing is kept', async () => {
    const p = await page();
    await p.goto(`${server.url}/console`);
    await p.locator('#token').fill('orbit_00000000000000000000000000000000_nope');
    await p.locator('#login button[type=submit]').click();
    await p.locator('#login-error').waitFor();
    assert.equal(await p.evaluate("sessionStorage.getItem('orbit.console.token')"), null);
    await p.close();
  });
});
