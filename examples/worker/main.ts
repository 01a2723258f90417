/**
 * An example worker: consumes the queues of a credentials file, "processes" each task by
 * echoing its payload after a short pause, and shuts down gracefully on SIGINT/SIGTERM
 * (reservations not started yet go back at once; running tasks get 10 s to finish).
 *
 *   ORBIT_URL=http://127.0.0.1:8080 ORBIT_CREDENTIALS_FILE=.local/app-first.credentials.json \
 *     npx tsx examples/worker/main.ts
 *
 * Optional: ORBIT_WORKER_CAPACITY (default 8), ORBIT_WORKER_NODE (default the host name),
 * ORBIT_WORKER_EXIT_WHEN_IDLE=1 to stop after 3 s without work (used by the README's demo).
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { OrbitWorker, NonRetryableError } from '@orbit-tasks/sdk/worker';

const baseUrl = process.env.ORBIT_URL ?? 'http://127.0.0.1:8080';
const credentialsFile = process.env.ORBIT_CREDENTIALS_FILE;
if (!credentialsFile) throw new Error('ORBIT_CREDENTIALS_FILE is required');
const credentials = JSON.parse(readFileSync(credentialsFile, 'utf8')) as { token: string; queues: string[] };

let lastWork = Date.now();
const worker = new OrbitWorker({
  baseUrl,
  token: credentials.token,
  node_id: process.env.ORBIT_WORKER_NODE ?? hostname(),
  queues: credentials.queues,
  capacity: Number(process.env.ORBIT_WORKER_CAPACITY ?? 8),
  async handler(task) {
    lastWork = Date.now();
    if (task.payload.fail === 'permanent') throw new NonRetryableError('asked to fail');
    // Work that honours cancellation: stop when the signal says so.
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(resolve, Number(task.payload.sleep_ms ?? 50));
      task.signal.addEventListener('abort', () => {
        clearTimeout(timer);
        reject(new Error(String(task.signal.reason)));
      });
    });
    console.log(JSON.stringify({ task_id: task.task_id, attempt: task.attempt_number, queue: task.queue, payload: task.payload }));
    return { echoed: task.payload };
  },
  onEvent(event) {
    if (event.type !== 'completed') console.error(JSON.stringify(event));
  },
});

const stop = async () => {
  await worker.stop({ timeoutMs: 10_000 });
  process.exit(0);
};
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
if (process.env.ORBIT_WORKER_EXIT_WHEN_IDLE === '1') {
  const idle = setInterval(() => {
    if (Date.now() - lastWork > 3000 && worker.heldAttempts === 0) {
      clearInterval(idle);
      void stop();
    }
  }, 250);
}

console.error(`worker consuming ${credentials.queues.join(', ')} at ${baseUrl}; Ctrl-C stops it gracefully`);
try {
  // Runs until stopped; a refused credential or session (revoked, disabled, unknown queue) ends
  // it with the server's reason instead of leaving an idle process behind.
  await worker.run();
} catch (error) {
  const e = error as { code?: string; message?: string; requestId?: string };
  console.error(`worker stopped: ${e.code ?? 'ERROR'}: ${e.message ?? String(error)}${e.requestId ? ` (request ${e.requestId})` : ''}`);
  process.exit(1);
}
