// `npm run galera`: a three-node MariaDB Galera cluster on this machine, from the distribution's
// packages (mariadb-server, galera-4, mariadb-backup), to run Orbit against (issue 22). Everything
// lives under <repo>/.local/galera/ (or --dir): node1, node2, node3, each with its own data
// directory, my.cnf, ports, logs and pid file, all on 127.0.0.1. Nothing system-wide is touched:
// every node reads only its own my.cnf (--defaults-file), and the state-transfer scripts' scratch
// directories are inside the node's directory too.
//
//   npm run galera                 start (or say it is already running) and print ORBIT_DATABASE_URL
//   npm run galera -- stop         clean shutdown of the three, node3 first and node1 last
//   npm run galera -- status       each node's state; exit code 0 when all three are Synced
//
//   --dir=PATH          where the nodes live (default .local/galera)
//   --port=N            node1's client port (default 33061; node2 and node3 the next two)
//   --galera-port=N     node1's group-communication port (default 4567; node2 N+10, node3 N+20),
//                       each node's IST port one above its own
//   --sst-port=N        node1's state-transfer port (default 4444; node2 N+10, node3 N+20)
//
// The ports are kept in <dir>/cluster.json: a later start, stop or status uses them without the flags.
//
// How it starts (docs/scale-out.md#galera-cluster): node1 bootstraps the cluster
// (--wsrep-new-cluster), then node2 and node3 join one after the other, each awaited until it is
// Synced in a Primary component of the expected size. The first start initialises node1 with
// mariadb-install-db, bootstraps it once to create the cluster's state (and the state-transfer
// account), stops it cleanly and seeds node2 and node3 with copies of that data directory, so
// they join by IST (the few write-sets since) instead of a full state transfer. A node that
// crashed starts at the position InnoDB recovers (mariadbd --wsrep-recover, then
// --wsrep-start-position), so it too needs only what it missed while the donor's gcache holds
// it; after a crash of all three, the most advanced node bootstraps. A node with no data, or too
// far behind, gets a full state transfer (SST) from a donor: by mariabackup
// (wsrep_sst_mariabackup), which works when the nodes run as root. rsync SST does not: the
// joiner's rsync daemon, started as root, switches to the user "nobody" (rsyncd.conf's default
// uid), which may not write the data directory. `stop` stops node3, node2, node1 in that order,
// so that node1 is the last to leave and may bootstrap the next start.
//
// What Orbit does differently on a cluster (statements, failover, causal reads, the migration lock)
// is in docs/scale-out.md; test/integration/galera-cluster.test.ts runs Orbit on one.

import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import mysql from 'mysql2/promise';
import {
  displayPath,
  fileSize,
  findExecutable,
  findServerBinaries,
  initialiseDatadir,
  isAlive,
  portIsFree,
  readFrom,
  readPid,
  runningAsRoot,
  runsWithArgument,
  socketPathIn,
  spawnServer,
  tail,
  withLock,
} from './local-db.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const DEFAULT_DIR = path.join(ROOT, '.local', 'galera');
export const DEFAULT_PORTS = Object.freeze({ client: 33061, galera: 4567, sst: 4444 });
export const NODE_COUNT = 3;
/** How far apart two nodes' group-communication (and IST) ports, and their SST ports, are. */
const NODE_PORT_STEP = 10;
const CLUSTER_NAME = 'orbit-galera';
const SST_USER = 'orbit_sst';
/** The longest a node may take to become Synced: a mariabackup SST alone takes more than 10 s. */
const START_TIMEOUT_MS = 180_000;
const STOP_TIMEOUT_MS = 60_000;
const RECOVER_TIMEOUT_MS = 120_000;
const POLL_MS = 100;
const GALERA_PROVIDERS = [
  '/usr/lib/galera/libgalera_smm.so',
  '/usr/lib/galera-4/libgalera_smm.so',
  '/usr/lib64/galera-4/libgalera_smm.so',
  '/usr/lib64/galera/libgalera_smm.so',
];

// ---------------------------------------------------------------------------
// What a cluster needs, and where it lives

/**
 * Whether this machine can run the cluster: MariaDB's server and install-db, the Galera provider,
 * mariadb-backup (the state-transfer method) with its SST script, and socat (its streamer).
 * @returns {{ok: true, bins: {server: string, installDb: string, provider: string}} | {ok: false, reason: string}}
 */
