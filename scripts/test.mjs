// `npm test`: make sure a database server is there, build, type-check and lint, then run the
// test files with Node's built-in test runner (TypeScript via tsx).
//
//   npm test                                   every tier: all test/**/*.test.ts
//   npm test -- test/unit/foo.test.ts          just these files (or directories)
//   npm test -- --test-name-pattern=quota      extra flags go to `node --test` (use --flag=value)
//   npm run test:unit                          one tier (unit, store, contract, integration):
//                                              its directory, without the type-check and lint,
//                                              and without a database for the unit tier
//
// What each tier proves: README.md#tests and docs/contributing.md. Node built-ins only.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

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

// The tier asked for (`--tier=unit`), if any: its directory, and what it needs first.
const TIERS = {
  unit: { dir: 'test/unit', database: false, builds: false },
  store: { dir: 'test/store', database: true, builds: false },
  contract: { dir: 'test/contract', database: true, builds: true },
  integration: { dir: 'test/integration', database: true, builds: true },
};
const tierArg = process.argv.slice(2).find((a) => a.startsWith('--tier='));
const tier = tierArg ? TIERS[tierArg.slice('--tier='.length)] : null;
if (tierArg && !tier) fail(`unknown ${tierArg} (one of ${Object.keys(TIERS).join(', ')})`, 2);

// (a) Database server. Tests create (and drop) their own databases on it. The unit tier has
// none: a unit test that reaches for one fails (the URL names a port nothing listens on).
if (tier && !tier.database) {
  process.env.ORBIT_TEST_DATABASE_URL = 'mysql://root@127.0.0.1:9/orbit-unit-tests-have-no-database';
} else if (!process.env.ORBIT_TEST_DATABASE_URL) {
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
const args = process.argv.slice(2).filter((a) => a !== tierArg);
const flags = args.filter((a) => a.startsWith('-'));
let files = args.filter((a) => !a.startsWith('-'));
if (tier) files = [tier.dir, ...files];

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
  // Relative to where the user typed the command (npm runs scripts from the repo root); a
  // tier's directory is relative to the repository.
  const base = process.env.INIT_CWD || process.cwd();
  const resolved = files.map((f) => (tier && f === tier.dir ? path.join(root, f) : path.resolve(base, f)));
  const missing = resolved.filter((f) => !fs.existsSync(f));
  if (missing.length > 0) fail(`no such test file: ${missing.map((f) => path.relative(base, f)).join(', ')}`);
  files = resolved.flatMap((f) => (fs.statSync(f).isDirectory() ? collect(f).sort() : [path.relative(root, f)]));
}
// The longest files first: with two at a time, a long one started last would run alone at
// the end. (Directory order otherwise; the list is a hint, a file missing from it runs later.)
const LONGEST_FIRST = [
  'test/integration/galera-cluster.test.ts',
  'test/contract/fuzz-http-bodies.test.ts',
  'test/contract/fuzz-http-requests.test.ts',
  'test/integration/pages-browser.test.ts',
  'test/integration/readme-scenario.test.ts',
  'test/integration/database-freeze.test.ts',
  'test/integration/sdk-package.test.ts',
  'test/integration/startup.test.ts',
  'test/integration/worker-load.test.ts',
  'test/integration/docs-commands.test.ts',
  'test/integration/tenant-data-size.test.ts',
  'test/integration/hot-path-differential.test.ts',
  'test/integration/subscription-crash.test.ts',
  'test/integration/worker-sdk.test.ts',
  'test/contract/fuzz-worker-frames.test.ts',
  'test/integration/worker-protocol.test.ts',
  'test/integration/schedules.test.ts',
];
const rank = (f) => {
  const i = LONGEST_FIRST.indexOf(f);
  return i === -1 ? LONGEST_FIRST.length : i;
};
files = [...new Set(files)].sort((a, b) => rank(a) - rank(b));

