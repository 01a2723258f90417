// Finds (or starts) a MySQL/MariaDB server for `npm start` and `npm test`.
//
// Order of preference:
//   1. ORBIT_DATABASE_URL, if set (must be reachable, otherwise we fail).
//   2. A server on 127.0.0.1:3306 that lets `root` in over TCP without a password
//      (skipped when ORBIT_LOCAL_DB=force).
//   3. A private MariaDB under <repo>/.local/mariadb/, created and started on demand
//      and left running in the background for the next run.
//
// Node built-ins only: this runs before `npm ci` may have happened.
//
// By hand:  node scripts/local-db.mjs         print the server URL (starting one if needed)
//           node scripts/local-db.mjs stop    stop the private server, if running

import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { spawn } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

const DEFAULT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const CONNECT_TIMEOUT_MS = 1500;
// The server sends its greeting only after it has resolved the client's host name,
// so give a remote server with slow DNS a little longer than the TCP connect.
const GREETING_TIMEOUT_MS = 5000;
const START_TIMEOUT_MS = 60_000;
const INSTALL_TIMEOUT_MS = 180_000;
const STOP_TIMEOUT_MS = 60_000;
const LOCK_TIMEOUT_MS = 150_000;
const PREFERRED_PORT = 3307;
const DEFAULT_LOCAL_URL = 'mysql://root@127.0.0.1:3306';

const BINARY_DIRS = ['/usr/sbin', '/usr/bin', '/usr/local/mysql/bin', '/usr/local/bin', '/usr/libexec'];

/**
 * Make sure a database server is available.
 * @returns {Promise<{url: string, privateServer: boolean}>} url has no database name,
 *   e.g. mysql://root@127.0.0.1:3306
 */
export async function ensureDatabase({ root = DEFAULT_ROOT, log = console.error } = {}) {
  const fromEnv = process.env.ORBIT_DATABASE_URL;
  if (fromEnv) {
    // Several hosts (a cluster's nodes, mysql://u@h1:p1,h2:p2/db): the first that answers.
    const reasons = [];
    for (const hostUrl of hostUrls(fromEnv)) {
      const target = parseDatabaseUrl(hostUrl);
      const probe = await probeServer(target.host, target.port);
      if (probe.ok) return { url: target.serverUrl, privateServer: false };
      reasons.push(`${target.display}: ${probe.reason}`);
    }
    throw new Error(
      `ORBIT_DATABASE_URL points at ${reasons.length === 1 ? reasons[0].replace(/: /, ', but no MySQL/MariaDB server answers there (') + ')' : `${reasons.length} hosts, and none answers (${reasons.join('; ')})`}.`,
    );
  }

  let why;
  if (process.env.ORBIT_LOCAL_DB === 'force') {
    why = 'ORBIT_LOCAL_DB=force is set';
  } else {
    // A full login also performs the probe (it starts by reading the greeting), and
    // unlike a bare probe it leaves no "Aborted connection" warning in the server log.
    // It matters too: stock Debian/Ubuntu packages authenticate root@localhost via
    // unix_socket, so a server can answer on 3306 and still refuse `root` over TCP.
    const login = await checkLogin({ host: '127.0.0.1', port: 3306, user: 'root' });
    if (login.ok) return { url: DEFAULT_LOCAL_URL, privateServer: false };
    if (login.greeted) {
      why = `the server on 127.0.0.1:3306 refuses root without a password (${login.reason})`;
      log(`orbit: ${why}; using a private MariaDB instead (or set ORBIT_DATABASE_URL)`);
    } else {
      why = `no MySQL/MariaDB is reachable at 127.0.0.1:3306 (${login.reason})`;
    }
  }

  const url = await ensurePrivateServer({ root, log, why });
  return { url, privateServer: true };
}