export function galeraRequirements() {
  const bins = findServerBinaries();
  if (!bins || !/mariadbd$/.test(bins.server)) return { ok: false, reason: 'no MariaDB server (mariadbd, mariadb-install-db): apt-get install mariadb-server' };
  const provider = GALERA_PROVIDERS.find((file) => fs.existsSync(file));
  if (!provider) return { ok: false, reason: 'no Galera provider (libgalera_smm.so): apt-get install galera-4' };
  const missing = [
    ['mariadb-backup', ['mariadb-backup', 'mariabackup'], 'mariadb-backup'],
    ['wsrep_sst_mariabackup', ['wsrep_sst_mariabackup'], 'mariadb-server'],
    ['socat', ['socat'], 'socat'],
  ].filter(([, names]) => !findExecutable(names));
  if (missing.length > 0) {
    const names = missing.map(([name]) => name).join(', ');
    return {
      ok: false,
      reason: `${names} not found (the mariabackup state transfer needs it): apt-get install ${[...new Set(missing.map(([, , pkg]) => pkg))].join(' ')}`,
    };
  }
  return { ok: true, bins: { ...bins, provider } };
}

/** A node's ports (index 0 for node1) in a cluster whose first node has `ports`. */
export function nodePorts(ports, index) {
  const galera = ports.galera + NODE_PORT_STEP * index;
  return { client: ports.client + index, galera, ist: galera + 1, sst: ports.sst + NODE_PORT_STEP * index };
}

/** Every port of a cluster: three nodes' client, group-communication, IST and SST ports. */
export function clusterPorts(ports) {
  return Array.from({ length: NODE_COUNT }, (_, i) => Object.values(nodePorts(ports, i))).flat();
}

function checkPorts(ports) {
  for (const [name, value] of Object.entries(ports)) {
    if (!Number.isInteger(value) || value < 1) throw new Error(`the ${name} port must be a positive integer, got ${value}`);
  }
  const all = clusterPorts(ports);
  if (all.some((p) => p > 65535)) throw new Error(`the cluster's ports must be at most 65535 (${all.join(', ')})`);
  if (new Set(all).size !== all.length) {
    throw new Error(
      `the cluster's ports overlap (${all.join(', ')}): node i uses client+i, galera+${NODE_PORT_STEP}i and the port above it, sst+${NODE_PORT_STEP}i`,
    );
  }
  return ports;
}

/**
 * Ports for a cluster of its own (a test's) on which nothing listens now: first ports at
 * `spacing` apart from a random start in [from, to), the three bases 10, 30 and 60 apart.
 */
export async function freeClusterPorts({ from = 20_000, to = 32_000, spacing = 100 } = {}) {
  const slots = Math.floor((to - from) / spacing);
  const first = crypto.randomInt(slots);
  for (let i = 0; i < slots; i++) {
    const base = from + ((first + i) % slots) * spacing;
    const ports = { client: base, galera: base + 10, sst: base + 60 };
    const free = await Promise.all(clusterPorts(ports).map((p) => portIsFree(p)));
    if (free.every(Boolean)) return ports;
  }
  throw new Error(`no free ports for a Galera cluster between ${from} and ${to}`);
}

function clusterPaths(dir) {
  const abs = path.resolve(dir);
  return {
    dir: abs,
    rel: displayPath(abs),
    clusterFile: path.join(abs, 'cluster.json'),
    lock: path.join(abs, 'lock'),
    nodes: Array.from({ length: NODE_COUNT }, (_, i) => nodePaths(abs, i)),
  };
}

function nodePaths(dir, index) {
  const nodeDir = path.join(dir, `node${index + 1}`);
  return {
    index,
    name: `node${index + 1}`,
    dir: nodeDir,
    rel: displayPath(nodeDir),
    data: path.join(nodeDir, 'data'),
    dataPartial: path.join(nodeDir, 'data.partial'),
    cnf: path.join(nodeDir, 'my.cnf'),
    pidFile: path.join(nodeDir, 'mariadb.pid'),
    socket: socketPathIn(nodeDir),
    errorLog: path.join(nodeDir, 'error.log'),
    serverLog: path.join(nodeDir, 'server.log'),
    installLog: path.join(nodeDir, 'install.log'),
    recoverLog: path.join(nodeDir, 'recover.log'),
    tmp: path.join(nodeDir, 'tmp'),
  };
}

