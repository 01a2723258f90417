// `npm run test:repeat`: is the suite deterministic? Runs the whole `npm test` several times in a
// row, in one or more fresh clones of the current commit at the same time (two copies load a
// 2-core machine the way a busy CI box is loaded), and reports every run. A test that fails
// in one of them depends on timing or on another test, and must be fixed.
//
//   npm run test:repeat                          3 runs in a row, 2 copies at once
//   npm run test:repeat -- --runs 5 --copies 1   5 runs, one copy
//
// Each copy is `git clone` of HEAD into a temporary folder (what is not committed is not
// tested), with its own `npm ci`; the copies share the database server, as CI does (every test
// file makes databases of its own). Node built-ins only.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const value = Number(process.argv[i + 1]);
  if (!Number.isInteger(value) || value < 1 || value > 20) {
    console.error(`orbit: --${name} must be an integer from 1 to 20`);
    process.exit(2);
  }
  return value;
}

const runs = option('runs', 3);
const copies = option('copies', 2);
const head = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).stdout.trim();
if (!head) {
  console.error('orbit: not a git checkout');
  process.exit(2);
}
const dirty = spawnSync('git', ['status', '--porcelain'], { cwd: root, encoding: 'utf8' }).stdout.trim();
if (dirty) console.error('orbit: note: uncommitted changes are not tested (each copy is a clone of HEAD)');

const base = fs.mkdtempSync(path.join(os.tmpdir(), 'orbit-repeat-'));
console.error(`orbit: ${copies} clone(s) of ${head} under ${base}, ${runs} run(s) each`);

function run(command, args, cwd, logFile) {
  return new Promise((resolve) => {
    const out = fs.openSync(logFile, 'a');
    const child = spawn(command, args, { cwd, stdio: ['ignore', out, out], env: { ...process.env, INIT_CWD: cwd } });
    child.on('exit', (code, signal) => {
      fs.closeSync(out);
      resolve(code ?? (signal ? 1 : 0));
    });
  });
}

/** The test counts from a run's log (node's spec reporter prints them at the end). */
function summary(logFile) {
  const text = fs.readFileSync(logFile, 'utf8');
  const count = (what) => [...text.matchAll(new RegExp(`ℹ ${what} (\\d+)`, 'g'))].at(-1)?.[1];
  const failed = [...text.matchAll(/^✖ (.+?) \(\d/gm)].map((m) => m[1]).filter((name) => name !== 'failing tests:');
  return { tests: count('tests'), pass: count('pass'), fail: count('fail'), failed: [...new Set(failed)] };
}

async function copy(n) {
  const dir = path.join(base, `copy-${n}`);
  const log = (name) => path.join(base, `copy-${n}-${name}.log`);
  if ((await run('git', ['clone', '--quiet', root, dir], base, log('clone'))) !== 0) return [{ run: 0, ok: false, note: `clone failed: ${log('clone')}` }];
  if ((await run('npm', ['ci', '--no-audit', '--no-fund'], dir, log('install'))) !== 0)
    return [{ run: 0, ok: false, note: `npm ci failed: ${log('install')}` }];
  const results = [];
  for (let r = 1; r <= runs; r++) {
    const file = log(`run-${r}`);
    const started = Date.now();
    const code = await run('npm', ['test'], dir, file);
    const s = summary(file);
    results.push({ run: r, ok: code === 0, seconds: Math.round((Date.now() - started) / 1000), ...s, log: file });
    console.error(
      `orbit: copy ${n} run ${r}: ${code === 0 ? 'passed' : 'FAILED'} - ${s.pass ?? '?'} of ${s.tests ?? '?'} passed in ${Math.round((Date.now() - started) / 1000)} s${s.failed.length ? `; failed: ${s.failed.join('; ')}` : ''}`,
    );
  }
  return results;
}

const all = (await Promise.all(Array.from({ length: copies }, (_, i) => copy(i + 1)))).flat();
const bad = all.filter((r) => !r.ok);
console.log(`${all.length - bad.length} of ${all.length} runs passed (${copies} cop${copies === 1 ? 'y' : 'ies'} at once × ${runs} in a row, commit ${head})`);
for (const r of bad) console.log(`failed: ${r.note ?? `run ${r.run}: ${r.failed.join('; ') || 'see'} ${r.log}`}`);
if (bad.length === 0) fs.rmSync(base, { recursive: true, force: true });
else console.log(`logs kept under ${base}`);
process.exit(bad.length === 0 ? 0 : 1);
