/** The API reference, the worker protocol document, the console and their icon: no envelope, no authentication (the console authenticates its own API calls). */
import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { CONSOLE_SECURITY_HEADERS, DOCS_SECURITY_HEADERS } from '../pages.ts';

type PageHandlers = Pick<
  Handlers<RequestContext>,
  'getAsyncApiDocument' | 'getApiReference' | 'getApiReferenceScript' | 'getConsole' | 'getConsoleScript' | 'getConsoleStylesheet' | 'getFavicon'
>;

const NOT_BUILT = (what: string, fix: string) => `${what} is not available on this server: ${fix}\n`;

export function pageHandlers(deps: AppDeps): PageHandlers {
  const { pages } = deps;
  const asset = (ctx: RequestContext, body: Buffer | null, type: string, missing: string) =>
    body === null
      ? ctx.hono.body(missing, 503, { 'Content-Type': 'text/plain; charset=utf-8', 'Cache-Control': 'no-store' })
      : ctx.hono.body(new Uint8Array(body), 200, { 'Content-Type': type, 'Cache-Control': 'public, max-age=300' });
  return {
    async getAsyncApiDocument(_input, ctx) {
      return ctx.hono.body(pages.asyncApiDocument, 200, { 'Content-Type': 'application/yaml; charset=utf-8' });
    },
    async getApiReference(_input, ctx) {
      return ctx.hono.body(pages.docsHtml, 200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-cache', ...DOCS_SECURITY_HEADERS });
    },
    async getApiReferenceScript(_input, ctx) {
      return asset(ctx, pages.redocScript, 'text/javascript; charset=utf-8', NOT_BUILT('the Redoc bundle', 'the `redoc` package is not installed (npm ci)'));
    },
    async getConsole(_input, ctx) {
      return ctx.hono.body(pages.consoleHtml, 200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-cache', ...CONSOLE_SECURITY_HEADERS });
    },
    async getConsoleScript(_input, ctx) {
      return asset(ctx, pages.consoleScript, 'text/javascript; charset=utf-8', NOT_BUILT('the console script', 'run `npm run build` (npm ci does it)'));
    },
    async getConsoleStylesheet(_input, ctx) {
      return asset(ctx, pages.consoleStylesheet, 'text/css; charset=utf-8', NOT_BUILT('the console stylesheet', 'run `npm run build` (npm ci does it)'));
    },
    // Named by both pages' <link rel="icon">, and where a browser asks by default for any page
    // (the specs, /metrics): without it every page view logs a 404 in the browser console.
    async getFavicon(_input, ctx) {
      return ctx.hono.body(new Uint8Array(pages.favicon), 200, { 'Content-Type': 'image/svg+xml', 'Cache-Control': 'public, max-age=300' });
    },
  };
}
