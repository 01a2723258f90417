/**
 * /docs in a real headless Chromium (test/helpers/browser.ts) against a real server process, on
 * a 390 px phone and on a desktop: the page is never wider than the screen (the shell's bar
 * wraps; Redoc is responsive), every link of the bar - the console's included - is on screen,
 * the sidebar opens with the tasks (Submit a task), not with health checks or the pages'
 * assets, the operations show their curl and SDK samples, and nothing goes wrong in the
 * browser (no CSP violation, page or console error, request off the origin, failed load).
 * Screenshots are written to .local/screenshots/.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { launchChromium, NO_PAGE_PROBLEMS, SCREENSHOTS, watchPage, type PageGlobals } from '../helpers/browser.ts';

const VIEWPORTS = [
  { name: 'phone', width: 390, height: 844 },
  { name: 'desktop', width: 1280, height: 900 },
];

describe('/docs in headless Chromium', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let browser: Browser;

  before(async () => {
    t = await freshDatabase('docs_page');
    server = await startServerProcess(t.url);
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
    await t?.drop();
  });

  /** /docs, rendered: Redoc has drawn the operations and the side menu. */
  async function openDocs(p: Page): Promise<void> {
    await p.goto(`${server.url}/docs`);
    await p.locator('li[data-item-id="tag/Tasks/operation/submitTask"]').waitFor({ state: 'attached', timeout: 60_000 });
    await p.locator('[data-section-id="tag/Tasks/operation/submitTask"]').waitFor({ state: 'attached', timeout: 60_000 });
    await p.evaluate(() => (globalThis as PageGlobals).document.fonts.ready);
  }

  for (const viewport of VIEWPORTS) {
    test(`${viewport.name} (${viewport.width} px): no horizontal overflow, the bar's links on screen, the sidebar opens with the tasks`, async () => {
      const p = await browser.newPage({ viewport: { width: viewport.width, height: viewport.height } });
      const watch = await watchPage(p, server.url);
      await openDocs(p);

      const layout = await p.evaluate(() => {
        const { document, innerWidth } = globalThis as PageGlobals;
        const root = document.documentElement;
        // What makes the page wider than the screen, if anything: the outermost elements past its right edge.
        const past = [...document.querySelectorAll('body *')]
          .filter((e: PageGlobals) => e.getBoundingClientRect().right > root.clientWidth + 0.5 && !e.parentElement?.closest('pre, table, [role=tabpanel]'))
          .slice(0, 5)
          .map((e: PageGlobals) => `${e.tagName.toLowerCase()}.${e.className} right=${Math.round(e.getBoundingClientRect().right)}`);
        return { innerWidth, scrollWidth: root.scrollWidth, bodyScrollWidth: document.body.scrollWidth, past: root.scrollWidth > innerWidth ? past : [] };
      });
      assert.ok(
        layout.scrollWidth <= layout.innerWidth && layout.bodyScrollWidth <= layout.innerWidth,
        `the page is no wider than the ${viewport.width} px screen: ${JSON.stringify(layout)}`,
      );

      // Every link of the bar is visible and wholly on screen, the console's above all.
      for (const id of ['openapi-link', 'asyncapi-link', 'console-link']) {
        const link = p.locator(`#${id}`);
        assert.ok(await link.isVisible(), `#${id} is visible`);
        const box = await link.boundingBox();
        assert.ok(box && box.x >= 0 && box.x + box.width <= viewport.width && box.width > 0, `#${id} is on screen: ${JSON.stringify(box)}`);
      }
      assert.equal(await p.locator('#console-link').getAttribute('href'), '/console');
      assert.equal(await p.locator('#console-link').innerText(), 'Live quota console');

      // The side menu, in its order: no section of the introduction, the tasks' tag first and its
      // first operation "Submit a task"; the system's tags (health, specs, pages) last.
      const menu: string[] = await p.evaluate(() =>
        [...(globalThis as PageGlobals).document.querySelectorAll('.menu-content li[data-item-id]')].map((li: PageGlobals) => li.getAttribute('data-item-id')),
      );
      const entries = menu.filter((id) => !id.startsWith('group/'));
      assert.equal(entries[0], 'tag/Tasks', `the sidebar's first entry is the tasks' tag: ${menu.slice(0, 5).join(', ')}`);
      assert.equal(entries[1], 'tag/Tasks/operation/submitTask', `then the first tasks operation: ${menu.slice(0, 5).join(', ')}`);
      assert.equal(
        entries.find((id) => id.includes('/operation/')),
        'tag/Tasks/operation/submitTask',
        'the first operation of the sidebar submits a task',
      );
      const firstSystem = entries.findIndex((id) => /^tag\/(Health-and-metrics|Specifications|Pages)/.test(id));
      assert.ok(firstSystem > 0, 'the system tags are in the sidebar');
      assert.ok(
        entries.slice(firstSystem).every((id) => /^tag\/(Health-and-metrics|Specifications|Pages)/.test(id)),
        `nothing but the system after it: ${entries.slice(firstSystem).join(', ')}`,
      );
      assert.ok(entries.indexOf('tag/Health-and-metrics/operation/getHealth') > entries.indexOf('tag/Queues'), 'health comes after every user-facing tag');
      const firstLabel = await p.locator('li[data-item-id="tag/Tasks/operation/submitTask"] label').first().textContent();
      assert.match(firstLabel ?? '', /Submit a task$/, 'the entry reads as its summary');
      if (viewport.width >= 1000)
        assert.ok(await p.locator('li[data-item-id="tag/Tasks"]').first().isVisible(), 'the tasks are the first entry you see in the sidebar');

      // The operations show their samples (x-codeSamples): curl and the TypeScript SDK.
      const submit = p.locator('[data-section-id="tag/Tasks/operation/submitTask"]');
      for (const tab of ['curl', 'TypeScript SDK'])
        assert.equal(await submit.getByRole('tab', { name: tab, exact: true }).count(), 1, `submitTask shows a "${tab}" sample tab`);
      // Redoc shows the request's payload first; a click shows the curl sample.
      await submit.getByRole('tab', { name: 'curl', exact: true }).click();
      await submit.getByText("-H 'Idempotency-Key: welcome-42'").first().waitFor();

      await p.screenshot({ path: path.join(SCREENSHOTS, `docs-${viewport.name}.png`) });
      assert.deepEqual(await watch.problems(), NO_PAGE_PROBLEMS, 'nothing went wrong in the browser');
      await p.close();
    });
  }
});
