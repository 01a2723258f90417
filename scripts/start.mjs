// `npm start`: install dependencies if needed, make sure a database is there, migrate,
// then run the server in the foreground. Works on a fresh clone.
//
// Node built-ins only (this may run before node_modules exists).

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

function mtime(file) {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return null;
  }
}

function exitCodeOf(result) {
  if (result.error) return 1;
  if (result.signal) return 128 + (os.constants.signals[result.signal] ?? 0);
  return result.status ?? 1;
}

// Run npm with the same npm that started us, if any (npm sets npm_execpath).
function npm(args) {
  const npmCli = process.env.npm_execpath;
  const [cmd, argv] = npmCli && /npm-cli\.c?js$/.test(npmCli) ? [process.execPath, [npmCli, ...args]] : ['npm', args];
  return spawnSync(cmd, argv, { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' });
}

// (a) Dependencies: npm writes node_modules/.package-lock.json after every install, so if
// it is missing or older than package-lock.json, node_modules is missing or out of date.
const lockTime = mtime(path.join(root, 'package-lock.json'));
const installedTime = mtime(path.join(root, 'node_modules', '.package-lock.json'));
if (installedTime === null || (lockTime !== null && installedTime < lockTime)) {
  const args = lockTime === null ? ['install'] : ['ci'];
  console.error(`orbit: node_modules is ${installedTime === null ? 'missing' : 'out of date'}; running npm ${args[0]}`);
  const result = npm(args);
  if (result.error) fail(`could not run npm: ${result.error.message}`);
  if (exitCodeOf(result) !== 0) fail(`npm ${args[0]} failed`, exitCodeOf(result));
}

// (b) Database.
const { ensureDatabase } = await import('./local-db.mjs');
let db;
try {
  db = await ensureDatabase({ root });
} catch (err) {
  fail(err instanceof Error ? err.message : String(err));
}

// (c) The URL the server and migrations use. `orbit-server` and `orbit-admin` never look for a
// database themselves (they use ORBIT_DATABASE_URL or mysql://root@127.0.0.1:3306/orbit), so
// when that is not the default, say what `npx orbit-admin` in another terminal needs.
if (!process.env.ORBIT_DATABASE_URL) {
  process.env.ORBIT_DATABASE_URL = `${db.url}/orbit`;
  if (process.env.ORBIT_DATABASE_URL !== 'mysql://root@127.0.0.1:3306/orbit') {
    console.error(
      `orbit: using ${process.env.ORBIT_DATABASE_URL}; for orbit-admin in another terminal: export ORBIT_DATABASE_URL=${process.env.ORBIT_DATABASE_URL}`,
    );
  }
}

// (d) Migrations.
const migrate = spawnSync(process.execPath, [path.join(root, 'bin', 'orbit-admin.mjs'), 'migrate'], {
  cwd: root,
  stdio: 'inherit',
  env: process.env,
});
if (migrate.error) fail(`could not run migrations: ${migrate.error.message}`);
if (exitCodeOf(migrate) !== 0) fail('migrations failed', exitCodeOf(migrate));

// (e) The server, in the foreground. Its log lines go to stdout as they are; once it listens,
// say on stderr what happened and what to do next.
const databaseUrl = process.env.ORBIT_DATABASE_URL;
const defaultUrl = databaseUrl === 'mysql://root@127.0.0.1:3306/orbit';
const databaseNote = db.privateServer
  ? `a private MariaDB under .local/mariadb, started by npm start (no MySQL/MariaDB was usable at 127.0.0.1:3306)`
  : process.env.ORBIT_DATABASE_URL === undefined || defaultUrl
    ? 'the MySQL/MariaDB server at 127.0.0.1:3306'
    : 'the server ORBIT_DATABASE_URL names';
const server = spawn(process.execPath, [path.join(root, 'bin', 'orbit-server.mjs')], {
  cwd: root,
  stdio: ['inherit', 'pipe', 'inherit'],
  env: process.env,
});
let announced = false;
let pending = '';
server.stdout.on('data', (chunk) => {
  process.stdout.write(chunk);
  if (announced) return;
  pending += chunk.toString('utf8');
  const lines = pending.split('\n');
  pending = lines.pop() ?? '';
  for (const line of lines) {
    let entry;
    try {
      entry = JSON.parse(line);
    } catch {
      continue;
    }
    if (entry.msg !== 'listening' || typeof entry.url !== 'string') continue;
    announced = true;
    announce(entry.url);
  }
});

function announce(url) {
  const env = defaultUrl ? '' : `ORBIT_DATABASE_URL=${redact(databaseUrl)} `;
  const say = (line = '') => console.error(line === '' ? '' : `orbit: ${line}`);
  say();
  say(`Orbit is running at ${url}`);
  say(`  database        ${redact(databaseUrl)} (${databaseNote}; migrated)`);
  say(`  API reference   ${url}/docs`);
  say(`  console         ${url}/console (paste a credential token)`);
  say(`  metrics         ${url}/metrics`);
  say('next, in another terminal at the repository root: the five-minute tour of README.md, which starts with');
  if (env !== '') say(`  export ${env.trim()}`);
  say(`  export ORBIT_URL=${url}`);
  say('  npx orbit-admin bootstrap --application demo --namespace shop --environment development \\');
  say('    --queue emails --output .local/shop.credentials.json');
  say('Ctrl-C stops the server.');
  say();
}

/** The URL without its password, as orbit-admin and orbit-server show it. */
function redact(value) {
  try {
    const parsed = new URL(value);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return value;
  }
}

relay(server, fail, 'start the server');
