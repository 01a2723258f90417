import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  claimBudget,
  claimOrder,
  fairShare,
  levelRoom,
  pickCandidates,
  planClaim,
  queueRoom,
  sessionRoom,
  type ClaimCandidate,
  type QueueAllowance,
  type QuotaLevel,
} from '../../server/domain/claim-decisions.ts';
import { startsInCurrentWindow } from '../../server/domain/start-window.ts';
import { PermitTally } from '../../server/domain/permits.ts';

/** Every property runs from a fixed seed: a failure reproduces. */
const RUNS = { seed: 0x0b17, numRuns: 500 };

const NOW = 1_000_000;
const idle: QuotaLevel = { maxConcurrency: 10, activeAttempts: 0, pendingStarts: 0, ratePerSecond: 100, window: { startedAt: null, starts: 0 } };

// ---------------------------------------------------------------------------------------------
// Room at one level, the queue's paused flag, the session

test('room at one level: concurrency left and start-window room left, whichever is smaller', () => {
  const cases: Array<[string, QuotaLevel, number]> = [
    ['nothing in use', idle, 10],
    ['active attempts use concurrency', { ...idle, activeAttempts: 3 }, 7],
    ['pending starts are active too (the store counts them in both)', { ...idle, activeAttempts: 5, pendingStarts: 5 }, 5],
    ['the rate is the smaller limit', { ...idle, maxConcurrency: 1000, ratePerSecond: 4 }, 4],
    ['pending starts hold window room', { ...idle, maxConcurrency: 1000, ratePerSecond: 10, activeAttempts: 3, pendingStarts: 3 }, 7],
    ['starts in the open window count', { ...idle, maxConcurrency: 1000, ratePerSecond: 10, window: { startedAt: NOW - 500, starts: 6 } }, 4],
    [
      'window starts + pending starts together',
      { ...idle, maxConcurrency: 1000, ratePerSecond: 10, pendingStarts: 3, activeAttempts: 3, window: { startedAt: NOW - 1, starts: 6 } },
      1,
    ],
    ['an ended window counts nothing', { ...idle, maxConcurrency: 1000, ratePerSecond: 10, window: { startedAt: NOW - 1000, starts: 10 } }, 10],
    ['the window ends exactly 1000 ms after it opened', { ...idle, maxConcurrency: 1000, ratePerSecond: 10, window: { startedAt: NOW - 999, starts: 10 } }, 0],
    ['full concurrency', { ...idle, activeAttempts: 10 }, 0],
    ['concurrency lowered below usage: 0, not negative', { ...idle, maxConcurrency: 2, activeAttempts: 7 }, 0],
    ['rate lowered below pending starts: 0, not negative', { ...idle, ratePerSecond: 2, activeAttempts: 5, pendingStarts: 5 }, 0],
    ['rate lowered below window starts: 0, not negative', { ...idle, ratePerSecond: 2, window: { startedAt: NOW, starts: 9 } }, 0],
    ['uint64 counters as bigints', { ...idle, maxConcurrency: 1_000_000, activeAttempts: 999_990n, pendingStarts: 1n }, 10],
    ['huge bigint usage', { ...idle, activeAttempts: 18_446_744_073_709_551_615n }, 0],
  ];
  for (const [name, level, room] of cases) assert.equal(levelRoom(level, NOW), room, name);
});

test('a paused queue has no room, whatever its limits; an unpaused one has its level room', () => {
  assert.equal(queueRoom({ ...idle, paused: true }, NOW), 0);
  assert.equal(queueRoom({ ...idle, paused: false }, NOW), 10);
  assert.equal(queueRoom({ ...idle, activeAttempts: 4, paused: false }, NOW), 6);
});

test('session room: capacity less what it holds, never negative', () => {
  assert.equal(sessionRoom(10, 0), 10);
  assert.equal(sessionRoom(10, 3), 7);
  assert.equal(sessionRoom(10, 3n), 7);
  assert.equal(sessionRoom(10, 10), 0);
  // Capacity is fixed per session, but held may be above it after a race with recovery's view.
  assert.equal(sessionRoom(2, 5), 0);
});

