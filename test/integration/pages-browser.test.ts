/**
 * The pages in a real headless Chromium (Debian's `chromium`, driven by playwright-core) against
 * a real server process: /docs renders the API reference from the served openapi.yaml with
 * nothing from the internet; /console, after pasting a token, shows the figures the API returns,
 * draws its usage bars at the share the API returns, refreshes them live, resolves a
 * NEEDS_REVIEW task (which the API then shows changed), and a credential without
 * application:resources:read sees queues only, with a note. On every page, as a user's browser
 * would show it: no Content-Security-Policy violation, no error in the browser console, no
 * request off Orbit's origin, no failed load, no 404, no broken image, and the page's icon is
 * served. Screenshots are written to .local/screenshots/.
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
/**
 * The page's globals (window, document), for the functions this file runs in the page: it is
 * type-checked with the project's settings, which have no DOM types.
 */
type PageGlobals = any;

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
    assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium), or set ORBIT_CHROMIUM`);
    fs.mkdirSync(SCREENSHOTS, { recursive: true });
    t = await freshDatabase('pages');
    tenant = await createTenant(t.db, { namespace: 'pages', queues: ['billing', 'reports'], resourceAccess: true });
    // A short lease and a quick recovery, so a dropped running attempt becomes NEEDS_REVIEW fast.
    server = await startServerProcess(t.url, { ORBIT_LEASE_SECONDS: '1', ORBIT_RECOVERY_INTERVAL_MS: '100' });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        // Offline: no host name resolves, so a request for anything but the server (127.0.0.1)
        // fails, and is recorded. Not page.route: with it, Playwright's interception aborts the
        // browser's own request for the page's icon, which this test checks is answered.
        '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
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

  /** A page (in a context of its own: no cache, no icon from an earlier page) that records everything `finish` checks. */
  async function page(): Promise<WatchedPage> {
    const p = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const origin = new URL(server.url).origin;
    const requested = new Set<string>();
    const answers: Array<{ url: string; status: number; mimeType?: string }> = [];
    const failed: string[] = [];
    const consoleErrors: Array<{ text: string; url: string }> = [];
    const pageErrors: string[] = [];
    // A violation is reported to the page alone (a `securitypolicyviolation` event): listen from
    // before any script of the page runs.
    await p.addInitScript(() => {
      const window: PageGlobals = globalThis;
      const violations: string[] = [];
      window.orbitCspViolations = violations;
      window.addEventListener(
        'securitypolicyviolation',
        (e: PageGlobals) => violations.push(`${e.violatedDirective} refused ${e.blockedURI} (${e.sourceFile}:${e.lineNumber}) ${e.sample}`),
        true,
      );
    });
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
    // Redoc renders the operations from /openapi.yaml: their summaries appear.
    await p.getByText('Create a cron or interval schedule that submits tasks to the queue.').first().waitFor({ timeout: 60_000 });
    assert.ok(await p.getByText('Submit up to 1,000 tasks in one request').first().isVisible());
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
    assert.equal(await text('#queues tr[data-queue=billing] [data-field=unfinished]'), `3 / 100000`);
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
    await finish(['403 /v1/application/resources', '403 /v1/events']);
    await p.close();
  });

  test('a refused token is said on the sign-in form, and nothing is kept', async () => {
    const { p, finish } = await page();
    await signIn(p, 'orbit_00000000000000000000000000000000_nope');
    await p.locator('#login-error').waitFor();
    assert.equal(await p.evaluate("sessionStorage.getItem('orbit.console.token')"), null);
    await finish(['401 /v1/application/resources', '401 /v1/queues']);
    await p.close();
  });
});
