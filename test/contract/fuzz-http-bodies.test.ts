/**
 * Property-based fuzzing of HTTP request bodies (fast-check, fixed seed; ORBIT_FUZZ_SEED
 * replays another). For every operation of openapi.yaml with a body, and for EVERY generated
 * input:
 *
 *   - never a 5xx;
 *   - a refusal is the error envelope with the same id in X-Request-Id, and a 400 names the
 *     offending field (one of the fields the spec's own schema, read with Ajv, objects to);
 *   - a body the spec accepts is not refused with 400;
 *   - a refused request changes nothing (CHECKSUM TABLE and row counts of every orbit_ table,
 *     compared before and after each refused request).
 *
 * Inputs: arbitrary JSON values; mutations of valid bodies (dropped, added, renamed fields, wrong
 * types, nulls, huge numbers and raw number literals, very long and unicode strings with lone
 * surrogates written as escapes, keys written with \u escapes, duplicate keys in the raw text);
 * raw bytes and broken UTF-8; nesting up to 10,000 levels (built as strings); bodies around and
 * over each operation's limit (`x-orbit-max-body-bytes`, else 1 MiB); chunked uploads without
 * Content-Length to a real server (its background loops stopped).
 *
 * Bulk submit (submitTasks) gets its own hostile bodies too (test/helpers/fuzz-bulk.ts: items
 * that replay, conflict, are mutated, sit at the delay/deadline and 256 KiB edges, nest deeply,
 * up to 1,001 items, around its 4 MiB limit), and for every body valid as a whole each item's
 * result is predicted (BulkModel): refused INVALID_ARGUMENT naming the item's field, replayed,
 * IDEMPOTENCY_CONFLICT, a full quota, or accepted with the task as sent - and the database holds
 * exactly one task and one receipt per accepted item.
 *
 * Schedules (createSchedule, pauseSchedule, resumeSchedule): a valid body meets a predicted
 * answer - pause and resume target a PAUSED and an ACTIVE schedule (409 STATE_CONFLICT, the state
 * stays), a creation is 200 for a new name and 409 for a taken one. The trigger rules the spec
 * states in words (exactly one of cron and interval_seconds, a cron croner reads, a known time
 * zone, a start_at that exists) get a property of their own, and an accepted schedule starts
 * when the spec says. Every schedule a property creates is paused at once, so none fires in the
 * background.
 *
 * Subscriptions (createSubscription, pauseSubscription, resumeSubscription, ackSubscription): a
 * valid body meets a predicted answer too - pause and resume target a PAUSED and an ACTIVE
 * subscription (409 STATE_CONFLICT); a creation is 404 when `queues` names a queue that does not
 * exist, else 409 naming `name` for a taken name, else 200 with the subscription as sent; an ack
 * of the subscription kept for acks is predicted from its position and the namespace's newest
 * event (equal: 200 unchanged; below, or beyond the newest: 409 naming `sequence`, nothing moved;
 * between: 200 at the new position). Two properties of their own: creations with filters drawn
 * from valid and invalid types and queues, and random pause/resume/read/ack sequences on fresh
 * subscriptions against a model of their state and position (both legitimate outcomes, 200 and
 * the 409 of the state, happen and are told apart).
 *
 * The file ends by checking every counter against a recount.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase, testConfig } from '../helpers/database.ts';
import { createCredential, createTenant, type TestTenant } from '../helpers/tenants.ts';
import { testApp, type TestResponse } from '../helpers/app.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import {
  EXPECTED_DEPTH_LIMIT,
  FUZZ_SEED,
  LogCapture,
  assertNever5xx,
  assertRefused,
  dbFingerprint,
  describeLogLine,
  documentedDepthLimit,
  fieldNames,
  jsonDepth,
  nastyString,
  nested,
  runProperty,
  sendRaw,
  type Json,
  type NestShape,
} from '../helpers/fuzz-common.ts';
import { mutatedDocument } from '../helpers/fuzz-mutations.ts';
import { ASYNCAPI_TEXT, OPENAPI_TEXT, bodyOperations, bodyVerdict, cronPointFrom, maxBodyBytes, timestampInputMillis } from '../helpers/fuzz-spec.ts';
import { BulkModel, hostileBulkBody, type BulkCounts } from '../helpers/fuzz-bulk.ts';
import { DEFAULT_MAX_BODY_BYTES, assertMatchesSpec } from './spec-validator.ts';
import { ALL_ACTIONS } from '../../server/domain/actions.ts';
import { startServer, type RunningServer } from '../../server/server.ts';

const QUEUE = 'fuzz';
/** A queue whose limit the bulk property squeezes, so quotas fill in the middle of batches. */
const TIGHT_QUEUE = 'fz-tight';
const STALE_REVISION = '999999';
const DEPTH_LIMIT = documentedDepthLimit(`${OPENAPI_TEXT}\n${ASYNCAPI_TEXT}`) ?? EXPECTED_DEPTH_LIMIT;

type JsonObject = { [key: string]: Json };

/** The schedule the createSchedule example names, made in `before` (so the example itself is 409, name taken). */
const SCHEDULE_NAME = 'fz-created';
/** Likewise the subscription the createSubscription example names. */
const SUBSCRIPTION_NAME = 'fz-feed';

/**
 * One valid body per operation, aimed so that a valid body changes nothing it should not: the
 * configure operations carry a stale revision (409), cancel targets a cancelled task and resolve
 * a WAITING one (409), pause targets a PAUSED schedule (or subscription) and resume an ACTIVE one
 * (409), the schedule's and the subscription's names are taken (409), and the ack is the
 * position its subscription is at (200, nothing moves). Submissions, queue creations and schedules under a new name
 * succeed, which the properties allow (such a schedule is paused at once). The schedule starts
 * in 2099 and fires daily, so it never fires during the tests.
 */
const VALID: Record<string, JsonObject> = {
  configureApplicationResources: {
    expected_revision: STALE_REVISION,
    reason: '模糊测试',
    max_unfinished_tasks: 1000000,
    max_concurrency: 10000,
    rate_per_second: 100000,
    dry_run: false,
  },
  configureNamespaceResources: {
    expected_revision: STALE_REVISION,
    reason: '模糊测试',
    reserved_unfinished_tasks: 0,
    reserved_concurrency: 0,
    reserved_rate_per_second: 0,
    dry_run: false,
  },
  configureRetention: {
    expected_revision: STALE_REVISION,
    reason: '模糊测试',
    finished_task_retention_seconds: 604800,
    event_retention_seconds: 604800,
    receipt_retention_seconds: 604800,
    audit_retention_seconds: 31536000,
    subscription_max_lag_seconds: 2592000,
    dry_run: false,
  },
  createQueue: {
    name: 'fz-created',
    reason: '模糊测试',
    max_unfinished_tasks: 1000,
    max_concurrency: 10,
    rate_per_second: 100,
    key_concurrency: 2,
    paused: false,
  },
  configureQueue: {
    expected_revision: STALE_REVISION,
    reason: '模糊测试',
    max_unfinished_tasks: 100000,
    max_concurrency: 1000,
    rate_per_second: 10000,
    key_concurrency: 1,
    paused: false,
    dry_run: false,
  },
  submitTask: {
    payload: { order: 1, lines: [{ sku: 'A-1', qty: 2 }], note: null },
    priority: 5,
    resource_key: 'customer-1',
    max_attempts: 3,
    deadline_seconds: 86400,
    delay_seconds: 0,
    on_unknown_outcome: 'retry',
  },
  submitTasks: {
    tasks: [
      {
        idempotency_key: 'fzv-0',
        payload: { order: 1, lines: [{ sku: 'A-1', qty: 2 }], note: null },
        priority: 5,
        resource_key: 'customer-1',
        max_attempts: 3,
        deadline_seconds: 86400,
        delay_seconds: 0,
        on_unknown_outcome: 'retry',
      },
      { idempotency_key: 'fzv-1', payload: {} },
      { idempotency_key: 'fzv-2', payload: { n: 2 }, priority: 9, deadline_seconds: 60, delay_seconds: 59, on_unknown_outcome: 'review' },
    ],
  },
  cancelTask: { reason: '模糊测试' },
  retryTask: { reason: '模糊测试' },
  resolveTask: { outcome: 'succeeded', reason: '模糊测试', result: { ok: true }, error: { note: 'none' } },
  createSchedule: {
    name: SCHEDULE_NAME,
    reason: '模糊测试',
    interval_seconds: 86400,
    timezone: 'Europe/Berlin',
    payload: { report: 'daily', lines: [{ sku: 'A-1', qty: 2 }], note: null },
    priority: 5,
    resource_key: 'customer-1',
    max_attempts: 3,
    deadline_seconds: 86400,
    on_unknown_outcome: 'retry',
    misfire_policy: 'skip',
    misfire_window_seconds: 60,
    start_at: '2099-01-01T00:00:00Z',
  },
  pauseSchedule: { reason: '模糊测试' },
  resumeSchedule: { reason: '模糊测试' },
  createSubscription: { name: SUBSCRIPTION_NAME, reason: '模糊测试', types: ['task.submitted', 'task.cancelled'], queues: [QUEUE], from: 'beginning' },
  pauseSubscription: { reason: '模糊测试' },
  resumeSubscription: { reason: '模糊测试' },
  // The position of the subscription kept for acks (set in `before`): 200, unchanged.
  ackSubscription: { sequence: '1' },
};

