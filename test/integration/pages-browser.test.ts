/**
 * The pages in a real headless Chromium (Debian's `chromium`, driven by playwright-core) against
 * a real server process: /docs renders the API reference from the served openapi.yaml with
 * nothing from the internet; /console, after pasting a token, shows the figures the API returns
 * (limits and usage counters alike, exact past 2^53), draws its usage bars at the share the API
 * returns, refreshes them live, resolves a NEEDS_REVIEW task (which the API then shows changed),
 * and a credential without application:resources:read sees queues only, with a note. The
 * namespaces' panel shows each namespace's floors and usage, live, and changes a namespace's
 * floors by a preview (a dry run: its effects shown, nothing changed) then an apply. The task
 * list filters by queue and state and pages newest first as GET /v1/tasks does; a task's page
 * (a link: the back button works) shows its fields, payload, error, attempts and events, and
 * resolves, retries and cancels it (the API then shows it changed; a refusal's message is
 * shown); a credential without tasks:read gets notes. At 390 px (a phone) and at 1280 px nothing
 * is wider than the window. On every page, as a user's browser would show it: no
 * Content-Security-Policy violation, no error in the browser console, no request off Orbit's
 * origin, no failed load, no 404, no broken image, and the page's icon is served. Screenshots
 * are written to .local/screenshots/.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { parse as parseYaml } from 'yaml';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, configureQueue, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw } from '../helpers/ws-session.ts';
import { waitFor } from '../helpers/wait.ts';
import { launchChromium, recordCspViolations, SCREENSHOTS, type PageGlobals } from '../helpers/browser.ts';

const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };

/** A page, and the check of everything it did, to run at the end of each test (before closing it). */
interface WatchedPage {
  p: Page;
  /**
   * Fails on a CSP violation, a page error, an error in the browser console, a request off the
   * server's origin, a failed load, a broken image, or an answer of 400 or more other than the
   * API refusals the test expects (`401 /v1/queues`); waits for the browser's own request for the
   * page's icon and checks it was answered with the image.
   */
  finish(expectedRefusals?: string[]): Promise<void>;
}

