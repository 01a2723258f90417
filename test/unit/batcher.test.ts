import { mock, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { KeyedBatcher, mayBeOneItemsFault } from '../../server/batcher.ts';
import { OrbitError } from '../../server/errors.ts';
import { currentDeadline, withDeadline } from '../../server/deadline.ts';

interface Deferred {
  promise: Promise<void>;
  release: () => void;
}
function deferred(): Deferred {
  let release!: () => void;
  const promise = new Promise<void>((r) => (release = r));
  return { promise, release };
}
const tick = () => new Promise<void>((r) => setImmediate(r));
async function ticks(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await tick();
}
/**
 * The batcher's per-key state, to see that it is dropped when a key goes idle (a tick after the
 * last answer: the slot is given back once the answers are out).
 */
async function liveKeys(b: object): Promise<number> {
  await tick();
  return (b as { keys: Map<string, unknown> }).keys.size;
}

/** A batch function that records its calls, can be held, and throws `error` when it meets a bad item. */
function recorder(options: { error?: (items: number[]) => unknown } = {}) {
  const calls: Array<{ key: string; items: number[] }> = [];
  let gate: Deferred | null = null;
  const run = async (key: string, items: number[]): Promise<string[]> => {
    calls.push({ key, items: [...items] });
    if (gate) await gate.promise;
    const error = options.error?.(items);
    if (error !== undefined) throw error;
    // Per-item outcomes: a refusal is an output, not an error.
    return items.map((i) => (i < 0 ? `refused ${i}` : `${key}:${i}`));
  };
  return {
    calls,
    run,
    hold() {
      gate = deferred();
    },
    release() {
      const g = gate;
      gate = null;
      g?.release();
    },
  };
}

test('an idle key runs a request at once, alone; requests arriving meanwhile go together in the next batch, answers in submission order', async () => {
  const r = recorder();
  const b = new KeyedBatcher(r.run, { maxBatch: 10, maxInFlight: 1 });
  r.hold();
  const first = b.submit('app', 1);
  assert.deepEqual(r.calls, [{ key: 'app', items: [1] }], 'run synchronously, without waiting for company');
  const rest = [2, -3, 4, 5].map((i) => b.submit('app', i));
  r.release();
  assert.equal(await first, 'app:1');
  assert.deepEqual(await Promise.all(rest), ['app:2', 'refused -3', 'app:4', 'app:5']);
  assert.deepEqual(
    r.calls.map((c) => c.items),
    [[1], [2, -3, 4, 5]],
  );
  assert.equal(await liveKeys(b), 0);
});

test('maxBatch: a backlog goes in batches of at most maxBatch, in order', async () => {
  const r = recorder();
  const b = new KeyedBatcher(r.run, { maxBatch: 3, maxInFlight: 1 });
  r.hold();
  const all = Array.from({ length: 9 }, (_, i) => b.submit('app', i));
  r.release();
  assert.deepEqual(
    await Promise.all(all),
    all.map((_, i) => `app:${i}`),
  );
  assert.deepEqual(
    r.calls.map((c) => c.items),
    [[0], [1, 2, 3], [4, 5, 6], [7, 8]],
  );
});

test('maxInFlight: at most that many batches of one key run at once', async () => {
  let running = 0;
  let most = 0;
  const b = new KeyedBatcher(
    async (_key: string, items: number[]) => {
      running += 1;
      most = Math.max(most, running);
      await ticks(3);
      running -= 1;
      return items;
    },
    { maxBatch: 2, maxInFlight: 2 },
  );
  const all: Promise<number>[] = [];
  for (let i = 0; i < 20; i++) {
    all.push(b.submit('app', i));
    if (i % 3 === 0) await tick();
  }
  assert.deepEqual(
    await Promise.all(all),
    Array.from({ length: 20 }, (_, i) => i),
  );
  assert.equal(most, 2);
});

test('keys are independent: a busy or failing key neither holds nor fails another, and batches never mix keys', async () => {
  const r = recorder({
    error: (items) => (items.includes(666) ? Object.assign(new Error('connection lost'), { code: 'PROTOCOL_CONNECTION_LOST', fatal: true }) : undefined),
  });
  const b = new KeyedBatcher(r.run, { maxBatch: 10, maxInFlight: 1 });
  r.hold();
  const a1 = b.submit('a', 1);
  const b1 = b.submit('b', 1);
  // Key b did not wait for key a's batch to be in flight: both started.
  assert.deepEqual(r.calls, [
    { key: 'a', items: [1] },
    { key: 'b', items: [1] },
  ]);
  const a2 = b.submit('a', 666);
  const b2 = b.submit('b', 2);
  r.release();
  assert.deepEqual(await Promise.all([a1, b1, b2]), ['a:1', 'b:1', 'b:2']);
  await assert.rejects(a2, /connection lost/);
  for (const c of r.calls) assert.ok(['a', 'b'].includes(c.key));
  assert.equal(await liveKeys(b), 0);
});

test('one bad item fails alone: a batch that throws is run again in halves, the others get their answers', async () => {
  const bad = new RangeError('item 5 cannot be stored');
  const r = recorder({ error: (items) => (items.includes(5) ? bad : undefined) });
  const b = new KeyedBatcher(r.run, { maxBatch: 8, maxInFlight: 1 });
  r.hold();
  const lead = b.submit('app', 100);
  const group = [0, 1, 2, 3, 4, 5, 6, 7].map((i) => b.submit('app', i));
  r.release();
  await lead;
  const settled = await Promise.allSettled(group);
  settled.forEach((s, i) => {
    if (i === 5) assert.deepEqual(s, { status: 'rejected', reason: bad });
    else assert.deepEqual(s, { status: 'fulfilled', value: `app:${i}` });
  });
  // The group, then halves down to the bad item, each half after the one before (in order).
  assert.deepEqual(
    r.calls.map((c) => c.items),
    [[100], [0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3], [4, 5, 6, 7], [4, 5], [4], [5], [6, 7]],
  );
  assert.equal(await liveKeys(b), 0);
});

test('isolation stays in the batch slot: requests submitted meanwhile wait, maxInFlight holds', async () => {
  let running = 0;
  let most = 0;
  const seen: number[][] = [];
  const b = new KeyedBatcher(
    async (_key: string, items: number[]) => {
      running += 1;
      most = Math.max(most, running);
      seen.push(items);
      await tick();
      running -= 1;
      if (items.includes(3)) throw new TypeError('bad item 3');
      return items;
    },
    { maxBatch: 4, maxInFlight: 1 },
  );
  const first = [0, 1, 2, 3].map((i) => b.submit('app', i)); // 0 alone, then 1..3 together
  await tick();
  const later = [10, 11].map((i) => b.submit('app', i));
  const results = await Promise.allSettled([...first, ...later]);
  assert.deepEqual(
    results.map((s) => s.status),
    ['fulfilled', 'fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled'],
  );
  assert.equal(most, 1);
  // The later requests ran after the isolation of the failed batch, not in between.
  assert.deepEqual(seen, [[0], [1, 2, 3], [1, 2], [3], [10, 11]]);
});

test('an error that says the database failed fails every request of the group at once (documented: not isolated)', async () => {
  const shared: unknown[] = [
    Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED', errno: -111, fatal: true }),
    Object.assign(new Error('no database connection within 5000 ms'), { code: 'ORBIT_POOL_TIMEOUT' }),
    Object.assign(new Error('Query inactivity timeout'), { code: 'PROTOCOL_SEQUENCE_TIMEOUT', fatal: true }),
    Object.assign(new Error('Deadlock found'), { code: 'ER_LOCK_DEADLOCK', errno: 1213, sqlState: '40001' }),
    Object.assign(new Error('Lock wait timeout exceeded'), { code: 'ER_LOCK_WAIT_TIMEOUT', errno: 1205, sqlState: 'HY000' }),
    Object.assign(new Error('Server shutdown in progress'), { code: 'ER_SERVER_SHUTDOWN', errno: 1053, sqlState: '08S01' }),
    new OrbitError('UNAVAILABLE', 'the database is unavailable'),
  ];
  for (const error of shared) {
    const r = recorder({ error: (items) => (items.length > 1 || items[0] !== 0 ? error : undefined) });
    const b = new KeyedBatcher(r.run, { maxBatch: 8, maxInFlight: 1 });
    r.hold();
    const lead = b.submit('app', 0);
    const group = [1, 2, 3, 4].map((i) => b.submit('app', i));
    r.release();
    await lead;
    const settled = await Promise.allSettled(group);
    for (const s of settled) assert.deepEqual(s, { status: 'rejected', reason: error });
    assert.equal(r.calls.length, 2, `one run for the whole group: ${String(error)}`);
  }
});

test('a caller may decide what is isolated; a predicate that throws shares the error', async () => {
  for (const isolate of [
    () => false,
    () => {
      throw new Error('predicate failed');
    },
  ]) {
    const bad = new TypeError('bad');
    const r = recorder({ error: (items) => (items.includes(2) ? bad : undefined) });
    const b = new KeyedBatcher(r.run, { maxBatch: 8, maxInFlight: 1, isolate });
    r.hold();
    const lead = b.submit('app', 0);
    const group = [1, 2, 3].map((i) => b.submit('app', i));
    r.release();
    await lead;
    for (const s of await Promise.allSettled(group)) assert.deepEqual(s, { status: 'rejected', reason: bad });
    assert.equal(await liveKeys(b), 0);
  }
});

test('a batch function that throws synchronously fails its requests and does not leave the key stuck', async () => {
  let calls = 0;
  const b = new KeyedBatcher(
    (_key: string, items: number[]): Promise<number[]> => {
      calls += 1;
      if (items.includes(1)) throw new TypeError('sync');
      return Promise.resolve(items);
    },
    { maxBatch: 8, maxInFlight: 1 },
  );
  await assert.rejects(b.submit('app', 1), /sync/);
  assert.equal(await b.submit('app', 2), 2);
  assert.equal(calls, 2);
  assert.equal(await liveKeys(b), 0);
});

test("which errors may be one item's fault", () => {
  const cases: Array<[string, unknown, boolean]> = [
    ['a TypeError of the code', new TypeError('x is undefined'), true],
    ['a plain Error without a code', new Error('queue row missing'), true],
    ['a thrown string', 'oops', true],
    ['an OrbitError of one item', new OrbitError('INTERNAL', 'queue row missing'), true],
    ['a STATE_CONFLICT', new OrbitError('STATE_CONFLICT', 'the session is closed'), true],
    ['UNAVAILABLE', new OrbitError('UNAVAILABLE', 'busy'), false],
    ['data too long (22001)', { code: 'ER_DATA_TOO_LONG', errno: 1406, sqlState: '22001' }, true],
    ['out of range (22003)', { code: 'ER_WARN_DATA_OUT_OF_RANGE', errno: 1264, sqlState: '22003' }, true],
    ['invalid JSON (22032)', { code: 'ER_INVALID_JSON_TEXT', errno: 3140, sqlState: '22032' }, true],
    ['duplicate key (23000)', { code: 'ER_DUP_ENTRY', errno: 1062, sqlState: '23000' }, true],
    ['NULL in a NOT NULL column, a guard (23000)', { code: 'ER_BAD_NULL_ERROR', errno: 1048, sqlState: '23000' }, true],
    ['subquery returns more than one row (21000)', { code: 'ER_SUBQUERY_NO_1_ROW', errno: 1242, sqlState: '21000' }, true],
    ['a missing table (42S02): the schema, every batch alike', { code: 'ER_NO_SUCH_TABLE', errno: 1146, sqlState: '42S02' }, false],
    ['deadlock (40001)', { code: 'ER_LOCK_DEADLOCK', errno: 1213, sqlState: '40001' }, false],
    ['lock wait timeout (HY000)', { code: 'ER_LOCK_WAIT_TIMEOUT', errno: 1205, sqlState: 'HY000' }, false],
    ['connection killed (70100)', { code: 'ER_CONNECTION_KILLED', errno: 1927, sqlState: '70100' }, false],
    ['read-only server (HY000)', { code: 'ER_OPTION_PREVENTS_STATEMENT', errno: 1290, sqlState: 'HY000' }, false],
    ['connection refused', { code: 'ECONNREFUSED', errno: -111, fatal: true }, false],
    ['connection lost', { code: 'PROTOCOL_CONNECTION_LOST', fatal: true }, false],
    ['pool timeout', { code: 'ORBIT_POOL_TIMEOUT' }, false],
    ['pool closed', { code: 'POOL_CLOSED' }, false],
    ['a fatal error even with a data SQLSTATE', { code: 'X', sqlState: '22001', fatal: true }, false],
  ];
  for (const [name, error, expected] of cases) assert.equal(mayBeOneItemsFault(error), expected, name);
});

test('property: every request gets its own answer, or its own error only if it is bad; limits and order hold', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 5 }),
      fc.integer({ min: 1, max: 3 }),
      fc.array(
        fc.record({
          key: fc.constantFrom('a', 'b', 'c'),
          bad: fc.integer({ min: 0, max: 6 }).map((n) => n === 0),
          wait: fc.integer({ min: 0, max: 2 }),
          work: fc.integer({ min: 0, max: 2 }),
        }),
        { maxLength: 40 },
      ),
      async (maxBatch, maxInFlight, ops) => {
        const running = new Map<string, number>();
        const firstSeen = new Map<string, number[]>();
        const runs: Array<{ key: string; items: number[] }> = [];
        const b = new KeyedBatcher(
          async (key: string, items: number[]) => {
            assert.ok(items.length >= 1 && items.length <= maxBatch, 'maxBatch');
            runs.push({ key, items });
            running.set(key, (running.get(key) ?? 0) + 1);
            assert.ok((running.get(key) as number) <= maxInFlight, 'maxInFlight');
            const seen = firstSeen.get(key) ?? [];
            for (const i of items) if (!seen.includes(i)) seen.push(i);
            firstSeen.set(key, seen);
            await ticks(Math.max(...items.map((i) => (ops[i] as { work: number }).work)));
            running.set(key, (running.get(key) as number) - 1);
            if (items.some((i) => (ops[i] as { bad: boolean }).bad)) throw new TypeError(`bad among ${items.join(',')}`);
            return items.map((i) => `${key}:${i}`);
          },
          { maxBatch, maxInFlight },
        );
        const answers: Array<Promise<string>> = [];
        for (const [i, op] of ops.entries()) {
          const answer = b.submit(op.key, i);
          answer.catch(() => {}); // settled below, after the others
          answers.push(answer);
          await ticks(op.wait);
        }
        const settled = await Promise.allSettled(answers);
        settled.forEach((s, i) => {
          const op = ops[i] as { key: string; bad: boolean };
          if (op.bad) {
            assert.equal(s.status, 'rejected');
            // Its error is its own: the run that failed it held it alone.
            assert.match(String((s as PromiseRejectedResult).reason), new RegExp(`bad among ${i}$`));
          } else assert.deepEqual(s, { status: 'fulfilled', value: `${op.key}:${i}` });
        });
        for (const run of runs) for (const i of run.items) assert.equal((ops[i] as { key: string }).key, run.key, 'batches never mix keys');
        // Each key's requests reach the batch function in the order they were submitted.
        for (const [key, seen] of firstSeen) {
          assert.deepEqual(
            seen,
            ops.flatMap((op, i) => (op.key === key ? [i] : [])),
          );
        }
        assert.equal(await liveKeys(b), 0);
      },
    ),
    { seed: 0xba7c, numRuns: 200 },
  );
});