/** Stop the private server started by ensureDatabase, if it is running. Returns true if it was stopped. */
export async function stopPrivateDatabase({ root = DEFAULT_ROOT, log = () => {} } = {}) {
  const p = privatePaths(root);
  const pid = readPid(p.pidFile);
  if (!pid || !isOurServer(pid, p)) return false;
  log(`orbit: stopping the private MariaDB (pid ${pid})`);
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return true;
    await sleep(200);
  }
  throw new Error(`the private MariaDB (pid ${pid}) did not stop within ${STOP_TIMEOUT_MS / 1000}s`);
}

// ---------------------------------------------------------------------------
// Private server

function privatePaths(root) {
  const dir = path.join(root, '.local', 'mariadb');
  const socket = socketPathIn(dir);
  return {
    localDir: path.join(root, '.local'),
    dir,
    rel: displayPath(dir),
    data: path.join(dir, 'data'),
    dataPartial: path.join(dir, 'data.partial'),
    portFile: path.join(dir, 'port'),
    pidFile: path.join(dir, 'mariadb.pid'),
    socket,
    errorLog: path.join(dir, 'error.log'),
    serverLog: path.join(dir, 'server.log'),
    installLog: path.join(dir, 'install.log'),
    initSql: path.join(dir, 'init.sql'),
    lock: path.join(dir, 'lock'),
  };
}

/** `<dir>/mariadb.sock`, or a name in the system's temporary directory unique to `dir` when that path is too long. */
export function socketPathIn(dir) {
  const socket = path.join(dir, 'mariadb.sock');
  // Unix socket paths are limited to 107 bytes; mariadbd aborts on longer ones.
  if (Buffer.byteLength(socket) <= 100) return socket;
  const hash = crypto.createHash('sha256').update(dir).digest('hex').slice(0, 12);
  return path.join(os.tmpdir(), `orbit-mariadb-${hash}.sock`);
}

async function ensurePrivateServer({ root, log, why }) {
  const p = privatePaths(root);

  const running = await findRunning(p);
  if (running) return running;

  fs.mkdirSync(p.localDir, { recursive: true, mode: 0o700 });
  try {
    fs.chmodSync(p.localDir, 0o700);
  } catch {
    // not ours to change; fine
  }
  fs.mkdirSync(p.dir, { recursive: true, mode: 0o700 });

  return withLock(p.lock, log, async () => {
    // Somebody may have started it while we waited for the lock.
    const again = await findRunning(p);
    if (again) return again;

    // A server of ours is alive but not answering yet (e.g. an earlier run timed out
    // during startup): wait for it instead of starting a second one on the same datadir.
    const pid = readPid(p.pidFile);
    const oldPort = readPort(p.portFile);
    if (pid && oldPort && isOurServer(pid, p)) {
      log(`orbit: waiting for the private MariaDB (pid ${pid}) on 127.0.0.1:${oldPort}`);
      await waitUntilReady({ port: oldPort, p, child: null, logOffsets: null });
      return privateUrl(oldPort);
    }

    const bins = findServerBinaries();
    if (!bins) {
      throw new Error(
        `${capitalise(why)}, and no MySQL/MariaDB server binaries (mariadbd or mysqld, plus ` +
          `mariadb-install-db or mysql_install_db) were found to start a private one.\n` +
          `Install them with \`sudo apt-get install mariadb-server\` (Debian/Ubuntu), ` +
          `or set ORBIT_DATABASE_URL=mysql://user:password@host:port to use an existing server.`,
      );
    }

    if (!fs.existsSync(p.data)) await initialiseDatadir(p, bins, log);

    let port = await choosePort(readPort(p.portFile));
    for (let attempt = 1; ; attempt++) {
      log(`orbit: starting a private MariaDB under ${p.rel} on 127.0.0.1:${port}`);
      const { child, logOffsets } = startServer(p, bins, port);
      fs.writeFileSync(p.portFile, `${port}\n`);
      try {
        await waitUntilReady({ port, p, child, logOffsets });
        return privateUrl(port);
      } catch (error) {
        // Another server took the port between the check and the bind (two test runs starting
        // private servers at the same moment): try again on a port the system picks.
        if (attempt >= 3 || !/Address already in use/.test(String(error?.message))) throw error;
        port = await systemPort();
      } finally {
        child.removeAllListeners();
      }
    }
  });
}

