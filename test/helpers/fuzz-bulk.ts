/**
 * The bulk submit (`submitTasks`, POST /v1/queues/{queue}/tasks:batch) oracle of the fuzz tests,
 * and hostile bulk bodies to feed it.
 *
 * `BulkModel` predicts every item's result from what openapi.yaml says and what was admitted
 * before, and checks the answer against it:
 *
 *   - the answer is 200 and matches the spec (SubmitTasksResult), one result per item in order,
 *     the tallies are the counts of the statuses;
 *   - an item the spec refuses (SubmitTaskItem, or delay_seconds not less than deadline_seconds)
 *     is `refused` INVALID_ARGUMENT naming one of the fields the oracle expects (`tasks[3].priority`,
 *     location body), with no task;
 *   - a valid item whose key was admitted before (earlier in this batch included) is `replayed`
 *     with the original task when the content is the same (defaults filled in, key order
 *     ignored), else `refused` IDEMPOTENCY_CONFLICT;
 *   - a valid new item is `accepted` with a WAITING task exactly as sent while both quotas have
 *     room, else `refused` APPLICATION_FULL (checked first) or QUEUE_FULL with the documented
 *     details - so once a quota fills, no later item of the batch is accepted;
 *   - each result carries the item's key (empty when it had none that is a string).
 *
 * `assertBulkWrites` then checks the database: exactly one task and one receipt per accepted
 * item, the unfinished counters up by as many, and nothing at all changed when none was accepted.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { Database } from '../../server/store/database/database.ts';
import type { TestResponse } from './app.ts';
import { assertMatchesSpec } from '../contract/spec-validator.ts';
import { nastyString, nested, type Json } from './fuzz-common.ts';
import { mutate, mutation, spliceRaws } from './fuzz-mutations.ts';
import type { Verdict } from './fuzz-spec.ts';

type JsonObject = { [key: string]: Json };

/**
 * What an item leaves out is the default (openapi.yaml: priority "default 5", max_attempts
 * "Default 3", deadline_seconds "default 86400", delay_seconds "Default 0"; no resource key).
 * on_unknown_outcome has no default in openapi.yaml: `retry` is what a submit without it gets.
 */
const DEFAULTS = { priority: 5, resource_key: null, max_attempts: 3, deadline_seconds: 86400, delay_seconds: 0, on_unknown_outcome: 'retry' } as const;

/** JSON with object keys sorted at every level: two spellings of the same content are equal. */
export function canonical(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  return `{${Object.keys(value)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
    .join(',')}}`;
}

/**
 * The content a submission's idempotency covers: where it goes and the item without its key,
 * defaults filled in (the same key sent to another queue is another request: a conflict).
 */
function content(queue: string, item: Record<string, unknown>): { canonical: string; filled: Record<string, unknown> } {
  const filled: Record<string, unknown> = { payload: item.payload };
  // `-0` (valid JSON) is the number 0: a task shows it as 0, and the strict asserts tell them apart.
  for (const [field, value] of Object.entries(DEFAULTS)) filled[field] = Object.is(item[field], -0) ? 0 : (item[field] ?? value);
  return { canonical: canonical({ queue, filled }), filled };
}

export interface BulkCounts {
  /** The queue the request goes to. */
  queue: string;
  tasks: number;
  receipts: number;
  appUnfinished: number;
  appMax: number;
  queueUnfinished: number;
  queueMax: number;
}

const ms = (iso: unknown) => Date.parse(String(iso));

