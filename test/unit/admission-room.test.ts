/**
 * The room for unfinished tasks (server/domain/admission-room.ts), the one rule the careful
 * admission path, the schedule loop and a retry decide by: on generated usage and requests, it
 * admits exactly what a count of each level against its limit allows, in order, and names the
 * application first when both are full. Seeded, by case count.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { UnfinishedRoom } from '../../server/domain/admission-room.ts';

test('admits in order exactly what both limits allow, the application named first', () => {
  fc.assert(
    fc.property(
      fc.record({ used: fc.nat(20), max: fc.integer({ min: 1, max: 20 }) }),
      fc.array(fc.record({ used: fc.nat(10), max: fc.integer({ min: 1, max: 10 }) }), { minLength: 1, maxLength: 3 }),
      fc.array(fc.nat(2), { maxLength: 40 }),
      (app, queues, requests) => {
        const room = new UnfinishedRoom(
          { unfinished_tasks: String(app.used), max_unfinished_tasks: app.max },
          queues.map((q, i) => [`q${i}`, { unfinished_tasks: String(q.used), max_unfinished_tasks: q.max }] as const),
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
  const room = new UnfinishedRoom({ unfinished_tasks: '0', max_unfinished_tasks: 5 }, []);
  assert.throws(() => room.full('missing'), /was not read under its lock/);
});