/** The cluster's settings: its ports and the state-transfer account's password, kept in cluster.json. */
function readSettings(paths) {
  try {
    return JSON.parse(fs.readFileSync(paths.clusterFile, 'utf8'));
  } catch (err) {
    if (err.code === 'ENOENT') return null;
    throw new Error(`${displayPath(paths.clusterFile)} is not readable JSON (${err.message}); delete it to start again with the default ports`);
  }
}

function writeSettings(paths, settings) {
  fs.writeFileSync(paths.clusterFile, `${JSON.stringify(settings, null, 2)}\n`, { mode: 0o600 });
}

// ---------------------------------------------------------------------------
// Nodes

/** The pid of the node's running server, or null (no pid file, or a stale one). */
function runningPid(node) {
  const pid = readPid(node.pidFile);
  return pid && runsWithArgument(pid, `--defaults-file=${node.cnf}`) ? pid : null;
}

/** The node's my.cnf: all it reads (mariadbd gets --defaults-file first, so no system file is read). */
function nodeConfig(node, settings, provider) {
  const ports = nodePorts(settings.ports, node.index);
  const members = Array.from({ length: NODE_COUNT }, (_, i) => `127.0.0.1:${nodePorts(settings.ports, i).galera}`);
  const lines = [
    '# Written by scripts/galera.mjs each time this node starts; change the script, not this file.',
    '[mysqld]',
    `datadir=${node.data}`,
    `socket=${node.socket}`,
    `port=${ports.client}`,
    'bind-address=127.0.0.1',
    `pid-file=${node.pidFile}`,
    `log-error=${node.errorLog}`,
    `tmpdir=${node.tmp}`, // also the SST scripts' scratch directories on the donor
    'skip-name-resolve',
    ...(runningAsRoot() ? ['user=root'] : []), // mariadbd refuses to run as root otherwise
    // A dev/test box's settings, as for the private MariaDB of scripts/local-db.mjs: never production's.
    'innodb-buffer-pool-size=128M',
    'innodb-flush-log-at-trx-commit=2',
    'max-connections=500',
    'character-set-server=utf8mb4',
    'collation-server=utf8mb4_unicode_ci',
    // What Galera requires.
    'binlog_format=ROW',
    'default_storage_engine=InnoDB',
    'innodb_autoinc_lock_mode=2',
    'wsrep_on=ON',
    `wsrep_provider=${provider}`,
    `wsrep_cluster_name=${CLUSTER_NAME}`,
    `wsrep_cluster_address=gcomm://${members.join(',')}`,
    `wsrep_node_name=${node.name}`,
    `wsrep_node_address=127.0.0.1:${ports.galera}`,
    `wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:${ports.galera};ist.recv_addr=127.0.0.1:${ports.ist};gcache.size=64M"`,
    `wsrep_sst_receive_address=127.0.0.1:${ports.sst}`,
    'wsrep_sst_method=mariabackup',
    `wsrep_sst_auth=${SST_USER}:${settings.sstPassword}`,
    '',
    '[sst]',
    'sockopt=bind=127.0.0.1', // socat: the joiner listens for the SST on 127.0.0.1 only
    '',
  ];
  return lines.join('\n');
}

function writeNodeConfig(node, settings, provider) {
  fs.mkdirSync(node.dir, { recursive: true, mode: 0o700 });
  fs.mkdirSync(node.tmp, { recursive: true, mode: 0o700 });
  // 0600: it holds the SST account's password, and mariadbd ignores a world-writable option file.
  fs.writeFileSync(node.cnf, nodeConfig(node, settings, provider), { mode: 0o600 });
  fs.chmodSync(node.cnf, 0o600);
}

/**
 * Starts the node's mariadbd in the background; `bootstrap` starts a new cluster with it, and
 * `position` (uuid:seqno) is where it is when its grastate.dat does not say (after a crash).
 */
function spawnNode(node, bins, { bootstrap, position }) {
  // An empty data directory is fine for a joiner: the SST fills it.
  fs.mkdirSync(node.data, { recursive: true, mode: 0o700 });
  const args = [`--defaults-file=${node.cnf}`, ...(bootstrap ? ['--wsrep-new-cluster'] : []), ...(position ? [`--wsrep-start-position=${position}`] : [])];
  // TMPDIR: the joiner's SST script makes its scratch directory there (mktemp -d).
  const { child, logOffsets } = spawnServer({
    server: bins.server,
    args,
    dir: node.dir,
    serverLog: node.serverLog,
    errorLog: node.errorLog,
    env: { ...process.env, TMPDIR: node.tmp },
  });
  // mariadbd writes the same pid there once it runs; written now, a status or stop sees it at once.
  if (child.pid) fs.writeFileSync(node.pidFile, `${child.pid}\n`);
  return { child, logOffsets };
}

