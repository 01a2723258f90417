/**
 * The README's shared-quota scenario (docs/quotas-and-locking.md): two namespaces of one
 * application share its `max_unfinished_tasks`.
 *
 *   1. set the application's max_unfinished_tasks to 1 (CAS on the revision read first);
 *   2. namespace first submits a task: accepted;
 *   3. namespace second submits one: refused with APPLICATION_FULL (HTTP 429) - the budget is shared;
 *   4. first cancels its task, which frees the slot;
 *   5. second submits again with the ORIGINAL Idempotency-Key: accepted (a refusal left no receipt);
 *   6. second cancels it;
 *   7. the original limits are restored by CAS - on every exit path (normal, error, SIGINT). If
 *      someone else changed the limits meanwhile, that is reported and NOT overwritten.
 *
 * ORBIT_EXAMPLE_PAUSE_MS makes it wait that long right after lowering the limit (to try Ctrl-C,
 * or a change by someone else, while the limit is lowered; the tests do both).
 *
 * Run from the repository root:
 *   ORBIT_URL=http://127.0.0.1:8080 ORBIT_CREDENTIALS_FILE=.local/app-first.credentials.json \
 *   ORBIT_SECOND_CREDENTIALS_FILE=.local/app-second.credentials.json npx tsx examples/application-resources/main.ts
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createOrbitClient, isOrbitError, type ApplicationResources, type OrbitClient } from '@orbit-tasks/sdk';

interface Credentials {
  token: string;
  namespace: string;
  queues: string[];
}

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
}

function readCredentials(path: string): Credentials {
  const parsed = JSON.parse(readFileSync(path, 'utf8')) as Credentials;
  if (!parsed.token || !Array.isArray(parsed.queues) || parsed.queues.length === 0) throw new Error(`${path} is not an orbit-admin credentials file`);
  return parsed;
}

const baseUrl = env('ORBIT_URL');
const firstCredentials = readCredentials(env('ORBIT_CREDENTIALS_FILE'));
const secondCredentials = readCredentials(env('ORBIT_SECOND_CREDENTIALS_FILE'));
const first = createOrbitClient({ baseUrl, token: firstCredentials.token });
const second = createOrbitClient({ baseUrl, token: secondCredentials.token });
const firstQueue = firstCredentials.queues[0] as string;
const secondQueue = secondCredentials.queues[0] as string;

// Operation identities: new for each run, kept for retries within the run.
const run = `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
const key = (step: string) => `application-resources-demo-${run}-${step}`;

/** What to put back, and the revision our own change produced (the CAS for restoring). */
let restore: { original: ApplicationResources; ourRevision: string } | null = null;
let restoring: Promise<boolean> | null = null;

/** Restores the original limits once; true when they are back (or were never changed). */
function restoreLimits(): Promise<boolean> {
  restoring ??= (async () => {
    if (!restore) return true;
    const { original, ourRevision } = restore;
    try {
      await first.configureApplicationResources({
        idempotency_key: key('restore'),
        expected_revision: ourRevision,
        reason: 'application-resources example: restore the original limits',
        max_unfinished_tasks: original.max_unfinished_tasks,
        max_concurrency: original.max_concurrency,
        rate_per_second: original.rate_per_second,
      });
      return true;
    } catch (error) {
      if (isOrbitError(error) && error.code === 'STATE_CONFLICT') {
        const now = await first.getApplicationResources().catch(() => null);
        process.stderr.write(
          `restore_conflict: the application's limits were changed by someone else after this example set them (revision ${ourRevision} → ${now?.revision ?? 'unknown'}); their change was kept, not overwritten. The original limits were max_unfinished_tasks=${original.max_unfinished_tasks} max_concurrency=${original.max_concurrency} rate_per_second=${original.rate_per_second}.\n`,
        );
      } else {
        process.stderr.write(
          `restore_failed: ${(error as Error).message}; the original limits were max_unfinished_tasks=${original.max_unfinished_tasks} max_concurrency=${original.max_concurrency} rate_per_second=${original.rate_per_second}\n`,
        );
      }
      return false;
    }
  })();
  return restoring;
}

async function cancel(client: OrbitClient, taskId: string, step: string): Promise<void> {
  await client.cancelTask({ task_id: taskId, idempotency_key: key(step), reason: 'application-resources example: clean up' });
}

async function scenario(): Promise<void> {
  const original = await first.getApplicationResources();
  if (original.unfinished_tasks !== 0) {
    throw new Error(`the example needs an idle application, but it has ${original.unfinished_tasks} unfinished task(s); bootstrap a new one`);
  }
  const limited = await first.configureApplicationResources({
    idempotency_key: key('limit'),
    expected_revision: original.revision,
    reason: 'application-resources example: max_unfinished_tasks = 1',
    max_unfinished_tasks: 1,
    max_concurrency: original.max_concurrency,
    rate_per_second: original.rate_per_second,
  });
  restore = { original, ourRevision: limited.resources.revision };
  const pause = Number(process.env.ORBIT_EXAMPLE_PAUSE_MS ?? 0);
  if (pause > 0) {
    process.stderr.write(`paused for ${pause} ms with max_unfinished_tasks=1 (revision ${limited.resources.revision})\n`);
    await new Promise((resolve) => setTimeout(resolve, pause));
  }

  const accepted = await first.submitTask({
    queue: firstQueue,
    idempotency_key: key('first-submit'),
    payload: { example: 'application-resources', namespace: firstCredentials.namespace },
  });

  const secondKey = key('second-submit');
  const secondRequest = {
    queue: secondQueue,
    idempotency_key: secondKey,
    payload: { example: 'application-resources', namespace: secondCredentials.namespace },
  };
  try {
    await second.submitTask(secondRequest);
    throw new Error('the second namespace was accepted although the application was full');
  } catch (error) {
    if (!isOrbitError(error) || error.code !== 'APPLICATION_FULL') throw error;
    console.log(`cross_namespace_backpressure=${error.code} http=${error.status}`);
  }

  await cancel(first, accepted.task.task_id, 'first-cancel');
  const retried = await second.submitTask(secondRequest); // the same idempotency_key: a refusal left no receipt
  console.log(`same_identity_retry_accepted=${retried.deduplicated === false && retried.task.state === 'WAITING'}`);
  await cancel(second, retried.task.task_id, 'second-cancel');
}

process.once('SIGINT', () => {
  process.stderr.write('interrupted: restoring the original limits\n');
  void restoreLimits().finally(() => process.exit(130));
});

let failed = false;
try {
  await scenario();
} catch (error) {
  failed = true;
  process.stderr.write(
    `error: ${isOrbitError(error) ? `${error.code} (HTTP ${error.status}, request ${error.requestId}): ` : ''}${(error as Error).message}\n`,
  );
}
const restored = await restoreLimits();
if (!failed) {
  const after = await first.getApplicationResources();
  console.log(`unfinished=${after.unfinished_tasks} active=${after.active_attempts} pending_starts=${after.pending_starts}`);
}
process.exitCode = failed || !restored ? 1 : 0;
