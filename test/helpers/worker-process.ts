/**
 * A worker in its own process (so a test can SIGKILL it mid-task), built on the worker SDK.
 * Configured by environment: ORBIT_URL, ORBIT_TOKEN, ORBIT_QUEUES (comma-separated),
 * ORBIT_CAPACITY, ORBIT_NODE, ORBIT_WORK_MS ("min-max"). Prints one JSON line per event.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { OrbitWorker } from '../../sdk/worker.ts';

export interface WorkerProcess {
  child: ChildProcess;
  lines: Array<Record<string, unknown>>;
  kill(): Promise<void>;
  stop(): Promise<void>;
}

export function startWorkerProcess(env: {
  url: string;
  token: string;
  queues: string[];
  capacity: number;
  node: string;
  workMs: [number, number];
}): WorkerProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
    env: {
      ...process.env,
      ORBIT_WORKER_CHILD: '1',
      ORBIT_URL: env.url,
      ORBIT_TOKEN: env.token,
      ORBIT_QUEUES: env.queues.join(','),
      ORBIT_CAPACITY: String(env.capacity),
      ORBIT_NODE: env.node,
      ORBIT_WORK_MS: env.workMs.join('-'),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: Array<Record<string, unknown>> = [];
  let buffer = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    let newline: number;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      try {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        // not ours
      }
    }
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    child,
    lines,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      // A process that does not stop in time is killed: a test never leaves one behind.
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

async function runChild(): Promise<void> {
  const [min, max] = (process.env.ORBIT_WORK_MS ?? '10-20').split('-').map(Number) as [number, number];
  const print = (event: Record<string, unknown>) => process.stdout.write(`${JSON.stringify({ ...event, at: Date.now() })}\n`);
  const worker = new OrbitWorker({
    baseUrl: process.env.ORBIT_URL as string,
    token: process.env.ORBIT_TOKEN as string,
    node_id: process.env.ORBIT_NODE as string,
    queues: (process.env.ORBIT_QUEUES as string).split(','),
    capacity: Number(process.env.ORBIT_CAPACITY),
    maxPollIntervalMs: 100,
    async handler(task) {
      print({ event: 'run', task_id: task.task_id, attempt_id: task.attempt_id });
      await new Promise((r) => setTimeout(r, min + Math.random() * (max - min)));
      return { by: process.env.ORBIT_NODE };
    },
    onEvent(event) {
      print({ event: event.type, detail: event });
    },
  });
  await worker.start();
  print({ event: 'ready' });
  process.once('SIGTERM', () => void worker.stop({ timeoutMs: 5000 }).then(() => process.exit(0)));
}

if (process.env.ORBIT_WORKER_CHILD === '1' && process.argv[1] === fileURLToPath(import.meta.url)) await runChild();