/** The node's wsrep status over its unix socket, or why it does not answer. */
async function queryNode(node) {
  let connection;
  try {
    connection = await mysql.createConnection({ socketPath: node.socket, user: 'root', connectTimeout: 2000 });
    const [rows] = await connection.query("SHOW GLOBAL STATUS LIKE 'wsrep%'");
    const status = Object.fromEntries(rows.map((row) => [row.Variable_name, row.Value]));
    return {
      answering: true,
      state: status.wsrep_local_state_comment,
      size: Number(status.wsrep_cluster_size),
      component: status.wsrep_cluster_status,
      ready: status.wsrep_ready === 'ON',
    };
  } catch (err) {
    return { answering: false, reason: err.code ?? err.message };
  } finally {
    await connection?.end().catch(() => {});
  }
}

function describeState(s) {
  return s.answering ? `${s.state}, ${s.component}, cluster size ${s.size}${s.ready ? '' : ', not ready'}` : `not answering (${s.reason})`;
}

/**
 * Waits until the node is Synced, ready, in a Primary component of at least `size` nodes. `child`
 * (when we started it) or its pid file tells whether it is still alive.
 */
async function waitForNode(node, { size, child = null, logOffsets = null, deadline }) {
  let last = 'not started';
  for (;;) {
    if (child ? child.exitInfo : !runningPid(node)) {
      const why = child ? child.exitInfo : 'it is not running';
      throw new Error(`${node.name} stopped before it was Synced (${why}).\n${startupLogs(node, logOffsets)}`);
    }
    const s = await queryNode(node);
    if (s.answering && s.state === 'Synced' && s.component === 'Primary' && s.ready && s.size >= size) return s;
    last = describeState(s);
    if (Date.now() > deadline) {
      throw new Error(`${node.name} was not Synced in a cluster of ${size} in time (last: ${last}).\n${startupLogs(node, logOffsets)}`);
    }
    await sleep(POLL_MS);
  }
}

function startupLogs(node, offsets) {
  const errors = readFrom(node.errorLog, offsets?.error ?? 0).trim();
  const server = readFrom(node.serverLog, offsets?.server ?? 0).trim();
  const parts = [`${path.join(node.rel, 'error.log')}:\n${errors ? tail(errors, 25) : '(empty)'}`];
  if (server) parts.push(`${path.join(node.rel, 'server.log')}:\n${tail(server, 10)}`);
  return parts.join('\n');
}

async function checkNodePortsFree(node, settings) {
  const ports = nodePorts(settings.ports, node.index);
  for (const [what, port] of Object.entries(ports)) {
    if (!(await portIsFree(port))) {
      throw new Error(
        `${node.name}'s ${what} port 127.0.0.1:${port} is in use; start the cluster on other ports (--port, --galera-port, --sst-port; npm run galera -- stop first if it is running)`,
      );
    }
  }
}

/**
 * Starts the node, joining (or with `bootstrap`, creating) the cluster, and waits until it is
 * Synced. A node that crashed starts at the position InnoDB recovers (`positions` holds those
 * recovered already), so that it needs only the writes it missed (IST) when the donor still has them.
 */
async function startNode(node, { settings, bins, bootstrap, size, deadline, log, positions = new Map() }) {
  await checkNodePortsFree(node, settings);
  writeNodeConfig(node, settings, bins.provider);
  const state = readGrastate(node);
  if (state?.uuid && state.seqno < 0 && !positions.has(node.name)) positions.set(node.name, await recoverPosition(node, bins, log));
  const position = positions.get(node.name);
  const ports = nodePorts(settings.ports, node.index);
  const at = position ? ` at its recovered position ${position.uuid}:${position.seqno}` : '';
  log(`orbit: ${bootstrap ? 'bootstrapping the cluster with' : 'starting'} ${node.name} on 127.0.0.1:${ports.client}${at} (${node.rel})`);
  const { child, logOffsets } = spawnNode(node, bins, { bootstrap, position: position && `${position.uuid}:${position.seqno}` });
  try {
    await waitForNode(node, { size, child, logOffsets, deadline });
  } finally {
    child.removeAllListeners();
  }
}