export class BulkModel {
  /** key → the content admitted under it and its task. */
  private readonly admitted = new Map<string, { content: string; taskId: string }>();
  /** How many item results of each kind were checked (`summary`). */
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly db: Database,
    private readonly applicationId: string,
  ) {}

  /** Row counts and the quota figures the prediction needs, for a request to `queue`; taken before and after it. */
  async counts(queue: string): Promise<BulkCounts> {
    const [row] = await this.db.rows<Record<string, string | number>>(
      `SELECT (SELECT COUNT(*) FROM orbit_tasks) AS tasks, (SELECT COUNT(*) FROM orbit_idempotency_receipts) AS receipts,
              a.unfinished_tasks AS app_unfinished, a.max_unfinished_tasks AS app_max, q.unfinished_tasks AS queue_unfinished, q.max_unfinished_tasks AS queue_max
         FROM orbit_application_resources a JOIN orbit_queues q ON q.application_id = a.application_id AND q.name = ?
        WHERE a.application_id = UNHEX(?)`,
      [queue, this.applicationId],
    );
    assert.ok(row, `no queue ${queue}`);
    return {
      queue,
      tasks: Number(row.tasks),
      receipts: Number(row.receipts),
      appUnfinished: Number(row.app_unfinished),
      appMax: Number(row.app_max),
      queueUnfinished: Number(row.queue_unfinished),
      queueMax: Number(row.queue_max),
    };
  }

  /**
   * Checks a submitTasks answer to a body valid as a whole (`verdict.items` set) against the
   * prediction, and records what it admitted. Returns how many items were accepted.
   */
  check(where: string, body: unknown, verdict: Verdict, response: TestResponse, before: BulkCounts): number {
    const show = `${where}: ${response.status} ${response.text.slice(0, 400)}`;
    assert.ok(verdict.items, `${where}: no item verdicts (not a bulk operation?)`);
    assert.equal(response.status, 200, `${show}: a body valid per openapi.yaml is answered 200, whatever becomes of its items`);
    try {
      assertMatchesSpec('submitTasks', 200, response.body);
    } catch (error) {
      assert.fail(`${where}: ${(error as Error).message}`);
    }
    assert.equal(response.headers.get('x-request-id'), response.body.request_id, `${show}: X-Request-Id must equal request_id`);
    const items = (body as { tasks: Array<Record<string, unknown>> }).tasks;
    const data = response.body.data as { results: Array<Record<string, any>>; accepted: number; replayed: number; refused: number };
    assert.equal(data.results.length, items.length, `${show}: one result per item`);
    const tally = (status: string) => data.results.filter((r) => r.status === status).length;
    assert.deepEqual(
      [data.accepted, data.replayed, data.refused],
      [tally('accepted'), tally('replayed'), tally('refused')],
      `${show}: the tallies are not the counts of the results`,
    );

    const room = { app: before.appMax - before.appUnfinished, queue: before.queueMax - before.queueUnfinished };
    let accepted = 0;
    let failure: unknown = null;
    items.forEach((item, i) => {
      const result = data.results[i] as Record<string, any>;
      const kind = result.status === 'refused' ? String(result.error?.code) : String(result.status);
      this.seen.set(kind, (this.seen.get(kind) ?? 0) + 1);
      if (failure === null) {
        try {
          accepted += this.checkItem(where, item, i, result, verdict.items?.[i] as Verdict, before.queue, data.results, room);
          return;
        } catch (error) {
          failure = error;
        }
      }
      // The prediction failed in this batch: still learn what the server admitted, so that the
      // runs shrinking the failure are predicted from what the database really holds.
      if (result.status === 'accepted' && typeof item.idempotency_key === 'string' && !this.admitted.has(item.idempotency_key)) {
        this.admitted.set(item.idempotency_key, { content: content(before.queue, item).canonical, taskId: String(result.task?.task_id) });
      }
    });
    if (failure !== null) throw failure;
    return accepted;
  }

  /** One item's result against the prediction; records an accepted item. Returns 1 when it was accepted. */
  private checkItem(
    where: string,
    item: Record<string, unknown>,
    i: number,
    result: Record<string, any>,
    itemVerdict: Verdict,
    queue: string,
    results: Array<Record<string, any>>,
    room: { app: number; queue: number },
  ): number {
    const at = `${where}: tasks[${i}] (${JSON.stringify(item).slice(0, 160)}) got ${JSON.stringify(result).slice(0, 300)}`;
    const key = item.idempotency_key;
    assert.equal(result.idempotency_key, typeof key === 'string' ? key : '', `${at}: the result must carry the item's key`);
    const refusedWith = (code: string) => {
      assert.equal(result.status, 'refused', `${at}: expected refused ${code}`);
      assert.equal(result.error?.code, code, `${at}: expected ${code}`);
      assert.equal(result.task, undefined, `${at}: a refused item has no task`);
    };
    if (!itemVerdict.valid) {
      refusedWith('INVALID_ARGUMENT');
      const details = result.error.details as { field?: unknown; location?: unknown } | undefined;
      assert.ok(
        typeof details?.field === 'string' && itemVerdict.fields.includes(details.field),
        `${at}: details.field must name the offending field, one of ${JSON.stringify(itemVerdict.fields.slice(0, 12))}`,
      );
      assert.equal(details?.location, 'body', `${at}: details.location`);
      return 0;
    }
    const { canonical: sent, filled } = content(queue, item);
    const known = this.admitted.get(key as string);
    if (known) {
      if (known.content === sent) {
        assert.equal(result.status, 'replayed', `${at}: the key was admitted before with the same content: expected replayed`);
        assert.equal(result.task?.task_id, known.taskId, `${at}: a replay answers the original task`);
        assert.equal(canonical(result.task.payload), canonical(item.payload), `${at}: the replayed task's payload`);
      } else refusedWith('IDEMPOTENCY_CONFLICT');
      return 0;
    }
    if (room.app <= 0) {
      refusedWith('APPLICATION_FULL');
      assert.deepEqual(result.error.details, { level: 'application', limit: 'max_unfinished_tasks' }, `${at}: details of APPLICATION_FULL`);
      return 0;
    }
    if (room.queue <= 0) {
      refusedWith('QUEUE_FULL');
      assert.deepEqual(result.error.details, { level: 'queue', queue, limit: 'max_unfinished_tasks' }, `${at}: details of QUEUE_FULL`);
      return 0;
    }
    assert.equal(result.status, 'accepted', `${at}: a valid new item with room in both quotas is accepted`);
    const task = result.task as Record<string, any>;
    assert.equal(task.queue, queue, `${at}: task.queue`);
    assert.equal(task.state, 'WAITING', `${at}: task.state`);
    assert.equal(canonical(task.payload), canonical(item.payload), `${at}: the task's payload is not the item's`);
    for (const field of ['priority', 'max_attempts', 'on_unknown_outcome'] as const) assert.equal(task[field], filled[field], `${at}: task.${field}`);
    assert.equal(task.resource_key ?? null, filled.resource_key, `${at}: task.resource_key`);
    assert.equal(
      ms(task.deadline_at) - ms(task.created_at),
      (filled.deadline_seconds as number) * 1000,
      `${at}: deadline_at is not created_at + deadline_seconds`,
    );
    assert.equal(ms(task.available_at) - ms(task.created_at), (filled.delay_seconds as number) * 1000, `${at}: available_at is not created_at + delay_seconds`);
    for (const earlier of results.slice(0, i))
      assert.notEqual(earlier.status === 'accepted' ? earlier.task.task_id : null, task.task_id, `${at}: two accepted items share a task`);
    this.admitted.set(key as string, { content: sent, taskId: task.task_id as string });
    room.app -= 1;
    room.queue -= 1;
    return 1;
  }

  /** The item results checked so far, by status or refusal code: shows what the fuzzing reached. */
  summary(): string {
    return (
      [...this.seen.entries()]
        .sort()
        .map(([kind, n]) => `${kind} ${n}`)
        .join(', ') || 'none'
    );
  }

  /**
   * What the request wrote: one task and one receipt per accepted item, the unfinished counters
   * up by as many; with none accepted, nothing changed at all (`fingerprint` before and after).
   */
  async assertWrites(where: string, before: BulkCounts, accepted: number, fingerprints?: () => Promise<[unknown, unknown]>): Promise<void> {
    const after = await this.counts(before.queue);
    assert.deepEqual(
      { tasks: after.tasks, receipts: after.receipts, app: after.appUnfinished, queue: after.queueUnfinished },
      { tasks: before.tasks + accepted, receipts: before.receipts + accepted, app: before.appUnfinished + accepted, queue: before.queueUnfinished + accepted },
      `${where}: ${accepted} item(s) accepted - expected as many new tasks and receipts, and the unfinished counters up by as many`,
    );
    if (accepted === 0 && fingerprints) {
      const [was, is] = await fingerprints();
      assert.deepEqual(is, was, `${where}: no item was accepted, yet the database changed`);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hostile bulk bodies
// ---------------------------------------------------------------------------------------------

/**
 * Item `k` of a small pool, in content variant `v`: batches reuse keys, so runs replay each
 * other (same k and v), conflict (same k, another v) and hold twins.
 */
export function poolItem(k: number, v: number, prefix = 'fzp'): JsonObject {
  return {
    idempotency_key: `${prefix}-${k}`,
    payload: { k, v, ...(k % 4 === 0 ? { lines: [{ sku: `S-${v}`, qty: v }], note: null } : {}) },
    ...(k % 3 === 0 ? { priority: (k + v) % 10 } : {}),
    ...(k % 5 === 0 ? { resource_key: `rk-${k % 7}` } : {}),
    ...(k % 6 === 0 ? { max_attempts: 1 + ((k + v) % 100) } : {}),
    ...(k % 7 === 0 ? { deadline_seconds: 60 + v, delay_seconds: 30 * v } : {}),
    ...(k % 11 === 0 ? { on_unknown_outcome: v % 2 === 0 ? 'retry' : 'review' } : {}),
  };
}

export interface BulkCase {
  text: string;
  /** A number literal JSON.parse cannot keep is in the text (the spec says it is refused). */
  unrepresentable: boolean;
  label: string;
}

/** `{"pad":"xx…"}` of exactly `bytes` bytes as compact JSON. */
const padded = (bytes: number): JsonObject => ({ pad: 'x'.repeat(Math.max(0, bytes - '{"pad":""}'.length)) });

/** One item, and the raw literals to splice into the text. */
const itemCase = (depthLimit: number): fc.Arbitrary<{ item: Json; raws: string[]; kind: string }> => {
  const k = fc.integer({ min: 0, max: 149 });
  const v = fc.integer({ min: 0, max: 2 });
  const plain = (kind: string) => (item: Json) => ({ item, raws: [] as string[], kind });
  return fc.oneof(
    { weight: 6, arbitrary: fc.tuple(k, v).map(([a, b]) => plain('pool')(poolItem(a, b))) },
    {
      weight: 5,
      arbitrary: fc.tuple(k, v, fc.array(mutation, { minLength: 1, maxLength: 3 })).map(([a, b, mutations]) => {
        const { value, raws } = mutate(poolItem(a, b), mutations);
        return { item: value, raws, kind: `mutated(${mutations.map((m) => m.kind).join('+')})` };
      }),
    },
    {
      // delay against deadline at and around the rule, and the extremes of both.
      weight: 2,
      arbitrary: fc
        .tuple(k, fc.constantFrom(1, 2, 60, 86400, 31535999, 31536000), fc.constantFrom(-1, 0, 1), fc.boolean())
        .map(([a, deadline, step, omitDeadline]) => {
          const delay = Math.max(0, Math.min(31535999, deadline + step - 1));
          const item: JsonObject = { idempotency_key: `fzt-${a}-${deadline}-${delay}-${omitDeadline}`, payload: { timing: a }, delay_seconds: delay };
          if (!omitDeadline) item.deadline_seconds = deadline;
          return plain('timing')(item);
        }),
    },
    {
      // Payloads at the 256 KiB limit (as compact JSON): one byte either side.
      weight: 1,
      arbitrary: fc
        .constantFrom(-1, 0, 1, 2)
        .map((delta) => plain(`payload ${262144 + delta} bytes`)({ idempotency_key: `fzbig-${delta}`, payload: padded(262144 + delta) })),
    },
    {
      // Deep user data inside an item: body, tasks, the item and the payload are four levels already.
      weight: 1,
      arbitrary: fc.tuple(fc.integer({ min: 1, max: depthLimit + 4 }), fc.constantFrom('array', 'object', 'mixed' as const)).map(([depth, shape]) => ({
        item: { idempotency_key: `fzd-${depth}-${shape}`, payload: { deep: '\u0000nest\u0000' } } as Json,
        raws: [`NEST:${depth}:${shape}`],
        kind: `payload nested ${depth} more levels`,
      })),
    },
    { weight: 1, arbitrary: fc.dictionary(nastyString(12), fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<Json>, { maxKeys: 4 }).map(plain('garbage object')) },
    { weight: 1, arbitrary: fc.constantFrom<Json>(null, 1, 'x', [], [{ payload: {} }], true).map(plain('not an object')) },
  );
};

/** Writes one item, splicing in raw literals and nesting placeholders. */
function writeItem(c: { item: Json; raws: string[] }): { text: string; unrepresentable: boolean } {
  const text = JSON.stringify(c.item);
  const nest = c.raws.find((r) => r.startsWith('NEST:'));
  if (nest) {
    const [, depth, shape] = nest.split(':') as [string, string, 'array' | 'object' | 'mixed'];
    return { text: text.replace(JSON.stringify('\u0000nest\u0000'), nested(Number(depth), shape)), unrepresentable: false };
  }
  return spliceRaws(text, c.raws);
}

/**
 * Hostile submitTasks bodies: a few items of every kind (pool items that replay and conflict,
 * mutated ones, delay/deadline edges, 256 KiB payloads, deep payloads, garbage and non-objects);
 * hundreds of items up to 1,001 made of such a template (keys kept: twins, or spread over a
 * pool); and bodies around the operation's byte limit made of big refused items.
 */
export function hostileBulkBody(options: { depthLimit: number; maxBodyBytes: number }): fc.Arbitrary<BulkCase> {
  const item = itemCase(options.depthLimit);
  const few = fc.array(item, { minLength: 1, maxLength: 8 }).map((items) => {
    const written = items.map(writeItem);
    return {
      text: `{"tasks":[${written.map((w) => w.text).join(',')}]}`,
      unrepresentable: written.some((w) => w.unrepresentable),
      label: `${items.length} item(s): ${items.map((i) => i.kind).join(', ')}`,
    };
  });
  const many = fc
    .record({
      template: fc.array(item, { minLength: 1, maxLength: 4 }),
      count: fc.oneof(fc.integer({ min: 50, max: 1001 }), fc.constantFrom(999, 1000, 1001)),
      spread: fc.integer({ min: 1, max: 60 }),
    })
    .map(({ template, count, spread }) => {
      const parts: string[] = [];
      let unrepresentable = false;
      let length = 0;
      // Past the byte limit the answer is the same whatever follows: stop there (1,000 items of 256 KiB would be 256 MB).
      for (let i = 0; i < count && length <= options.maxBodyBytes; i++) {
        const base = template[i % template.length] as { item: Json; raws: string[]; kind: string };
        let itemValue = base.item;
        // Spread the keys of object items over `spread` variants (1: every copy is a twin).
        if (itemValue !== null && typeof itemValue === 'object' && !Array.isArray(itemValue) && typeof itemValue.idempotency_key === 'string' && spread > 1) {
          itemValue = { ...itemValue, idempotency_key: `${itemValue.idempotency_key}~${i % spread}` };
        }
        const w = writeItem({ item: itemValue, raws: base.raws });
        unrepresentable ||= w.unrepresentable;
        parts.push(w.text);
        length += w.text.length + 1;
      }
      return {
        text: `{"tasks":[${parts.join(',')}]}`,
        unrepresentable,
        label: `${parts.length} items from ${template.map((t) => t.kind).join(', ')} (keys over ${spread})`,
      };
    });
  const nearLimit = fc
    .record({ delta: fc.oneof(fc.integer({ min: -3, max: 3 }), fc.integer({ min: -5000, max: 5000 })), small: fc.integer({ min: 0, max: 3 }) })
    .map(({ delta, small }) => {
      // Items whose payload is one byte too large (each refused on its own), then whitespace to the size wanted.
      const target = options.maxBodyBytes + delta;
      const big = JSON.stringify({ idempotency_key: 'fzhuge', payload: padded(262145) });
      const heads = Array.from({ length: small }, (_, i) => JSON.stringify(poolItem(i, 0, 'fznear')));
      const parts = [...heads];
      while (`{"tasks":[${[...parts, big].join(',')}]}`.length <= target) parts.push(big);
      if (parts.length === heads.length) parts.push(big);
      let text = `{"tasks":[${parts.join(',')}]}`;
      if (text.length > target) {
        parts.pop();
        text = `{"tasks":[${parts.join(',')}]}`;
      }
      text = text.slice(0, -1) + ' '.repeat(Math.max(0, target - text.length)) + '}';
      return { text, unrepresentable: false, label: `${parts.length} items, ${Buffer.byteLength(text)} bytes (limit ${options.maxBodyBytes})` };
    });
  return fc.oneof({ weight: 6, arbitrary: few }, { weight: 2, arbitrary: many }, { weight: 1, arbitrary: nearLimit });
}