const level = fc.record({
  maxConcurrency: fc.integer({ min: 1, max: 50 }),
  activeAttempts: fc.oneof(fc.integer({ min: 0, max: 80 }), fc.bigInt({ min: 0n, max: 80n })),
  pendingStarts: fc.integer({ min: 0, max: 80 }),
  ratePerSecond: fc.integer({ min: 1, max: 50 }),
  window: fc.record({ startedAt: fc.option(fc.integer({ min: NOW - 2500, max: NOW }), { nil: null }), starts: fc.integer({ min: 0, max: 80 }) }),
});

test('property: level room is exactly min(every limit) clamped at 0', () => {
  fc.assert(
    fc.property(level, (l) => {
      const room = levelRoom(l, NOW);
      const concurrencyLeft = l.maxConcurrency - Number(l.activeAttempts);
      const rateLeft = l.ratePerSecond - startsInCurrentWindow(l.window, NOW) - Number(l.pendingStarts);
      assert.ok(Number.isInteger(room) && room >= 0);
      assert.ok(room <= Math.max(0, concurrencyLeft));
      assert.ok(room <= Math.max(0, rateLeft));
      assert.equal(room, Math.max(0, Math.min(concurrencyLeft, rateLeft)));
      // Usage at or above a (lowered) limit grants nothing.
      if (concurrencyLeft <= 0 || rateLeft <= 0) assert.equal(room, 0);
    }),
    RUNS,
  );
});

// ---------------------------------------------------------------------------------------------
// The claim's budget and the node's fair share

test('budget: what is asked, within the session room and the application room', () => {
  const cases: Array<[string, Parameters<typeof claimBudget>[0], { wanted: number; budget: number }]> = [
    ['plenty of room', { max: 5, sessionRoom: 10, applicationRoom: 100, otherWaitingNodes: 3 }, { wanted: 5, budget: 5 }],
    ['the session is the limit', { max: 5, sessionRoom: 2, applicationRoom: 100, otherWaitingNodes: 0 }, { wanted: 2, budget: 2 }],
    ['a full session wants nothing', { max: 5, sessionRoom: 0, applicationRoom: 100, otherWaitingNodes: 0 }, { wanted: 0, budget: 0 }],
    ['scarce room, alone: all of it', { max: 10, sessionRoom: 10, applicationRoom: 6, otherWaitingNodes: 0 }, { wanted: 10, budget: 6 }],
    ['scarce room, one other node waits: half', { max: 10, sessionRoom: 10, applicationRoom: 6, otherWaitingNodes: 1 }, { wanted: 10, budget: 3 }],
    ['scarce room, rounded up', { max: 20, sessionRoom: 20, applicationRoom: 10, otherWaitingNodes: 2 }, { wanted: 20, budget: 4 }],
    ['one slot, many nodes: someone still gets it', { max: 10, sessionRoom: 10, applicationRoom: 1, otherWaitingNodes: 9 }, { wanted: 10, budget: 1 }],
    ['no room', { max: 10, sessionRoom: 10, applicationRoom: 0, otherWaitingNodes: 4 }, { wanted: 10, budget: 0 }],
    // Room is not scarce when it covers what this claim wants: waiting nodes do not matter.
    ['room covers the claim', { max: 3, sessionRoom: 10, applicationRoom: 3, otherWaitingNodes: 5 }, { wanted: 3, budget: 3 }],
  ];
  for (const [name, input, expected] of cases) assert.deepEqual(claimBudget(input), expected, name);
  assert.equal(fairShare(7, 0), 7);
  assert.equal(fairShare(7, 1), 4);
  assert.equal(fairShare(0, 3), 0);
});

const budgetInput = fc.record({
  max: fc.integer({ min: 0, max: 200 }),
  sessionRoom: fc.integer({ min: 0, max: 200 }),
  applicationRoom: fc.integer({ min: 0, max: 200 }),
  otherWaitingNodes: fc.integer({ min: 0, max: 20 }),
});