/**
 * root@127.0.0.1 with no password (the account Orbit's URL names; under skip-name-resolve a TCP
 * login matches accounts by IP only) and the state-transfer account mariabackup logs in with on
 * a donor. Run on the bootstrapped node; Galera replicates the statements to every node. Only
 * what is missing is written: a statement replicated needlessly would put the position of the
 * nodes about to join behind the cluster's.
 */
async function setUpAccounts(node, settings) {
  const connection = await mysql.createConnection({ socketPath: node.socket, user: 'root' });
  try {
    const [[present]] = await connection.query(
      `SELECT EXISTS(SELECT 1 FROM mysql.user WHERE user = 'root' AND host = '127.0.0.1') AS root_ok,
              EXISTS(SELECT 1 FROM mysql.user WHERE user = ? AND host = 'localhost' AND authentication_string = PASSWORD(?)
                       AND Reload_priv = 'Y' AND Process_priv = 'Y' AND Lock_tables_priv = 'Y') AS sst_ok`,
      [SST_USER, settings.sstPassword],
    );
    const statements = [];
    if (!present.root_ok) {
      statements.push("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''", "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION");
    }
    if (!present.sst_ok) {
      const account = `'${SST_USER}'@'localhost'`;
      statements.push(
        `CREATE OR REPLACE USER ${account} IDENTIFIED BY '${settings.sstPassword}'`,
        `GRANT RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR ON *.* TO ${account}`,
      );
    }
    for (const statement of statements) await connection.query(statement);
  } finally {
    await connection.end();
  }
}

/** SIGTERM (a clean shutdown) and wait until it is gone. */
async function stopNode(node, pid, deadline) {
  process.kill(pid, 'SIGTERM');
  while (isAlive(pid)) {
    if (Date.now() > deadline) throw new Error(`${node.name} (pid ${pid}) did not stop in time; see ${path.join(node.rel, 'error.log')}`);
    await sleep(POLL_MS);
  }
  fs.rmSync(node.pidFile, { force: true });
}

// ---------------------------------------------------------------------------
// Galera's saved state (grastate.dat) and which node bootstraps

function readGrastate(node) {
  let text;
  try {
    text = fs.readFileSync(path.join(node.data, 'grastate.dat'), 'utf8');
  } catch {
    return null;
  }
  const field = (name) => text.match(new RegExp(`^${name}:\\s*(\\S+)`, 'm'))?.[1];
  return { uuid: field('uuid') ?? null, seqno: Number(field('seqno') ?? -1), safeToBootstrap: field('safe_to_bootstrap') === '1' };
}

function setSafeToBootstrap(node, value) {
  const file = path.join(node.data, 'grastate.dat');
  const text = fs.readFileSync(file, 'utf8');
  fs.writeFileSync(file, text.replace(/^safe_to_bootstrap:.*$/m, `safe_to_bootstrap: ${value ? 1 : 0}`));
}

/**
 * After a crash grastate.dat says seqno -1: the position InnoDB recovers (mariadbd
 * --wsrep-recover, what the packages' galera_recovery does before a systemd start), or null.
 */
async function recoverPosition(node, bins, log) {
  log(`orbit: ${node.name} did not stop cleanly; recovering its position (mariadbd --wsrep-recover)`);
  const offset = fileSize(node.recoverLog);
  const child = spawn(bins.server, [`--defaults-file=${node.cnf}`, '--wsrep-recover', `--log-error=${node.recoverLog}`], { stdio: 'ignore', cwd: node.dir });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`mariadbd --wsrep-recover of ${node.name} did not finish within ${RECOVER_TIMEOUT_MS / 1000}s`));
    }, RECOVER_TIMEOUT_MS);
    child.on('error', reject);
    child.on('exit', () => {
      clearTimeout(timer);
      resolve();
    });
  });
  const found = readFrom(node.recoverLog, offset).match(/WSREP: Recovered position: ([0-9a-f-]{36}):(-?\d+)/);
  return found && Number(found[2]) >= 0 && !/^[0-]+$/.test(found[1]) ? { uuid: found[1], seqno: Number(found[2]) } : null;
}

