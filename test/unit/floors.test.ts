/**
 * The floors rule (server/domain/floors.ts) on generated applications of three namespaces:
 * grants decided one at a time by `FloorLedger` never take a level over its limit, never
 * refuse a namespace below its floor, and leave the idle sum equal to its definition; the fast
 * paths' test (`fitsBesideAllFloors`) never admits what the exact rule refuses. Seeded, by case count.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ApplicationClaimRoom } from '../../server/domain/claim-decisions.ts';
import { fitsBesideAllFloors, FloorLedger, idleChange, idleOf, reservationsFit, roomFor } from '../../server/domain/floors.ts';

const SEED = 20261203;
const NAMESPACES = ['a', 'b', 'c'] as const;

const application = fc
  .record({
    limit: fc.integer({ min: 1, max: 12 }),
    reserved: fc.tuple(fc.nat(6), fc.nat(6), fc.nat(6)),
  })
  .filter((c) => c.reserved.reduce((n, r) => n + r, 0) <= c.limit);

test('grants never pass the limit, a namespace below its floor is never refused, and the idle sum stays Σ max(0, reserved - usage)', () => {
  fc.assert(
    fc.property(application, fc.array(fc.record({ ns: fc.nat(2), release: fc.boolean() }), { maxLength: 60 }), (app, steps) => {
      const usage = [0n, 0n, 0n];
      const reserved = app.reserved.map(BigInt);
      const idleSum = () => reserved.reduce((n, r, i) => n + idleOf({ reserved: r, usage: usage[i] as bigint }), 0n);
      for (const step of steps) {
        const i = step.ns;
        const ns = NAMESPACES[i] as string;
        // A fresh ledger from the rows as they are, as every transaction reads them.
        const ledger = new FloorLedger(
          { limit: BigInt(app.limit), usage: usage.reduce((n, u) => n + u, 0n), idleReserved: idleSum() },
          NAMESPACES.map((k, j) => [k, { reserved: reserved[j] as bigint, usage: usage[j] as bigint }] as const),
        );
        if (step.release) {
          if ((usage[i] as bigint) > 0n) usage[i] = (usage[i] as bigint) - 1n;
          continue;
        }
        const room = ledger.room(ns);
        if ((usage[i] as bigint) < (reserved[i] as bigint)) assert.ok(room >= 1n, `namespace ${ns} below its floor was refused`);
        if (room >= 1n) {
          ledger.take(ns);
          usage[i] = (usage[i] as bigint) + 1n;
          assert.equal(
            ledger.room(ns),
            roomFor(
              { limit: BigInt(app.limit), usage: usage.reduce((n, u) => n + u, 0n), idleReserved: idleSum() },
              { reserved: reserved[i] as bigint, usage: usage[i] as bigint },
            ),
          );
        }
        const total = usage.reduce((n, u) => n + u, 0n);
        assert.ok(total <= BigInt(app.limit), 'the application is over its limit');
        // usage + idle never passes the limit: what keeps every floor reachable.
        assert.ok(total + idleSum() <= BigInt(app.limit), 'the floors no longer fit beside the usage');
      }
    }),
    { numRuns: 400, seed: SEED },
  );
});

test('the fast paths test never admits what the exact rule refuses', () => {
  fc.assert(
    fc.property(
      fc.record({
        limit: fc.integer({ min: 0, max: 20 }),
        usage: fc.nat(20),
        idle: fc.nat(20),
        ownReserved: fc.nat(10),
        ownUsage: fc.nat(10),
        n: fc.integer({ min: 1, max: 5 }),
      }),
      (c) => {
        const own = { reserved: BigInt(c.ownReserved), usage: BigInt(c.ownUsage) };
        // The application's idle sum includes the namespace's own idle part.
        const level = { limit: BigInt(c.limit), usage: BigInt(c.usage), idleReserved: BigInt(c.idle) + idleOf(own) };
        if (fitsBesideAllFloors(level, BigInt(c.n))) assert.ok(roomFor(level, own) >= BigInt(c.n));
      },
    ),
    { numRuns: 500, seed: SEED + 1 },
  );
});

test('idleChange is the change of idleOf, and reservations fit while their sum is within the limit', () => {
  assert.equal(idleChange({ reserved: 5n, usage: 3n }, 1n), -1n);
  assert.equal(idleChange({ reserved: 5n, usage: 5n }, 1n), 0n);
  assert.equal(idleChange({ reserved: 5n, usage: 6n }, -2n), 1n);
  assert.equal(reservationsFit(10n, 10n), true);
  assert.equal(reservationsFit(10n, 11n), false);
});

test('a ledger refuses to guess about a namespace it was not given', () => {
  const ledger = new FloorLedger({ limit: 5n, usage: 0n, idleReserved: 0n }, []);
  assert.throws(() => ledger.room('missing'), /was not read under its lock/);
});

test("claims: another namespace's reservations waiting to start within its rate floor take nothing from this one's floor", () => {
  // rate 10, a and b each reserve 5 starts a second; a has claimed 5 (its floor), none started.
  const app = {
    maxConcurrency: 100,
    activeAttempts: 5n,
    pendingStarts: 5n,
    ratePerSecond: 10,
    window: { startedAt: null, starts: 0 },
    idleReservedConcurrency: 0n,
    reservedRate: 10n,
    windowReservedStarts: 0n,
  };
  const namespace = (pending: bigint) => ({ reservedConcurrency: 0n, activeAttempts: pending, reservedRate: 5n, windowStarts: 0n, pendingStarts: pending });
  const room = new ApplicationClaimRoom(
    app,
    [
      ['a', namespace(5n)],
      ['b', namespace(0n)],
    ],
    Date.UTC(2030, 0, 1),
  );
  assert.equal(room.room('b'), 5, 'b has its whole floor');
  assert.equal(room.ownRoom('b'), 5, 'and it is its own: not shared out by fairness');
  assert.equal(room.room('a'), 0, 'a has used its floor, and the rest is b’s');
  room.take('b', 2);
  assert.equal(room.room('b'), 3);
});
