// `npm test`: make sure a database server is there, type-check, then run the test files
// with Node's built-in test runner (TypeScript via tsx).
//
//   npm test                                   all test/**/*.test.ts
//   npm test -- test/unit/foo.test.ts          just these files
//   npm test -- --test-name-pattern=quota      extra flags go to `node --test` (use --flag=value)
//
// Node built-ins only.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { relay } from './relay.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function fail(message, code = 1) {
  console.error(`orbit: ${message}`);
  process.exit(code);
}

function exitCodeOf(result) {
  if (result.error) return 1;
  if (result.signal) return 128 + (os.constants.signals[result.signal] ?? 0);
  return result.status ?? 1;
}

// (a) Database server. Tests create (and drop) their own databases on it.
if (!process.env.ORBIT_TEST_DATABASE_URL) {
  const { ensureDatabase } = await import('./local-db.mjs');
  try {
    const { url } = await ensureDatabase({ root });
    process.env.ORBIT_TEST_DATABASE_URL = url;
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
}

// (b) Every transaction of the tests, and of the server processes they start, is checked
// against the lock order (server/store/database/lock-order.ts).
process.env.ORBIT_CHECK_LOCK_ORDER ??= '1';
process.env.ORBIT_CHECK_SHARD_ROUTING ??= '1'; // every statement routes to one shard by application_id (shard-routing.ts)

// (c) Test files: the ones given on the command line, or every test/**/*.test.ts.
const args = process.argv.slice(2);
const flags = args.filter((a) => a.startsWith('-'));
let files = args.filter((a) => !a.startsWith('-'));

function collect(dir, out = []) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) collect(full, out);
    else if (entry.isFile() && entry.name.endsWith('.test.ts')) out.push(path.relative(root, full));
  }
  return out;
}

if (files.length === 0) {
  const testDir = path.join(root, 'test');
  files = fs.existsSync(testDir) ? collect(testDir).sort() : [];
  if (files.length === 0) fail('no test files found (test/**/*.test.ts)');
} else {
  // Relative to where the user typed the command (npm runs scripts from the repo root).
  const base = process.env.INIT_CWD || process.cwd();
  const missing = files.filter((f) => !fs.existsSync(path.resolve(base, f)));
  if (missing.length > 0) fail(`no such test file: ${missing.join(', ')}`);
  files = files.map((f) => path.relative(root, path.resolve(base, f)) || f);
}

// (d) Type-check everything first; a type error fails fast. Use the project's own tsc
// (not `npx tsc`, which offers to install an unrelated "tsc" package if it is missing).
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
if (!fs.existsSync(tsc)) fail('node_modules/typescript is missing; run `npm ci` first');
// The builds the tests run against: the SDK package (sdk/dist; the examples import it by name,
// as a client app does) and the console bundle (console/dist, served at /console), rebuilt from
// the current sources before anything type-checks or runs against them.
function step(label, args) {
  console.error(`orbit: ${label}`);
  const result = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
  if (result.error) fail(`could not run ${label}: ${result.error.message}`);
  if (exitCodeOf(result) !== 0) fail(`${label} failed`, exitCodeOf(result));
}
step('building the SDK package (sdk/dist)', [path.join(root, 'sdk', 'build.mjs')]);
step('building the console (console/dist)', [path.join(root, 'console', 'build.mjs')]);
step('type-checking (tsc --noEmit)', [tsc, '--noEmit', '-p', 'tsconfig.json']);
step('type-checking the console (tsc --noEmit -p console)', [tsc, '--noEmit', '-p', path.join('console', 'tsconfig.json')]);
step('linting (npm run lint: Biome, openapi.yaml, asyncapi.yaml)', [path.join(root, 'scripts', 'lint.mjs')]);

// (e) Run them.
const runner = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', '--test-reporter=spec', ...flags, ...files], {
  cwd: root,
  stdio: 'inherit',
});

relay(runner, fail, 'run the tests');