/**
 * The node to bootstrap when none is running: the one Galera marked safe_to_bootstrap (the last to
 * leave cleanly; node1 after `stop`), else the most advanced one (after a crash, by the position
 * InnoDB recovers, kept in `positions` for the start), which is then marked safe to bootstrap.
 */
async function chooseBootstrapNode(paths, settings, bins, log, positions) {
  const states = paths.nodes.map((node) => ({ node, state: readGrastate(node) })).filter(({ state }) => state?.uuid);
  const safe = states.find(({ state }) => state.safeToBootstrap);
  if (safe) return safe.node;
  if (states.length === 0) return paths.nodes[0];
  for (const entry of states) {
    if (entry.state.seqno < 0) {
      writeNodeConfig(entry.node, settings, bins.provider);
      const position = await recoverPosition(entry.node, bins, log);
      positions.set(entry.node.name, position);
      entry.state.seqno = position?.seqno ?? -1;
    }
  }
  const best = states.reduce((a, b) => (b.state.seqno > a.state.seqno ? b : a));
  log(`orbit: no node was the last to leave the cluster cleanly; bootstrapping ${best.node.name}, the most advanced (seqno ${best.state.seqno})`);
  setSafeToBootstrap(best.node, true);
  return best.node;
}

/**
 * The first start: node1 initialised and bootstrapped once (the cluster's state and accounts),
 * stopped cleanly, and its data directory copied to the other nodes that have none, so that they
 * join by IST, not SST (a mariabackup SST takes over 10 s: its donor script sleeps 10 s first).
 */
async function createCluster(paths, settings, bins, deadline, log) {
  const [first, ...others] = paths.nodes;
  fs.mkdirSync(first.dir, { recursive: true, mode: 0o700 });
  await initialiseDatadir(first, bins, log);
  await startNode(first, { settings, bins, bootstrap: true, size: 1, deadline, log });
  await setUpAccounts(first, settings);
  const pid = runningPid(first);
  if (pid) await stopNode(first, pid, Date.now() + STOP_TIMEOUT_MS);
  for (const node of others) {
    if (fs.existsSync(node.data)) continue;
    log(`orbit: seeding ${node.name} with a copy of ${first.name}'s data directory`);
    fs.rmSync(node.dataPartial, { recursive: true, force: true });
    fs.mkdirSync(node.dir, { recursive: true, mode: 0o700 });
    // Not gvwstate.dat (node1's own view of the cluster) nor node1's write-set cache.
    fs.cpSync(first.data, node.dataPartial, { recursive: true, filter: (file) => !['gvwstate.dat', 'galera.cache'].includes(path.basename(file)) });
    fs.renameSync(node.dataPartial, node.data);
    setSafeToBootstrap(node, false);
  }
}

// ---------------------------------------------------------------------------
// The cluster

function nodeSummary(node, settings, s) {
  const port = nodePorts(settings.ports, node.index).client;
  return {
    name: node.name,
    port,
    url: `mysql://root@127.0.0.1:${port}`,
    pid: runningPid(node),
    ...(s ? { state: s.state, size: s.size, component: s.component } : {}),
  };
}

/**
 * Starts the cluster under `dir` (or finds it running), and returns once all three nodes are
 * Synced in one Primary component. A node that is not running is started: node1 (or whichever
 * node may bootstrap) first when none is, then the others join one after the other.
 * @returns {Promise<{dir: string, alreadyRunning: boolean, url: string, nodes: {name: string, port: number, url: string, pid: number}[]}>}
 *   url: node1's, without a database name, e.g. mysql://root@127.0.0.1:33061
 */
