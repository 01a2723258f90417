/**
 * A consumer process for crash tests: the subscription named ORBIT_SUBSCRIPTION, looked up by
 * name once, then `for await (const event of orbit.subscribe({ subscription_id, … }))` over the
 * SDK, appending each event it processes to ORBIT_CONSUMER_OUT (one JSON line, written before
 * the loop body returns, i.e. before its ack) - so a SIGKILL leaves exactly what a real consumer
 * would have done. Stops on SIGTERM.
 */
import { appendFileSync } from 'node:fs';
import { createOrbitClient } from '../../sdk/index.ts';

const { ORBIT_URL, ORBIT_TOKEN, ORBIT_SUBSCRIPTION, ORBIT_CONSUMER_OUT } = process.env;
if (!ORBIT_URL || !ORBIT_TOKEN || !ORBIT_SUBSCRIPTION || !ORBIT_CONSUMER_OUT)
  throw new Error('ORBIT_URL, ORBIT_TOKEN, ORBIT_SUBSCRIPTION and ORBIT_CONSUMER_OUT are needed');
const orbit = createOrbitClient({ baseUrl: ORBIT_URL, token: ORBIT_TOKEN });
const stop = new AbortController();
process.on('SIGTERM', () => stop.abort());
console.log(JSON.stringify({ msg: 'consuming' }));
const { subscription_id } = await orbit.getSubscriptionByName({ name: ORBIT_SUBSCRIPTION });
for await (const event of orbit.subscribe({ subscription_id, signal: stop.signal, wait_seconds: 5 })) {
  appendFileSync(ORBIT_CONSUMER_OUT, `${JSON.stringify({ sequence: event.sequence, type: event.type, subject: event.subject })}\n`);
}