test('property: a budget never exceeds what was asked, the session room or the application room', () => {
  fc.assert(
    fc.property(budgetInput, (input) => {
      const { wanted, budget } = claimBudget(input);
      assert.equal(wanted, Math.min(input.max, input.sessionRoom));
      assert.ok(Number.isInteger(budget) && budget >= 0);
      assert.ok(budget <= input.max && budget <= input.sessionRoom && budget <= input.applicationRoom);
    }),
    RUNS,
  );
});

test('property: fair share - at least floor(room / nodes) of the room a claim sees, at most ceil; a single node gets all', () => {
  fc.assert(
    fc.property(budgetInput, (input) => {
      const { wanted, budget } = claimBudget(input);
      const nodes = input.otherWaitingNodes + 1;
      // Whenever it asks for at least that much, a claim gets at least its floor share...
      assert.ok(budget >= Math.min(wanted, Math.floor(input.applicationRoom / nodes)));
      // ...and, while room is scarce, no more than its ceiling share.
      if (input.applicationRoom < wanted) assert.ok(budget <= Math.ceil(input.applicationRoom / nodes));
      // Some node always makes progress while there is room.
      if (wanted > 0 && input.applicationRoom > 0) assert.ok(budget >= 1);
      // No other node waiting: everything it wants that there is room for.
      if (input.otherWaitingNodes === 0) assert.equal(budget, Math.min(wanted, input.applicationRoom));
    }),
    RUNS,
  );
});

test('property: claims of several nodes, one after another on the same room, never take more than the room', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 100 }),
      fc.integer({ min: 1, max: 8 }),
      fc.array(fc.record({ node: fc.nat(), want: fc.integer({ min: 0, max: 60 }) }), { maxLength: 40 }),
      (room, nodes, claims) => {
        // The application row serialises claims: each sees the room the previous ones left.
        let left = room;
        const waiting = new Set<number>();
        const got = new Array<number>(nodes).fill(0);
        for (const { node: n, want } of claims) {
          const node = n % nodes;
          const others = [...waiting].filter((w) => w !== node).length;
          const { wanted, budget } = claimBudget({ max: want, sessionRoom: want, applicationRoom: left, otherWaitingNodes: others });
          assert.ok(budget <= left);
          left -= budget;
          got[node] = (got[node] as number) + budget;
          if (budget < wanted) waiting.add(node);
          else waiting.delete(node);
        }
        assert.ok(left >= 0);
        assert.equal(
          got.reduce((a, b) => a + b, 0),
          room - left,
        );
      },
    ),
    RUNS,
  );
});

test('fair share is per claim, not an exact split of one round: later claimers see less room', () => {
  // Two nodes, each wanting 20, waiting on 10 slots: the first takes ceil(10 / 2) = 5, the
  // second ceil(5 / 2) = 3 of what is left, and the remaining 2 go to whoever claims next.
  const first = claimBudget({ max: 20, sessionRoom: 20, applicationRoom: 10, otherWaitingNodes: 1 });
  const second = claimBudget({ max: 20, sessionRoom: 20, applicationRoom: 10 - first.budget, otherWaitingNodes: 1 });
  assert.deepEqual([first.budget, second.budget], [5, 3]);
});

// ---------------------------------------------------------------------------------------------
// Picking candidates: claim order, budget, queue room, keyed permits

function candidate(queue: string, n: number, fields: Partial<ClaimCandidate> = {}): ClaimCandidate {
  return {
    queue,
    taskId: n.toString(16).padStart(32, '0'),
    priority: 0,
    availableAt: '2024-01-01 00:00:00.000000',
    resourceKey: null,
    payloadBytes: 2,
    ...fields,
  };
}
const ids = (cs: ClaimCandidate[]) => cs.map((c) => Number.parseInt(c.taskId, 16));
const allowances = (entries: Record<string, QueueAllowance>) => new Map(Object.entries(entries));