export async function startCluster({ dir = DEFAULT_DIR, ports, log = console.error, timeoutMs = START_TIMEOUT_MS } = {}) {
  const requirements = galeraRequirements();
  if (!requirements.ok) throw new Error(`cannot start a Galera cluster: ${requirements.reason}`);
  const { bins } = requirements;
  const paths = clusterPaths(dir);
  fs.mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  return underClusterLock(paths, log, async () => {
    const deadline = Date.now() + timeoutMs;
    const stored = readSettings(paths);
    const running = paths.nodes.filter((node) => runningPid(node));
    if (running.length > 0 && ports && stored && clusterPorts(checkPorts({ ...stored.ports, ...ports })).join() !== clusterPorts(stored.ports).join()) {
      throw new Error(`the cluster under ${paths.rel} is running on other ports (${JSON.stringify(stored.ports)}); stop it first to change them`);
    }
    const settings = {
      ports: checkPorts({ ...DEFAULT_PORTS, ...stored?.ports, ...(running.length === 0 ? ports : {}) }),
      sstPassword: stored?.sstPassword ?? crypto.randomBytes(18).toString('base64url'),
    };
    writeSettings(paths, settings);

    const alreadyRunning = running.length === NODE_COUNT;
    const positions = new Map();
    if (running.length === 0) {
      if (!fs.existsSync(paths.nodes[0].data)) await createCluster(paths, settings, bins, deadline, log);
      const first = await chooseBootstrapNode(paths, settings, bins, log, positions);
      await startNode(first, { settings, bins, bootstrap: true, size: 1, deadline, log, positions });
      await setUpAccounts(first, settings);
    }
    for (const node of paths.nodes) {
      const alive = paths.nodes.filter((n) => runningPid(n)).length;
      if (runningPid(node)) await waitForNode(node, { size: 1, deadline });
      else await startNode(node, { settings, bins, bootstrap: false, size: alive + 1, deadline, log, positions });
    }
    const states = [];
    for (const node of paths.nodes) states.push(await waitForNode(node, { size: NODE_COUNT, deadline }));
    const nodes = paths.nodes.map((node, i) => nodeSummary(node, settings, states[i]));
    return { dir: paths.dir, alreadyRunning, url: nodes[0].url, nodes };
  });
}

/** `fn` while this process holds the cluster's lock (one start, stop or join at a time). */
function underClusterLock(paths, log, fn) {
  return withLock(paths.lock, log, fn, `the Galera cluster under ${paths.rel}`);
}

/** Node `number` (1 to NODE_COUNT) of the cluster at `paths`. */
function nodeOf(paths, number) {
  const node = paths.nodes[number - 1];
  if (!node) throw new Error(`no node ${number}: a cluster has nodes 1 to ${NODE_COUNT}`);
  return node;
}

/**
 * Starts one node (1, 2 or 3) that is not running, to join the others (at least one must be
 * running), and waits until it is Synced - after a state transfer if it is behind.
 */
export async function startClusterNode({ dir = DEFAULT_DIR, node: number, log = () => {}, timeoutMs = START_TIMEOUT_MS }) {
  const requirements = galeraRequirements();
  if (!requirements.ok) throw new Error(`cannot start a Galera node: ${requirements.reason}`);
  const paths = clusterPaths(dir);
  const node = nodeOf(paths, number);
  return underClusterLock(paths, log, async () => {
    const settings = readSettings(paths);
    if (!settings) throw new Error(`no cluster under ${paths.rel} (start it first)`);
    if (runningPid(node)) throw new Error(`${node.name} is running already`);
    const alive = paths.nodes.filter((n) => runningPid(n)).length;
    if (alive === 0) throw new Error(`no node of ${paths.rel} is running for ${node.name} to join (start the cluster instead)`);
    await startNode(node, { settings, bins: requirements.bins, bootstrap: false, size: alive + 1, deadline: Date.now() + timeoutMs, log });
    return nodeSummary(node, settings, await queryNode(node));
  });
}

/** The pid of node `number`'s server, or null when it is not running. */
export function clusterNodePid({ dir = DEFAULT_DIR, node: number }) {
  const node = clusterPaths(dir).nodes[number - 1];
  return node ? runningPid(node) : null;
}

/**
 * Stops every running node cleanly (SIGTERM; node3 first, node1 last, so node1 is the one safe
 * to bootstrap next), and removes the pid file of a node that is not running. The names stopped.
 */
export async function stopCluster({ dir = DEFAULT_DIR, log = () => {}, timeoutMs = STOP_TIMEOUT_MS } = {}) {
  const paths = clusterPaths(dir);
  if (!fs.existsSync(paths.dir)) return [];
  return underClusterLock(paths, log, async () => {
    const stopped = [];
    for (const node of [...paths.nodes].reverse()) {
      const pid = readPid(node.pidFile);
      if (!pid) continue;
      if (!runningPid(node)) {
        fs.rmSync(node.pidFile, { force: true });
        log(`orbit: ${node.name} is not running (removed its stale pid file, pid ${pid})`);
        continue;
      }
      log(`orbit: stopping ${node.name} (pid ${pid})`);
      await stopNode(node, pid, Date.now() + timeoutMs);
      stopped.push(node.name);
    }
    return stopped;
  });
}

