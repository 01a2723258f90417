/**
 * BullMQ 5 on Redis (not durable here: the server keeps nothing on disk, see the machine line):
 * enqueue with 16 concurrent producers of single `Queue.add` calls, then drain with one
 * `Worker` of concurrency 16 and a no-op processor, defaults otherwise (completed jobs are kept).
 * Everything lives under a private key prefix, removed at the end.
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { Queue, Worker } from 'bullmq';
import { fmt } from '../common.ts';
import { cpuMeter } from './cpu.ts';
import { phase, pooled, printRow, RunLedger, waitUntil, type Result, type Workload } from './shared.ts';

const HOST = process.env.ORBIT_BENCH_REDIS_HOST ?? '127.0.0.1';
const PORT = Number(process.env.ORBIT_BENCH_REDIS_PORT ?? 6379);

/** The ioredis calls used here (BullMQ types its client more narrowly). */
interface RedisClient {
  info(section: string): Promise<string>;
  call(command: string, ...args: string[]): Promise<unknown>;
  scan(cursor: string, ...args: Array<string | number>): Promise<[string, string[]]>;
  del(...keys: string[]): Promise<number>;
}

async function clientOf(queue: Queue): Promise<RedisClient> {
  return (await queue.client) as unknown as RedisClient;
}

/** null when Redis answers PING, else why not. */
export function redisUnreachable(): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: HOST, port: PORT });
    const done = (reason: string | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(reason === null ? null : `Redis not reachable at ${HOST}:${PORT} (${reason})`);
    };
    const timer = setTimeout(() => done('no answer in 3 s'), 3000);
    socket.once('error', (error) => done(error.message));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => done(data.toString().startsWith('+PONG') ? null : `answered ${JSON.stringify(data.toString().trim())}`));
  });
}

/** `Redis 7.0.15 (appendonly=no, save="")`, for the machine line (call after redisUnreachable said null). */
export async function describeRedis(): Promise<string> {
  const queue = new Queue('describe', {
    connection: { host: HOST, port: PORT, maxRetriesPerRequest: null },
    prefix: `orbit-bench-${randomBytes(4).toString('hex')}`,
  });
  try {
    const client = await clientOf(queue);
    const version = /redis_version:(\S+)/.exec(await client.info('server'))?.[1] ?? '?';
    const config = async (key: string) => ((await client.call('CONFIG', 'GET', key)) as string[])[1] ?? '?';
    return `Redis ${version} (appendonly=${await config('appendonly')}, save="${await config('save')}")`;
  } finally {
    await queue.close();
  }
}

export async function benchBullmq(w: Workload): Promise<Result> {
  const system = 'BullMQ 5';
  const prefix = `orbit-bench-${randomBytes(4).toString('hex')}`;
  const name = 'noop';
  const connection = { host: HOST, port: PORT, maxRetriesPerRequest: null };
  const queue = new Queue(name, { connection, prefix });
  let worker: Worker | null = null;
  try {
    const cpuEnqueue = cpuMeter({ names: ['redis-server'] });
    const enqueueSeconds = await pooled(w.tasks, w.producers, async (n) => {
      await queue.add('noop', { n });
    });

    const enqueueCpu = cpuEnqueue.stop();
    const ledger = new RunLedger();
    let completed = 0;
    let failed = 0;
    const cpuDrain = cpuMeter({ names: ['redis-server'] });
    const t0 = performance.now();
    worker = new Worker(
      name,
      async (job) => {
        ledger.record((job.data as { n: number }).n);
      },
      { connection, prefix, concurrency: w.concurrency },
    );
    worker.on('completed', () => {
      completed += 1;
    });
    worker.on('failed', () => {
      failed += 1;
    });
    worker.on('error', (error) => console.error(`bullmq: ${error.message}`));
    const finished = await waitUntil(() => completed >= w.tasks, w.phaseTimeoutMs);
    const drainSeconds = finished ? (performance.now() - t0) / 1000 : NaN;
    const drainCpu = cpuDrain.stop();
    await worker.close();
    const counts = await queue.getJobCounts('completed', 'waiting', 'active', 'failed', 'delayed');
    printRow(
      system,
      phase('enqueue', w.tasks, enqueueSeconds, `, ${w.producers} producers`),
      Number.isNaN(drainSeconds) ? `drain TIMED OUT (${fmt(completed)} completed)` : phase('drain', w.tasks, drainSeconds, `, concurrency ${w.concurrency}`),
      enqueueCpu,
      drainCpu,
    );
    return {
      system: 'BullMQ 5 (Redis, not durable)',
      enqueue: w.tasks / enqueueSeconds,
      drain: w.tasks / drainSeconds,
      checks: [`${system}: ${ledger.summary(w.tasks)}; ${completed} completed events, ${failed} failed; Redis counts ${JSON.stringify(counts)}`],
    };
  } finally {
    if (worker && !worker.closing) await worker.close().catch(() => {});
    await queue.obliterate({ force: true }).catch(() => {});
    // Anything else under the prefix (the obliterate leaves the queue's meta keys).
    const client = await clientOf(queue);
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) await client.del(...keys);
    } while (cursor !== '0');
    await queue.close();
  }
}
