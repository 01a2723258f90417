/**
 * An example consumer of task lifecycle events: creates the subscription if it is not there yet
 * (the same Idempotency-Key every time, so a rerun replays it), then prints every event of the
 * namespace's tasks, acknowledging each one after it is printed. Kill it (Ctrl-C, or kill -9) and
 * start it again: it resumes after the last event it acknowledged.
 *
 *   ORBIT_URL=http://127.0.0.1:8080 ORBIT_CREDENTIALS_FILE=.local/app-first.credentials.json \
 *     npx tsx examples/subscription/main.ts
 *
 * Optional: ORBIT_SUBSCRIPTION (default `readme-consumer`).
 */
import { readFileSync } from 'node:fs';
import { createOrbitClient, isOrbitError } from '@orbit-tasks/sdk';

const baseUrl = process.env.ORBIT_URL ?? 'http://127.0.0.1:8080';
const credentialsFile = process.env.ORBIT_CREDENTIALS_FILE;
if (!credentialsFile) throw new Error('ORBIT_CREDENTIALS_FILE is required');
const { token } = JSON.parse(readFileSync(credentialsFile, 'utf8')) as { token: string };
const name = process.env.ORBIT_SUBSCRIPTION ?? 'readme-consumer';
const orbit = createOrbitClient({ baseUrl, token });

let subscriptionId: string;
try {
  const created = await orbit.createSubscription({
    idempotency_key: `create-subscription-${name}`,
    name,
    reason: 'example consumer',
    types: ['task.submitted', 'task.started', 'task.succeeded', 'task.failed', 'task.retry_scheduled', 'task.cancelled'],
    from: 'now',
  });
  subscriptionId = created.subscription.subscription_id;
} catch (error) {
  // Created before under another key: fine, it is the same durable cursor.
  if (!(isOrbitError(error) && error.code === 'STATE_CONFLICT')) throw error;
  subscriptionId = (await orbit.getSubscriptionByName({ name })).subscription_id;
}

const stop = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => stop.abort());
console.error(`consuming subscription "${name}" (Ctrl-C stops; a restart resumes after the last acknowledged event)`);
for await (const event of orbit.subscribe({ subscription_id: subscriptionId, signal: stop.signal })) {
  console.log(JSON.stringify({ sequence: event.sequence, type: event.type, task_id: event.subject, data: event.data }));
}