test('claim order: priority first, then the oldest available_at, then task id', () => {
  const cs = [
    candidate('q', 1, { priority: 0, availableAt: '2024-01-01 00:00:02.000000' }),
    candidate('q', 2, { priority: 5, availableAt: '2024-01-01 00:00:09.000000' }),
    candidate('q', 3, { priority: 0, availableAt: '2024-01-01 00:00:01.000000' }),
    candidate('q', 5, { priority: 0, availableAt: '2024-01-01 00:00:01.000000' }),
    candidate('q', 4, { priority: 0, availableAt: '2024-01-01 00:00:01.000000' }),
    candidate('q', 6, { priority: -3, availableAt: '2023-01-01 00:00:00.000000' }),
    candidate('q', 7, { priority: 0, availableAt: '2024-01-01 00:00:01.000001' }),
  ];
  assert.deepEqual(ids([...cs].sort(claimOrder)), [2, 3, 4, 5, 7, 1, 6]);
  const { picked } = pickCandidates(cs, { left: 10, queues: allowances({ q: { room: 10, keyConcurrency: 1 } }), holders: new PermitTally() });
  assert.deepEqual(ids(picked), [2, 3, 4, 5, 7, 1, 6]);
  // Merged across queues: the order is global, not queue by queue.
  const merged = pickCandidates([candidate('a', 1, { priority: 1 }), candidate('b', 2, { priority: 3 }), candidate('a', 3, { priority: 2 })], {
    left: 2,
    queues: allowances({ a: { room: 5, keyConcurrency: 1 }, b: { room: 5, keyConcurrency: 1 } }),
    holders: new PermitTally(),
  });
  assert.deepEqual(ids(merged.picked), [2, 3]);
});

test('keyed permits: at most key_concurrency per (queue, key), counting holders already there', () => {
  const cs = [
    candidate('q', 1, { resourceKey: 'hot', priority: 9 }),
    candidate('q', 2, { resourceKey: 'hot', priority: 8 }),
    candidate('q', 3, { resourceKey: 'hot', priority: 7 }),
    candidate('q', 4, { resourceKey: 'cold', priority: 6 }),
    candidate('q', 5, { priority: 5 }),
    candidate('q', 6, { resourceKey: 'held', priority: 4 }),
    candidate('r', 7, { resourceKey: 'hot', priority: 3 }),
  ];
  const result = pickCandidates(cs, {
    left: 10,
    queues: allowances({ q: { room: 10, keyConcurrency: 2 }, r: { room: 10, keyConcurrency: 1 } }),
    holders: new PermitTally([
      [{ queue: 'q', resourceKey: 'held' }, 2],
      [{ queue: 'q', resourceKey: 'hot' }, 0],
      [{ queue: 'q', resourceKey: 'cold' }, 1],
    ]),
  });
  // hot: 2 of 3; cold: 1 held + 1; held: already full; the same key in another queue is another permit.
  assert.deepEqual(ids(result.picked), [1, 2, 4, 5, 7]);
  assert.deepEqual(result.fullKeys, [
    { queue: 'q', resourceKey: 'hot' },
    { queue: 'q', resourceKey: 'held' },
  ]);
  assert.equal(result.holders.get({ queue: 'q', resourceKey: 'hot' }), 2);
  assert.equal(result.holders.get({ queue: 'q', resourceKey: 'cold' }), 2);
  assert.equal(result.holders.get({ queue: 'q', resourceKey: 'held' }), 2);
  assert.equal(result.holders.get({ queue: 'r', resourceKey: 'hot' }), 1);
  assert.equal(result.queues.get('q')?.room, 6);
  // key_concurrency lowered below the holders: nothing more for that key, never negative.
  const lowered = pickCandidates([candidate('q', 1, { resourceKey: 'k' })], {
    left: 5,
    queues: allowances({ q: { room: 5, keyConcurrency: 1 } }),
    holders: new PermitTally([[{ queue: 'q', resourceKey: 'k' }, 3]]),
  });
  assert.deepEqual(lowered.picked, []);
  assert.equal(lowered.holders.get({ queue: 'q', resourceKey: 'k' }), 3);
});