// (d) The builds the tests run against, first: the SDK package (sdk/dist; the examples import
// it by name, as a client app does), the console bundle (console/dist, served at /console) and
// the server bundle the tests' server processes run - from the current sources.
function step(label, args) {
  console.error(`orbit: ${label}`);
  const result = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
  if (result.error) fail(`could not run ${label}: ${result.error.message}`);
  if (exitCodeOf(result) !== 0) fail(`${label} failed`, exitCodeOf(result));
}
if (!tier || tier.builds) {
  step('building the SDK package (sdk/dist)', [path.join(root, 'sdk', 'build.mjs')]);
  step('building the console (console/dist)', [path.join(root, 'console', 'build.mjs')]);
  // The server processes of the tests run this bundle of the sources (test/helpers/server-process.ts).
  step("bundling orbit-server for the tests' server processes (.local/orbit-server.mjs)", [path.join(root, 'scripts', 'bundle-server.mjs')]);
  process.env.ORBIT_TEST_SERVER_BUNDLE = path.join(root, '.local', 'orbit-server.mjs');
}

/** Runs a child to its end; its exit code. Output inherited, or collected when `quiet`. */
function run(args, { quiet = false } = {}) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: root, stdio: quiet ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    let output = '';
    if (quiet) for (const stream of [child.stdout, child.stderr]) stream.on('data', (chunk) => (output += chunk));
    children.add(child);
    child.on('error', (err) => resolve({ code: 1, output: `${output}${err.message}\n` }));
    child.on('close', (code, signal) => {
      children.delete(child);
      resolve({ code: signal ? 128 + (os.constants.signals[signal] ?? 0) : (code ?? 1), output });
    });
  });
}
const children = new Set();
for (const signal of ['SIGINT', 'SIGTERM'])
  process.on(signal, () => {
    for (const child of children) child.kill(signal);
    process.exit(130);
  });

// (e) The checks of a whole run - type-check (the project's own tsc, not `npx tsc`, which
// offers to install an unrelated "tsc" package) and lint - run one after another beside the
// tests (they take ~30 s of one core that the tests leave idle); a failure is printed when it
// happens and fails the run at the end.
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
if (!fs.existsSync(tsc)) fail('node_modules/typescript is missing; run `npm ci` first');
const CHECKS = [
  ['type-check (tsc --noEmit)', [tsc, '--noEmit', '-p', 'tsconfig.json']],
  ['type-check of the console (tsc --noEmit -p console)', [tsc, '--noEmit', '-p', path.join('console', 'tsconfig.json')]],
  ['lint (npm run lint: Biome, openapi.yaml, asyncapi.yaml)', [path.join(root, 'scripts', 'lint.mjs')]],
];
const checks = tier
  ? Promise.resolve([])
  : (async () => {
      const failed = [];
      for (const [label, args] of CHECKS) {
        const { code, output } = await run(args, { quiet: true });
        if (code === 0) console.error(`orbit: ${label}: passed`);
        else {
          console.error(`orbit: ${label} FAILED (exit ${code}):\n${output}`);
          failed.push(label);
        }
      }
      return failed;
    })();

// (f) The tests. The unit files first, all in one process (scripts/run-in-one-process.mjs: they
// are quick, and a process each would cost more than their tests); then every other file in a
// process of its own, three at a time: most files wait part of their time (for a server, a
// lease, a long-poll), and two at a time left part of the two cores idle (`npm run test:repeat`
// runs two whole suites at once, so the tests are proved under more load than this). The spec
// reporter unless a reporter is given.
const reporter = flags.some((f) => f.startsWith('--test-reporter')) ? [] : ['--test-reporter=spec'];
const unitFiles = files.filter((f) => f.startsWith(path.join('test', 'unit') + path.sep));
const otherFiles = files.filter((f) => !unitFiles.includes(f));
const codes = [];
if (unitFiles.length > 0) {
  codes.push((await run(['--import', 'tsx', ...reporter, ...flags, path.join('scripts', 'run-in-one-process.mjs'), ...unitFiles])).code);
  if (codes[0] !== 0 && otherFiles.length > 0) console.error(`orbit: unit tests failed (exit ${codes[0]}); running the others too`);
}
if (otherFiles.length > 0) codes.push((await run(['--import', 'tsx', '--test', '--test-concurrency=3', ...reporter, ...flags, ...otherFiles])).code);
const failedChecks = await checks;
if (failedChecks.length > 0) console.error(`orbit: failed: ${failedChecks.join('; ')}`);
process.exit(codes.find((c) => c !== 0) ?? (failedChecks.length > 0 ? 1 : 0));
