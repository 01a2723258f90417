/**
 * The room for unfinished tasks (server/domain/admission.ts), the one rule the careful
 * admission path, the schedule loop and a retry decide by: on generated usage and requests, it
 * admits exactly what a count of each level against its limit allows, in order, and names the
 * application first when both are full. Seeded, by case count.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { decideAdmissions, UnfinishedRoom } from '../../server/domain/admission.ts';

/** One namespace without a floor. */
const NO_FLOORS = [['n', { reserved_unfinished_tasks: 0, unfinished_tasks: 0 }]] as const;

test('admits in order exactly what both limits allow, the application named first', () => {
  fc.assert(
    fc.property(
      fc.record({ used: fc.nat(20), max: fc.integer({ min: 1, max: 20 }) }),
      fc.array(fc.record({ used: fc.nat(10), max: fc.integer({ min: 1, max: 10 }) }), { minLength: 1, maxLength: 3 }),
      fc.array(fc.nat(2), { maxLength: 40 }),
      (app, queues, requests) => {
        const room = new UnfinishedRoom(
          { unfinished_tasks: String(app.used), max_unfinished_tasks: app.max, idle_reserved_unfinished_tasks: '0' },
          NO_FLOORS,
          queues.map((q, i) => [`q${i}`, { unfinished_tasks: String(q.used), max_unfinished_tasks: q.max }, 'n'] as const),
        );
        let appUsed = app.used;
        const queueUsed = queues.map((q) => q.used);
        for (const r of requests) {
          const i = r % queues.length;
          const expected = appUsed >= app.max ? 'application' : (queueUsed[i] as number) >= (queues[i]?.max as number) ? 'queue' : null;
          assert.equal(room.full(`q${i}`), expected);
          if (expected === null) {
            room.take(`q${i}`);
            appUsed += 1;
            queueUsed[i] = (queueUsed[i] as number) + 1;
          }
        }
      },
    ),
    { numRuns: 300, seed: 20261203 },
  );
});

test('a queue not read under its lock is a mistake of the caller, never room', () => {
  const room = new UnfinishedRoom({ unfinished_tasks: '0', max_unfinished_tasks: 5, idle_reserved_unfinished_tasks: 0 }, NO_FLOORS, []);
  assert.throws(() => room.full('missing'), /was not read under its lock/);
});

test('decisions in order: credential, replay, twin, application full, queue full, accept', () => {
  const room = new UnfinishedRoom({ unfinished_tasks: '0', max_unfinished_tasks: 3, idle_reserved_unfinished_tasks: 0 }, NO_FLOORS, [
    ['a', { unfinished_tasks: '0', max_unfinished_tasks: 1 }, 'n'],
    ['b', { unfinished_tasks: '0', max_unfinished_tasks: 5 }, 'n'],
  ]);
  const receipts = new Map([['old', 'receipt of old']]);
  const decisions = decideAdmissions(
    [
      { key: 'k1', queue: 'a', credentialValid: false }, // revoked: nothing else is looked at
      { key: 'old', queue: 'a', credentialValid: true }, // replay, even if the queue were full
      { key: 'k2', queue: 'a', credentialValid: true }, // accept (a: 1 of 1)
      { key: 'k2', queue: 'a', credentialValid: true }, // twin of the one before, takes no room
      { key: 'k3', queue: 'a', credentialValid: true }, // queue a full
      { key: 'k4', queue: 'b', credentialValid: true }, // accept (application 2 of 3)
      { key: 'k5', queue: 'b', credentialValid: true }, // accept (application 3 of 3)
      { key: 'k6', queue: 'a', credentialValid: true }, // both full: the application is named
      { key: 'k3', queue: 'b', credentialValid: true }, // refused before, not a twin: full
    ],
    (key) => receipts.get(key),
    room,
  );
  assert.deepEqual(decisions, [
    { kind: 'credential-no-longer-valid' },
    { kind: 'replay', receipt: 'receipt of old' },
    { kind: 'accept' },
    { kind: 'twin', of: 2 },
    { kind: 'full', level: 'queue', byOthersFloors: false },
    { kind: 'accept' },
    { kind: 'accept' },
    { kind: 'full', level: 'application', byOthersFloors: false },
    { kind: 'full', level: 'application', byOthersFloors: false },
  ]);
});

test('property: only accepts take room; a twin always points back to an accept of its key', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 8 }),
      fc.array(fc.record({ key: fc.constantFrom('a', 'b', 'c', 'd', 'e'), queue: fc.constantFrom('q0', 'q1'), credentialValid: fc.boolean() }), {
        maxLength: 30,
      }),
      fc.subarray(['a', 'b', 'c', 'd', 'e']),
      (max, requests, replayed) => {
        const room = new UnfinishedRoom({ unfinished_tasks: '0', max_unfinished_tasks: max, idle_reserved_unfinished_tasks: 0 }, NO_FLOORS, [
          ['q0', { unfinished_tasks: '0', max_unfinished_tasks: max }, 'n'],
          ['q1', { unfinished_tasks: '0', max_unfinished_tasks: max }, 'n'],
        ]);
        const decisions = decideAdmissions(requests, (key) => (replayed.includes(key) ? key : undefined), room);
        const accepts = decisions.filter((d) => d.kind === 'accept').length;
        assert.ok(accepts <= max);
        decisions.forEach((d, i) => {
          const r = requests[i] as (typeof requests)[number];
          if (d.kind === 'twin') {
            assert.ok(d.of < i && decisions[d.of]?.kind === 'accept' && requests[d.of]?.key === r.key);
          }
          if (d.kind === 'replay') assert.ok(replayed.includes(r.key) && r.credentialValid);
          if (d.kind === 'accept') assert.ok(!replayed.includes(r.key) && r.credentialValid);
          // Refused for room only once the room is used up by accepts.
          if (d.kind === 'full') assert.equal(decisions.slice(0, i).filter((x) => x.kind === 'accept').length, max);
        });
        // Every distinct non-replayed valid key is accepted once, while there is room.
        const distinct = new Set(requests.filter((r) => r.credentialValid && !replayed.includes(r.key)).map((r) => r.key)).size;
        assert.equal(accepts, Math.min(distinct, max));
      },
    ),
    { seed: 20261203, numRuns: 300 },
  );
});
