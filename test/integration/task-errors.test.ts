/**
 * A task's `error` says why it is in its current state (openapi.yaml, Task.error;
 * server/domain/task-errors.ts), against a real server with raw worker frames:
 *
 * - a task that ends CANCELLED always has `{"code": "CANCELLED", "message": <the reason given to
 *   :cancel>}`, whichever path it took: WAITING and LEASED at once, RUNNING by the worker's
 *   `complete cancelled` (the one-round-trip path leaves it to the careful one, which is also
 *   called directly), a NEEDS_REVIEW task that a cancel intent's lost lease sent to review; a
 *   worker that cancels on its own says so; the worker's words go to the event;
 * - a resolve: SUCCEEDED and back to WAITING clear it, FAILED sets the resolution's (or the
 *   reason), and the error it replaced is in the `task.resolved` event;
 * - a success clears what earlier attempts reported (both result paths), a deadline replaces it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call } from '../helpers/server-process.ts';
import { waitFor } from '../helpers/wait.ts';
import { endLeases } from '../helpers/leases.ts';
import { connectRaw, type RawSession } from '../helpers/ws-session.ts';
import { startServer, type RunningServer } from '../../server/server.ts';
import { silentLogger } from '../../server/log.ts';
import { completeCareful, finishFast } from '../../server/store/attempts/attempt-complete.ts';
import { CANCELLED_BY_WORKER } from '../../server/domain/task-errors.ts';
import { sqlToMillis } from '../../server/time.ts';

/**
 * Long enough that no lease runs out while a test works with its attempt, however slow the
 * machine: where a test needs a lease to run out (a worker gone silent), it ends it itself
 * (`leaseRunsOut`) and recovery, which runs every 100 ms, does the rest.
 */
const LEASE_SECONDS = 600;