/** URL of our running private server, or null if it is not running. */
async function findRunning(p) {
  const pid = readPid(p.pidFile);
  const port = readPort(p.portFile);
  if (!pid || !port || !isOurServer(pid, p)) return null;
  const login = await checkLogin({ host: '127.0.0.1', port, user: 'root' });
  if (!login.greeted || !(await answersOnOurSocket(p))) return null;
  if (login.ok) return privateUrl(port);
  throw refusesRoot(port, login, p);
}

// Whatever answers on the TCP port could be some other server that grabbed the port.
// Our unix socket is unique to our datadir, and mariadbd creates it only after binding
// its TCP port (it aborts if that fails), so a server answering there proves the port
// is ours. Any answer counts, even "access denied".
async function answersOnOurSocket(p) {
  return (await checkLogin({ socketPath: p.socket, user: 'root' })).greeted;
}

function privateUrl(port) {
  return `mysql://root@127.0.0.1:${port}`;
}

function refusesRoot(port, login, p) {
  return new Error(
    `the private MariaDB on 127.0.0.1:${port} is running but refuses root over TCP (${login.reason}).\n` +
      `Stop it (kill $(cat ${path.join(p.rel, 'mariadb.pid')})) and delete ${p.rel} to start from scratch.`,
  );
}

/** The first of `names` found as an executable file on PATH or in the usual server directories, or null. */
export function findExecutable(names) {
  const dirs = [...new Set([...(process.env.PATH || '').split(path.delimiter).filter(Boolean), ...BINARY_DIRS])];
  for (const name of names) {
    for (const dir of dirs) {
      const candidate = path.join(dir, name);
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        if (fs.statSync(candidate).isFile()) return candidate;
      } catch {
        // keep looking
      }
    }
  }
  return null;
}

export function findServerBinaries() {
  const server = findExecutable(['mariadbd', 'mysqld']);
  const installDb = findExecutable(['mariadb-install-db', 'mysql_install_db']);
  return server && installDb ? { server, installDb } : null;
}

export function runningAsRoot() {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

/**
 * Runs mariadb-install-db into `p.dataPartial`, then renames it to `p.data` (`p.dir` is its working
 * directory, `p.installLog` its output, `p.rel` how the messages name `p.dir`).
 */
export async function initialiseDatadir(p, bins, log) {
  log(`orbit: initialising ${path.join(p.rel, 'data')} (first run)`);
  // Install into a scratch directory and rename it at the end, so an interrupted
  // install never leaves a half-initialised datadir behind.
  fs.rmSync(p.dataPartial, { recursive: true, force: true });
  const args = [
    '--no-defaults',
    `--datadir=${p.dataPartial}`,
    '--auth-root-authentication-method=normal', // root with an empty password, not unix_socket
    '--skip-test-db',
  ];
  if (runningAsRoot()) args.push(`--user=${os.userInfo().username}`);
  // Tarball layouts (e.g. /usr/local/mysql) need --basedir; distro packages know theirs.
  const base = path.dirname(path.dirname(fs.realpathSync(bins.installDb)));
  if (base !== '/usr' && fs.existsSync(path.join(base, 'share'))) args.push(`--basedir=${base}`);

  const out = fs.openSync(p.installLog, 'w');
  let code;
  try {
    fs.writeSync(out, `$ ${bins.installDb} ${args.join(' ')}\n`);
    const child = spawn(bins.installDb, args, { stdio: ['ignore', out, out], cwd: p.dir });
    code = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        resolve(`timeout after ${INSTALL_TIMEOUT_MS / 1000}s`);
      }, INSTALL_TIMEOUT_MS);
      child.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.on('exit', (status, signal) => {
        clearTimeout(timer);
        resolve(signal ? `signal ${signal}` : status);
      });
    });
  } finally {
    fs.closeSync(out);
  }
  if (code !== 0) {
    fs.rmSync(p.dataPartial, { recursive: true, force: true });
    throw new Error(
      `${path.basename(bins.installDb)} failed (exit ${code}); see ${path.join(p.rel, 'install.log')}:\n` +
        installErrors(fs.readFileSync(p.installLog, 'utf8')),
    );
  }
  fs.renameSync(p.dataPartial, p.data);
}

