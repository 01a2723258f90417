/**
 * The three-node Galera cluster of `npm run galera` (scripts/galera.mjs, issue 22), started through
 * the script's own functions under a temporary directory and on free ports of its own, so a
 * cluster the user runs is never touched: the three nodes are Synced in one Primary component, a
 * row written through node 1 is read through node 3, a SIGKILLed node 2 leaves the other two
 * Primary and comes back with what it missed (IST from its recovered position), a node 3 that lost
 * its data directory comes back by a full state transfer (SST by mariabackup, the method the
 * script uses), and the cluster stops cleanly. Orbit itself is not run here (and so there is no
 * counter recount): whether Orbit is correct on Galera is the next part of issue 22.
 *
 * Skipped, with the reason, where the packages are missing (mariadb-server, galera-4,
 * mariadb-backup). Every wait is for a condition: a node's wsrep status, a process gone.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { waitFor } from '../helpers/wait.ts';
import {
  clusterNodePid,
  freeClusterPorts,
  galeraRequirements,
  startCluster,
  startClusterNode,
  stopCluster,
  stopClusterNode,
  // @ts-expect-error - a plain ES module of the repository's scripts, no type declarations
} from '../../scripts/galera.mjs';

interface WsrepStatus {
  state: string;
  size: number;
  component: string;
}

const requirements = galeraRequirements();
const skip = requirements.ok ? false : `no Galera cluster on this machine: ${requirements.reason}`;

describe('a three-node Galera cluster (npm run galera)', { skip }, () => {
  let dir: string;
  let nodeUrls: string[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'orbit-galera-'));
    const cluster = await startCluster({ dir, ports: await freeClusterPorts(), log: () => {} });
    nodeUrls = cluster.nodes.map((node: { url: string }) => node.url);
  });
  after(async () => {
    if (!dir) return;
    try {
      await stopCluster({ dir });
    } finally {
      // A node a failed test left in a state it does not stop from: never leave it running.
      for (const node of [1, 2, 3]) {
        const pid = clusterNodePid({ dir, node });
        if (pid) process.kill(pid, 'SIGKILL');
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });

  async function onNode<T>(node: number, fn: (connection: mysql.Connection) => Promise<T>): Promise<T> {
    const connection = await mysql.createConnection(`${nodeUrls[node - 1]}`);
    try {
      return await fn(connection);
    } finally {
      await connection.end();
    }
  }

  async function wsrepStatus(node: number): Promise<WsrepStatus> {
    return onNode(node, async (connection) => {
      const [rows] = await connection.query<mysql.RowDataPacket[]>("SHOW STATUS LIKE 'wsrep%'");
      const status = Object.fromEntries(rows.map((row) => [row.Variable_name, row.Value]));
      return { state: status.wsrep_local_state_comment, size: Number(status.wsrep_cluster_size), component: status.wsrep_cluster_status };
    });
  }

  /** Waits until every one of `nodes` is Synced in a Primary component of `size`. */
  async function waitForMembers(nodes: number[], size: number): Promise<void> {
    await waitFor(async () => {
      for (const node of nodes) {
        const s = await wsrepStatus(node);
        if (s.state !== 'Synced' || s.component !== 'Primary' || s.size !== size) return false;
      }
      return true;
    });
  }

  /** A causal read: wsrep_sync_wait makes the node apply every write-set committed before it first. */
  async function notesOn(node: number): Promise<string[]> {
    return onNode(node, async (connection) => {
      await connection.query('SET SESSION wsrep_sync_wait = 1');
      const [rows] = await connection.query<mysql.RowDataPacket[]>('SELECT note FROM galera_check.notes ORDER BY id');
      return rows.map((row) => row.note as string);
    });
  }

  async function addNote(node: number, id: number, note: string): Promise<void> {
    await onNode(node, (connection) => connection.query('INSERT INTO galera_check.notes (id, note) VALUES (?, ?)', [id, note]));
  }

  function logSince(node: number, offset: number): string {
    return readFileSync(join(dir, `node${node}`, 'error.log'), 'utf8').slice(offset);
  }

  function logSize(node: number): number {
    return statSync(join(dir, `node${node}`, 'error.log')).size;
  }

  test('three nodes, each Synced in one Primary component of size 3', async () => {
    for (const node of [1, 2, 3]) {
      assert.deepEqual(await wsrepStatus(node), { state: 'Synced', size: 3, component: 'Primary' }, `node ${node}`);
    }
  });

  test('a row written through node 1 is read through node 3', async () => {
    await onNode(1, async (connection) => {
      await connection.query('CREATE DATABASE galera_check');
      await connection.query('CREATE TABLE galera_check.notes (id INT PRIMARY KEY, note VARCHAR(40) NOT NULL) ENGINE=InnoDB');
    });
    await addNote(1, 1, 'written through node 1');
    assert.deepEqual(await notesOn(3), ['written through node 1']);
  });

  test('node 2 SIGKILLed: nodes 1 and 3 stay Primary; restarted, node 2 catches up by IST from its recovered position', async () => {
    const pid = clusterNodePid({ dir, node: 2 });
    assert.ok(pid, 'node 2 runs');
    process.kill(pid, 'SIGKILL');
    await waitFor(async () => clusterNodePid({ dir, node: 2 }) === null);
    await waitForMembers([1, 3], 2);
    await addNote(1, 2, 'written while node 2 was down');

    const offset = logSize(2);
    await startClusterNode({ dir, node: 2 });
    await waitForMembers([1, 2, 3], 3);
    const log = logSince(2, offset);
    assert.match(log, /WSREP: IST received/, 'node 2 received the write-sets it missed');
    assert.doesNotMatch(log, /SST completed on joiner/, 'no full state transfer');
    assert.deepEqual(await notesOn(2), ['written through node 1', 'written while node 2 was down']);
  });

  test('node 3 without its data directory comes back by SST (mariabackup)', async () => {
    assert.equal(await stopClusterNode({ dir, node: 3 }), true);
    await waitForMembers([1, 2], 2);
    rmSync(join(dir, 'node3', 'data'), { recursive: true });
    await addNote(2, 3, 'written through node 2');

    const offset = logSize(3);
    await startClusterNode({ dir, node: 3 });
    await waitForMembers([1, 2, 3], 3);
    assert.match(logSince(3, offset), /mariabackup SST completed on joiner/);
    assert.deepEqual(await notesOn(3), ['written through node 1', 'written while node 2 was down', 'written through node 2']);
  });

  test('stops cleanly: node 3, node 2, then node 1, which may bootstrap the next start', async () => {
    assert.deepEqual(await stopCluster({ dir }), ['node3', 'node2', 'node1']);
    for (const node of [1, 2, 3]) {
      assert.equal(clusterNodePid({ dir, node }), null, `node ${node} is gone`);
      assert.equal(existsSync(join(dir, `node${node}`, 'mariadb.pid')), false, `node ${node} has no pid file`);
      const state = readFileSync(join(dir, `node${node}`, 'data', 'grastate.dat'), 'utf8');
      assert.match(state, /^seqno:\s+\d+$/m, `node ${node} saved its position (a clean shutdown)`);
      assert.match(state, new RegExp(`^safe_to_bootstrap: ${node === 1 ? 1 : 0}$`, 'm'), `node ${node}`);
    }
  });
});