test('per-queue room, the budget, paused queues; the inputs are not changed', () => {
  const queues = allowances({
    a: { room: 2, keyConcurrency: 1 },
    b: { room: 5, keyConcurrency: 1 },
    paused: { room: queueRoom({ ...idle, paused: true }, NOW), keyConcurrency: 1 },
  });
  const holders = new PermitTally([[{ queue: 'b', resourceKey: 'k' }, 0]]);
  const cs = [
    candidate('paused', 1, { priority: 9 }),
    candidate('a', 2, { priority: 8 }),
    candidate('a', 3, { priority: 7 }),
    candidate('a', 4, { priority: 6 }),
    candidate('b', 5, { priority: 5 }),
    candidate('unknown', 6, { priority: 5 }),
    candidate('b', 7, { priority: 4 }),
    candidate('b', 8, { priority: 3 }),
  ];
  const result = pickCandidates(cs, { left: 4, queues, holders });
  assert.deepEqual(ids(result.picked), [2, 3, 5, 7]);
  assert.equal(result.queues.get('a')?.room, 0);
  assert.equal(result.queues.get('b')?.room, 3);
  assert.equal(result.queues.get('paused')?.room, 0);
  assert.deepEqual(result.fullKeys, []);
  assert.equal(queues.get('a')?.room, 2);
  assert.equal(holders.get({ queue: 'b', resourceKey: 'k' }), 0);
  assert.equal(pickCandidates(cs, { left: 0, queues, holders }).picked.length, 0);
});

test('payload bytes: the pick stops at the first candidate that would pass what is left, in claim order; the first of a claim always goes', () => {
  const queues = allowances({ q: { room: 10, keyConcurrency: 1 } });
  const cs = [
    candidate('q', 1, { priority: 9, payloadBytes: 400 }),
    candidate('q', 2, { priority: 8, payloadBytes: 500 }),
    candidate('q', 3, { priority: 7, payloadBytes: 10 }),
  ];
  // 400 + 500 > 800: stops at 2, and does not reach past it for the small 3 (claim order holds).
  assert.deepEqual(ids(pickCandidates(cs, { left: 10, queues, holders: new PermitTally(), payloadBytesLeft: 800 }).picked), [1]);
  // Nothing granted yet: the first goes whatever its size - a claim is never empty for size alone.
  assert.deepEqual(ids(pickCandidates(cs, { left: 10, queues, holders: new PermitTally(), payloadBytesLeft: 100, firstOfClaim: true }).picked), [1]);
  assert.deepEqual(ids(pickCandidates(cs, { left: 10, queues, holders: new PermitTally(), payloadBytesLeft: 100 }).picked), []);
  assert.deepEqual(ids(pickCandidates(cs, { left: 10, queues, holders: new PermitTally() }).picked), [1, 2, 3]);
});

test('property: picked payloads stay within the bytes left, unless a claim gets exactly its one first attempt', () => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 0, max: 1000 }), { minLength: 1, maxLength: 20 }),
      fc.integer({ min: 0, max: 3000 }),
      fc.boolean(),
      (sizes, left, firstOfClaim) => {
        const cs = sizes.map((bytes, i) => candidate('q', i + 1, { payloadBytes: bytes, priority: -i }));
        const { picked } = pickCandidates(cs, {
          left: 100,
          queues: allowances({ q: { room: 100, keyConcurrency: 1 } }),
          holders: new PermitTally(),
          payloadBytesLeft: left,
          firstOfClaim,
        });
        const total = picked.reduce((n, c) => n + c.payloadBytes, 0);
        if (total > left) assert.ok(firstOfClaim && picked.length === 1, `${total} > ${left} with ${picked.length} picked`);
        // A prefix of the claim order: nothing after a candidate that did not fit.
        assert.deepEqual(ids(picked), ids(cs.slice(0, picked.length)));
        if (picked.length < cs.length) assert.ok(total + (cs[picked.length] as ClaimCandidate).payloadBytes > left, 'stopped only where the next did not fit');
      },
    ),
    RUNS,
  );
});

