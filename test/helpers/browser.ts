/**
 * Headless Chromium for the browser tests of Orbit's pages (Debian's `chromium`, or the one
 * ORBIT_CHROMIUM names, driven by playwright-core), offline: no host name resolves, so a request
 * for anything but the server under test (127.0.0.1) fails and is recorded.
 *
 *   const browser = await launchChromium();
 *   const p = await browser.newPage({ viewport: { width: 390, height: 844 } });
 *   const watch = await watchPage(p, server.url);
 *   …
 *   assert.deepEqual(await watch.problems(), NO_PAGE_PROBLEMS);
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = process.env.ORBIT_CHROMIUM ?? '/usr/bin/chromium';
/** Where browser tests write their screenshots. */
export const SCREENSHOTS = fileURLToPath(new URL('../../.local/screenshots/', import.meta.url));

/**
 * The page's globals (window, document), for the functions a test runs in the page: tests are
 * type-checked with the project's settings, which have no DOM types.
 */
export type PageGlobals = any;

/** Chromium, offline but for 127.0.0.1; fails naming what to install when it is missing. */
export async function launchChromium(): Promise<Browser> {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium), or set ORBIT_CHROMIUM`);
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      // Offline: no host name resolves, so a request for anything but the server (127.0.0.1)
      // fails, and is recorded. Not page.route: with it, Playwright's interception aborts the
      // browser's own request for the page's icon.
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
}

/**
 * A violation is reported to the page alone (a `securitypolicyviolation` event): listen from
 * before any script of the page runs; the page's `orbitCspViolations` lists them.
 */
export async function recordCspViolations(p: Page): Promise<void> {
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
}

export interface PageProblems {
  cspViolations: string[];
  pageErrors: string[];
  consoleErrors: string[];
  offOrigin: string[];
  failedLoads: string[];
}

export const NO_PAGE_PROBLEMS: PageProblems = { cspViolations: [], pageErrors: [], consoleErrors: [], offOrigin: [], failedLoads: [] };

/**
 * Records, from before the page's first script runs, what a user's browser would show as wrong:
 * Content-Security-Policy violations, page errors, errors in the console, requests off the
 * server's origin and failed loads. Call before `p.goto`.
 */
export async function watchPage(p: Page, serverUrl: string): Promise<{ problems(): Promise<PageProblems> }> {
  const origin = new URL(serverUrl).origin;
  const requested = new Set<string>();
  const failed: string[] = [];
  const consoleErrors: string[] = [];
  const pageErrors: string[] = [];
  await recordCspViolations(p);
  p.on('request', (request) => requested.add(request.url()));
  p.on('requestfailed', (request) => failed.push(`${request.url()}: ${request.failure()?.errorText}`));
  p.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(`${message.text()} (${message.location().url})`);
  });
  p.on('pageerror', (error) => pageErrors.push(error.message));
  const sameOrigin = (url: string) =>
    url.startsWith('data:') || (url.startsWith('blob:') ? new URL(url.slice('blob:'.length)).origin : new URL(url).origin) === origin;
  return {
    async problems() {
      return {
        cspViolations: await p.evaluate(() => (globalThis as PageGlobals).orbitCspViolations ?? []),
        pageErrors,
        consoleErrors,
        offOrigin: [...requested].filter((url) => !sameOrigin(url)),
        failedLoads: failed,
      };
    },
  };
}