// ---------------------------------------------------------------------------------------------
// Bytes and deadlines: a group is bounded by weight, and every item is answered by its
// request's deadline whatever the batch function does (mocked timers: deterministic time).

test('maxWeight: a group stops before the item that would pass it; an item heavier than it goes alone', async () => {
  const r = recorder();
  const b = new KeyedBatcher(r.run, { maxBatch: 100, maxInFlight: 1, weight: (i: number) => Math.abs(i), maxWeight: () => 10 });
  r.hold();
  const first = b.submit('k', 1);
  await tick();
  const rest = [4, 5, 2, 20, 3, 3, 3].map((i) => b.submit('k', i));
  r.release();
  await Promise.all([first, ...rest]);
  assert.deepEqual(
    r.calls.map((c) => c.items),
    [[1], [4, 5], [2], [20], [3, 3, 3]],
  );
});

test('lingerMs: the first item of an idle key waits that long for company; a full group, or one behind a group in flight, goes at once', async () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    const r = recorder();
    const b = new KeyedBatcher(r.run, { maxBatch: 3, maxInFlight: 1, lingerMs: 2 });
    const first = b.submit('k', 1);
    mock.timers.tick(1);
    const second = b.submit('k', 2);
    assert.equal(r.calls.length, 0, 'still waiting for company');
    r.hold();
    mock.timers.tick(1);
    assert.deepEqual(
      r.calls.map((c) => c.items),
      [[1, 2]],
      'after lingerMs, together',
    );
    // Behind the group in flight: the next group starts the moment it ends, without lingering.
    const behind = [3, 4].map((i) => b.submit('k', i));
    r.release();
    assert.deepEqual(await Promise.all([first, second, ...behind]), ['k:1', 'k:2', 'k:3', 'k:4']);
    assert.deepEqual(
      r.calls.map((c) => c.items),
      [
        [1, 2],
        [3, 4],
      ],
    );
    // Idle again: a group that fills to maxBatch goes at once.
    const full = [5, 6, 7].map((i) => b.submit('k', i));
    assert.deepEqual(r.calls.at(-1)?.items, [5, 6, 7], 'a full group does not wait');
    await Promise.all(full);
    assert.equal(await liveKeys(b), 0);
  } finally {
    mock.timers.reset();
  }
});

