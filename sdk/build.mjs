// Builds the package into dist/, for both module systems:
// - JavaScript by esbuild, once as ESM (dist/index.js, dist/worker.js: the package is "type":
//   "module") and once as CommonJS (dist/index.cjs, dist/worker.cjs). Each entry is bundled with
//   what it needs of generated/ (the client: the operation table and where the counts are,
//   generated/operations.ts; the worker: the frame validators); openapi-fetch and ws stay
//   dependencies. The worker imports
//   the client's module of its own format (./index.js or ./index.cjs), so OrbitError is one class
//   per format.
// - Declarations by tsc (dist/*.d.ts for `import`), copied as dist/*.d.cts for `require`, with
//   their relative imports pointing at the .cjs/.d.cts files.
// Run by `npm pack` (prepack), by `npm run build -w @orbit-tasks/sdk`, and by the root's
// `npm install` / `npm ci` (prepare), so the examples can import the package by name.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, 'dist');
fs.rmSync(dist, { recursive: true, force: true });

for (const format of ['esm', 'cjs']) {
  const extension = format === 'esm' ? '.js' : '.cjs';
  await build({
    entryPoints: { index: path.join(here, 'index.ts'), worker: path.join(here, 'worker.ts') },
    outdir: dist,
    outExtension: { '.js': extension },
    bundle: true,
    format,
    platform: 'node',
    target: 'node20.6',
    packages: 'external',
    logLevel: 'warning',
    // The generated validators ask for import.meta.url (for createRequire), which CommonJS has not.
    ...(format === 'cjs'
      ? {
          define: { 'import.meta.url': '__orbitImportMetaUrl' },
          banner: { js: 'const __orbitImportMetaUrl = require("node:url").pathToFileURL(__filename).href;' },
        }
      : {}),
    plugins: [
      {
        name: 'client-module',
        setup(b) {
          // worker.ts imports ./index.ts: the built client of the same format, not a second copy.
          b.onResolve({ filter: /^\.\/index\.ts$/ }, (args) =>
            args.importer.endsWith('worker.ts') ? { path: `./index${extension}`, external: true } : undefined,
          );
        },
      },
    ],
  });
}

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const result = spawnSync(process.execPath, [tsc, '-p', path.join(here, 'tsconfig.build.json')], { stdio: 'inherit' });
if (result.status !== 0) process.exit(result.status ?? 1);

// tsc rewrites `./x.ts` to `./x.js` in what it emits but keeps it in declarations, where a
// consumer would look for a `.ts` file that is not in the package. The .d.cts copies point at
// the CommonJS files (TypeScript finds x.d.cts for x.cjs).
const relative = /(from\s+['"]\.{1,2}\/[^'"]+?)\.(?:ts|js)(['"])/g;
for (const file of fs.readdirSync(dist, { recursive: true })) {
  const name = String(file);
  if (!name.endsWith('.d.ts')) continue;
  const full = path.join(dist, name);
  const text = fs.readFileSync(full, 'utf8');
  fs.writeFileSync(full, text.replace(relative, '$1.js$2'));
  fs.writeFileSync(full.replace(/\.d\.ts$/, '.d.cts'), text.replace(relative, '$1.cjs$2'));
}
