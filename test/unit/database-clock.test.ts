/**
 * DatabaseClock (server/store/database/clock.ts) never runs ahead of the database, however late
 * within a round trip NOW(6) was taken, and keeps the shortest round trip of its samples. A fake
 * database with a clock of its own; the process's clock is the test's.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DatabaseClock } from '../../server/store/database/clock.ts';
import type { Queryable } from '../../server/store/database/database.ts';
import { millisToSql } from '../../server/time.ts';

/** A database whose clock is `offsetMs` ahead of the process's; each query takes its round trip and reads NOW at `at` (0: its start, 1: its end). */
function fakeDatabase(process: { now: number }, offsetMs: number, trips: Array<{ ms: number; at: number }>): Queryable {
  let i = 0;
  return {
    rows: async () => {
      const trip = trips[i++ % trips.length] as { ms: number; at: number };
      const read = process.now + trip.ms * trip.at + offsetMs;
      process.now += trip.ms;
      return [{ now: millisToSql(read) }];
    },
  } as unknown as Queryable;
}

test('the clock never runs ahead of the database, wherever in the round trip NOW(6) was read', async () => {
  for (const offsetMs of [0, 250, -4000]) {
    for (const at of [0, 0.5, 1]) {
      const process = { now: Date.UTC(2030, 0, 1) };
      const clock = new DatabaseClock(fakeDatabase(process, offsetMs, [{ ms: 300, at }]), () => process.now);
      await clock.sample();
      const databaseNow = process.now + offsetMs;
      assert.ok(clock.now() <= databaseNow, `ahead by ${clock.now() - databaseNow} ms (offset ${offsetMs}, NOW read at ${at} of the trip)`);
      assert.ok(databaseNow - clock.now() <= 300, 'behind by at most the round trip');
    }
  }
});

test('of its samples the shortest round trip decides: one slow trip on a busy machine does not skew it', async () => {
  const process = { now: Date.UTC(2030, 0, 1) };
  const clock = new DatabaseClock(
    fakeDatabase(process, 0, [
      { ms: 900, at: 0 },
      { ms: 2, at: 0.5 },
      { ms: 700, at: 0 },
    ]),
    () => process.now,
  );
  await clock.sample();
  assert.ok(Math.abs(clock.now() - process.now) <= 2, `off by ${clock.now() - process.now} ms`);
});
