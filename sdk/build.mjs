// Builds the package into dist/: tsc turns index.ts, worker.ts and the generated types into
// JavaScript with declarations (rewriting the `.ts` import suffixes to `.js`), and the generated
// frame validators - already JavaScript with a .d.ts beside them - are copied as they are.
// Run by `npm pack` (prepack), by `npm run build -w @orbit-tasks/sdk`, and by the root's
// `npm install` / `npm ci` (prepare), so the examples can import the package by name.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, 'dist');
fs.rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const result = spawnSync(process.execPath, [tsc, '-p', path.join(here, 'tsconfig.build.json')], { stdio: 'inherit' });
if (result.status !== 0) process.exit(result.status ?? 1);
for (const file of ['frame-validators.js', 'frame-validators.d.ts']) {
  fs.copyFileSync(path.join(here, 'generated', file), path.join(dist, 'generated', file));
}
// tsc rewrites `./x.ts` to `./x.js` in the JavaScript it emits but keeps it in declarations,
// where a consumer would look for a `.ts` file that is not in the package.
for (const file of fs.readdirSync(dist, { recursive: true })) {
  if (!String(file).endsWith('.d.ts')) continue;
  const full = path.join(dist, String(file));
  const text = fs.readFileSync(full, 'utf8');
  fs.writeFileSync(full, text.replace(/(from\s+['"]\.{1,2}\/[^'"]+)\.ts(['"])/g, '$1.js$2'));
}