/** Stops node `number` (1, 2 or 3) cleanly: it leaves the cluster at once. False when it was not running. */
export async function stopClusterNode({ dir = DEFAULT_DIR, node: number, log = () => {}, timeoutMs = STOP_TIMEOUT_MS }) {
  const paths = clusterPaths(dir);
  const node = nodeOf(paths, number);
  return underClusterLock(paths, log, async () => {
    const pid = runningPid(node);
    if (!pid) return false;
    log(`orbit: stopping ${node.name} (pid ${pid})`);
    await stopNode(node, pid, Date.now() + timeoutMs);
    return true;
  });
}

/** Each node's pid and wsrep state, as far as it answers. */
export async function clusterStatus({ dir = DEFAULT_DIR } = {}) {
  const paths = clusterPaths(dir);
  const settings = readSettings(paths);
  if (!settings) return { dir: paths.dir, exists: false, nodes: [] };
  const nodes = [];
  for (const node of paths.nodes) {
    const pid = runningPid(node);
    const s = pid ? await queryNode(node) : null;
    nodes.push({ ...nodeSummary(node, settings, s?.answering ? s : null), running: Boolean(pid), answer: s ? describeState(s) : 'not running' });
  }
  return { dir: paths.dir, exists: true, nodes };
}

// ---------------------------------------------------------------------------
// CLI

function parseArgs(argv) {
  const options = {};
  const ports = {};
  let command = 'start';
  const flags = { '--port': 'client', '--galera-port': 'galera', '--sst-port': 'sst' };
  for (const arg of argv) {
    const [flag, value] = arg.split(/=(.*)/s);
    if (flag === '--dir' && value) options.dir = path.resolve(process.env.INIT_CWD || process.cwd(), value);
    else if (flags[flag] && value) ports[flags[flag]] = Number(value);
    else if (!arg.startsWith('-') && ['start', 'stop', 'status'].includes(arg)) command = arg;
    else throw new Error(`unknown argument ${JSON.stringify(arg)}`);
  }
  if (Object.keys(ports).length > 0) options.ports = ports;
  return { command, options };
}

if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) {
  const usage = 'usage: npm run galera -- [start|stop|status] [--dir=PATH] [--port=33061] [--galera-port=4567] [--sst-port=4444]';
  try {
    const { command, options } = parseArgs(process.argv.slice(2));
    if (command === 'start') {
      const started = Date.now();
      const cluster = await startCluster(options);
      const where = displayPath(cluster.dir);
      const members = cluster.nodes.map((n) => `${n.name} 127.0.0.1:${n.port}`).join(', ');
      console.error(
        cluster.alreadyRunning
          ? `orbit: the Galera cluster under ${where} is already running: ${members}, all Synced`
          : `orbit: the Galera cluster under ${where} is up in ${((Date.now() - started) / 1000).toFixed(1)}s: ${members}, all Synced`,
      );
      // Every node, the same first for every server: it writes through node1, the others stand by.
      const hosts = cluster.nodes.map((node) => new URL(node.url).host).join(',');
      console.error('orbit: point Orbit at the cluster (the database is created by the migrations; docs/scale-out.md):');
      console.log(`export ORBIT_DATABASE_URL=mysql://root@${hosts}/orbit`);
      console.error(`orbit: stop it with: npm run galera -- stop${options.dir ? ` --dir=${where}` : ''}`);
    } else if (command === 'stop') {
      const stopped = await stopCluster({ ...options, log: console.error });
      console.error(stopped.length > 0 ? `orbit: stopped ${stopped.join(', ')}` : 'orbit: no node of the Galera cluster is running');
    } else {
      const status = await clusterStatus(options);
      if (!status.exists) {
        console.error(`orbit: no Galera cluster under ${displayPath(status.dir)} (npm run galera starts one)`);
        process.exitCode = 1;
      } else {
        for (const n of status.nodes) console.log(`${n.name}  127.0.0.1:${n.port}  ${n.running ? `pid ${n.pid}  ${n.answer}` : 'not running'}`);
        const healthy = status.nodes.every((n) => n.state === 'Synced' && n.component === 'Primary' && n.size === NODE_COUNT);
        process.exitCode = healthy ? 0 : 1;
      }
    }
  } catch (err) {
    console.error(`orbit: ${err instanceof Error ? err.message : err}`);
    if (/unknown argument/.test(String(err?.message))) console.error(usage);
    process.exitCode = 1;
  }
}
