/**
 * A subscription consumer (the SDK's `subscribe` loop, in its own process) reading task
 * lifecycle events while tasks run through two server processes; midway the consumer and the
 * server it reads from are SIGKILLed and restarted. At the end the consumer has seen every
 * lifecycle event of every task - exactly the ones the feed and the tasks table say - and the
 * only events it saw twice are after the position it had acknowledged when it was killed.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { OrbitWorker } from '../../sdk/worker.ts';

const CONSUMER = fileURLToPath(new URL('../helpers/subscription-consumer.ts', import.meta.url));
const TASK_TYPES = [
  'task.submitted',
  'task.started',
  'task.retry_scheduled',
  'task.succeeded',
  'task.failed',
  'task.needs_review',
  'task.cancelled',
  'task.expired',
  'task.resolved',
];

function startConsumer(url: string, token: string, out: string): { child: ChildProcess; exited: Promise<void> } {
  const child = spawn(process.execPath, ['--import', 'tsx', CONSUMER], {
    env: { ...process.env, ORBIT_URL: url, ORBIT_TOKEN: token, ORBIT_SUBSCRIPTION: 'lifecycle', ORBIT_CONSUMER_OUT: out },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return { child, exited: new Promise((resolve) => child.once('exit', () => resolve())) };
}

describe('a subscription consumer and a server killed midway', () => {
  let t: TestDatabase;
  let servers: ServerProcess[];
  let tenant: TestTenant;
  let dir: string;

  before(async () => {
    t = await freshDatabase('subscription_crash');
    tenant = await createTenant(t.db, { namespace: 'crash', queues: ['work'], resourceAccess: true });
    servers = await Promise.all([startServerProcess(t.url), startServerProcess(t.url)]);
    dir = mkdtempSync(join(tmpdir(), 'orbit-consumer-'));
  });
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await assertCountersMatchRecount(t.db);
    await t.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('every lifecycle event of every task is consumed; duplicates only after the last ack', async () => {
    const created = await call(servers[0]!.url, 'POST', '/v1/subscriptions', {
      token: tenant.token,
      key: 'lifecycle-sub',
      body: { name: 'lifecycle', reason: 'crash test', types: TASK_TYPES, from: 'beginning' },
    });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const subscriptionId: string = created.body.data.subscription.subscription_id;
    const out = join(dir, 'consumed.jsonl');
    let consumer = startConsumer(servers[0]!.url, tenant.token, out);

    let n = 0;
    const submitSome = (count: number, via: ServerProcess[] = servers) =>
      Promise.all(
        Array.from({ length: count }, () => {
          const i = n++;
          return call(via[i % via.length]!.url, 'POST', '/v1/queues/work/tasks', {
            token: tenant.token,
            key: `crash-${i}`,
            body: { payload: { i }, max_attempts: 5 },
          });
        }),
      );
    const worker = new OrbitWorker({
      baseUrl: servers[1]!.url,
      token: tenant.token,
      node_id: 'crash-worker',
      queues: ['work'],
      capacity: 8,
      maxPollIntervalMs: 50,
      handler: async (task) => {
        if ((task.payload.i as number) % 7 === 0 && task.attempt_number === 1) throw new Error('retry me once');
        return { ok: true };
      },
    });
    await worker.start();
    await submitSome(60);
    await waitFor(async () => (existsSync(out) && readFileSync(out, 'utf8').split('\n').length > 40 ? true : null), 60_000);

    // Kill the consumer mid-stream, and the server it reads from.
    consumer.child.kill('SIGKILL');
    await consumer.exited;
    await servers[0]!.kill();
    const position = BigInt((await call(servers[1]!.url, 'GET', `/v1/subscriptions/${subscriptionId}`, { token: tenant.token })).body.data.acked_sequence);
    const beforeRestart = readFileSync(out, 'utf8').trim().split('\n').length;
    await submitSome(60, [servers[1]!]); // work goes on through the surviving server
    servers[0] = await startServerProcess(t.url);
    consumer = startConsumer(servers[0]!.url, tenant.token, out);
    await submitSome(30);

    // Done when every task succeeded and the consumer has reached the feed's last task event.
    await waitFor(async () => {
      const rows = await t.db.rows<{ n: number }>("SELECT COUNT(*) AS n FROM orbit_tasks WHERE state <> 'SUCCEEDED'");
      return Number(rows[0]?.n) === 0 ? true : null;
    }, 60_000);
    await worker.stop();
    const feed: Array<{ sequence: string; type: string; subject: string }> = [];
    for (let after = '0'; ; ) {
      const page = (await call(servers[1]!.url, 'GET', `/v1/events?after=${after}&limit=100`, { token: tenant.token })).body.data;
      feed.push(...page.events.filter((e: { type: string }) => e.type.startsWith('task.')));
      after = page.next_after;
      if (page.events.length < 100) break;
    }
    const last = feed.at(-1)!.sequence;
    await waitFor(async () => (readFileSync(out, 'utf8').includes(`"sequence":"${last}"`) ? true : null), 60_000);
    consumer.child.kill('SIGTERM');
    await consumer.exited;

    const consumed = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { sequence: string; type: string; subject: string });
    assert.ok(beforeRestart > 0 && consumed.length > beforeRestart, 'it consumed before the kill and after the restart');
    const seen = new Map<string, number>();
    for (const e of consumed) seen.set(e.sequence, (seen.get(e.sequence) ?? 0) + 1);
    // Nothing missing: every task event of the feed was consumed, with its type and subject.
    const bySequence = new Map(consumed.map((e) => [e.sequence, e]));
    for (const e of feed) {
      assert.deepEqual(bySequence.get(e.sequence), { sequence: e.sequence, type: e.type, subject: e.subject }, `event ${e.sequence} (${e.type}) was consumed`);
    }
    assert.equal(seen.size, feed.length, 'nothing but the feed was consumed');
    // Duplicates only after the position acknowledged when it was killed.
    const twice = [...seen].filter(([, count]) => count > 1).map(([sequence]) => BigInt(sequence));
    for (const sequence of twice) assert.ok(sequence > position, `event ${sequence} came twice although ${position} was acknowledged`);
    // In order within each run: the consumer never went backwards except at the restart.
    const sequences = consumed.map((e) => BigInt(e.sequence));
    const backwards = sequences.filter((s, i) => i > 0 && s <= (sequences[i - 1] as bigint)).length;
    assert.ok(backwards <= 1, `${backwards} steps backwards`);

    // And the events are what the tasks table says: every task submitted, started as often as
    // it has attempts, and succeeded last.
    const tasks = await t.db.rows<{ task_id: Buffer; attempts: number }>('SELECT task_id, attempts FROM orbit_tasks');
    assert.equal(tasks.length, n);
    for (const task of tasks) {
      const id = task.task_id.toString('hex');
      const types = feed.filter((e) => e.subject === id).map((e) => e.type);
      assert.equal(types[0], 'task.submitted');
      assert.equal(types.filter((x) => x === 'task.started').length, task.attempts);
      assert.equal(types.at(-1), 'task.succeeded');
    }
  });
});