describe("a task's error says why it is in its current state", () => {
  let t: TestDatabase;
  let server: RunningServer;
  let tenant: TestTenant;
  let worker: RawSession;
  let sessionId: string;
  let keys = 0;
  let claims = 0;

  before(async () => {
    t = await freshDatabase('task_errors');
    tenant = await createTenant(t.db, { namespace: 'errors', queues: ['jobs'], resourceAccess: true });
    server = await startServer(
      { ...testConfig(), databaseUrl: t.url, listenPort: 0, leaseSeconds: LEASE_SECONDS, recoveryIntervalMs: 100 },
      { log: silentLogger() },
    );
    worker = await connectRaw(server.url, tenant.token);
    const welcome = await worker.request({ type: 'hello', node_id: 'errors', queues: ['jobs'], capacity: 20 });
    assert.equal(welcome.type, 'welcome', JSON.stringify(welcome));
    sessionId = welcome.session_id;
  });
  after(async () => {
    await worker.close();
    await server.close();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const http = (method: string, path: string, body?: unknown) =>
    call(server.url, method, path, { token: tenant.token, key: method === 'POST' ? `k-${++keys}` : undefined, body });
  async function submit(body: Record<string, unknown> = {}): Promise<string> {
    const r = await http('POST', '/v1/queues/jobs/tasks', { payload: { n: keys }, ...body });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.task.task_id;
  }
  const task = async (id: string) => (await http('GET', `/v1/tasks/${id}`)).body.data;
  const cancel = async (id: string, reason: string) => {
    const r = await http('POST', `/v1/tasks/${id}:cancel`, { reason });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.task;
  };
  const resolve = async (id: string, body: Record<string, unknown>) => {
    const r = await http('POST', `/v1/tasks/${id}:resolve`, body);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data.task;
  };
  /** Claims every claimable task (starting them with `start`), returning the attempts by task id. */
  async function claimAll(ids: string[], start: boolean): Promise<Map<string, string>> {
    const answer = await worker.request({ type: 'claim', claim_id: `c${++claims}`, max: 20, ...(start ? { start: true } : {}) });
    assert.equal(answer.type, 'claimed', JSON.stringify(answer));
    const attempts = new Map<string, string>((answer.attempts as Array<{ task_id: string; attempt_id: string }>).map((a) => [a.task_id, a.attempt_id]));
    assert.deepEqual([...attempts.keys()].sort(), [...ids].sort(), 'the claim took exactly these tasks');
    return attempts;
  }
  const running = async (id: string) => (await claimAll([id], true)).get(id) as string;
  const complete = (attemptId: string, frame: Record<string, unknown>) => worker.request({ type: 'complete', attempt_id: attemptId, ...frame });
  /** The task's events, oldest first. */
  async function eventsOf(id: string): Promise<Array<{ type: string; data: Record<string, any> }>> {
    const out: Array<{ type: string; subject: string; data: Record<string, any> }> = [];
    for (let after = '0'; ; ) {
      const page = (await http('GET', `/v1/events?after=${after}&limit=100`)).body.data;
      out.push(...page.events);
      if (page.events.length === 0) break;
      after = page.next_after;
    }
    return out.filter((e) => e.subject === id);
  }
  /** What a store call needs to know of an attempt (what the worker session keeps). */
  async function known(attemptId: string) {
    const [row] = await t.db.rows<{ task_id: Buffer; queue_id: Buffer; namespace_id: Buffer; resource_key: string | null; deadline_at: string }>(
      'SELECT task_id, queue_id, namespace_id, resource_key, deadline_at FROM orbit_attempts WHERE attempt_id = UNHEX(?)',
      [attemptId],
    );
    assert.ok(row, `attempt ${attemptId}`);
    return {
      attemptId: Buffer.from(attemptId, 'hex'),
      taskId: row.task_id,
      queueId: row.queue_id,
      namespaceId: row.namespace_id,
      sessionId: Buffer.from(sessionId, 'hex'),
      resourceKey: row.resource_key,
      deadlineAtMs: sqlToMillis(row.deadline_at),
    };
  }
  const applicationId = () => Buffer.from(tenant.applicationId, 'hex');
  /** The worker has gone silent for its whole lease: the attempts' leases end now (recovery sees them at its next round). */
  const leaseRunsOut = (attemptIds: string[]) => endLeases(t.db, attemptIds);

  test('WAITING and LEASED tasks cancelled at once carry the reason', async () => {
    const waiting = await submit({ delay_seconds: 60 });
    assert.deepEqual((await cancel(waiting, 'no longer needed')).error, { code: 'CANCELLED', message: 'no longer needed' });
    const leased = await submit();
    await claimAll([leased], false);
    const cancelled = await cancel(leased, 'the order was withdrawn');
    assert.equal(cancelled.state, 'CANCELLED');
    assert.deepEqual(cancelled.error, { code: 'CANCELLED', message: 'the order was withdrawn' });
    assert.deepEqual(
      (await eventsOf(leased)).map((e) => e.type),
      ['task.submitted', 'task.cancelled'],
    );
  });

  test("a RUNNING task ends CANCELLED by its worker's answer with the reason of the latest :cancel, not the worker's error", async () => {
    const id = await submit();
    const attemptId = await running(id);
    const intent = await cancel(id, 'first thoughts');
    assert.deepEqual([intent.state, intent.cancel_requested, intent.error], ['RUNNING', true, undefined], 'an intent is no cancellation yet');
    assert.equal((await worker.next((f) => f.type === 'cancel_requested' && f.attempt_id === attemptId)).type, 'cancel_requested');
    await cancel(id, 'the customer cancelled the order');
    // The one-round-trip path leaves a cancellation to the careful one (it cannot read the reason): nothing written.
    const fast = await finishFast(t.db, {
      applicationId: applicationId(),
      items: [{ ...(await known(attemptId)), taskState: 'CANCELLED', attemptState: 'CANCELLED', error: { message: 'cancelled', name: 'Error' } }],
    });
    assert.equal(fast, false);
    assert.equal((await task(id)).state, 'RUNNING');
    // What the worker SDK sends when its handler stops on the cancel.
    const done = await complete(attemptId, { outcome: 'cancelled', error: { message: 'cancelled', name: 'Error' } });
    assert.equal(done.task_state, 'CANCELLED', JSON.stringify(done));
    const ended = await task(id);
    assert.equal(ended.state, 'CANCELLED');
    assert.deepEqual(ended.error, { code: 'CANCELLED', message: 'the customer cancelled the order' });
    const events = await eventsOf(id);
    assert.deepEqual(
      events.map((e) => e.type),
      ['task.submitted', 'task.started', 'task.cancel_requested', 'task.cancel_requested', 'task.cancelled'],
    );
    assert.deepEqual(events.at(-1)?.data.worker_error, { message: 'cancelled', name: 'Error' }, "the worker's words are in the event");
  });

  test('the careful result path, called directly, writes the same cancellation', async () => {
    const id = await submit();
    const attemptId = await running(id);
    await cancel(id, 'stop the batch');
    const { answers } = await completeCareful(t.db, {
      applicationId: applicationId(),
      items: [{ ...(await known(attemptId)), outcome: 'cancelled', error: { why: 'interrupted' }, retryable: false }],
    });
    assert.deepEqual(answers, [{ kind: 'completed', taskState: 'CANCELLED', duplicate: false }]);
    assert.deepEqual((await task(id)).error, { code: 'CANCELLED', message: 'stop the batch' });
    assert.deepEqual((await eventsOf(id)).at(-1)?.data.worker_error, { why: 'interrupted' });
  });

  test('a worker that cancels on its own says so; without an error of its own the event has none', async () => {
    const id = await submit();
    const attemptId = await running(id);
    assert.equal((await complete(attemptId, { outcome: 'cancelled' })).task_state, 'CANCELLED');
    assert.deepEqual((await task(id)).error, { code: 'CANCELLED', message: CANCELLED_BY_WORKER });
    assert.equal((await eventsOf(id)).at(-1)?.data.worker_error, undefined);
  });

  test('a cancel intent whose lease runs out goes to review (LEASE_EXPIRED); a :cancel then ends it with its own reason', async () => {
    const id = await submit();
    const attemptId = await running(id);
    await cancel(id, 'stop');
    await leaseRunsOut([attemptId]);
    const review = await waitFor(async () => {
      const current = await task(id);
      return current.state === 'NEEDS_REVIEW' ? current : null;
    });
    assert.equal(review.error.code, 'LEASE_EXPIRED', 'recovery never ends a task CANCELLED: the outcome is unknown');
    const cancelled = await cancel(id, 'checked: nothing was charged');
    assert.deepEqual(cancelled.error, { code: 'CANCELLED', message: 'checked: nothing was charged' });
    const event = (await eventsOf(id)).at(-1);
    assert.equal(event?.type, 'task.cancelled');
    assert.equal(event?.data.previous_error.code, 'LEASE_EXPIRED', 'the error it replaced stays in the history');
  });

  test('resolve: SUCCEEDED and WAITING clear the error, FAILED sets the resolution’s or the reason; the replaced one is in the event', async () => {
    const ids = [await submit({ on_unknown_outcome: 'review' }), await submit({ on_unknown_outcome: 'review' })];
    ids.push(await submit({ on_unknown_outcome: 'review' }), await submit({ on_unknown_outcome: 'review' }));
    const held = await claimAll(ids, true);
    // The workers go silent: every lease runs out and each task waits for an operator.
    await leaseRunsOut([...held.values()]);
    await waitFor(async () => (await Promise.all(ids.map(task))).every((x) => x.state === 'NEEDS_REVIEW' && x.error?.code === 'LEASE_EXPIRED'));
    const [succeeded, failed, failedBare, retried] = ids as [string, string, string, string];

    const a = await resolve(succeeded, { outcome: 'succeeded', reason: 'checked by hand', result: { invoice: 'INV-7' } });
    assert.deepEqual([a.state, a.error, a.result], ['SUCCEEDED', undefined, { invoice: 'INV-7' }]);
    const b = await resolve(failed, { outcome: 'failed', reason: 'the bank refused', error: { code: 'CARD_DECLINED' } });
    assert.deepEqual([b.state, b.error], ['FAILED', { code: 'CARD_DECLINED' }]);
    const c = await resolve(failedBare, { outcome: 'failed', reason: 'no longer wanted' });
    assert.deepEqual([c.state, c.error], ['FAILED', { code: 'RESOLVED_FAILED', message: 'no longer wanted' }]);
    const d = await resolve(retried, { outcome: 'retry', reason: 'try again' });
    assert.deepEqual([d.state, d.error, d.cancel_requested], ['WAITING', undefined, false]);
    for (const id of ids) {
      const event = (await eventsOf(id)).at(-1);
      assert.equal(event?.type, 'task.resolved');
      assert.equal(event?.data.previous_error.code, 'LEASE_EXPIRED', `${id}: the replaced error is in the task.resolved event`);
    }
    // The retried task runs again and succeeds: still no error.
    const attemptId = await running(retried);
    assert.equal((await complete(attemptId, { outcome: 'succeeded' })).task_state, 'SUCCEEDED');
    assert.equal((await task(retried)).error, undefined);
  });

  test('a success clears what an earlier attempt reported, on the one-round-trip path and the careful one', async () => {
    for (const path of ['fast', 'careful'] as const) {
      const id = await submit({ max_attempts: 2 });
      const first = await running(id);
      assert.equal((await complete(first, { outcome: 'failed', retryable: true, error: { message: 'boom' } })).task_state, 'WAITING');
      assert.deepEqual((await task(id)).error, { message: 'boom' }, 'waiting for its retry because of this');
      // Claimable again once the backoff (1 s) is over.
      const second = await waitFor(async () => {
        const answer = await worker.request({ type: 'claim', claim_id: `c${++claims}`, max: 1, start: true });
        return (answer.attempts as Array<{ task_id: string; attempt_id: string }>).find((x) => x.task_id === id)?.attempt_id;
      });
      if (path === 'fast') {
        assert.equal((await complete(second, { outcome: 'succeeded', result: { ok: true } })).task_state, 'SUCCEEDED');
      } else {
        const { answers } = await completeCareful(t.db, {
          applicationId: applicationId(),
          items: [{ ...(await known(second)), outcome: 'succeeded', result: { ok: true }, retryable: false }],
        });
        assert.deepEqual(answers, [{ kind: 'completed', taskState: 'SUCCEEDED', duplicate: false }]);
      }
      const done = await task(id);
      assert.deepEqual([done.state, done.error, done.result], ['SUCCEEDED', undefined, { ok: true }], `${path} path`);
    }
  });

  test('a task past its deadline while it waits for a retry is EXPIRED with DEADLINE_EXCEEDED', async () => {
    const id = await submit({ deadline_seconds: 3600 });
    const attemptId = await running(id);
    assert.equal((await complete(attemptId, { outcome: 'failed', retryable: true, error: { message: 'flaky' } })).task_state, 'WAITING');
    // Its deadline comes while it waits for the retry (set to now here, rather than raced with a
    // deadline of a few seconds that a slow machine might pass before the attempt even failed).
    await t.db.exec("UPDATE orbit_tasks SET deadline_at = NOW(6) WHERE task_id = UNHEX(?) AND state = 'WAITING'", [id]);
    const expired = await waitFor(async () => {
      const current = await task(id);
      return current.state === 'EXPIRED' ? current : null;
    });
    assert.equal(expired.error.code, 'DEADLINE_EXCEEDED', 'why it is EXPIRED, not why its last attempt failed');
  });
});