/**
 * What a failed install said: its error lines (the server's `[ERROR]`s, a shell's "…: error"),
 * else its last lines - its tail alone is the same advice about grant tables whatever failed.
 */
function installErrors(text) {
  const errors = text.split('\n').filter((line) => /\[ERROR\]|\bERROR\b|error:|FATAL|Aborting/i.test(line) && !/look at the grant tables/.test(line));
  return errors.length > 0 ? errors.slice(-12).join('\n') : tail(text, 15);
}

function startServer(p, bins, port) {
  // Runs on every start and is idempotent. install-db normally creates root@127.0.0.1
  // already, but we run with --skip-name-resolve, where TCP logins only match accounts
  // keyed by IP, so make sure that account exists whatever the install-db version did.
  fs.writeFileSync(
    p.initSql,
    ["CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';", "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;", ''].join('\n'),
  );
  const args = [
    '--no-defaults', // must come first
    `--datadir=${p.data}`,
    `--socket=${p.socket}`,
    `--port=${port}`,
    '--bind-address=127.0.0.1',
    `--pid-file=${p.pidFile}`,
    `--log-error=${p.errorLog}`,
    `--init-file=${p.initSql}`,
    '--skip-name-resolve', // no reverse DNS on connect; 127.0.0.1 matches root@127.0.0.1
    // Settings for a dev/test box. innodb_flush_log_at_trx_commit=2 gives up durability
    // of the last second of commits on an OS crash; fine for a private, throwaway server,
    // and it makes the test suite much faster. Never copy this to production.
    '--innodb-buffer-pool-size=256M',
    '--innodb-flush-log-at-trx-commit=2',
    '--max-connections=500',
    '--character-set-server=utf8mb4',
    '--collation-server=utf8mb4_unicode_ci',
  ];
  if (runningAsRoot()) args.push('--user=root'); // mariadbd refuses to run as root otherwise

  return spawnServer({ server: bins.server, args, dir: p.dir, serverLog: p.serverLog, errorLog: p.errorLog });
}

/**
 * Starts `server` with `args` in the background, detached, its output appended to `serverLog`
 * after the command line. `child.exitInfo` says how it ended once it has; `logOffsets` are where
 * this start's lines begin in `errorLog` and `serverLog`, for the messages of a failed start.
 */
export function spawnServer({ server, args, dir, serverLog, errorLog, env = process.env }) {
  const logOffsets = { error: fileSize(errorLog), server: fileSize(serverLog) };
  const out = fs.openSync(serverLog, 'a');
  let child;
  try {
    fs.writeSync(out, `\n$ ${server} ${args.join(' ')}\n`);
    logOffsets.server = fileSize(serverLog);
    child = spawn(server, args, { detached: true, stdio: ['ignore', out, out], cwd: dir, env });
  } finally {
    fs.closeSync(out);
  }
  child.unref();
  child.exitInfo = null;
  child.on('exit', (code, signal) => {
    child.exitInfo = signal ? `signal ${signal}` : `exit code ${code}`;
  });
  child.on('error', (err) => {
    child.exitInfo = err.message;
  });
  return { child, logOffsets };
}

async function waitUntilReady({ port, p, child, logOffsets }) {
  const deadline = Date.now() + START_TIMEOUT_MS;
  let last = 'not started';
  while (Date.now() < deadline) {
    if (child?.exitInfo) {
      throw new Error(`the private MariaDB exited during startup (${child.exitInfo}).\n${startupLogs(p, logOffsets)}`);
    }
    // Ready = root can log in over TCP with an empty password, which is what we promise.
    const login = await checkLogin({ host: '127.0.0.1', port, user: 'root' });
    if (login.greeted && (await answersOnOurSocket(p))) {
      if (login.ok) return;
      throw refusesRoot(port, login, p);
    }
    last = login.greeted ? `another server is answering on port ${port}` : login.reason;
    await sleep(250);
  }
  throw new Error(`the private MariaDB did not answer on 127.0.0.1:${port} within ${START_TIMEOUT_MS / 1000}s (${last}).\n` + startupLogs(p, logOffsets));
}

