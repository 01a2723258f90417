/**
 * The shared-budget scenario, with a floor (docs/quotas-and-locking.md#floors): the application's
 * max_unfinished_tasks is 2 and namespace second reserves 1 of them, so namespace first - however
 * much it submits - is refused at 1, and second is accepted at once.
 *
 *   1. set the application's max_unfinished_tasks to 2 (CAS on the revision read first);
 *   2. give namespace second a floor of 1 unfinished task (CAS on its floors' revision);
 *   3. first submits twice: the first is accepted, the second refused with APPLICATION_FULL, the
 *      room left being second's floor (`details.reserved_by_other_namespaces`);
 *   4. second submits: accepted at once;
 *   5. both tasks are cancelled, second's floor removed and the original limits restored by CAS -
 *      on every exit path (normal, error, SIGINT). A change by someone else meanwhile is
 *      reported and NOT overwritten.
 *
 * Run from the repository root, with the credentials of the README's shared-budget example:
 *   ORBIT_URL=http://127.0.0.1:8080 ORBIT_CREDENTIALS_FILE=.local/app-first.credentials.json \
 *   ORBIT_SECOND_CREDENTIALS_FILE=.local/app-second.credentials.json npx tsx examples/namespace-floors/main.ts
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createOrbitClient, isOrbitError, type ApplicationResources, type NamespaceResources, type OrbitClient } from '@orbit-tasks/sdk';

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
  if (!parsed.token || !parsed.namespace || !Array.isArray(parsed.queues) || parsed.queues.length === 0)
    throw new Error(`${path} is not an orbit-admin credentials file`);
  return parsed;
}

const baseUrl = env('ORBIT_URL');
const firstCredentials = readCredentials(env('ORBIT_CREDENTIALS_FILE'));
const secondCredentials = readCredentials(env('ORBIT_SECOND_CREDENTIALS_FILE'));
const first = createOrbitClient({ baseUrl, token: firstCredentials.token });
const second = createOrbitClient({ baseUrl, token: secondCredentials.token });

// Operation identities: new for each run, kept for retries within the run.
const run = `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
const key = (step: string) => `namespace-floors-demo-${run}-${step}`;

/** What to undo, in reverse order: the tasks made, second's floor, the application's limits. */
const tasks: Array<{ client: OrbitClient; taskId: string }> = [];
let floorSet: { original: NamespaceResources; ourRevision: string } | null = null;
let limitsSet: { original: ApplicationResources; ourRevision: string } | null = null;
let undoing: Promise<boolean> | null = null;

const conflict = (what: string, ours: string, now: string | undefined, original: string) =>
  process.stderr.write(
    `restore_conflict: ${what} was changed by someone else after this example set it (revision ${ours} → ${now ?? 'unknown'}); their change was kept, not overwritten. The original was ${original}.\n`,
  );

/** Undoes what the run did, once; true when everything is back. */
function undo(): Promise<boolean> {
  undoing ??= (async () => {
    let ok = true;
    for (const [i, t] of tasks.entries()) {
      await t.client
        .cancelTask({ task_id: t.taskId, idempotency_key: key(`cancel-${i}`), reason: 'namespace-floors example: clean up' })
        .catch((error: Error) => {
          ok = false;
          process.stderr.write(`cancel_failed: task ${t.taskId}: ${error.message}\n`);
        });
    }
    if (floorSet) {
      const { original, ourRevision } = floorSet;
      try {
        await first.configureNamespaceResources({
          namespace: secondCredentials.namespace,
          idempotency_key: key('floor-restore'),
          expected_revision: ourRevision,
          reason: 'namespace-floors example: restore the floors',
          reserved_unfinished_tasks: original.reserved_unfinished_tasks,
          reserved_concurrency: original.reserved_concurrency,
          reserved_rate_per_second: original.reserved_rate_per_second,
        });
      } catch (error) {
        ok = false;
        if (isOrbitError(error) && error.code === 'STATE_CONFLICT') {
          const now = (await first.listNamespaceResources().catch(() => null))?.namespaces.find((n) => n.namespace === secondCredentials.namespace);
          conflict(
            `namespace ${secondCredentials.namespace}'s floors`,
            ourRevision,
            now?.revision,
            `reserved_unfinished_tasks=${original.reserved_unfinished_tasks}`,
          );
        } else process.stderr.write(`restore_failed: ${(error as Error).message}\n`);
      }
    }
    if (limitsSet) {
      const { original, ourRevision } = limitsSet;
      try {
        await first.configureApplicationResources({
          idempotency_key: key('limits-restore'),
          expected_revision: ourRevision,
          reason: 'namespace-floors example: restore the original limits',
          max_unfinished_tasks: original.max_unfinished_tasks,
          max_concurrency: original.max_concurrency,
          rate_per_second: original.rate_per_second,
        });
      } catch (error) {
        ok = false;
        if (isOrbitError(error) && error.code === 'STATE_CONFLICT') {
          const now = await first.getApplicationResources().catch(() => null);
          conflict("the application's limits", ourRevision, now?.revision, `max_unfinished_tasks=${original.max_unfinished_tasks}`);
        } else process.stderr.write(`restore_failed: ${(error as Error).message}\n`);
      }
    }
    return ok;
  })();
  return undoing;
}