describe('pages in headless Chromium', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let tenant: TestTenant;
  let browser: Browser;

  before(async () => {
    t = await freshDatabase('pages');
    tenant = await createTenant(t.db, { namespace: 'pages', queues: ['billing', 'reports'], resourceAccess: true });
    // A short lease and a quick recovery, so a dropped running attempt becomes NEEDS_REVIEW fast.
    server = await startServerProcess(t.url, { ORBIT_LEASE_SECONDS: '1', ORBIT_RECOVERY_INTERVAL_MS: '100' });
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await server.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  /** A page (in a context of its own: no cache, no icon from an earlier page) that records everything `finish` checks. */
  async function page(viewport: { width: number; height: number } = DESKTOP): Promise<WatchedPage> {
    const p = await browser.newPage({ viewport });
    const origin = new URL(server.url).origin;
    const requested = new Set<string>();
    const answers: Array<{ url: string; status: number; mimeType?: string }> = [];
    const failed: string[] = [];
    const consoleErrors: Array<{ text: string; url: string }> = [];
    const pageErrors: string[] = [];
    await recordCspViolations(p);
    p.on('request', (request) => requested.add(request.url()));
    p.on('response', (response) => answers.push({ url: response.url(), status: response.status() }));
    p.on('requestfailed', (request) => failed.push(`${request.url()}: ${request.failure()?.errorText}`));
    p.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push({ text: message.text(), url: message.location().url });
    });
    p.on('pageerror', (error) => pageErrors.push(error.message));
    // Requests the browser makes for the page itself, like its icon, are no page.on('request')
    // events; the DevTools protocol's network events show them (and the page's own again).
    const cdp = await p.context().newCDPSession(p);
    const urlOf = new Map<string, string>();
    cdp.on('Network.requestWillBeSent', (e) => {
      urlOf.set(e.requestId, e.request.url);
      requested.add(e.request.url);
    });
    cdp.on('Network.responseReceived', (e) => answers.push({ url: e.response.url, status: e.response.status, mimeType: e.response.mimeType }));
    cdp.on('Network.loadingFailed', (e) => {
      if (!e.canceled) failed.push(`${urlOf.get(e.requestId)}: ${e.errorText}${e.blockedReason ? ` (${e.blockedReason})` : ''}`);
    });
    await cdp.send('Network.enable');

    const sameOrigin = (url: string) =>
      url.startsWith('data:') || // inline: nothing is requested
      (url.startsWith('blob:') ? new URL(url.slice('blob:'.length)).origin : new URL(url).origin) === origin;
    const refusal = (status: number, url: string) => `${status} ${new URL(url).pathname}`;

    async function finish(expectedRefusals: string[] = []): Promise<void> {
      // The icon: the one the page names, else where a browser looks by default. The browser asks
      // for it itself once the page has loaded; its answer is waited for (null: none came).
      const namedIcon: string | null = await p.evaluate(() => (globalThis as PageGlobals).document.querySelector('link[rel=icon]')?.href ?? null);
      const iconUrl = namedIcon ?? `${origin}/favicon.ico`;
      const iconAnswer = await waitFor(async () => answers.find((a) => a.url === iconUrl && a.mimeType !== undefined)).catch(() => null);
      const iconSize: number[] | null = await p.evaluate(async (src) => {
        const image = new (globalThis as PageGlobals).Image();
        image.src = src;
        return image.decode().then(
          () => [image.naturalWidth, image.naturalHeight],
          () => null,
        );
      }, iconUrl);

      const broken = (): Promise<string[]> =>
        p.evaluate(() =>
          [...(globalThis as PageGlobals).document.images]
            .filter((i: PageGlobals) => !i.complete || i.naturalWidth === 0)
            .map((i: PageGlobals) => i.currentSrc || i.src),
        );
      // An image still loading is waited for; one that never loads is reported below.
      await waitFor(async () => (await broken()).length === 0).catch(() => undefined);

      // The browser reports every answer of 400 or more in its console; it may report only the expected refusals.
      const refusalReport = /^Failed to load resource: the server responded with a status of (\d{3})\b/;
      const expectedReport = ({ text, url }: { text: string; url: string }) => {
        const status = refusalReport.exec(text)?.[1];
        return status !== undefined && url !== '' && expectedRefusals.includes(refusal(Number(status), url));
      };
      // Everything at once, so a failure shows every problem of the page.
      assert.deepEqual(
        {
          icon: { named: namedIcon, status: iconAnswer?.status ?? null, type: iconAnswer?.mimeType ?? null, size: iconSize },
          cspViolations: await p.evaluate(() => (globalThis as PageGlobals).orbitCspViolations),
          pageErrors,
          consoleErrors: consoleErrors.filter((e) => !expectedReport(e)),
          offOrigin: [...requested].filter((url) => !sameOrigin(url)),
          failedLoads: failed,
          unexpectedAnswers: answers.filter((a) => a.status >= 400 && !expectedRefusals.includes(refusal(a.status, a.url))),
          brokenImages: await broken(),
        },
        {
          icon: { named: `${origin}/favicon.ico`, status: 200, type: 'image/svg+xml', size: [32, 32] },
          cspViolations: [],
          pageErrors: [],
          consoleErrors: [],
          offOrigin: [],
          failedLoads: [],
          unexpectedAnswers: [],
          brokenImages: [],
        },
        'what the browser shows of the page: its icon; no CSP violation, error, request off the origin, failed load, 404 or other answer of 400 or more but the expected refusals, or broken image',
      );
    }
    return { p, finish };
  }

  /** The application's limits, set through the API. */
  async function configureApplication(token: string, limits: { max_unfinished_tasks: number; max_concurrency: number; rate_per_second: number }) {
    const current = (await call(server.url, 'GET', '/v1/application/resources', { token })).body.data;
    const configured = await call(server.url, 'POST', '/v1/application/resources:configure', {
      token,
      key: `console-limits-${current.revision}`,
      body: { expected_revision: current.revision, reason: 'console test', ...limits },
    });
    assert.equal(configured.status, 200, JSON.stringify(configured.body));
  }

  /** Opens the console and signs in with `token`. */
  async function signIn(p: Page, token: string): Promise<void> {
    await p.goto(`${server.url}/console`);
    await p.locator('#token').fill(token);
    await p.locator('#login button[type=submit]').click();
  }

  test('/docs renders the API reference from the served spec, with the worker protocol linked, offline', async () => {
    const { p, finish } = await page();
    await p.goto(`${server.url}/docs`);
    // Redoc renders the operations from /openapi.yaml: their summaries, as the served spec words them, appear.
    const served = await fetch(`${server.url}/openapi.yaml`);
    assert.equal(served.status, 200);
    const spec = parseYaml(await served.text()) as { paths: Record<string, Record<string, { operationId?: string; summary?: string }>> };
    const summaryOf = (operationId: string): string => {
      const operation = Object.values(spec.paths)
        .flatMap((item) => Object.values(item))
        .find((o) => o?.operationId === operationId);
      assert.ok(operation?.summary, `openapi.yaml has ${operationId} with a summary`);
      return operation.summary;
    };
    // Attached, not necessarily visible: the side menu may show an operation only in its tag's collapsed group.
    await p.getByText(summaryOf('createSchedule'), { exact: true }).first().waitFor({ state: 'attached', timeout: 60_000 });
    assert.ok((await p.getByText(summaryOf('submitTasks'), { exact: true }).count()) > 0);
    assert.equal(await p.locator('#asyncapi-link').getAttribute('href'), '/asyncapi.yaml');
    const asyncapi = await fetch(`${server.url}/asyncapi.yaml`);
    assert.equal(asyncapi.status, 200);
    assert.match(await asyncapi.text(), /^asyncapi: 3\.0\.0/);
    // The side menu's footer (where Redoc's logo from its CDN was) is there, without the logo.
    assert.ok(await p.getByText('API docs by Redocly').first().isVisible());
    await p.screenshot({ path: path.join(SCREENSHOTS, 'docs.png') });
    await finish();
    await p.close();
  });

  test('/console shows the figures the API returns, refreshes them, and resolves a NEEDS_REVIEW task', async () => {
    // Figures to show: limits, two submitted tasks, a paused queue, and one task in NEEDS_REVIEW.
    await configureApplication(tenant.token, { max_unfinished_tasks: 50, max_concurrency: 7, rate_per_second: 30 });
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

    const { p, finish } = await page();
    await signIn(p, tenant.token);
    await p.locator('#application [data-limit=unfinished] [data-used]').waitFor();
    assert.equal(await p.evaluate("sessionStorage.getItem('orbit.console.token')"), tenant.token);
    assert.ok(!p.url().includes(tenant.token), 'the token is never in the URL');

    const api = (await call(server.url, 'GET', '/v1/application/resources', { token: tenant.token })).body.data;
    const text = (selector: string) => p.locator(selector).first().innerText();
    assert.equal(await text('#application [data-limit=unfinished] [data-used]'), api.unfinished_tasks);
    assert.equal(await text('#application [data-limit=unfinished] [data-max]'), '50');
    assert.equal(await text('#application [data-limit=active] [data-max]'), '7');
    assert.equal(await text('#application [data-limit=rate] [data-used]'), '30');
    assert.equal(await text('#queues tr[data-queue=billing] [data-field=unfinished]'), '3 / 100,000');
    assert.equal(await text('#queues tr[data-queue=reports] [data-field=paused]'), 'paused');
    assert.equal(await text('#queues tr[data-queue=reports] [data-field=unfinished]'), '0 / 40');
    await p.locator(`#review tr[data-task-id="${reviewId}"]`).waitFor();
    assert.ok((await text('#events')).includes('application.resources.configured'));

    // Live: a submission made elsewhere shows up without reloading.
    await call(server.url, 'POST', '/v1/queues/reports/tasks', { token: tenant.token, key: 'console-3', body: { payload: { n: 3 } } });
    await p.locator('#queues tr[data-queue=reports] [data-field=unfinished]', { hasText: '1 / 40' }).waitFor({ timeout: 30_000 });
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console.png'), fullPage: true });

    // Resolve from the page: the task changes, as the API shows, and leaves the review list.
    const row = p.locator(`#review tr[data-task-id="${reviewId}"]`);
    await row.locator('[data-field=reason]').fill('checked by hand: the charge went through');
    await row.locator('button[data-outcome=succeeded]').click();
    await p.locator(`#review tr[data-task-id="${reviewId}"]`).waitFor({ state: 'detached', timeout: 30_000 });
    const resolved = (await call(server.url, 'GET', `/v1/tasks/${reviewId}`, { token: tenant.token })).body.data;
    assert.equal(resolved.state, 'SUCCEEDED');
    const audit = (await call(server.url, 'GET', '/v1/audit-events?limit=100', { token: tenant.token })).body.data.audit_events;
    assert.ok(audit.some((a: any) => a.action === 'task.resolve' && a.resource === reviewId && a.reason === 'checked by hand: the charge went through'));
    await p.locator('#events', { hasText: 'task.resolved' }).waitFor({ timeout: 30_000 });

    await p.locator('#sign-out').click();
    assert.equal(await p.evaluate("sessionStorage.getItem('orbit.console.token')"), null);
    await p.locator('#token').waitFor();
    await finish();
    await p.close();
  });

  test('/console draws each usage bar at the share the API returns: 1 of 250 is a sliver, not a full bar', async () => {
    // An application of its own, so its usage is exactly what this test makes: one task.
    const own = await createTenant(t.db, { namespace: 'bars', queues: ['bars'], resourceAccess: true });
    await configureApplication(own.token, { max_unfinished_tasks: 250, max_concurrency: 8, rate_per_second: 30 });
    const submitted = await call(server.url, 'POST', '/v1/queues/bars/tasks', { token: own.token, key: 'bars-1', body: { payload: { n: 1 } } });
    assert.equal(submitted.status, 200);
    const { p, finish } = await page();

    /** Each bar as drawn: its figures, and the width of its fill against its track's, read in one go (the page redraws). */
    const drawn = (): Promise<Record<string, { used?: string; max?: string; share: number | null; trackWidth?: number; full?: boolean } | undefined>> =>
      p.evaluate(() =>
        Object.fromEntries(
          ['unfinished', 'active'].map((id) => {
            const card = (globalThis as PageGlobals).document.querySelector(`#application [data-limit=${id}]`);
            const track = card?.querySelector('.bar');
            const fill = track?.querySelector(':scope > span');
            return [
              id,
              {
                used: card?.querySelector('[data-used]')?.textContent,
                max: card?.querySelector('[data-max]')?.textContent,
                share: track && fill ? fill.getBoundingClientRect().width / track.getBoundingClientRect().width : null,
                trackWidth: track?.getBoundingClientRect().width,
                full: track?.classList.contains('full'),
              },
            ];
          }),
        ),
      );
    /** What the API says each bar must show. */
    const apiShares = async () => {
      const r = (await call(server.url, 'GET', '/v1/application/resources', { token: own.token })).body.data;
      return { unfinished: Number(r.unfinished_tasks) / r.max_unfinished_tasks, active: Number(r.active_attempts) / r.max_concurrency, r };
    };

    await signIn(p, own.token);
    let bars = await waitFor(async () => {
      const now = await drawn();
      return now.unfinished?.max === '250' ? now : null;
    });
    let api = await apiShares();
    assert.equal(api.unfinished, 1 / 250);
    assert.equal(bars.unfinished?.used, api.r.unfinished_tasks);
    assert.ok((bars.unfinished?.trackWidth ?? 0) > 100, `the track is drawn wide enough to measure: ${JSON.stringify(bars)}`);
    assert.ok(Math.abs((bars.unfinished?.share ?? 1) - api.unfinished) < 0.002, `unfinished: drawn ${bars.unfinished?.share}, the API says ${api.unfinished}`);
    assert.ok((bars.unfinished?.share ?? 1) < 0.01, 'a sliver, clearly not a full bar');
    assert.equal(bars.unfinished?.full, false);
    assert.equal(api.active, 0);
    assert.equal(bars.active?.used, '0');
    assert.equal(bars.active?.share, 0, 'no active attempt: an empty bar');
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console-bars.png'), fullPage: true });

    // Lowering the limit (allowed below usage) redraws the bar live: 1 of 4 is a quarter, 1 of 1 is full.
    for (const [max, share] of [
      [4, 0.25],
      [1, 1],
    ] as const) {
      await configureApplication(own.token, { max_unfinished_tasks: max, max_concurrency: 8, rate_per_second: 30 });
      bars = await waitFor(async () => {
        const now = await drawn();
        return now.unfinished?.max === String(max) ? now : null;
      });
      api = await apiShares();
      assert.equal(api.unfinished, share);
      assert.ok(Math.abs((bars.unfinished?.share ?? 0) - share) < 0.002, `1 of ${max}: drawn ${bars.unfinished?.share}, the API says ${share}`);
      assert.equal(bars.unfinished?.full, share === 1, 'a full bar, and only a full one, is marked full');
    }
    await finish();
    await p.close();
  });

  test('/console with a credential without application:resources:read: queues only, with a note', async () => {
    const limited = await createCredential(t.db, tenant, ['queues:read', 'tasks:read'], ['billing']);
    const { p, finish } = await page();
    await signIn(p, limited);
    await p.locator('#resources-note').waitFor();
    assert.match(await p.locator('#resources-note').innerText(), /application:resources:read/);
    assert.equal(await p.locator('#application').count(), 0);
    await p.locator('#queues tr[data-queue=billing]').waitFor();
    assert.equal(await p.locator('#queues tr[data-queue=reports]').count(), 0, 'only the queues in its scope');
    assert.match(await p.locator('#events').innerText(), /events:read/);
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console-queues-only.png'), fullPage: true });
    // The refusals the page turned into its notes; the browser reports them, as it does every 403.
    await finish(['403 /v1/application/resources', '403 /v1/application/namespaces', '403 /v1/events']);
    await p.close();
  });

  test("/console's namespaces: each one's floors and usage, live; a change of floors is previewed (a dry run: its effects, nothing changed) and applied on a second click", async () => {
    // An application of its own: two namespaces, one with two tasks.
    const a = await createTenant(t.db, { namespace: 'floors-a', queues: ['fa'], resourceAccess: true });
    const b = await createTenant(t.db, { applicationId: a.applicationId, namespace: 'floors-b', queues: ['fb'], resourceAccess: true });
    await configureApplication(a.token, { max_unfinished_tasks: 20, max_concurrency: 5, rate_per_second: 30 });
    for (const n of [1, 2])
      assert.equal((await call(server.url, 'POST', '/v1/queues/fa/tasks', { token: a.token, key: `floors-a-${n}`, body: { payload: { n } } })).status, 200);
    const namespacesOf = async () => (await call(server.url, 'GET', '/v1/application/namespaces', { token: a.token })).body.data.namespaces;
    const { p, finish } = await page();
    await signIn(p, a.token);
    const cell = (namespace: string, field: string) => p.locator(`#namespaces tr[data-namespace=${namespace}] [data-field=${field}]`);
    await cell('floors-a', 'unfinished').waitFor();
    const text = (selector: string) => p.locator(selector).first().innerText();
    assert.deepEqual(
      [await cell('floors-a', 'unfinished').innerText(), await cell('floors-b', 'unfinished').innerText(), await cell('floors-b', 'revision').innerText()],
      ['2', '0', '1'],
    );
    // Live: a submission in the other namespace shows up without reloading.
    assert.equal((await call(server.url, 'POST', '/v1/queues/fb/tasks', { token: b.token, key: 'floors-b-1', body: { payload: { n: 1 } } })).status, 200);
    await p.locator('#namespaces tr[data-namespace=floors-b] [data-field=unfinished]', { hasText: /^1$/ }).waitFor({ timeout: 30_000 });

    // Preview: a dry run - its effects shown, nothing changed, Apply enabled.
    await p.locator('#floors-namespace').selectOption('floors-b');
    await p.locator('#floors-unfinished').fill('5');
    await p.locator('#floors-concurrency').fill('2');
    await p.locator('#floors-rate').fill('0');
    await p.locator('#floors-reason').fill('keep room for b');
    assert.equal(await p.locator('#floors-apply').isDisabled(), true, 'nothing to apply before a preview');
    await p.locator('#floors-preview').click();
    await p.locator('#floors-effects li[data-limit=reserved_unfinished_tasks]').waitFor();
    assert.match(
      await text('#floors-effects li[data-limit=reserved_unfinished_tasks]'),
      /namespace uses 1 of a new reserved_unfinished_tasks 5: 4 kept for it/,
    );
    assert.match(await text('#floors-effects li[data-limit=reserved_concurrency]'), /namespace uses 0 of a new reserved_concurrency 2: 2 kept for it/);
    assert.match(await text('#floors-effects li[data-limit=reserved_rate_per_second]'), /unchanged/);
    const untouched = (await namespacesOf()).find((n: { namespace: string }) => n.namespace === 'floors-b');
    assert.deepEqual([untouched.revision, untouched.reserved_unfinished_tasks, untouched.reserved_concurrency], ['1', 0, 0], 'a preview changes nothing');
    assert.equal(await p.locator('#floors-apply').isDisabled(), false);
    // Another value than the preview's: Apply waits for a new preview.
    await p.locator('#floors-unfinished').fill('6');
    assert.equal(await p.locator('#floors-apply').isDisabled(), true, 'changed since the preview');
    assert.equal(await p.locator('#floors-effects').count(), 0);
    await p.locator('#floors-unfinished').fill('5');
    await p.locator('#floors-preview').click();
    await p.locator('#floors-effects li').first().waitFor();
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console-floors-preview.png'), fullPage: true });

    // Apply: the change, as the API then shows it, and the panel redrawn with it.
    await p.locator('#floors-apply').click();
    await p.locator('#floors-status', { hasText: 'Applied' }).waitFor();
    const applied = (await namespacesOf()).find((n: { namespace: string }) => n.namespace === 'floors-b');
    assert.deepEqual([applied.revision, applied.reserved_unfinished_tasks, applied.reserved_concurrency, applied.reserved_rate_per_second], ['2', 5, 2, 0]);
    await p.locator('#namespaces tr[data-namespace=floors-b] [data-field=unfinished]', { hasText: '1 / 5' }).waitFor({ timeout: 30_000 });
    assert.equal(await cell('floors-b', 'active').innerText(), '0 / 2');
    await p.locator('#floors-sums [data-floor-sum=unfinished]', { hasText: '5 unfinished tasks (4 unused)' }).waitFor({ timeout: 30_000 });
    const audit = (await call(server.url, 'GET', '/v1/audit-events?limit=100', { token: a.token })).body.data.audit_events;
    assert.ok(audit.some((r: any) => r.action === 'namespace.resources.configure' && r.resource === 'floors-b' && r.reason === 'keep room for b'));

    // A preview the server would refuse (floors above the application's limit) says why, and enables nothing.
    await p.locator('#floors-concurrency').fill('6');
    await p.locator('#floors-preview').click();
    await p.locator('#floors-status', { hasText: "the namespaces' reserved_concurrency would total 6, above the application's max_concurrency 5" }).waitFor();
    assert.equal(await p.locator('#floors-apply').isDisabled(), true);
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console-floors.png'), fullPage: true });
    await finish(['409 /v1/application/namespaces/floors-b:configure']);
    await p.close();
    // Back to no floors, so the application is as the other tests expect none.
    const restored = await call(server.url, 'POST', '/v1/application/namespaces/floors-b:configure', {
      token: a.token,
      key: 'floors-b-restore',
      body: { expected_revision: '2', reason: 'test done', reserved_unfinished_tasks: 0, reserved_concurrency: 0, reserved_rate_per_second: 0 },
    });
    assert.equal(restored.status, 200, JSON.stringify(restored.body));
  });

  test('a refused token is said on the sign-in form, and nothing is kept', async () => {
    const { p, finish } = await page();
    await signIn(p, 'orbit_00000000000000000000000000000000_nope');
    await p.locator('#login-error').waitFor();
    assert.equal(await p.evaluate("sessionStorage.getItem('orbit.console.token')"), null);
    await finish(['401 /v1/application/resources', '401 /v1/application/namespaces', '401 /v1/queues']);
    await p.close();
  });

  // ---------------------------------------------------------------------------------------------
  // Tasks: the list, a task's page, its actions, and the page at a phone's width.

  /** Submits a task through the API; its id. */
  async function submitTask(token: string, queue: string, key: string, body: Record<string, unknown>): Promise<string> {
    const r = await call(server.url, 'POST', `/v1/queues/${queue}/tasks`, { token, key, body });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.task.task_id;
  }
  const getTask = async (token: string, id: string) => (await call(server.url, 'GET', `/v1/tasks/${id}`, { token })).body.data;

  /**
   * A task in NEEDS_REVIEW: a worker claims and starts it, then goes away; the running attempt's
   * lease (one second on this server) runs out with its outcome unknown.
   */
  async function taskInReview(token: string, queue: string, key: string, payload: Record<string, unknown>): Promise<string> {
    const id = await submitTask(token, queue, key, { payload, priority: 9, max_attempts: 1, on_unknown_outcome: 'review' });
    const worker = await connectRaw(server.url, token);
    await worker.request({ type: 'hello', node_id: `console-node-${key}`, queues: [queue], capacity: 1 });
    const granted = await worker.request({ type: 'claim', claim_id: `claim-${key}`, max: 1, start: true });
    assert.equal(granted.attempts?.[0]?.task_id, id, JSON.stringify(granted));
    await worker.close();
    await waitFor(async () => (await getTask(token, id)).state === 'NEEDS_REVIEW');
    return id;
  }

  /** Waits until `read` gives `expected`; fails showing the last value read when it never does. */
  async function until<T>(read: () => Promise<T>, expected: T, what: string): Promise<void> {
    let last: T | undefined;
    await waitFor(async () => {
      last = await read();
      return JSON.stringify(last) === JSON.stringify(expected);
    }).catch(() => assert.deepEqual(last, expected, what));
  }

  /** The task ids the list shows, in order. */
  const listed = (p: Page): Promise<string[]> =>
    p.evaluate(() => [...(globalThis as PageGlobals).document.querySelectorAll('#tasks tbody tr')].map((tr: PageGlobals) => tr.dataset.taskId));

  /** Every task GET /v1/tasks lists with this query, newest first. */
  async function apiListed(token: string, query: string): Promise<string[]> {
    const ids: string[] = [];
    for (let cursor: string | undefined; ; ) {
      const r = await call(server.url, 'GET', `/v1/tasks?${query}&limit=100${cursor === undefined ? '' : `&cursor=${cursor}`}`, { token });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      ids.push(...r.body.data.tasks.map((x: { task_id: string }) => x.task_id));
      cursor = r.body.data.next_cursor;
      if (cursor === undefined) return ids;
    }
  }

  /** How wide the page is against its window (no horizontal scrolling: scrollWidth <= innerWidth). */
  const widths = (p: Page): Promise<{ scrollWidth: number; innerWidth: number }> =>
    p.evaluate(() => ({ scrollWidth: (globalThis as PageGlobals).document.documentElement.scrollWidth, innerWidth: (globalThis as PageGlobals).innerWidth }));

  test('the task list: newest first across queues, by queue and state, page by page; a row opens the task, back returns', async () => {
    const own = await createTenant(t.db, { namespace: 'list', queues: ['mail', 'bills'], resourceAccess: true });
    const submitted: Array<{ id: string; queue: string }> = [];
    for (let n = 0; n < 23; n++) {
      const queue = n % 3 === 0 ? 'bills' : 'mail';
      submitted.push({ id: await submitTask(own.token, queue, `list-${n}`, { payload: { n } }), queue });
    }
    const cancelled = [1, 4, 7].map((n) => submitted[n]!.id);
    for (const id of cancelled) {
      const r = await call(server.url, 'POST', `/v1/tasks/${id}:cancel`, { token: own.token, key: `cancel-${id}`, body: { reason: 'list test' } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    const newest = submitted.map((s) => s.id).reverse();
    const { p, finish } = await page();
    await signIn(p, own.token);

    // Everything (23 tasks; 25 a page by default), as the API lists it.
    await until(() => listed(p), newest, 'all the tasks, newest first');
    assert.deepEqual(await apiListed(own.token, ''), newest, 'the API lists the same');
    assert.equal(await p.locator('#tasks-older').isDisabled(), true, 'one page: nothing older');
    const first = submitted[22]!;
    const row = p.locator(`#tasks tr[data-task-id="${first.id}"]`);
    const api = await getTask(own.token, first.id);
    assert.deepEqual(
      {
        id: await row.locator('[data-field=task-id]').innerText(),
        href: await row.locator('[data-field=task-id]').getAttribute('href'),
        title: await row.locator('[data-field=task-id]').getAttribute('title'),
        queue: await row.locator('[data-field=queue]').innerText(),
        state: await row.locator('[data-field=state]').innerText(),
        attempts: await row.locator('[data-field=attempts]').innerText(),
        created: await row.locator('[data-field=created]').innerText(),
      },
      {
        id: `…${first.id.slice(-8)}`,
        href: `#/tasks/${first.id}`,
        title: first.id,
        queue: first.queue,
        state: 'WAITING',
        attempts: '0 / 3',
        created: api.created_at,
      },
    );
    assert.equal(await p.locator(`#tasks tr[data-task-id="${cancelled[0]}"] [data-field=state]`).innerText(), 'CANCELLED');

    // Ten a page: 10, 10, 3; newer goes back a page, newest to the first.
    await p.locator('#task-page-size').selectOption('10');
    await until(() => listed(p), newest.slice(0, 10), 'page 1 of 10');
    await p.locator('#tasks-older').click();
    await until(() => listed(p), newest.slice(10, 20), 'page 2 of 10');
    assert.equal(await p.locator('#tasks-page').innerText(), 'Page 2');
    await p.locator('#tasks-older').click();
    await until(() => listed(p), newest.slice(20), 'page 3: the oldest three');
    await p.locator('#tasks-page', { hasText: /^Page 3$/ }).waitFor();
    assert.equal(await p.locator('#tasks-older').isDisabled(), true, 'the last page: nothing older');
    await p.locator('#tasks-newer').click();
    await until(() => listed(p), newest.slice(10, 20), 'back to page 2');
    await p.locator('#tasks-newest').click();
    await until(() => listed(p), newest.slice(0, 10), 'back to the newest');
    assert.equal(await p.locator('#tasks-newest').isDisabled(), true);

    // By queue, by state, and both; each as the API lists it.
    const filter = async (queue: string, state: string) => {
      await p.locator('#task-filter-queue').selectOption(queue);
      await p.locator('#task-filter-state').selectOption(state);
      const query = new URLSearchParams({ ...(queue ? { queue } : {}), ...(state ? { state } : {}) }).toString();
      const expected = await apiListed(own.token, query);
      await until(() => listed(p), expected.slice(0, 10), `queue ${queue || 'all'}, state ${state || 'any'}`);
      return expected;
    };
    assert.deepEqual(
      await filter('bills', ''),
      submitted
        .filter((s) => s.queue === 'bills')
        .map((s) => s.id)
        .reverse()
        .slice(0, 8),
    );
    assert.deepEqual(await filter('', 'CANCELLED'), [...cancelled].reverse());
    assert.deepEqual(await filter('bills', 'CANCELLED'), []);
    await p.locator('#tasks-none').waitFor();
    const mailWaiting = await filter('mail', 'WAITING');
    assert.equal(mailWaiting.length, 12);
    await p.locator('#tasks-older').click();
    await until(() => listed(p), mailWaiting.slice(10), 'mail, WAITING, page 2');

    // A row opens the task's page (its own URL); back returns to the list as it was.
    const opened = mailWaiting[10]!;
    await p.locator(`#tasks tr[data-task-id="${opened}"] [data-field=task-id]`).click();
    await p.locator(`#task[data-task-id="${opened}"] dd[data-field=state]`).waitFor();
    assert.ok(p.url().endsWith(`/console#/tasks/${opened}`), p.url());
    const n = submitted.findIndex((s) => s.id === opened);
    assert.equal(await p.locator('#task-data [data-json=payload]').innerText(), JSON.stringify({ n }, null, 2));
    await p.goBack();
    await until(() => listed(p), mailWaiting.slice(10), 'back: the same page of the same filters');
    assert.deepEqual(
      [await p.locator('#task-filter-queue').inputValue(), await p.locator('#task-filter-state').inputValue(), await p.locator('#task-page-size').inputValue()],
      ['mail', 'WAITING', '10'],
    );
    // A task opened by its id, pasted from elsewhere.
    const pasted = mailWaiting[3]!;
    await p.locator('#task-open-id').fill(` ${pasted.toUpperCase()} `);
    await p.locator('#task-open button[type=submit]').click();
    await p.locator(`#task[data-task-id="${pasted}"] dd[data-field=state]`).waitFor();
    assert.ok(p.url().endsWith(`/console#/tasks/${pasted}`), p.url());
    await p.goBack();
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console-tasks.png'), fullPage: true });
    await finish();
    await p.close();
  });

  test("a task's page: its fields, payload, error, attempts and events; resolved, retried (refused when the queue is full), cancelled and retried again", async () => {
    const own = await createTenant(t.db, { namespace: 'history', queues: ['mail'], resourceAccess: true });
    const payload = { to: 'ops@example.com', subject: '<b>not html</b>', lines: [1, 2, 3] };
    const id = await taskInReview(own.token, 'mail', 'history', payload);
    const { p, finish } = await page();
    await signIn(p, own.token);

    // The review row shows its payload and error, and opens its page.
    const reviewRow = p.locator(`#review tr[data-task-id="${id}"]`);
    await reviewRow.waitFor();
    assert.equal(await reviewRow.locator('[data-json=payload]').innerText(), JSON.stringify(payload, null, 2));
    const inReview = await getTask(own.token, id);
    assert.equal(await reviewRow.locator('[data-json=error]').innerText(), JSON.stringify(inReview.error, null, 2));
    assert.match(await reviewRow.locator('[data-json=error]').innerText(), /LEASE_EXPIRED/);
    await reviewRow.locator('[data-field=task-id]').click();

    // The page: every field, the payload as text (never HTML), the attempts and the events, as the API has them.
    await p.locator(`#task[data-task-id="${id}"] dd[data-field=state]`, { hasText: 'NEEDS_REVIEW' }).waitFor();
    const field = (name: string) => p.locator(`#task dd[data-field=${name}]`).innerText();
    assert.deepEqual(
      {
        task_id: await field('task_id'),
        queue: await field('queue'),
        namespace: await field('namespace'),
        priority: await field('priority'),
        attempts: await field('attempts'),
        max_attempts: await field('max_attempts'),
        on_unknown_outcome: await field('on_unknown_outcome'),
        cancel_requested: await field('cancel_requested'),
        created_at: await field('created_at'),
        deadline_at: await field('deadline_at'),
      },
      {
        task_id: id,
        queue: 'mail',
        namespace: 'history',
        priority: '9',
        attempts: '1',
        max_attempts: '1',
        on_unknown_outcome: 'review',
        cancel_requested: 'no',
        created_at: inReview.created_at,
        deadline_at: inReview.deadline_at,
      },
    );
    assert.equal(await p.locator('#task-data [data-json=payload]').innerText(), JSON.stringify(payload, null, 2));
    assert.equal(await p.locator('#task-data b').count(), 0, 'the payload is text, not HTML');
    assert.equal(await p.locator('#task-data [data-json=result]').innerText(), '—');
    assert.match(await p.locator('#task-data [data-json=error]').innerText(), /LEASE_EXPIRED/);
    const attempts = (await call(server.url, 'GET', `/v1/tasks/${id}/attempts`, { token: own.token })).body.data.attempts;
    assert.equal(attempts.length, 1);
    assert.deepEqual(
      [
        await p.locator('#task-attempts tbody tr').count(),
        await p.locator('#task-attempts tr[data-attempt-number="1"] [data-field=state]').innerText(),
        await p.locator('#task-attempts tr[data-attempt-number="1"] [data-field=node_id]').innerText(),
      ],
      [1, attempts[0].state, 'console-node-history'],
    );
    const eventTypes = () => p.locator('#task-events [data-field=type]').allInnerTexts();
    const apiEventTypes = async () =>
      (await call(server.url, 'GET', `/v1/tasks/${id}/events`, { token: own.token })).body.data.events.map((e: { type: string }) => e.type);
    assert.deepEqual(await apiEventTypes(), ['task.submitted', 'task.started', 'task.needs_review']);
    await until(eventTypes, await apiEventTypes(), 'the events, in order');
    const actions = () => p.locator('#task-actions button').evaluateAll((bs) => bs.map((b: PageGlobals) => b.dataset.outcome ?? b.dataset.action));
    assert.deepEqual(await actions(), ['succeeded', 'failed', 'retry', 'cancel'], 'NEEDS_REVIEW: resolve three ways, or cancel');

    // A reason being typed survives the periodic refresh.
    await p.locator('#task-reason').fill('the relay refused it: fail it');
    await p.locator('#task h2').click(); // the field is left
    const refreshes = Number(await p.locator('#refreshed').getAttribute('data-refreshes'));
    // Two redraws later (a redraw of the whole page, the field included):
    await waitFor(async () => Number(await p.locator('#refreshed').getAttribute('data-refreshes')) >= refreshes + 2);
    assert.equal(await p.locator('#task-reason').inputValue(), 'the relay refused it: fail it');

    // Resolve: failed.
    await p.locator('#task-actions button[data-outcome=failed]').click();
    await p.locator('#task dd[data-field=state]', { hasText: 'FAILED' }).waitFor();
    assert.match(await p.locator('#task-action-status').innerText(), /Resolved \(failed\): the task is FAILED/);
    assert.equal((await getTask(own.token, id)).state, 'FAILED');
    const audit = async (action: string) =>
      (await call(server.url, 'GET', '/v1/audit-events?limit=100', { token: own.token })).body.data.audit_events
        .filter((a: any) => a.action === action && a.resource === id)
        .map((a: any) => a.reason);
    assert.deepEqual(await audit('task.resolve'), ['the relay refused it: fail it']);
    await until(actions, ['retry'], 'FAILED: retry only');

    // Retry with the queue full: the refusal's message is shown, and nothing changes.
    await configureQueue(server.url, own.token, 'mail', { max_unfinished_tasks: 1 });
    await submitTask(own.token, 'mail', 'history-filler', { payload: { filler: true } });
    await p.locator('#task-reason').fill('the relay is back');
    await p.locator('#task-actions button[data-action=retry]').click();
    await p.locator('#task-action-status.error').waitFor();
    assert.match(await p.locator('#task-action-status').innerText(), /^QUEUE_FULL: /);
    assert.equal((await getTask(own.token, id)).state, 'FAILED', 'a refused retry changes nothing');
    assert.equal(await p.locator('#task-reason').inputValue(), 'the relay is back', 'the reason stays for another try');

    // With room, the retry puts it back to WAITING, with one more attempt allowed.
    await configureQueue(server.url, own.token, 'mail', { max_unfinished_tasks: 100 });
    await p.locator('#task-actions button[data-action=retry]').click();
    await p.locator('#task dd[data-field=state]', { hasText: 'WAITING' }).waitFor();
    assert.match(await p.locator('#task-action-status').innerText(), /Retried: the task is WAITING again/);
    const retried = await getTask(own.token, id);
    assert.deepEqual([retried.state, retried.attempts, retried.max_attempts, retried.error], ['WAITING', 1, 2, undefined]);
    assert.equal(await field('max_attempts'), '2');
    assert.equal(await p.locator('#task-data [data-json=error]').innerText(), '—');
    assert.deepEqual(await audit('task.retry'), ['the relay is back']);
    await until(eventTypes, ['task.submitted', 'task.started', 'task.needs_review', 'task.resolved', 'task.retried'], 'the retry is in the events');
    assert.deepEqual(await eventTypes(), await apiEventTypes());
    await until(actions, ['cancel'], 'WAITING: cancel only');

    // Cancel from the page: CANCELLED at once, its error the reason.
    assert.equal(await p.locator('#task-reason').inputValue(), '', 'a new action, a new reason');
    await p.locator('#task-reason').fill('not needed after all');
    await p.locator('#task-actions button[data-action=cancel]').click();
    await p.locator('#task dd[data-field=state]', { hasText: 'CANCELLED' }).waitFor();
    assert.deepEqual((await getTask(own.token, id)).error, { code: 'CANCELLED', message: 'not needed after all' });
    assert.equal(await p.locator('#task-data [data-json=error]').innerText(), JSON.stringify({ code: 'CANCELLED', message: 'not needed after all' }, null, 2));

    // And a CANCELLED task retried from the page is WAITING again.
    await until(actions, ['retry'], 'CANCELLED: retry only');
    await p.locator('#task-reason').fill('needed after all');
    await p.locator('#task-actions button[data-action=retry]').click();
    await p.locator('#task dd[data-field=state]', { hasText: 'WAITING' }).waitFor();
    assert.equal((await getTask(own.token, id)).state, 'WAITING');
    await until(eventTypes, await apiEventTypes(), 'every event, in order');
    assert.deepEqual((await eventTypes()).slice(-2), ['task.cancelled', 'task.retried']);
    await p.screenshot({ path: path.join(SCREENSHOTS, 'console-task.png'), fullPage: true });

    await p.locator('#back').click();
    await p.locator('#tasks tbody tr').first().waitFor();
    await finish([`429 /v1/tasks/${id}:retry`]);
    await p.close();
  });

  test('at 390 px (a phone) and at 1280 px the page is no wider than the window: the overview and a task page', async () => {
    const own = await createTenant(t.db, { namespace: 'phone', queues: ['a-rather-long-queue-name-for-a-phone'], resourceAccess: true });
    const queue = 'a-rather-long-queue-name-for-a-phone';
    const payload = { token_of_sorts: 'x'.repeat(400), nested: { deeper: { list: Array.from({ length: 30 }, (_, i) => `item-${i}`) } } };
    const id = await taskInReview(own.token, queue, 'phone', payload);
    for (let n = 0; n < 3; n++) await submitTask(own.token, queue, `phone-${n}`, { payload: { n, note: 'y'.repeat(200) } });
    for (const [name, viewport] of [
      ['phone', PHONE],
      ['desktop', DESKTOP],
    ] as const) {
      const { p, finish } = await page(viewport);
      await signIn(p, own.token);
      await p.locator(`#review tr[data-task-id="${id}"]`).waitFor();
      await p.locator('#tasks tbody tr').nth(3).waitFor();
      await p.locator('#events tbody tr').first().waitFor();
      let w = await widths(p);
      assert.ok(w.scrollWidth <= w.innerWidth, `${name} overview: ${JSON.stringify(w)}`);
      if (viewport === PHONE) {
        // The review table is wider than a phone: it scrolls inside its own container.
        const review = await p.locator('#review .scroll').evaluate((d: PageGlobals) => ({ scrollWidth: d.scrollWidth, clientWidth: d.clientWidth }));
        assert.ok(review.scrollWidth > review.clientWidth, `the review table scrolls in its container: ${JSON.stringify(review)}`);
      }
      await p.screenshot({ path: path.join(SCREENSHOTS, `console-${name}.png`), fullPage: true });

      // The task's page, opened by its link (as a bookmark would).
      await p.goto(`${server.url}/console#/tasks/${id}`);
      await p.locator(`#task[data-task-id="${id}"] dd[data-field=state]`, { hasText: 'NEEDS_REVIEW' }).waitFor();
      await p.locator('#task-events tbody tr').nth(2).waitFor();
      await p.locator('#task-attempts tbody tr').first().waitFor();
      assert.equal(await p.locator('#task-data [data-json=payload]').innerText(), JSON.stringify(payload, null, 2));
      w = await widths(p);
      assert.ok(w.scrollWidth <= w.innerWidth, `${name} task page: ${JSON.stringify(w)}`);
      await p.screenshot({ path: path.join(SCREENSHOTS, `console-task-${name}.png`), fullPage: true });
      await finish();
      await p.close();
    }
    const r = await call(server.url, 'POST', `/v1/tasks/${id}:cancel`, { token: own.token, key: 'phone-cancel', body: { reason: 'done with it' } });
    assert.equal(r.status, 200);
  });

  test('a credential without tasks:read: the task list, the review list and a task page each say so', async () => {
    const limited = await createCredential(t.db, tenant, ['queues:read'], ['billing']);
    const someTask = await submitTask(tenant.token, 'billing', 'no-tasks-read', { payload: { n: 'not to be read' } });
    const { p, finish } = await page();
    await signIn(p, limited);
    await p.locator('#tasks-note').waitFor();
    assert.match(await p.locator('#tasks-note').innerText(), /tasks:read/);
    assert.match(await p.locator('#review').innerText(), /tasks:read/);
    assert.equal(await p.locator('#tasks table').count(), 0);
    await p.goto(`${server.url}/console#/tasks/${someTask}`);
    await p.locator('#task-note').waitFor();
    assert.match(await p.locator('#task-note').innerText(), /tasks:read/);
    await finish(['403 /v1/application/resources', '403 /v1/application/namespaces', '403 /v1/events', '403 /v1/tasks', `403 /v1/tasks/${someTask}`]);
    await p.close();
  });

  test('usage counters and limits are shown alike, a counter past 2^53 exactly', async () => {
    const { p, finish } = await page();
    // The API as it would answer with counters no number can hold: this one answer is replaced,
    // through the DevTools protocol for its URL alone (page.route would intercept the browser's
    // request for the page's icon too, which `finish` checks).
    const real = (await call(server.url, 'GET', '/v1/application/resources', { token: tenant.token })).body;
    const fake = JSON.stringify({
      ...real,
      data: { ...real.data, max_unfinished_tasks: 100_000_000, unfinished_tasks: '9007199254740993', active_attempts: '1234567', pending_starts: '0' },
    });
    const cdp = await p.context().newCDPSession(p);
    cdp.on('Fetch.requestPaused', (e) => {
      void cdp.send('Fetch.fulfillRequest', {
        requestId: e.requestId,
        responseCode: 200,
        responseHeaders: [{ name: 'Content-Type', value: 'application/json' }],
        body: Buffer.from(fake).toString('base64'),
      });
    });
    await cdp.send('Fetch.enable', { patterns: [{ urlPattern: '*/v1/application/resources', requestStage: 'Request' }] });
    await signIn(p, tenant.token);
    await p.locator('#application [data-limit=unfinished] [data-used]').waitFor();
    const text = (selector: string) => p.locator(selector).first().innerText();
    assert.deepEqual(
      {
        used: await text('#application [data-limit=unfinished] [data-used]'),
        max: await text('#application [data-limit=unfinished] [data-max]'),
        active: await text('#application [data-limit=active] [data-used]'),
        pending: await text('#application [data-limit=pending-starts] [data-used]'),
        full: await p.locator('#application [data-limit=unfinished] .bar').getAttribute('class'),
      },
      { used: '9,007,199,254,740,993', max: '100,000,000', active: '1,234,567', pending: '0', full: 'bar full' },
    );
    await cdp.send('Fetch.disable');
    await finish();
    await p.close();
  });
});