const OPERATION_IDS = bodyOperations.map((op) => op.operationId);
const methodOf = (operationId: string) => bodyOperations.find((op) => op.operationId === operationId)?.method as string;
const declaresIdempotencyKey = (operationId: string) =>
  bodyOperations.find((op) => op.operationId === operationId)?.parameters.some((p) => p.in === 'header' && p.name === 'Idempotency-Key') ?? false;
const BULK_LIMIT = maxBodyBytes('submitTasks');

// ---------------------------------------------------------------------------------------------

/** Mutated valid bodies; `base` is the operation id. */
const bodyCase = mutatedDocument(VALID);

describe(`fuzz: HTTP request bodies (ORBIT_FUZZ_SEED=${FUZZ_SEED}, nesting limit ${DEPTH_LIMIT})`, () => {
  let t: TestDatabase;
  let api: Awaited<ReturnType<typeof testApp>>;
  let tenant: TestTenant;
  let token: string;
  let cancelledTask: string;
  let waitingTask: string;
  /** The targets of resume (ACTIVE: a valid body is 409) and pause (PAUSED: likewise). */
  let activeSchedule: string;
  let pausedSchedule: string;
  /** Every schedule name taken in QUEUE (a valid createSchedule with one of them is 409). */
  const scheduleNames = new Set<string>();
  /** The targets of resume (ACTIVE) and pause (PAUSED), and the one kept for acks (its position is predicted). */
  let activeSubscription: string;
  let pausedSubscription: string;
  let ackedSubscription: string;
  /** Every subscription name taken in the namespace. */
  const subscriptionNames = new Set<string>();
  /** The queues of the namespace (a subscription naming another is 404). */
  const QUEUES = new Set([QUEUE, TIGHT_QUEUE]);
  let bulk: BulkModel;
  const log = new LogCapture();
  let keyCounter = 0;
  const freshKey = () => `fz-${++keyCounter}-${randomBytes(3).toString('hex')}`;

  function pathFor(operationId: string, id?: string): string {
    const op = bodyOperations.find((o) => o.operationId === operationId);
    assert.ok(op);
    return op.path
      .replace('{queue}', QUEUE)
      .replace('{namespace}', tenant.namespace)
      .replace('{task_id}', id ?? (operationId === 'cancelTask' || operationId === 'retryTask' ? cancelledTask : waitingTask))
      .replace('{schedule_id}', id ?? (operationId === 'pauseSchedule' ? pausedSchedule : activeSchedule))
      .replace(
        '{subscription_id}',
        id ?? (operationId === 'pauseSubscription' ? pausedSubscription : operationId === 'ackSubscription' ? ackedSubscription : activeSubscription),
      );
  }
  const headersFor = (extra: Record<string, string> = {}): Record<string, string> => ({
    Authorization: `Bearer ${token}`,
    'Content-Type': 'application/json',
    'Idempotency-Key': freshKey(),
    ...extra,
  });

  async function submit(payload: Json = { n: keyCounter }): Promise<string> {
    const r = await api.request('POST', `/v1/queues/${QUEUE}/tasks`, { token, key: freshKey(), body: { payload } });
    assert.equal(r.status, 200, r.text);
    return r.body.data.task.task_id as string;
  }

  /** Pauses a schedule a property created, so that nothing fires in the background (should a schedule loop run). */
  async function pauseCreated(where: string, scheduleId: string): Promise<void> {
    const r = await api.request('POST', `/v1/schedules/${scheduleId}:pause`, { token, key: freshKey(), body: { reason: 'fuzz: created by a property' } });
    assert.equal(r.status, 200, `${where}: pausing the schedule it created: ${r.text}`);
  }

  /** A subscription's row as the predictions compare it. */
  interface SubscriptionFacts {
    acked: bigint;
    state: string;
    row: string;
  }
  /** The newest event sequence of the namespace (what an ack is checked against). */
  async function namespaceHead(): Promise<bigint> {
    const [row] = await t.db.rows<{ head: string | number | null }>('SELECT MAX(sequence) AS head FROM orbit_events WHERE namespace_id = UNHEX(?)', [
      tenant.namespaceId,
    ]);
    return BigInt(row?.head ?? 0);
  }
  async function subscriptionFacts(subscriptionId: string): Promise<SubscriptionFacts> {
    const [row] = await t.db.rows<{ acked_sequence: string | number; state: string; acked_at: unknown; updated_at: unknown }>(
      'SELECT acked_sequence, state, acked_at, updated_at FROM orbit_subscriptions WHERE subscription_id = UNHEX(?)',
      [subscriptionId],
    );
    assert.ok(row, `no subscription ${subscriptionId}`);
    return { acked: BigInt(row.acked_sequence), state: row.state, row: JSON.stringify(row) };
  }

  /**
   * The state before a request: its fingerprint; for a bulk submit the counts its prediction
   * needs; for a subscription operation the namespace's newest event, and for one on a
   * subscription (the id in the path) that subscription's row.
   */
  interface Before {
    fingerprint: Record<string, string>;
    bulk: BulkCounts | null;
    head: bigint | null;
    subscription: { id: string; facts: SubscriptionFacts } | null;
  }
  async function stateBefore(operationId: string, path: string, queue: string): Promise<Before> {
    const fingerprint = await dbFingerprint(t.db);
    const subscriptionId = /^\/v1\/subscriptions\/([0-9a-f]{32}):/.exec(path)?.[1];
    return {
      fingerprint,
      bulk: operationId === 'submitTasks' ? await bulk.counts(queue) : null,
      head: operationId.endsWith('Subscription') ? await namespaceHead() : null,
      subscription: subscriptionId === undefined ? null : { id: subscriptionId, facts: await subscriptionFacts(subscriptionId) },
    };
  }
  /** The state before the last request (see stateBefore). */
  let last: Before = { fingerprint: {}, bulk: null, head: null, subscription: null };

  /** Leaves `room` free places under a queue's or the application's max_unfinished_tasks (a configure through the API). */
  async function squeeze(level: 'queue' | 'application', room: number, queue = TIGHT_QUEUE): Promise<void> {
    const path = level === 'queue' ? `/v1/queues/${queue}` : '/v1/application/resources';
    const current = (await api.request('GET', path, { token })).body.data;
    const limits =
      level === 'queue'
        ? {
            max_concurrency: current.max_concurrency,
            rate_per_second: current.rate_per_second,
            key_concurrency: current.key_concurrency,
            paused: current.paused,
          }
        : { max_concurrency: current.max_concurrency, rate_per_second: current.rate_per_second };
    const max = room < 0 ? 1_000_000 : Math.max(1, Number(current.unfinished_tasks) + room);
    const r = await api.request('POST', `${path}:configure`, {
      token,
      key: freshKey(),
      body: { expected_revision: current.revision, reason: 'squeeze', max_unfinished_tasks: max, ...limits },
    });
    assert.equal(r.status, 200, `squeeze ${level}: ${r.text}`);
  }

  /**
   * One request; never 5xx; a refusal is the envelope and changes nothing. Returns the response
   * for the property's own expectations.
   */
  async function exchange(
    where: string,
    operationId: string,
    body: string | Uint8Array,
    options: { path?: string; headers?: Record<string, string>; queue?: string } = {},
  ): Promise<TestResponse> {
    // A bulk submit has no Idempotency-Key header (each item has its key).
    const headers = headersFor(options.headers);
    if (!declaresIdempotencyKey(operationId)) delete headers['Idempotency-Key'];
    const path = options.path ?? (options.queue ? pathFor(operationId).replace(`/queues/${QUEUE}/`, `/queues/${options.queue}/`) : pathFor(operationId));
    last = await stateBefore(operationId, path, options.queue ?? QUEUE);
    const before = last.fingerprint;
    log.clear();
    const response = await sendRaw(api.app, methodOf(operationId), path, headers, body);
    assertNever5xx(response, where, log);
    if (response.status >= 400) {
      assertRefused(response, where, {}, log);
      assert.deepEqual(
        await dbFingerprint(t.db),
        before,
        `${where}: a refused request (${response.status} ${response.body?.error?.code}) changed the database`,
      );
    }
    return response;
  }

  /**
   * What the spec says about the JSON value the text means; for a bulk body valid as a whole,
   * every item's result too, and what the request wrote (`before`: the state `exchange` saw).
   */
  async function expectVerdict(where: string, operationId: string, value: unknown, response: TestResponse, before = last): Promise<void> {
    const verdict = bodyVerdict(operationId, value);
    if (verdict.valid && verdict.items) {
      const counts = before.bulk;
      assert.ok(counts, `${where}: no counts taken before the bulk submit`);
      const accepted = bulk.check(where, value, verdict, response, counts);
      await bulk.assertWrites(where, counts, accepted, async () => [before.fingerprint, await dbFingerprint(t.db)]);
    } else if (verdict.valid) {
      assert.notEqual(response.status, 400, `${where}: valid per openapi.yaml but refused: ${response.text.slice(0, 300)}`);
      await expectScheduleOutcome(where, operationId, value as JsonObject, response);
      await expectSubscriptionOutcome(where, operationId, value as JsonObject, response, before);
    } else {
      assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: verdict.fields, location: 'body' }, log);
    }
  }

  /**
   * What a valid schedule body gets, predicted: pause and resume meet a schedule already in the
   * state asked for (409 STATE_CONFLICT naming that state); a creation is 409 naming `name` when
   * the name is taken, else 200 with the schedule as sent - which is then paused.
   */
  async function expectScheduleOutcome(where: string, operationId: string, value: JsonObject, response: TestResponse): Promise<void> {
    if (operationId === 'pauseSchedule' || operationId === 'resumeSchedule') {
      assertRefused(response, where, { status: 409, code: 'STATE_CONFLICT' }, log);
      assert.equal(
        response.body.error.details?.state,
        operationId === 'pauseSchedule' ? 'PAUSED' : 'ACTIVE',
        `${where}: the conflict names the current state: ${response.text.slice(0, 300)}`,
      );
      return;
    }
    if (operationId !== 'createSchedule') return;
    const name = value.name as string;
    if (scheduleNames.has(name)) {
      assertRefused(response, where, { status: 409, code: 'STATE_CONFLICT' }, log);
      assert.equal(response.body.error.details?.field, 'name', `${where}: a taken name is the conflict: ${response.text.slice(0, 300)}`);
      return;
    }
    assert.equal(response.status, 200, `${where}: a valid schedule under a new name: ${response.text.slice(0, 300)}`);
    assertMatchesSpec('createSchedule', 200, response.body);
    const schedule = response.body.data.schedule;
    assert.deepEqual(
      [schedule.name, schedule.queue, schedule.state, response.body.data.deduplicated],
      [name, QUEUE, 'ACTIVE', false],
      `${where}: ${response.text.slice(0, 300)}`,
    );
    assert.deepEqual(schedule.payload, value.payload, `${where}: the schedule's payload differs from the one sent`);
    scheduleNames.add(name);
    await pauseCreated(where, schedule.schedule_id);
  }

  /**
   * What a valid subscription body gets, predicted: pause and resume meet a subscription in the
   * state asked for (409 naming it); a creation naming a queue the namespace lacks is 404, one
   * under a taken name 409 naming `name`, else 200 with the subscription as sent (its position
   * 0 from the beginning, else the newest event, its own creation included); an ack is predicted
   * from the position and the namespace's newest event before it (see expectAck).
   */
  async function expectSubscriptionOutcome(where: string, operationId: string, value: JsonObject, response: TestResponse, before: Before): Promise<void> {
    if (operationId === 'pauseSubscription' || operationId === 'resumeSubscription') {
      const state = before.subscription?.facts.state;
      const asked = operationId === 'pauseSubscription' ? 'PAUSED' : 'ACTIVE';
      if (state === asked) {
        assertRefused(response, where, { status: 409, code: 'STATE_CONFLICT' }, log);
        assert.equal(response.body.error.details?.state, state, `${where}: the conflict names the current state: ${response.text.slice(0, 300)}`);
      } else {
        assert.equal(response.status, 200, `${where}: ${state} → ${asked}: ${response.text.slice(0, 300)}`);
        assertMatchesSpec(operationId, 200, response.body);
        assert.equal(response.body.data.subscription.state, asked, where);
      }
      return;
    }
    if (operationId === 'ackSubscription') {
      await expectAck(where, value.sequence as string, response, before);
      return;
    }
    if (operationId !== 'createSubscription') return;
    const queues = value.queues as string[] | undefined;
    const name = value.name as string;
    if (queues?.some((q) => !QUEUES.has(q))) {
      assertRefused(response, where, { status: 404, code: 'NOT_FOUND' }, log);
      return;
    }
    if (subscriptionNames.has(name)) {
      assertRefused(response, where, { status: 409, code: 'STATE_CONFLICT' }, log);
      assert.equal(response.body.error.details?.field, 'name', `${where}: a taken name is the conflict: ${response.text.slice(0, 300)}`);
      return;
    }
    assert.equal(response.status, 200, `${where}: a valid subscription under a new name: ${response.text.slice(0, 300)}`);
    assertMatchesSpec('createSubscription', 200, response.body);
    subscriptionNames.add(name);
    const made = response.body.data.subscription;
    assert.deepEqual(
      [made.name, made.types, made.queues, made.state, response.body.data.deduplicated],
      [name, value.types, value.queues, 'ACTIVE', false],
      `${where}: the subscription as sent: ${response.text.slice(0, 300)}`,
    );
    if (value.from === 'beginning') assert.equal(made.acked_sequence, '0', `${where}: from the beginning`);
    else {
      const head = await namespaceHead();
      assert.ok(BigInt(made.acked_sequence) > (before.head ?? 0n), `${where}: from now, after its own creation: ${made.acked_sequence}`);
      assert.equal(made.acked_sequence, String(head), `${where}: from now: the newest event of the namespace`);
    }
  }

  /**
   * An ack, predicted from the subscription's position and the namespace's newest event before
   * it: the position again is 200 and moves nothing (the row as it was); below it, or beyond the
   * newest event, 409 STATE_CONFLICT naming `sequence` (the refusal changed nothing: exchange);
   * else 200 at the new position.
   */
  async function expectAck(where: string, sequence: string, response: TestResponse, before: Before): Promise<'again' | 'below' | 'beyond' | 'forward'> {
    assert.ok(before.subscription && before.head !== null, `${where}: no state taken before the ack`);
    const { id, facts } = before.subscription;
    const wanted = BigInt(sequence);
    const show = `${where} (position ${facts.acked}, newest event ${before.head}): ${response.status} ${response.text.slice(0, 300)}`;
    if (wanted < facts.acked || wanted > before.head) {
      assertRefused(response, where, { status: 409, code: 'STATE_CONFLICT' }, log);
      assert.equal(response.body.error.details?.field, 'sequence', show);
      return wanted < facts.acked ? 'below' : 'beyond';
    }
    assert.equal(response.status, 200, show);
    assertMatchesSpec('ackSubscription', 200, response.body);
    assert.equal(response.body.data.subscription.acked_sequence, String(wanted), show);
    const now = await subscriptionFacts(id);
    if (wanted === facts.acked) {
      assert.equal(now.row, facts.row, `${show}: acknowledging the position again changed the subscription`);
      return 'again';
    }
    assert.equal(now.acked, wanted, `${show}: the stored position`);
    return 'forward';
  }

  async function createSubscription(body: JsonObject, state: 'ACTIVE' | 'PAUSED' = 'ACTIVE'): Promise<string> {
    const r = await api.request('POST', '/v1/subscriptions', { token, key: freshKey(), body });
    assert.equal(r.status, 200, r.text);
    subscriptionNames.add(body.name as string);
    const id = r.body.data.subscription.subscription_id as string;
    if (state === 'PAUSED') {
      const paused = await api.request('POST', `/v1/subscriptions/${id}:pause`, { token, key: freshKey(), body: { reason: 'fuzz target' } });
      assert.equal(paused.status, 200, paused.text);
    }
    return id;
  }

  async function createSchedule(body: JsonObject): Promise<string> {
    const r = await api.request('POST', `/v1/queues/${QUEUE}/schedules`, { token, key: freshKey(), body });
    assert.equal(r.status, 200, r.text);
    scheduleNames.add(body.name as string);
    return r.body.data.schedule.schedule_id as string;
  }

  before(async () => {
    t = await freshDatabase('fuzzbodies');
    api = await testApp(t.db);
    api.deps.log = log.logger;
    tenant = await createTenant(t.db, { namespace: 'fuzz-bodies', queues: [QUEUE, TIGHT_QUEUE], resourceAccess: true });
    token = await createCredential(t.db, tenant, [...ALL_ACTIONS], ['*']);
    bulk = new BulkModel(t.db, tenant.applicationId);
    cancelledTask = await submit();
    const cancelled = await api.request('POST', `/v1/tasks/${cancelledTask}:cancel`, { token, key: freshKey(), body: { reason: 'fuzz target' } });
    assert.equal(cancelled.status, 200, cancelled.text);
    waitingTask = await submit();
    activeSchedule = await createSchedule(VALID.createSchedule as JsonObject);
    pausedSchedule = await createSchedule({ ...(VALID.createSchedule as JsonObject), name: 'fz-paused' });
    await pauseCreated('before', pausedSchedule);
    activeSubscription = await createSubscription(VALID.createSubscription as JsonObject);
    pausedSubscription = await createSubscription({ name: 'fz-paused', reason: 'fuzz target' }, 'PAUSED');
    ackedSubscription = await createSubscription({ name: 'fz-acked', reason: 'fuzz target: acks', from: 'beginning' });
    const acked = await api.request('POST', `/v1/subscriptions/${ackedSubscription}:ack`, { token, key: freshKey(), body: VALID.ackSubscription });
    assert.equal(acked.status, 200, acked.text);
  });

  after(async () => {
    if (!t) return;
    if (bulk) console.log(`# fuzz: bulk submit item results checked: ${bulk.summary()}`);
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  test('every operation with a body has a valid example here, and the examples are valid per openapi.yaml', () => {
    assert.deepEqual([...OPERATION_IDS].sort(), Object.keys(VALID).sort());
    for (const id of OPERATION_IDS) assert.ok(bodyVerdict(id, VALID[id]).valid, `${id}: the example is not valid per openapi.yaml`);
    // Every item of the bulk example is valid too, and the body limits are what the spec says.
    assert.deepEqual(
      bodyVerdict('submitTasks', VALID.submitTasks).items?.map((v) => v.valid),
      [true, true, true],
    );
    assert.equal(BULK_LIMIT, 4 * 1024 * 1024, 'submitTasks: x-orbit-max-body-bytes');
    for (const id of OPERATION_IDS) if (id !== 'submitTasks') assert.equal(maxBodyBytes(id), DEFAULT_MAX_BODY_BYTES, `${id}: the default body limit`);
  });

  test('arbitrary JSON values as bodies: 400 naming a field the spec objects to, never 5xx, nothing changed', async () => {
    await runProperty(
      'arbitrary JSON bodies',
      fc.record({ operationId: fc.constantFrom(...OPERATION_IDS), value: fc.jsonValue({ maxDepth: 5, stringUnit: 'binary' }) }),
      async ({ operationId, value }) => {
        const where = `${operationId} body ${JSON.stringify(value).slice(0, 120)}`;
        const response = await exchange(where, operationId, JSON.stringify(value));
        await expectVerdict(where, operationId, value, response);
      },
      { numRuns: 300 },
    );
  });

  test('mutations of valid bodies (fields dropped/added/renamed, wrong types, nulls, huge numbers, long and unicode strings, escaped and duplicate keys)', async () => {
    await runProperty(
      'mutated valid bodies',
      bodyCase,
      async (c) => {
        fc.pre(Buffer.byteLength(c.text) <= maxBodyBytes(c.base)); // larger bodies have their own property
        const where = `${c.label}: ${c.text.slice(0, 160)}`;
        const response = await exchange(where, c.base, c.text);
        if (c.unrepresentable && response.status === 400) {
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', location: 'body' }, log);
          return;
        }
        if (c.duplicate !== null) {
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: fieldNames(c.duplicate, 'body'), location: 'body' }, log);
          return;
        }
        await expectVerdict(where, c.base, JSON.parse(c.text), response);
      },
      { numRuns: 400 },
    );
  });

  /** A start_at written from fields, some of them outside the calendar (month 0 or 13, day 31 of April, hour 24, offset +24:00). */
  const startAtFromFields = fc
    .record({
      year: fc.oneof(fc.integer({ min: 0, max: 9999 }), fc.constantFrom(0, 1, 999, 1000, 1900, 1970, 2000, 2024, 2027, 2028, 2100, 2400, 9999)),
      month: fc.integer({ min: 0, max: 13 }),
      day: fc.oneof(fc.integer({ min: 0, max: 32 }), fc.constantFrom(28, 29, 30, 31)),
      hour: fc.oneof(fc.integer({ min: 0, max: 23 }), fc.constantFrom(0, 23, 24, 29)),
      minute: fc.constantFrom(0, 30, 59, 60),
      second: fc.constantFrom(0, 59, 60),
      fraction: fc.constantFrom('', '.5', '.123', '.999999'),
      offset: fc.constantFrom('Z', '+00:00', '-00:00', '+05:45', '-01:00', '+14:00', '-12:00', '+23:59', '-23:59', '+24:00', '-00:60'),
    })
    .map((f) => {
      const two = (n: number) => String(n).padStart(2, '0');
      return `${String(f.year).padStart(4, '0')}-${two(f.month)}-${two(f.day)}T${two(f.hour)}:${two(f.minute)}:${two(f.second)}${f.fraction}${f.offset}`;
    });

  /** A cron the spec takes (croner reads five or six fields, some never firing), one it does not, fields drawn at random, or anything. */
  const cronExpression = fc.oneof(
    {
      weight: 4,
      arbitrary: fc.constantFrom(
        '0 9 * * 1-5',
        '*/15 * * * *',
        '0 0 1 1 *',
        '30 2 * * 0',
        '0 0 29 2 *',
        '0 0 30 2 *',
        '0 */5 * * * *',
        '59 59 23 31 12 *',
        '0 0 31 * 1#5',
        '? ? ? ? ?',
        ' 0 9 * * * ',
        '0\t9 * * *',
        '0  9   * * *',
        '0 9 * * MON-FRI',
        '0 9 * JAN *',
      ),
    },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        '61 * * * *',
        '* * * *',
        '* * * * * * *',
        '0 0 * * 8',
        '60 * * * * *',
        'L * * * *',
        '@daily',
        ' ',
        'x',
        '0 25 * * *',
        '0 9 32 * *',
        '0 9 * 13 *',
        '1-0 * * * *',
        '0 9 * * 1-5 extra words',
        '*/0 * * * *',
      ),
    },
    {
      weight: 2,
      arbitrary: fc
        .array(fc.constantFrom('*', '0', '5', '59', '60', '1-5', '*/2', '?', 'L', '#', ',', 'a', '-1', '1,2', 'JAN', 'SUN', '7', '1#2', '5L'), {
          minLength: 3,
          maxLength: 7,
        })
        .map((fields) => fields.join(' ')),
    },
    { weight: 1, arbitrary: nastyString(40).filter((text) => text.length > 0 && text.length <= 200) },
  );

  test('createSchedule trigger rules stated in words (exactly one of cron and interval_seconds, a cron croner reads, a known time zone, a start_at that exists): 400 naming the field, else 200 starting when the spec says', async () => {
    let n = 0;
    /** What the runs met: `200 cron`, `200 interval`, `400 <field>`. */
    const outcomes = new Map<string, number>();
    const tally = (outcome: string) => outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    await runProperty(
      'schedule trigger rules',
      fc.record({
        trigger: fc.constantFrom('cron', 'cron', 'cron', 'interval', 'interval', 'both', 'neither'),
        cron: cronExpression,
        interval: fc.oneof(fc.constantFrom(1, 59, 3600, 86400, 31536000), fc.integer({ min: 1, max: 31536000 })),
        timezone: fc.option(
          fc.oneof(
            {
              weight: 4,
              arbitrary: fc.constantFrom(
                'UTC',
                'utc',
                'Europe/Berlin',
                'Asia/Shanghai',
                'Asia/Kathmandu',
                'America/St_Johns',
                'Australia/Lord_Howe',
                'Etc/GMT+12',
                'EST5EDT',
                'GMT',
                'Europe/berlin',
              ),
            },
            {
              weight: 1,
              arbitrary: fc.constantFrom('Mars/Olympus', 'Etc/GMT+14', '+05:00', 'Z', ' UTC', 'local', 'Europe/Berlin/Mitte', 'Asia/Shanghai\u0000'),
            },
            { weight: 1, arbitrary: nastyString(20).filter((text) => text.length > 0 && text.length <= 64) },
          ),
          { nil: undefined, freq: 3 },
        ),
        startAt: fc.option(
          fc.oneof(
            startAtFromFields,
            fc.constantFrom(
              '2099-01-01T00:00:00Z',
              '2028-02-29T12:00:00+05:45',
              '2027-02-29T00:00:00Z',
              '2100-02-29T00:00:00Z',
              '2400-02-29T00:00:00Z',
              '2030-04-31T00:00:00Z',
              '9999-12-31T23:59:59.999999Z',
              '9999-12-31T23:59:59.999999+00:00',
              '9999-12-31T23:59:59-00:01',
              '9999-12-31T23:30:00-01:00',
              '0000-01-01T00:00:00Z',
              '0000-01-01T00:30:00+01:00',
              '0000-01-01T00:00:00-00:01',
              '0000-02-29T00:00:00Z',
              '0001-01-01T00:00:00Z',
              '0001-01-01T00:00:00+00:01',
              '1969-12-31T23:59:59.999Z',
            ),
          ),
          { nil: undefined, freq: 3 },
        ),
      }),
      async ({ trigger, cron, interval, timezone, startAt }) => {
        const body: JsonObject = { name: `fzs-${++n}-${randomBytes(2).toString('hex')}`, reason: '计划规则', payload: { n } };
        if (trigger === 'cron' || trigger === 'both') body.cron = cron;
        if (trigger === 'interval' || trigger === 'both') body.interval_seconds = interval;
        if (timezone !== undefined) body.timezone = timezone;
        if (startAt !== undefined) body.start_at = startAt;
        const where = `createSchedule ${JSON.stringify(body).slice(0, 240)}`;
        const response = await exchange(where, 'createSchedule', JSON.stringify(body));
        const verdict = bodyVerdict('createSchedule', body);
        if (!verdict.valid) {
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: verdict.fields, location: 'body' }, log);
          tally(`400 ${response.body.error.details.field}`);
          return;
        }
        tally(`200 ${body.cron === undefined ? 'interval' : 'cron'}`);
        assert.equal(
          response.status,
          200,
          `${where}: valid per openapi.yaml (also its rules in words) but answered ${response.status}: ${response.text.slice(0, 300)}`,
        );
        assertMatchesSpec('createSchedule', 200, response.body);
        const schedule = response.body.data.schedule;
        scheduleNames.add(body.name as string);
        try {
          assert.equal(schedule.name, body.name, where);
          assert.equal(schedule.cron, body.cron, `${where}: cron`);
          assert.equal(schedule.interval_seconds, body.interval_seconds, `${where}: interval_seconds`);
          const createdMs = Date.parse(schedule.created_at);
          const startMs = startAt === undefined ? null : (timestampInputMillis(startAt) as number);
          assert.equal(schedule.start_at === undefined ? null : Date.parse(schedule.start_at), startMs, `${where}: start_at, in UTC`);
          // "The first trigger point is the first one at or after start_at (default: the creation time): for an interval,
          // start_at itself, or one interval after the creation time when start_at is left out; a start_at in the past
          // starts from the creation time instead."
          const from = startMs !== null && startMs >= createdMs ? startMs : null;
          const first =
            body.cron !== undefined
              ? cronPointFrom(body.cron as string, (body.timezone as string | undefined) ?? 'UTC', from ?? createdMs)
              : (from ?? createdMs + interval * 1000);
          assert.equal(
            schedule.next_fire_at === undefined ? null : Date.parse(schedule.next_fire_at),
            first,
            `${where}: the first trigger point (created ${schedule.created_at})`,
          );
          if (body.cron !== undefined) assert.equal(schedule.timezone, (body.timezone as string | undefined) ?? 'UTC', `${where}: timezone`);
        } finally {
          await pauseCreated(where, schedule.schedule_id);
        }
      },
      { numRuns: 250 },
    );
    console.log(
      `# fuzz: schedule trigger outcomes: ${[...outcomes]
        .sort()
        .map(([k, v]) => `${k} ×${v}`)
        .join(', ')}`,
    );
    // The generator reaches every rule and both triggers (else the property proves less than it says).
    for (const outcome of ['200 cron', '200 interval', '400 cron', '400 timezone', '400 start_at']) assert.ok(outcomes.has(outcome), `no run met "${outcome}"`);
  });

  /** Event types: ones the spec names, ones its pattern takes, ones it does not. */
  const eventType = fc.oneof(
    {
      weight: 4,
      arbitrary: fc.constantFrom(
        'task.submitted',
        'task.started',
        'task.retry_scheduled',
        'task.succeeded',
        'queue.created',
        'schedule.paused',
        'subscription.created',
      ),
    },
    { weight: 2, arbitrary: fc.stringMatching(/^[a-z]{1,8}(\.[a-z_]{1,8}){1,3}$/) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        'Task.Submitted',
        'task',
        'task.',
        '.task',
        'task..x',
        'task.sub-mitted',
        'task.1',
        ' task.submitted',
        '',
        'tâsk.x',
        'task.submitted\u0000',
      ),
    },
    { weight: 1, arbitrary: nastyString(20) },
  );
  /** Queue names: the namespace's, valid ones it lacks, invalid ones. */
  const queueName = fc.oneof(
    { weight: 5, arbitrary: fc.constantFrom(QUEUE, TIGHT_QUEUE) },
    { weight: 2, arbitrary: fc.constantFrom('no-such-queue', 'fuzz2', 'q.x', '0') },
    { weight: 1, arbitrary: fc.constantFrom('FUZZ', 'fuzz ', '-fuzz', '', 'a'.repeat(64), 'é') },
    { weight: 1, arbitrary: nastyString(20) },
  );

  test('createSubscription filters (types and queues valid, invalid, repeated, of queues the namespace lacks; from): 400 naming the field, 404, 409 for a taken name, else 200 as sent', async () => {
    let n = 0;
    const outcomes = new Map<string, number>();
    const tally = (outcome: string) => outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    await runProperty(
      'subscription filters',
      fc.record({
        name: fc.oneof(
          { weight: 6, arbitrary: fc.constant('') },
          { weight: 1, arbitrary: fc.constantFrom(SUBSCRIPTION_NAME, 'fz-paused', 'fz-acked') },
          { weight: 1, arbitrary: nastyString(20) },
        ),
        types: fc.option(fc.array(eventType, { minLength: 0, maxLength: 5 }), { nil: undefined, freq: 2 }),
        queues: fc.option(fc.array(queueName, { minLength: 0, maxLength: 4 }), { nil: undefined, freq: 2 }),
        from: fc.option(fc.constantFrom('now', 'beginning', 'beginning', 'NOW', 'start'), { nil: undefined, freq: 3 }),
      }),
      async ({ name, types, queues, from }) => {
        const body: JsonObject = { name: name === '' ? `fzsub-${++n}-${randomBytes(2).toString('hex')}` : name, reason: '订阅过滤' };
        if (types !== undefined) body.types = types;
        if (queues !== undefined) body.queues = queues;
        if (from !== undefined) body.from = from;
        const where = `createSubscription ${JSON.stringify(body).slice(0, 240)}`;
        const response = await exchange(where, 'createSubscription', JSON.stringify(body));
        await expectVerdict(where, 'createSubscription', body, response);
        const field = response.body?.error?.details?.field as string | undefined;
        tally(response.status === 400 ? `400 ${String(field).replace(/\[\d+\]$/, '[i]')}` : String(response.status));
      },
      { numRuns: 250 },
    );
    console.log(
      `# fuzz: subscription filter outcomes: ${[...outcomes]
        .sort()
        .map(([k, v]) => `${k} ×${v}`)
        .join(', ')}`,
    );
    for (const outcome of ['200', '404', '409', '400 types', '400 types[i]', '400 queues', '400 queues[i]', '400 from'])
      assert.ok(outcomes.has(outcome), `no run met "${outcome}"`);
  });

  test('pause, resume, read and ack in random order on fresh subscriptions: each 200 or the 409 the model of its state and position predicts, and a read shows the events after the position', async () => {
    const step = fc.oneof(
      fc.constant({ kind: 'pause' as const, at: '' }),
      fc.constant({ kind: 'resume' as const, at: '' }),
      fc.record({ kind: fc.constant('read' as const), at: fc.constantFrom('1', '2', '50', '100') }),
      fc.record({ kind: fc.constant('ack' as const), at: fc.constantFrom('below', 'again', 'next', 'read', 'read', 'head', 'beyond', 'max', 'zero') }),
    );
    let n = 0;
    const outcomes = new Map<string, number>();
    const tally = (outcome: string) => outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    await runProperty(
      'subscription state and position',
      fc.record({ from: fc.constantFrom('beginning', 'now'), steps: fc.array(step, { minLength: 1, maxLength: 8 }) }),
      async ({ from, steps }) => {
        const id = await createSubscription({ name: `fzsm-${++n}-${randomBytes(2).toString('hex')}`, reason: '状态机', from });
        const model = { state: 'ACTIVE', acked: (await subscriptionFacts(id)).acked };
        let lastRead: string | null = null;
        for (const [i, { kind, at }] of steps.entries()) {
          const where = `step ${i + 1} ${kind}${at ? ` ${at}` : ''} of ${JSON.stringify(steps)} on ${id} (${model.state}, position ${model.acked})`;
          if (kind === 'read') {
            const path = `/v1/subscriptions/${id}/events?limit=${at}&wait_seconds=0`;
            const response = await sendRaw(api.app, 'GET', path, { Authorization: `Bearer ${token}` }, undefined, AbortSignal.timeout(30_000));
            if (model.state === 'PAUSED') {
              assertRefused(response, where, { status: 409, code: 'STATE_CONFLICT' }, log);
              assert.equal(response.body.error.details?.state, 'PAUSED', where);
              tally('read 409');
              continue;
            }
            assertNever5xx(response, where, log);
            assert.equal(response.status, 200, `${where}: ${response.text.slice(0, 300)}`);
            assertMatchesSpec('readSubscription', 200, response.body);
            // No filters and every queue in scope: what /v1/events shows after the position.
            const feed = await api.request('GET', `/v1/events?after=${model.acked}&limit=${at}`, { token });
            assert.deepEqual(response.body.data.events, feed.body.data.events, `${where}: the events after the position`);
            lastRead = (response.body.data.events as Array<{ sequence: string }>).at(-1)?.sequence ?? lastRead;
            tally('read 200');
            continue;
          }
          if (kind === 'pause' || kind === 'resume') {
            const operationId = kind === 'pause' ? 'pauseSubscription' : 'resumeSubscription';
            const response = await exchange(where, operationId, JSON.stringify({ reason: '状态机' }), { path: `/v1/subscriptions/${id}:${kind}` });
            const to = kind === 'pause' ? 'PAUSED' : 'ACTIVE';
            if (model.state === to) {
              assertRefused(response, where, { status: 409, code: 'STATE_CONFLICT' }, log);
              assert.equal(response.body.error.details?.state, to, `${where}: the conflict names the current state`);
              tally(`${kind} 409`);
            } else {
              assert.equal(response.status, 200, `${where}: ${response.text.slice(0, 300)}`);
              assertMatchesSpec(operationId, 200, response.body);
              assert.deepEqual([response.body.data.subscription.state, response.body.data.subscription.acked_sequence], [to, String(model.acked)], where);
              model.state = to;
              tally(`${kind} 200`);
            }
            continue;
          }
          const head = await namespaceHead();
          const sequence = {
            below: model.acked > 0n ? model.acked - 1n : 0n,
            again: model.acked,
            next: model.acked + 1n,
            read: lastRead === null ? model.acked : BigInt(lastRead),
            head,
            beyond: head + 1n,
            max: 18446744073709551615n,
            zero: 0n,
          }[at] as bigint;
          const response = await exchange(`${where} to ${sequence}`, 'ackSubscription', JSON.stringify({ sequence: String(sequence) }), {
            path: `/v1/subscriptions/${id}:ack`,
          });
          assert.equal(last.subscription?.facts.acked, model.acked, `${where}: the stored position differs from the model's`);
          const outcome = await expectAck(`${where} to ${sequence}`, String(sequence), response, last);
          if (outcome === 'forward') model.acked = sequence;
          tally(`ack ${outcome}`);
        }
        const facts = await subscriptionFacts(id);
        assert.deepEqual([facts.state, facts.acked], [model.state, model.acked], `after ${JSON.stringify(steps)}: the subscription differs from the model`);
      },
      { numRuns: 80 },
    );
    console.log(
      `# fuzz: subscription step outcomes: ${[...outcomes]
        .sort()
        .map(([k, v]) => `${k} ×${v}`)
        .join(', ')}`,
    );
    for (const outcome of ['pause 200', 'pause 409', 'resume 200', 'resume 409', 'read 200', 'read 409', 'ack again', 'ack below', 'ack beyond', 'ack forward'])
      assert.ok(outcomes.has(outcome), `no run met "${outcome}"`);
  });

  /** One hostile bulk body: over the limit or too deep is 400 for the whole body; else the spec's verdict, item by item. */
  async function bulkCase(where: string, queue: string, c: { text: string; unrepresentable: boolean }): Promise<void> {
    const response = await exchange(where, 'submitTasks', c.text, { queue });
    if (Buffer.byteLength(c.text) > BULK_LIMIT) {
      assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: 'body', location: 'body' }, log);
      return;
    }
    if (jsonDepth(c.text) > DEPTH_LIMIT) {
      assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: (f) => f === 'body' || f.startsWith('tasks'), location: 'body' }, log);
      return;
    }
    if (c.unrepresentable) {
      // "A number outside the range of a double is refused", user data included (openapi.yaml).
      assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: (f) => f === 'body' || f.startsWith('tasks'), location: 'body' }, log);
      return;
    }
    await expectVerdict(where, 'submitTasks', JSON.parse(c.text), response);
  }

  test('hostile bulk submits (items that replay, conflict, are mutated, at the delay/deadline and 256 KiB edges, deeply nested; up to 1,001 items; around 4 MiB): every item result as predicted', async () => {
    await runProperty(
      'hostile bulk bodies',
      fc.record({
        c: hostileBulkBody({ depthLimit: DEPTH_LIMIT, maxBodyBytes: BULK_LIMIT }),
        // Quotas with a few places left, so that they fill in the middle of a batch.
        squeezed: fc.constantFrom('none', 'none', 'none', 'queue', 'queue', 'application'),
        room: fc.integer({ min: 0, max: 6 }),
      }),
      async ({ c, squeezed, room }) => {
        const queue = squeezed === 'none' ? QUEUE : TIGHT_QUEUE;
        const where = `submitTasks to ${queue}${squeezed === 'none' ? '' : ` (${squeezed} with ${room} places left)`} ${c.label}: ${c.text.slice(0, 160)}`;
        if (squeezed !== 'none') await squeeze(squeezed, room);
        try {
          await bulkCase(where, queue, c);
        } finally {
          if (squeezed === 'application') await squeeze('application', -1);
        }
      },
      { numRuns: 100 },
    );
  });

  test('raw bytes: not UTF-8, not JSON, or broken in the middle of a valid body - 400 body, never 5xx', async () => {
    const badUtf8 = fc.constantFrom([0xff], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0x80], [0xf5, 0x80, 0x80, 0x80], [0xf0, 0x9f, 0x98]);
    const bytes = fc.oneof(
      fc.uint8Array({ maxLength: 512 }),
      fc.tuple(fc.constantFrom(...OPERATION_IDS), badUtf8, fc.nat()).map(([id, bad, at]) => {
        const text = Buffer.from(JSON.stringify(VALID[id]));
        const cut = text.indexOf('"', 2 + (at % Math.max(1, text.length - 4))) + 1 || 2;
        return new Uint8Array(Buffer.concat([text.subarray(0, cut), Buffer.from(bad), text.subarray(cut)]));
      }),
      fc.string({ maxLength: 200, unit: 'binary' }).map((s) => new Uint8Array(Buffer.from(s))),
      fc
        .constantFrom(
          '',
          ' ',
          'nul',
          'null',
          'true',
          '{',
          '}',
          '{"a":1,}',
          "{'a':1}",
          '{"a":01}',
          '{"a":NaN}',
          '{"a":Infinity}',
          '[1,]',
          '{"a":"\\x41"}',
          '"\\ud800"',
          '\uFEFF{}',
        )
        .map((s) => new Uint8Array(Buffer.from(s))),
    );
    await runProperty(
      'raw non-JSON bodies',
      fc.record({ operationId: fc.constantFrom(...OPERATION_IDS), bytes }),
      async ({ operationId, bytes: body }) => {
        const where = `${operationId} raw bytes ${Buffer.from(body).toString('hex').slice(0, 120)}`;
        const response = await exchange(where, operationId, body);
        let value: unknown;
        try {
          value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
        } catch {
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: 'body', location: 'body' }, log);
          return;
        }
        await expectVerdict(where, operationId, value, response);
      },
      { numRuns: 300 },
    );
  });

  test(`deep nesting up to 10,000 levels (limit ${DEPTH_LIMIT}): refused with 400 past the limit, accepted within it, never 5xx`, async () => {
    const depth = fc.oneof(
      fc.integer({ min: 1, max: DEPTH_LIMIT + 8 }),
      fc.integer({ min: DEPTH_LIMIT - 3, max: DEPTH_LIMIT + 3 }),
      fc.integer({ min: 100, max: 10_000 }),
      fc.constantFrom(1000, 5000, 10_000),
    );
    await runProperty(
      'deep nesting in HTTP bodies',
      fc.record({
        depth,
        shape: fc.constantFrom<NestShape>('array', 'object', 'mixed'),
        placement: fc.constantFrom('whole', 'payload', 'payload', 'result', 'own-field', 'item-payload', 'item-payload'),
      }),
      async ({ depth: total, shape, placement }) => {
        // `total` counts every level of the document, the body's own object included.
        let operationId: string;
        let text: string;
        let path: string | undefined;
        let prefix: string;
        if (placement === 'whole') {
          operationId = 'submitTask';
          text = nested(total, shape === 'object' ? 'object' : shape);
          prefix = shape === 'object' ? 'k' : 'body';
        } else if (placement === 'payload') {
          operationId = 'submitTask';
          text = total < 2 ? '{"payload":1}' : `{"payload":${nested(total - 1, 'object')}}`;
          if (shape !== 'object' && total >= 3) text = `{"payload":{"k":${nested(total - 2, shape)}}}`;
          prefix = 'payload';
        } else if (placement === 'item-payload') {
          // body, tasks, the item and its payload are four levels; the same key for the same document (replayed after the first time).
          operationId = 'submitTasks';
          const head = `{"tasks":[{"idempotency_key":"fzn-${total}-${shape}","payload":`;
          text = total < 6 ? `${head}{}}]}` : `${head}{"k":${nested(total - 4, shape)}}}]}`;
          prefix = 'tasks';
        } else if (placement === 'result') {
          operationId = 'resolveTask';
          const reviewed = await submit();
          await t.db.exec("UPDATE orbit_tasks SET state = 'NEEDS_REVIEW' WHERE task_id = UNHEX(?)", [reviewed]);
          path = pathFor('resolveTask', reviewed);
          text = total < 2 ? '{"outcome":"succeeded","reason":"深","result":1}' : `{"outcome":"succeeded","reason":"深","result":${nested(total - 1, shape)}}`;
          prefix = 'result';
        } else {
          operationId = 'createQueue';
          text = total < 2 ? '{"name":1,"reason":"x"}' : `{"name":${nested(total - 1, shape)},"reason":"x"}`;
          prefix = 'name';
        }
        const where = `${placement} ${shape} nesting of ${total} levels (${operationId})`;
        const response = await exchange(where, operationId, text, path === undefined ? {} : { path });
        if (total > DEPTH_LIMIT) {
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', location: 'body', field: (f) => f === 'body' || f.startsWith(prefix) }, log);
          return;
        }
        const value = JSON.parse(text);
        await expectVerdict(where, operationId, value, response);
        if (response.status === 200 && placement === 'item-payload') {
          const id = response.body.data.results[0].task.task_id as string;
          const stored = (await api.request('GET', `/v1/tasks/${id}`, { token })).body.data;
          assert.deepEqual(stored.payload, value.tasks[0].payload, `${where}: stored user data differs`);
        }
        if (response.status === 200 && (placement === 'payload' || placement === 'result')) {
          // Accepted user data comes back as sent.
          const id = response.body.data.task.task_id as string;
          const stored = (await api.request('GET', `/v1/tasks/${id}`, { token })).body.data;
          assert.deepEqual(
            placement === 'payload' ? stored.payload : stored.result,
            placement === 'payload' ? value.payload : value.result,
            `${where}: stored user data differs`,
          );
        }
      },
      { numRuns: 100 },
    );
  });

  test('the nesting limit is documented in openapi.yaml and asyncapi.yaml', () => {
    assert.notEqual(documentedDepthLimit(OPENAPI_TEXT), null, 'openapi.yaml does not say how deeply a body may nest');
    assert.notEqual(documentedDepthLimit(ASYNCAPI_TEXT), null, 'asyncapi.yaml does not say how deeply a frame may nest');
  });

  test('user data with numbers JSON cannot keep (1e400, -1e400, 1e-400) is refused naming where, never silently stored as null or 0', async () => {
    await runProperty(
      'unrepresentable numbers in payload',
      fc.record({ literal: fc.constantFrom('1e400', '-1e400', '1E999', '1e-400', '-2.5e-999'), nest: fc.boolean(), batch: fc.boolean() }),
      async ({ literal, nest, batch }) => {
        const payload = nest ? `{"a":[${literal}]}` : `{"a":${literal}}`;
        const text = batch
          ? `{"tasks":[{"idempotency_key":"fzu-ok","payload":{}},{"idempotency_key":"fzu-${literal}","payload":${payload}}]}`
          : `{"payload":${payload}}`;
        const where = `${batch ? 'bulk item' : 'payload'} with ${literal}`;
        const response = await exchange(where, batch ? 'submitTasks' : 'submitTask', text);
        const named = (f: string) => f === 'body' || f.startsWith(batch ? 'tasks[1].payload' : 'payload');
        if (response.status >= 400) {
          assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: named, location: 'body' }, log);
          return;
        }
        if (batch) {
          // Refusing only the item (naming where) would do too; storing it would not.
          const item = response.body.data.results[1];
          if (item.status === 'refused' && item.error.code === 'INVALID_ARGUMENT' && named(item.error.details?.field)) return;
        }
        const task = batch ? response.body.data.results[1].task : response.body.data.task;
        assert.ok(task, `${where}: ${response.text.slice(0, 300)}`);
        const stored = (await api.request('GET', `/v1/tasks/${task.task_id}`, { token })).body.data.payload;
        const a = nest ? stored.a[0] : stored.a;
        assert.fail(`${where}: accepted (${response.status}), and the number was stored as ${JSON.stringify(a)}`);
      },
      { numRuns: 10 },
    );
  });

  /** Bodies refused for their content whatever their size, to push to each operation's byte limit: the head, then padding. */
  const SIZED: Record<string, { head: string; fields: string[] }> = {
    createQueue: { head: '{"name":"BAD NAME","reason":"r"', fields: ['name', 'pad'] },
    submitTask: { head: '{"payload":[]', fields: ['payload', 'pad'] },
    submitTasks: { head: '{"tasks":[]', fields: ['tasks', 'pad'] },
    createSchedule: { head: '{"name":"BAD NAME","reason":"r","payload":{},"interval_seconds":86400', fields: ['name', 'pad'] },
    createSubscription: { head: '{"name":"BAD NAME","reason":"r","queues":["fuzz"]', fields: ['name', 'pad'] },
    ackSubscription: { head: '{"sequence":"-1"', fields: ['sequence', 'pad'] },
  };

  test("bodies near and over each operation's limit (x-orbit-max-body-bytes: 4 MiB for submitTasks, else 1 MiB; whitespace or multi-byte characters): the limit is in bytes, and exactly the limit is not refused for size", async () => {
    await runProperty(
      'body size limit',
      fc.record({
        operationId: fc.constantFrom(...Object.keys(SIZED)),
        delta: fc.oneof(
          fc.integer({ min: -64, max: 64 }),
          fc.constantFrom(-1, 0, 1, 2),
          fc.integer({ min: 65, max: 7 * DEFAULT_MAX_BODY_BYTES }),
          // Between another operation's limit and this one's.
          fc.integer({ min: -4 * DEFAULT_MAX_BODY_BYTES, max: -65 }),
        ),
        filler: fc.constantFrom('whitespace', 'two-byte', 'four-byte'),
        declared: fc.constantFrom('none', 'exact', 'smaller'),
      }),
      async ({ operationId, delta, filler, declared }) => {
        const limit = maxBodyBytes(operationId);
        const { head: start, fields } = SIZED[operationId] as { head: string; fields: string[] };
        const size = Math.max(limit + delta, start.length + 64);
        let text: string;
        if (filler === 'whitespace') {
          text = start + ' '.repeat(size - start.length - 1) + '}';
        } else {
          const head = `${start},"pad":"`;
          const room = size - head.length - 2;
          const unit = filler === 'two-byte' ? 'é' : '𝄞';
          const width = filler === 'two-byte' ? 2 : 4;
          text = head + unit.repeat(Math.floor(room / width)) + 'x'.repeat(room % width) + '"}';
        }
        const bytes = Buffer.from(text);
        assert.equal(bytes.length, size);
        const headers: Record<string, string> = {};
        if (declared === 'exact') headers['Content-Length'] = String(size);
        if (declared === 'smaller') headers['Content-Length'] = String(Math.max(0, size - 1000));
        const where = `${operationId} body of ${size} bytes (limit ${limit}, ${filler}, Content-Length ${declared})`;
        const response = await exchange(where, operationId, new Uint8Array(bytes), { headers });
        if (size > limit) assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: 'body', location: 'body' }, log);
        else assertRefused(response, where, { status: 400, code: 'INVALID_ARGUMENT', field: fields, location: 'body' }, log);
      },
      { numRuns: 36 },
    );
  });

  describe('chunked uploads without Content-Length, to a real server', () => {
    let server: RunningServer;
    const serverLog = new LogCapture();
    before(async () => {
      // A real server on a real socket (app.request cannot stream a body), with its background
      // loops stopped: recovery would expire tasks with short deadlines (valid bodies may ask for
      // 1 s) and the schedule loop fire schedules while refusals are compared - however long
      // this takes, nothing but the requests changes the database.
      server = await startServer({ ...testConfig(), databaseUrl: t.url, listenPort: 0 }, { log: serverLog.logger });
      await Promise.all([server.recovery.stop(), server.schedules.stop()]);
    });
    after(async () => {
      await server?.close();
    });

    const lastServerError = () => describeLogLine([...serverLog.lines].reverse().find((l) => Number(l.level) >= 50));
    /** A raw chunked-upload answer as a TestResponse; a 5xx fails at once, with the server's last error line. */
    function answered(response: { status: number; headers: unknown; text: string }, where: string): TestResponse {
      let body: unknown;
      try {
        body = JSON.parse(response.text);
      } catch {
        body = undefined;
      }
      if (response.status >= 500) assert.fail(`${where}: answered ${response.status}: ${response.text.slice(0, 300)}\n    ${lastServerError()}`);
      return { status: response.status, headers: new Headers(response.headers as Record<string, string>), text: response.text, body };
    }

    /**
     * A chunked POST. Resolves with the response as soon as it arrives - also before the body is
     * finished - or with null when none came within `waitMs` after the last chunk was written.
     */
    function chunked(
      operationId: string,
      path: string,
      chunks: Buffer[],
      options: { end: boolean; waitMs: number },
    ): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string; writtenBytes: number } | null> {
      const headers: Record<string, string> = { ...headersFor(), 'Transfer-Encoding': 'chunked', Connection: 'close' };
      if (!declaresIdempotencyKey(operationId)) delete headers['Idempotency-Key'];
      const url = new URL(path, server.url);
      return new Promise((resolve, reject) => {
        let written = 0;
        let settled = false;
        let timer: NodeJS.Timeout | undefined;
        const request = http.request(url, {
          method: 'POST',
          headers,
        });
        request.on('response', (res) => {
          const parts: Buffer[] = [];
          res.on('data', (d: Buffer) => parts.push(d));
          res.on('end', () => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            request.destroy();
            resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(parts).toString('utf8'), writtenBytes: written });
          });
        });
        request.on('error', (error: NodeJS.ErrnoException) => {
          if (settled) return;
          // The server may close the connection while we are still writing (EPIPE/ECONNRESET) - a response may still follow.
          if (error.code === 'EPIPE' || error.code === 'ECONNRESET') return;
          settled = true;
          clearTimeout(timer);
          reject(error);
        });
        (async () => {
          for (const chunk of chunks) {
            if (settled || request.destroyed) return;
            written += chunk.length;
            request.write(chunk);
            // Let the socket and the server run between chunks, like a real upload.
            if (written % (64 * 1024) < chunk.length) await new Promise((r) => setImmediate(r));
          }
          if (options.end) request.end();
          timer = setTimeout(() => {
            if (settled) return;
            settled = true;
            request.destroy();
            resolve(null);
          }, options.waitMs);
        })().catch(reject);
      });
    }

    const split = (bytes: Buffer, sizes: number[]): Buffer[] => {
      const out: Buffer[] = [];
      let at = 0;
      for (let i = 0; at < bytes.length; i++) {
        const n = Math.max(1, sizes[i % Math.max(1, sizes.length)] ?? 1);
        out.push(bytes.subarray(at, at + n));
        at += n;
      }
      return out;
    };

    test('a chunked body under the limit gets the same answer as the same bytes sent at once', async () => {
      await runProperty(
        'chunked bodies under the limit',
        fc.record({ c: bodyCase, sizes: fc.array(fc.integer({ min: 1, max: 4096 }), { minLength: 1, maxLength: 8 }) }),
        async ({ c, sizes }) => {
          const bytes = Buffer.from(c.text);
          fc.pre(bytes.length <= maxBodyBytes(c.base));
          const where = `${c.label}, chunked in ${sizes.join('/')}-byte pieces: ${c.text.slice(0, 120)}`;
          const state = await stateBefore(c.base, pathFor(c.base), QUEUE);
          const before = state.fingerprint;
          // Generous: it costs nothing when the answer comes at once.
          const response = await chunked(c.base, pathFor(c.base), split(bytes, sizes), { end: true, waitMs: 30_000 });
          assert.ok(response, `${where}: no answer within 30 s`);
          const asTest = answered(response, where);
          if (asTest.status >= 400) {
            assertRefused(asTest, where);
            assert.deepEqual(await dbFingerprint(t.db), before, `${where}: a refused request changed the database`);
          }
          if (c.unrepresentable && asTest.status === 400) assertRefused(asTest, where, { status: 400, code: 'INVALID_ARGUMENT', location: 'body' });
          else if (c.duplicate !== null) assertRefused(asTest, where, { status: 400, field: fieldNames(c.duplicate, 'body'), location: 'body' });
          else await expectVerdict(where, c.base, JSON.parse(c.text), asTest, state);
        },
        { numRuns: 60 },
      );
    });

    test('a chunked body over the limit is refused as soon as the limit is passed (not read to its end first), with 400 body', async () => {
      await runProperty(
        'chunked bodies over the limit',
        fc.record({
          operationId: fc.constantFrom('submitTask', 'submitTasks'),
          over: fc.integer({ min: 1, max: 3 * DEFAULT_MAX_BODY_BYTES }),
          chunk: fc.integer({ min: 1024, max: 256 * 1024 }),
        }),
        async ({ operationId, over, chunk }) => {
          const limit = maxBodyBytes(operationId);
          const where = `${operationId}: chunked body of ${limit + over} bytes (limit ${limit}) in ${chunk}-byte chunks, the request left open`;
          const before = await dbFingerprint(t.db);
          const head = Buffer.from(operationId === 'submitTasks' ? '{"tasks":[{"idempotency_key":"fzc","payload":{"pad":"' : '{"payload":{"pad":"');
          const bytes = Buffer.concat([head, Buffer.alloc(limit + over - head.length, 'x')]);
          // The request is never ended: a server that reads the whole body before checking its size never answers
          // (so the wait may be generous: only a server that never answers waits it out).
          const response = await chunked(operationId, pathFor(operationId), split(bytes, [chunk]), { end: false, waitMs: 20_000 });
          assert.ok(response, `${where}: no answer within 20 s of passing the limit - the body is read to its end before the size check`);
          const asTest = answered(response, where);
          assertRefused(asTest, where, { status: 400, code: 'INVALID_ARGUMENT', field: 'body', location: 'body' });
          assert.deepEqual(await dbFingerprint(t.db), before, `${where}: a refused request changed the database`);
        },
        { numRuns: 6 },
      );
      // The process is still healthy.
      const health = await fetch(`${server.url}/healthz`);
      assert.equal(health.status, 200);
    });
  });
});
