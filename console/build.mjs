// Builds the console (console/dist/): esbuild bundles src/main.ts for the browser, and the
// stylesheet is copied. Run by the root's `npm install` / `npm ci` (prepare), `npm run build`
// and `npm test`; orbit-server serves the result at /console.
import { build } from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, 'dist');
fs.mkdirSync(dist, { recursive: true });
await build({
  entryPoints: [path.join(here, 'src', 'main.ts')],
  outfile: path.join(dist, 'console.js'),
  bundle: true,
  format: 'esm',
  target: ['chrome110', 'firefox110', 'safari16'],
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
});
fs.copyFileSync(path.join(here, 'src', 'console.css'), path.join(dist, 'console.css'));