test('lingerMs as a function of the key: a key it gives 0 runs at once, another lingers', async () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    const r = recorder();
    const b = new KeyedBatcher(r.run, { maxBatch: 8, maxInFlight: 1, lingerMs: (key) => (key === 'solo' ? 0 : 3) });
    const solo = b.submit('solo', 1);
    const shared = b.submit('shared', 2);
    assert.deepEqual(
      r.calls.map((c) => c.key),
      ['solo'],
      'solo went at once; shared waits',
    );
    mock.timers.tick(3);
    assert.deepEqual(
      r.calls.map((c) => c.key),
      ['solo', 'shared'],
    );
    assert.deepEqual(await Promise.all([solo, shared]), ['solo:1', 'shared:2']);
  } finally {
    mock.timers.reset();
  }
});

test('property: every item is answered by its deadline, with its output when the group answers in time, else UNAVAILABLE at the deadline; a group runs with its latest deadline', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.record({ at: fc.integer({ min: 0, max: 200 }), budget: fc.option(fc.integer({ min: 1, max: 300 }), { nil: undefined }) }), {
        minLength: 1,
        maxLength: 16,
      }),
      // How long each successive group takes (a database that answers slowly, or hangs for a while).
      fc.array(fc.integer({ min: 0, max: 800 }), { minLength: 1, maxLength: 16 }),
      fc.integer({ min: 1, max: 6 }),
      // Lingering included: an item waiting for company is still answered by its deadline.
      fc.integer({ min: 0, max: 5 }),
      async (items, durations, maxBatch, lingerMs) => {
        mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 });
        try {
          let groups = 0;
          const seen: Array<{ items: number[]; deadline: number | undefined }> = [];
          const b = new KeyedBatcher<number, number>(
            (_key, xs) => {
              seen.push({ items: [...xs], deadline: currentDeadline() });
              const ms = durations[groups++ % durations.length] as number;
              return new Promise((resolve) => setTimeout(() => resolve(xs.map((x) => x * 2)), ms));
            },
            { maxBatch, maxInFlight: 1, lingerMs },
          );
          const order = items.map((item, i) => ({ ...item, i })).sort((x, y) => x.at - y.at || x.i - y.i);
          const answers: Array<{ at: number; value?: number; code?: string } | undefined> = [];
          let next = 0;
          // Items without a deadline (background work) are answered when their group is: the
          // longest any can wait is every group's duration, one after another.
          const horizon = 200 + durations.reduce((a, d) => a + d, 0) * (items.length + 1) + 400;
          for (let now = 0; now <= horizon && answers.filter(Boolean).length < items.length; now++) {
            while (next < order.length && (order[next] as { at: number }).at === now) {
              const { i, budget } = order[next++] as { i: number; budget: number | undefined };
              const submit = () => b.submit('k', i);
              (budget === undefined ? submit() : withDeadline(budget, submit)).then(
                (value) => (answers[i] = { at: Date.now(), value }),
                (error: OrbitError) => (answers[i] = { at: Date.now(), code: error.code }),
              );
            }
            await tick();
            mock.timers.tick(1);
            await tick();
          }
          for (const [i, item] of items.entries()) {
            const answer = answers[i];
            assert.ok(answer, `item ${i} was answered`);
            if (item.budget !== undefined)
              assert.ok(answer.at <= item.at + item.budget, `item ${i} answered at ${answer.at}, after its deadline ${item.at + item.budget}`);
            if (answer.code === undefined) assert.equal(answer.value, i * 2, 'its own output');
            else {
              assert.equal(answer.code, 'UNAVAILABLE');
              assert.equal(answer.at, item.at + (item.budget as number), 'answered at its deadline, not before');
            }
          }
          for (const group of seen) {
            const deadlines = group.items.map((i) => {
              const item = items[i] as { at: number; budget: number | undefined };
              return item.budget === undefined ? undefined : item.at + item.budget;
            });
            const expected = deadlines.includes(undefined) ? undefined : Math.max(...(deadlines as number[]));
            assert.equal(group.deadline, expected, 'a group runs with the latest deadline of its items (none if one has none)');
          }
        } finally {
          mock.timers.reset();
        }
      },
    ),
    { seed: 0xdead1, numRuns: 150 },
  );
});