const QUEUES = ['q0', 'q1', 'q2'] as const;
const KEYS = ['k0', 'k1', 'k2'] as const;
const pickInput = fc.record({
  left: fc.integer({ min: 0, max: 12 }),
  queues: fc.record({
    q0: fc.record({ room: fc.integer({ min: 0, max: 6 }), keyConcurrency: fc.integer({ min: 1, max: 3 }) }),
    q1: fc.record({ room: fc.integer({ min: 0, max: 6 }), keyConcurrency: fc.integer({ min: 1, max: 3 }) }),
    q2: fc.record({ room: fc.integer({ min: 0, max: 6 }), keyConcurrency: fc.integer({ min: 1, max: 3 }) }),
  }),
  // Holders may be above key_concurrency (it was lowered).
  holders: fc.array(fc.tuple(fc.constantFrom(...QUEUES), fc.constantFrom(...KEYS), fc.integer({ min: 0, max: 4 }))),
  candidates: fc
    .uniqueArray(
      fc.record({
        id: fc.integer({ min: 1, max: 10_000 }),
        queue: fc.constantFrom(...QUEUES),
        priority: fc.integer({ min: -2, max: 2 }),
        second: fc.integer({ min: 0, max: 5 }),
        resourceKey: fc.option(fc.constantFrom(...KEYS), { nil: null }),
      }),
      { selector: (c) => c.id, maxLength: 30 },
    )
    .map((cs) =>
      cs.map((c) => candidate(c.queue, c.id, { priority: c.priority, resourceKey: c.resourceKey, availableAt: `2024-01-01 00:00:0${c.second}.000000` })),
    ),
});

test('property: the pick respects the budget, every queue room and every permit, in claim order, and always has a reason to pass over', () => {
  fc.assert(
    fc.property(pickInput, (input) => {
      const queues = new Map(Object.entries(input.queues));
      const holders = new PermitTally();
      for (const [q, k, n] of input.holders) holders.set({ queue: q, resourceKey: k }, n);
      const before = JSON.stringify([[...queues], holders.entries()]);
      const result = pickCandidates(input.candidates, { left: input.left, queues, holders });
      assert.equal(JSON.stringify([[...queues], holders.entries()]), before, 'inputs unchanged');

      const order = [...input.candidates].sort(claimOrder);
      const picked = new Set(result.picked);
      assert.deepEqual(
        result.picked,
        order.filter((c) => picked.has(c)),
        'picked in claim order',
      );
      assert.ok(result.picked.length <= input.left, 'budget');

      const perQueue = new Map<string, number>();
      const perKey = new PermitTally();
      for (const c of result.picked) {
        perQueue.set(c.queue, (perQueue.get(c.queue) ?? 0) + 1);
        if (c.resourceKey !== null) perKey.add({ queue: c.queue, resourceKey: c.resourceKey }, 1);
      }
      for (const [q, allowance] of queues) {
        assert.ok((perQueue.get(q) ?? 0) <= allowance.room, 'queue room');
        assert.equal(result.queues.get(q)?.room, allowance.room - (perQueue.get(q) ?? 0));
      }
      for (const [key, n] of perKey.entries()) {
        const held = holders.get(key);
        assert.ok(held + n <= (queues.get(key.queue) as QueueAllowance).keyConcurrency, 'key_concurrency, counting holders already there');
        assert.equal(result.holders.get(key), held + n);
      }

      // Nothing is passed over without a reason, and a reason, once there, stays for the rest of
      // the round: so no later candidate of the same queue (and key) is taken instead.
      const budgetOut = result.picked.length === input.left;
      order.forEach((c, i) => {
        if (picked.has(c)) return;
        const queueOut = (perQueue.get(c.queue) ?? 0) === (queues.get(c.queue) as QueueAllowance).room;
        const key = c.resourceKey === null ? null : { queue: c.queue, resourceKey: c.resourceKey };
        const keyOut = key !== null && result.holders.get(key) >= (queues.get(c.queue) as QueueAllowance).keyConcurrency;
        // A task without a key is only ever passed over for the budget or its queue's room.
        assert.ok(budgetOut || queueOut || keyOut, 'passed over without a reason');
        for (const later of order.slice(i + 1)) {
          if (!picked.has(later) || later.queue !== c.queue) continue;
          assert.ok(key !== null && later.resourceKey !== c.resourceKey, 'a later candidate was taken instead');
        }
        if (keyOut && !budgetOut && !queueOut)
          assert.ok(
            result.fullKeys.some((f) => f.queue === key?.queue && f.resourceKey === key.resourceKey),
            'a full key is reported',
          );
      });
      for (const key of result.fullKeys) {
        assert.ok(result.holders.get(key) >= (queues.get(key.queue) as QueueAllowance).keyConcurrency);
      }
    }),
    RUNS,
  );
});

