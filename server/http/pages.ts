/**
 * The pages Orbit serves itself, with everything they load, so they work with no internet: the
 * API reference (/docs: openapi.yaml rendered by Redoc's standalone bundle, from the `redoc`
 * package), the worker protocol document (/asyncapi.yaml), and the live quota console (/console:
 * console/index.html and the bundle console/build.mjs makes), and the icon of all of them
 * (/favicon.ico: console/favicon.svg). Read once, when the app is built.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

import { ASYNCAPI_PATH, CONSOLE_DIR } from '../paths.ts';

export interface PageAssets {
  asyncApiDocument: string;
  docsHtml: string;
  /** null when the `redoc` package is not installed. */
  redocScript: Buffer | null;
  consoleHtml: string;
  /** null when the console has not been built (`npm run build`). */
  consoleScript: Buffer | null;
  consoleStylesheet: Buffer | null;
  /** An SVG image, served at /favicon.ico. */
  favicon: Buffer;
}

/**
 * The page shell of /docs around Redoc: a bar with links to the two specs and the console. Its
 * CSP (DOCS_SECURITY_HEADERS) allows inline <style> elements, which Redoc needs for itself; the
 * shell has no style attribute. On a narrow screen (a 390 px phone) the bar wraps and drops
 * the file names, so it never makes the page wider than the screen and every link stays
 * visible (test/integration/docs-page-browser.test.ts); Redoc below it is responsive itself.
 */
const DOCS_HTML = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Orbit API reference</title>
  <link rel="icon" href="/favicon.ico" type="image/svg+xml">
  <style>
    body { margin: 0; }
    .orbit-bar { font-family: system-ui, sans-serif; padding: 0.6rem 1.25rem; background: #1d2330; color: #fff; display: flex; flex-wrap: wrap; gap: 0.35rem 1.5rem; align-items: baseline; }
    .orbit-bar strong { font-size: 1.05rem; }
    .orbit-bar a { color: #b9c7ff; overflow-wrap: anywhere; }
    @media (max-width: 40rem) {
      .orbit-bar { padding: 0.5rem 1rem; column-gap: 1rem; font-size: 0.95rem; }
      .orbit-bar .orbit-file { display: none; }
    }
  </style>
</head>
<body>
  <nav class="orbit-bar" aria-label="Orbit">
    <strong>Orbit</strong>
    <a id="openapi-link" href="/openapi.yaml">HTTP API<span class="orbit-file"> (openapi.yaml)</span></a>
    <a id="asyncapi-link" href="/asyncapi.yaml">Worker protocol<span class="orbit-file"> (asyncapi.yaml)</span></a>
    <a id="console-link" href="/console">Live quota console</a>
  </nav>
  <redoc spec-url="/openapi.yaml" hide-download-button="false" path-in-middle-panel="true" required-props-first="true"></redoc>
  <script src="/docs/redoc.standalone.js"></script>
</body>
</html>
`;

function readOrNull(path: string): Buffer | null {
  return existsSync(path) ? readFileSync(path) : null;
}

/**
 * Redoc's bundle with its one load from the internet taken out. The side menu's footer ("API docs
 * by Redocly") always renders `<img src="https://cdn.redoc.ly/redoc/logo-mini.svg">`: Redoc has no
 * option or theme setting to leave it out, and a stylesheet rule cannot stop it either (an <img>
 * is fetched even when it is not displayed). Here the bundle's hard-coded absolute `src` props
 * become `data:,`, which is no image: it fails to load without any request, and the logo's own
 * onError handler in Redoc (which hides a logo that cannot be loaded) removes it, so the footer
 * shows the text alone. No CSP violation, nothing in the browser console. Matching every
 * `src:"https://..."` rather than that one URL keeps this working if Redoc moves its logo; if a
 * new Redoc loads something from the internet in another way, the browser test
 * (test/integration/pages-browser.test.ts) fails, naming the URL.
 */
function offlineRedocBundle(bundle: Buffer): Buffer {
  return Buffer.from(bundle.toString('utf8').replace(/\bsrc:"https?:\/\/[^"]*"/g, 'src:"data:,"'), 'utf8');
}

function redocBundlePath(): string | null {
  try {
    return createRequire(import.meta.url).resolve('redoc/bundles/redoc.standalone.js');
  } catch {
    return null;
  }
}

export function loadPageAssets(): PageAssets {
  const redoc = redocBundlePath();
  const redocScript = redoc === null ? null : readOrNull(redoc);
  return {
    asyncApiDocument: readFileSync(ASYNCAPI_PATH, 'utf8'),
    docsHtml: DOCS_HTML,
    redocScript: redocScript === null ? null : offlineRedocBundle(redocScript),
    consoleHtml: readFileSync(`${CONSOLE_DIR}index.html`, 'utf8'),
    consoleScript: readOrNull(`${CONSOLE_DIR}dist/console.js`),
    consoleStylesheet: readOrNull(`${CONSOLE_DIR}dist/console.css`),
    favicon: readFileSync(`${CONSOLE_DIR}favicon.svg`),
  };
}

/**
 * What the browser may do on these pages: load only from Orbit itself (the console's API calls
 * included), never be framed. Redoc styles itself with inline <style> elements and runs its
 * search in a blob: worker. The console has no inline style at all (`style-src 'self'` refuses
 * style attributes too): what it computes, like a usage bar's width, it sets through the CSSOM.
 */
export const CONSOLE_SECURITY_HEADERS: Record<string, string> = {
  'Content-Security-Policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  'Referrer-Policy': 'no-referrer',
  'X-Content-Type-Options': 'nosniff',
};
export const DOCS_SECURITY_HEADERS: Record<string, string> = {
  'Content-Security-Policy':
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'",
  'Referrer-Policy': 'no-referrer',
  'X-Content-Type-Options': 'nosniff',
};