async function scenario(): Promise<void> {
  const original = await first.getApplicationResources();
  if (original.unfinished_tasks !== 0) {
    throw new Error(`the example needs an idle application, but it has ${original.unfinished_tasks} unfinished task(s); bootstrap a new one`);
  }
  const limited = await first.configureApplicationResources({
    idempotency_key: key('limits'),
    expected_revision: original.revision,
    reason: 'namespace-floors example: max_unfinished_tasks = 2',
    max_unfinished_tasks: 2,
    max_concurrency: original.max_concurrency,
    rate_per_second: original.rate_per_second,
  });
  limitsSet = { original, ourRevision: limited.resources.revision };

  const floors = (await first.listNamespaceResources()).namespaces.find((n) => n.namespace === secondCredentials.namespace);
  if (!floors) throw new Error(`namespace ${secondCredentials.namespace} is not in this application`);
  const reserved = await first.configureNamespaceResources({
    namespace: secondCredentials.namespace,
    idempotency_key: key('floor'),
    expected_revision: floors.revision,
    reason: 'namespace-floors example: second keeps 1 of the 2',
    reserved_unfinished_tasks: 1,
    reserved_concurrency: floors.reserved_concurrency,
    reserved_rate_per_second: floors.reserved_rate_per_second,
  });
  floorSet = { original: floors, ourRevision: reserved.namespace_resources.revision };

  // first fills what it may: one task, then the application is full for it.
  let firstAccepted = 0;
  for (let i = 0; i < 2; i++) {
    try {
      const accepted = await first.submitTask({
        queue: firstCredentials.queues[0] as string,
        idempotency_key: key(`first-${i}`),
        payload: { example: 'namespace-floors' },
      });
      tasks.push({ client: first, taskId: accepted.task.task_id });
      firstAccepted++;
    } catch (error) {
      if (!isOrbitError(error) || error.code !== 'APPLICATION_FULL') throw error;
      const details = (error.details ?? {}) as { reserved_by_other_namespaces?: boolean };
      console.log(`first_refused_at=${firstAccepted} code=${error.code} reserved_by_other_namespaces=${details.reserved_by_other_namespaces === true}`);
      break;
    }
  }
  if (firstAccepted !== 1) throw new Error(`namespace first was accepted ${firstAccepted} times; the floor should have stopped it at 1`);

  const accepted = await second.submitTask({
    queue: secondCredentials.queues[0] as string,
    idempotency_key: key('second'),
    payload: { example: 'namespace-floors' },
  });
  tasks.push({ client: second, taskId: accepted.task.task_id });
  console.log(`second_within_floor_accepted=${accepted.deduplicated === false && accepted.task.state === 'WAITING'}`);
}

process.once('SIGINT', () => {
  process.stderr.write('interrupted: undoing the changes\n');
  void undo().finally(() => process.exit(130));
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
const undone = await undo();
if (!failed) {
  const after = await first.getApplicationResources();
  console.log(`unfinished=${after.unfinished_tasks} active=${after.active_attempts} pending_starts=${after.pending_starts}`);
}
process.exitCode = failed || !undone ? 1 : 0;