test('property: keys never affect tasks without a key', () => {
  fc.assert(
    fc.property(pickInput, (input) => {
      // With every keyed candidate's permit full, the unkeyed ones are picked exactly as if the
      // keyed ones were not there at all.
      const queues = new Map(Object.entries(input.queues));
      const full = new PermitTally();
      for (const q of QUEUES) for (const k of KEYS) full.set({ queue: q, resourceKey: k }, 3);
      const unkeyed = input.candidates.filter((c) => c.resourceKey === null);
      const withKeys = pickCandidates(input.candidates, { left: input.left, queues, holders: full });
      const without = pickCandidates(unkeyed, { left: input.left, queues, holders: full });
      assert.deepEqual(withKeys.picked, without.picked);
    }),
    RUNS,
  );
});

test('property: the whole decision never grants more than the smallest limit of every level', () => {
  fc.assert(
    fc.property(
      level,
      fc.array(fc.tuple(level, fc.boolean()), { minLength: 3, maxLength: 3 }),
      budgetInput,
      pickInput,
      (app, queueLevels, session, picking) => {
        const { wanted, budget } = claimBudget({ ...session, applicationRoom: levelRoom(app, NOW) });
        const queues = new Map(
          QUEUES.map((q, i) => {
            const [l, paused] = queueLevels[i] as [QuotaLevel, boolean];
            return [q, { room: queueRoom({ ...l, paused }, NOW), keyConcurrency: 2 }] as const;
          }),
        );
        const { picked } = budget > 0 ? pickCandidates(picking.candidates, { left: budget, queues, holders: new PermitTally() }) : { picked: [] };
        const limit = (l: QuotaLevel) =>
          Math.min(l.maxConcurrency - Number(l.activeAttempts), l.ratePerSecond - startsInCurrentWindow(l.window, NOW) - Number(l.pendingStarts));
        assert.ok(picked.length <= Math.max(0, Math.min(wanted, session.max, session.sessionRoom, limit(app))));
        QUEUES.forEach((q, i) => {
          const [l, paused] = queueLevels[i] as [QuotaLevel, boolean];
          const n = picked.filter((c) => c.queue === q).length;
          assert.ok(n <= Math.max(0, limit(l)));
          if (paused) assert.equal(n, 0);
        });
      },
    ),
    RUNS,
  );
});

test('the claim plan: credential, then session, then the budget within the room the group left', () => {
  const base = {
    credentialValid: true,
    sessionOpen: true,
    capacity: 10,
    held: 4,
    max: 8,
    applicationRoom: 20,
    grantedInGroup: 0,
    ownQueueRoom: 20,
    otherWaitingNodes: 0,
  };
  assert.deepEqual(planClaim({ ...base, credentialValid: false, sessionOpen: false }), { kind: 'credential-no-longer-valid' });
  assert.deepEqual(planClaim({ ...base, sessionOpen: false }), { kind: 'session-closed' });
  // Wants what the session has room for (10 - 4), below the max asked.
  assert.deepEqual(planClaim(base), { kind: 'pick', budget: 6, wanted: 6 });
  // The claims before it in the group left 3 of the application's room.
  assert.deepEqual(planClaim({ ...base, grantedInGroup: 17 }), { kind: 'pick', budget: 3, wanted: 6 });
  assert.deepEqual(planClaim({ ...base, grantedInGroup: 25 }), { kind: 'pick', budget: 0, wanted: 6 });
  // Scarce room (its queues have 4) shared with 3 other waiting nodes: its fair share, 1.
  assert.deepEqual(planClaim({ ...base, ownQueueRoom: 4, otherWaitingNodes: 3 }), { kind: 'pick', budget: 1, wanted: 6 });
});