function startupLogs(p, offsets) {
  const parts = [];
  const server = readFrom(p.serverLog, offsets?.server ?? 0).trim();
  if (server) parts.push(`${path.join(p.rel, 'server.log')}:\n${tail(server, 10)}`);
  const errors = readFrom(p.errorLog, offsets?.error ?? 0).trim();
  parts.push(`${path.join(p.rel, 'error.log')}:\n${errors ? tail(errors, 20) : '(empty)'}`);
  return parts.join('\n');
}

async function choosePort(previous) {
  for (const port of [PREFERRED_PORT, previous]) {
    if (port && (await portIsFree(port))) return port;
  }
  return systemPort();
}

/** A port that is free now, as the system picks it. */
function systemPort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen({ host: '127.0.0.1', port: 0, exclusive: true }, () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export function portIsFree(port) {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen({ host: '127.0.0.1', port, exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

// A lock file with our pid, so concurrent `npm start` / `npm test` runs do not both
// initialise or start the server. Stale locks (dead owner) are taken over. `what` names what
// the owner is starting, in the messages.
export async function withLock(lockFile, log, fn, what = 'the private MariaDB') {
  const deadline = Date.now() + LOCK_TIMEOUT_MS;
  let announced = false;
  for (;;) {
    try {
      fs.writeFileSync(lockFile, `${process.pid}\n`, { flag: 'wx' });
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
    const owner = readPid(lockFile);
    if (!owner || !isAlive(owner)) {
      // Stale (or being written right now: give a fresh file a moment).
      if (owner || Date.now() - fileMtime(lockFile) > 2000) fs.rmSync(lockFile, { force: true });
      await sleep(50);
      continue;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for process ${owner} to finish starting ${what} (${lockFile})`);
    }
    if (!announced) {
      log(`orbit: waiting for process ${owner}, which is starting ${what}`);
      announced = true;
    }
    await sleep(250);
  }
  try {
    return await fn();
  } finally {
    fs.rmSync(lockFile, { force: true });
  }
}

// ---------------------------------------------------------------------------
// Process helpers

export function readPid(file) {
  try {
    const pid = Number.parseInt(fs.readFileSync(file, 'utf8').trim(), 10);
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

function readPort(file) {
  const port = readPid(file);
  return port && port < 65536 ? port : null;
}

export function isAlive(pid) {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if (err.code !== 'EPERM') return false;
  }
  try {
    // A zombie still "exists" for kill(0) but is gone for our purposes.
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true; // no /proc (macOS): trust kill(0)
  }
}

/** Is pid alive and (where /proc lets us check) a server running on our datadir? Guards against pid reuse. */
function isOurServer(pid, p) {
  return runsWithArgument(pid, `--datadir=${p.data}`);
}

/** Is pid alive and (where /proc lets us check) a process with `arg` among its arguments? */
export function runsWithArgument(pid, arg) {
  if (!isAlive(pid)) return false;
  if (!fs.existsSync('/proc/self/cmdline')) return true; // no /proc (macOS): trust the pid file
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(`${arg}\0`);
  } catch {
    return false;
  }
}

export function fileSize(file) {
  try {
    return fs.statSync(file).size;
  } catch {
    return 0;
  }
}

function fileMtime(file) {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

export function readFrom(file, offset) {
  try {
    const buf = fs.readFileSync(file);
    return buf.subarray(Math.min(offset, buf.length)).toString('utf8');
  } catch {
    return '';
  }
}

export function displayPath(file) {
  const rel = path.relative(process.cwd(), file);
  return rel && !rel.startsWith('..') && !path.isAbsolute(rel) ? rel : file;
}

export function tail(text, lines) {
  return text
    .trimEnd()
    .split('\n')
    .slice(-lines)
    .map((l) => `  ${l}`)
    .join('\n');
}

function capitalise(s) {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

// ---------------------------------------------------------------------------
// URLs

/** The URL of each host of `mysql://u@h1:p1,h2:p2/db` (as server/config.ts databaseHostUrls). */
function hostUrls(raw) {
  const match = /^(mysql:\/\/(?:[^@/]*@)?)([^/?#]*)(.*)$/s.exec(raw);
  if (!match || !match[2].includes(',')) return [raw];
  return match[2].split(',').map((host) => `${match[1]}${host}${match[3]}`);
}

function parseDatabaseUrl(raw) {
  let u;
  try {
    u = new URL(raw);
  } catch {
    throw new Error('ORBIT_DATABASE_URL is not a valid URL (expected mysql://user:password@host:port/database)');
  }
  if (!u.hostname) {
    throw new Error('ORBIT_DATABASE_URL has no host (expected mysql://user:password@host:port/database)');
  }
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = u.port ? Number(u.port) : 3306;
  const auth = u.username ? `${u.username}${u.password ? `:${u.password}` : ''}@` : '';
  // Database, query string and fragment are dropped: callers append `/<database>`.
  const serverUrl = `${u.protocol}//${auth}${u.host}`;
  return { host, port, serverUrl, display: `${u.host}${u.port ? '' : ':3306'}` };
}

// ---------------------------------------------------------------------------
// Wire protocol (just enough to check a server is there and lets us in)

/**
 * Connect and read the server's greeting. MySQL/MariaDB speak first: a handshake
 * packet whose first payload byte (5th byte on the wire) is protocol version 10.
 * @returns {Promise<{ok: true, version: string} | {ok: false, reason: string}>}
 */
export function probeServer(host, port) {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    let settled = false;
    const socket = net.connect({ host, port });
    const finish = (result) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    let timer = setTimeout(() => finish({ ok: false, reason: 'connect timed out' }), CONNECT_TIMEOUT_MS);
    socket.on('connect', () => {
      clearTimeout(timer);
      timer = setTimeout(() => finish({ ok: false, reason: 'no greeting from the server' }), GREETING_TIMEOUT_MS);
    });
    socket.on('error', (err) => finish({ ok: false, reason: err.code === 'ECONNREFUSED' ? 'connection refused' : err.message }));
    socket.on('close', () => finish({ ok: false, reason: 'connection closed before the greeting' }));
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length < 5) return;
      if (buf[4] === 10) {
        const end = buf.indexOf(0, 5);
        finish({ ok: true, version: buf.toString('latin1', 5, end > 0 ? end : Math.min(buf.length, 40)) });
      } else if (buf[4] === 0xff) {
        const len = buf.readUIntLE(0, 3);
        if (buf.length < 4 + len) return;
        finish({ ok: false, reason: `server refused the connection: ${errorPacketMessage(buf.subarray(4, 4 + len))}` });
      } else {
        finish({ ok: false, reason: 'not a MySQL/MariaDB server (unexpected greeting)' });
      }
    });
  });
}

/**
 * Try to log in with an empty password over TCP, the way the app will. This includes
 * the probe: `greeted` says whether a MySQL/MariaDB server answered at all (a protocol 10
 * greeting, or an error packet such as "host not allowed" in its place). Connects to
 * host:port, or to a unix socket if socketPath is given.
 * @returns {Promise<{ok: boolean, greeted: boolean, reason?: string}>}
 */
export function checkLogin({ host, port, socketPath, user }) {
  const CLIENT_LONG_PASSWORD = 0x1;
  const CLIENT_PROTOCOL_41 = 0x200;
  const CLIENT_SECURE_CONNECTION = 0x8000;
  const CLIENT_PLUGIN_AUTH = 0x80000;

  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    let settled = false;
    let greeted = false;
    const socket = net.connect(socketPath ? { path: socketPath } : { host, port });
    const finish = (result) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (result.ok)
        socket.end(packet(0, Buffer.from([0x01]))); // COM_QUIT, so the server logs no aborted connection
      else socket.destroy();
      resolve({ greeted, ...result });
    };
    let timer = setTimeout(() => finish({ ok: false, reason: 'connect timed out' }), CONNECT_TIMEOUT_MS);
    socket.on('connect', () => {
      clearTimeout(timer);
      timer = setTimeout(() => finish({ ok: false, reason: greeted ? 'login timed out' : 'no greeting from the server' }), GREETING_TIMEOUT_MS);
    });
    socket.on('error', (err) => finish({ ok: false, reason: err.code === 'ECONNREFUSED' ? 'connection refused' : err.message }));
    socket.on('close', () => finish({ ok: false, reason: 'connection closed' }));
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      while (!settled && buf.length >= 4) {
        const len = buf.readUIntLE(0, 3);
        if (buf.length < 4 + len) return;
        const seq = buf[3];
        const payload = buf.subarray(4, 4 + len);
        buf = buf.subarray(4 + len);
        onPacket(seq, payload);
      }
    });

    function onPacket(seq, payload) {
      const kind = payload[0];
      if (kind === 0xff) {
        const reason = errorPacketMessage(payload);
        if (greeted) return finish({ ok: false, reason });
        greeted = true; // a server answered, just not with a greeting (e.g. 1130 host not allowed)
        return finish({ ok: false, reason: `server refused the connection: ${reason}` });
      }
      if (!greeted) {
        if (kind !== 10) return finish({ ok: false, reason: 'not a MySQL/MariaDB server (unexpected greeting)' });
        greeted = true;
        const flags = Buffer.alloc(4);
        flags.writeUInt32LE(CLIENT_LONG_PASSWORD | CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH);
        const maxPacket = Buffer.alloc(4);
        maxPacket.writeUInt32LE(16 * 1024 * 1024);
        const response = Buffer.concat([
          flags,
          maxPacket,
          Buffer.from([45]), // utf8mb4_general_ci
          Buffer.alloc(23),
          Buffer.from(`${user}\0`, 'utf8'),
          Buffer.from([0]), // empty auth response = empty password
          Buffer.from('mysql_native_password\0', 'latin1'),
        ]);
        socket.write(packet(seq + 1, response));
        return;
      }
      if (kind === 0x00) return finish({ ok: true });
      if (kind === 0xfe) {
        // Auth switch: answer "empty password" in the requested plugin's terms.
        const end = payload.indexOf(0, 1);
        const plugin = payload.toString('latin1', 1, end > 0 ? end : payload.length);
        socket.write(packet(seq + 1, plugin === 'caching_sha2_password' ? Buffer.from([0]) : Buffer.alloc(0)));
        return;
      }
      if (kind === 0x01) return; // extra auth data (e.g. caching_sha2 fast-auth result); OK/ERR follows
      finish({ ok: false, reason: `unexpected packet 0x${kind.toString(16)} during login` });
    }
  });
}

function packet(seq, payload) {
  const header = Buffer.alloc(4);
  header.writeUIntLE(payload.length, 0, 3);
  header[3] = seq & 0xff;
  return Buffer.concat([header, payload]);
}

function errorPacketMessage(payload) {
  if (payload.length < 3) return 'unknown error';
  const code = payload.readUInt16LE(1);
  const rest = payload.subarray(3);
  const message = (rest[0] === 0x23 ? rest.subarray(6) : rest).toString('utf8'); // skip '#' + SQLSTATE
  return `${code} ${message}`;
}

// ---------------------------------------------------------------------------
// CLI

if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) {
  const command = process.argv[2] ?? 'start';
  try {
    if (command === 'start') {
      console.log((await ensureDatabase()).url);
    } else if (command === 'stop') {
      const stopped = await stopPrivateDatabase({ log: console.error });
      if (!stopped) console.error('orbit: the private MariaDB is not running');
    } else {
      console.error('usage: node scripts/local-db.mjs [start|stop]');
      process.exitCode = 2;
    }
  } catch (err) {
    console.error(`orbit: ${err instanceof Error ? err.message : err}`);
    process.exitCode = 1;
  }
}
