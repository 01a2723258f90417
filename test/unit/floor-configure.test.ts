/**
 * The configure side of the floors (docs/quotas-and-locking.md#floors): the sums check both
 * configures ask (server/domain/floor-sums.ts), the dry run's effects of a namespace's floors and
 * the floors' line on a changed application limit (server/domain/configure-effects.ts), and the
 * refusal's wording and details (server/errors.ts floorsAboveLimit). On generated floors: the
 * check refuses exactly the sums above their limit, naming the first in the API's order, and
 * each floor's line says what is kept for the namespace - its idle part, domain/floors.ts idleOf.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { configureEffects, floorEffects } from '../../server/domain/configure-effects.ts';
import { FLOOR_OF_LIMIT, firstFloorAboveLimit, floorSumsAfter, type Floors } from '../../server/domain/floor-sums.ts';
import { idleOf } from '../../server/domain/floors.ts';
import { floorsAboveLimit } from '../../server/errors.ts';

const LIMITS = { max_unfinished_tasks: 100, max_concurrency: 10, rate_per_second: 50 };
const floors = (u: number, c: number, r: number): Floors => ({ reserved_unfinished_tasks: u, reserved_concurrency: c, reserved_rate_per_second: r });

test("a namespace's new floors beside the others': the sums, and the first one above its limit", () => {
  // The others reserve 60 / 4 / 10; this namespace goes from 10 / 2 / 0 to 20 / 8 / 0.
  const sums = floorSumsAfter(floors(70, 6, 10), floors(10, 2, 0), floors(20, 8, 0));
  assert.deepEqual(sums, floors(80, 12, 10));
  assert.deepEqual(firstFloorAboveLimit(LIMITS, sums), {
    reserved: 'reserved_concurrency',
    limit: 'max_concurrency',
    reservedSum: 12,
    applicationLimit: 10,
  });
  assert.equal(firstFloorAboveLimit(LIMITS, floors(100, 10, 50)), null, 'exactly the limit fits');
  // The first in the API's order is named when several do not fit.
  assert.equal(firstFloorAboveLimit(LIMITS, floors(101, 11, 51))?.limit, 'max_unfinished_tasks');
});

test('the refusal names the limit and both figures, worded for whichever configure made it', () => {
  const found = { reserved: 'reserved_concurrency', limit: 'max_concurrency', reservedSum: 250, applicationLimit: 200 };
  const byFloor = floorsAboveLimit('floor', found);
  assert.deepEqual(
    [byFloor.code, byFloor.status, byFloor.message, byFloor.details],
    [
      'STATE_CONFLICT',
      409,
      "the namespaces' reserved_concurrency would total 250, above the application's max_concurrency 200",
      { field: 'reserved_concurrency', limit: 'max_concurrency', reserved_sum: 250, application_limit: 200 },
    ],
  );
  const byLimit = floorsAboveLimit('limit', found);
  assert.deepEqual(
    [byLimit.message, byLimit.details?.field],
    ["the namespaces' reserved_concurrency total 250, above the new max_concurrency 200: lower the reservations first", 'max_concurrency'],
  );
});

test("a namespace's floor effects: kept for it, all in use, removed, unchanged - with what the sums would be", () => {
  const effects = floorEffects(floors(0, 4, 10), floors(200, 2, 0), { unfinishedTasks: 120n, activeAttempts: 3n, startsThisSecond: 4n }, floors(300, 9, 0), {
    max_unfinished_tasks: 1000,
    max_concurrency: 10,
    rate_per_second: 50,
  });
  assert.deepEqual(effects, [
    {
      limit: 'reserved_unfinished_tasks',
      current: 0,
      proposed: 200,
      usage: '120',
      effect:
        "namespace uses 120 of a new reserved_unfinished_tasks 200: 80 kept for it, off limits to other namespaces; the namespaces' reserved_unfinished_tasks would total 300 of the application's max_unfinished_tasks 1000",
    },
    {
      limit: 'reserved_concurrency',
      current: 4,
      proposed: 2,
      usage: '3',
      effect:
        "namespace uses 3 of a new reserved_concurrency 2: all of it in use, none kept idle; the namespaces' reserved_concurrency would total 9 of the application's max_concurrency 10",
    },
    {
      limit: 'reserved_rate_per_second',
      current: 10,
      proposed: 0,
      usage: '4',
      effect:
        "no reserved_rate_per_second: the namespace shares what the other namespaces' floors leave; the 6 kept for it until now go back to the shared room; the namespaces' reserved_rate_per_second would total 0 of the application's rate_per_second 50",
    },
  ]);
  const same = floorEffects(floors(1, 2, 3), floors(1, 2, 3), { unfinishedTasks: 9n, activeAttempts: 9n, startsThisSecond: 9n }, floors(1, 2, 3), LIMITS);
  assert.deepEqual(
    same.map((e) => e.effect),
    ['unchanged', 'unchanged', 'unchanged'],
  );
});

test('a changed application limit that floors reserve part of says how much; unchanged ones and ones without floors do not', () => {
  const usage = { unfinishedTasks: 10n, activeAttempts: 2n, startsInWindow: 0n, pendingStarts: 0n };
  const held = {
    max_unfinished_tasks: { reserved: 0n, idle: 0n },
    max_concurrency: { reserved: 5n, idle: 3n },
    rate_per_second: { reserved: 20n, idle: 20n },
  };
  const effects = configureEffects('application', LIMITS, { max_unfinished_tasks: 90, max_concurrency: 8, rate_per_second: 50 }, usage, held);
  assert.deepEqual(
    effects.map((e) => e.effect),
    [
      'room for 80 more unfinished tasks',
      "room for 6 more active attempts; the namespaces' floors reserve 5 of it, 3 of them unused (kept for their namespaces)",
      'unchanged',
    ],
  );
  // Without floors given (a queue), the lines are those of configureEffects alone.
  assert.deepEqual(configureEffects('application', LIMITS, LIMITS, usage, held), configureEffects('application', LIMITS, LIMITS, usage));
});

test('property: the check refuses exactly the sums above their limit; each floor line keeps idleOf(new floor, usage) for its namespace', () => {
  const floor = fc.integer({ min: 0, max: 1000 });
  const floorsArb = fc.record({ reserved_unfinished_tasks: floor, reserved_concurrency: floor, reserved_rate_per_second: floor });
  const limit = fc.integer({ min: 1, max: 3000 });
  fc.assert(
    fc.property(
      floorsArb,
      floorsArb,
      floorsArb,
      fc.record({ max_unfinished_tasks: limit, max_concurrency: limit, rate_per_second: limit }),
      fc.record({
        unfinishedTasks: fc.bigInt({ min: 0n, max: 2000n }),
        activeAttempts: fc.bigInt({ min: 0n, max: 2000n }),
        startsThisSecond: fc.bigInt({ min: 0n, max: 2000n }),
      }),
      (others, before, after, limits, usage) => {
        const sums = floorSumsAfter(
          floors(
            others.reserved_unfinished_tasks + before.reserved_unfinished_tasks,
            others.reserved_concurrency + before.reserved_concurrency,
            others.reserved_rate_per_second + before.reserved_rate_per_second,
          ),
          before,
          after,
        );
        for (const { reserved } of FLOOR_OF_LIMIT) assert.equal(sums[reserved], others[reserved] + after[reserved]);
        const above = firstFloorAboveLimit(limits, sums);
        const over = FLOOR_OF_LIMIT.filter(({ reserved, limit }) => sums[reserved] > limits[limit]);
        assert.equal(above?.reserved ?? null, over[0]?.reserved ?? null);
        const used = [usage.unfinishedTasks, usage.activeAttempts, usage.startsThisSecond];
        for (const [i, e] of floorEffects(before, after, usage, sums, limits).entries()) {
          const { reserved } = FLOOR_OF_LIMIT[i] as (typeof FLOOR_OF_LIMIT)[number];
          assert.equal(e.limit, reserved);
          assert.equal(e.usage, (used[i] as bigint).toString());
          if (before[reserved] === after[reserved]) assert.equal(e.effect, 'unchanged');
          else if (after[reserved] === 0) assert.match(e.effect, new RegExp(`^no ${reserved}:`));
          else {
            const kept = idleOf({ reserved: BigInt(after[reserved]), usage: used[i] as bigint });
            if (kept > 0n) assert.match(e.effect, new RegExp(`: ${kept} kept for it, off limits to other namespaces;`));
            else assert.match(e.effect, /all of it in use, none kept idle;/);
            assert.match(e.effect, new RegExp(`would total ${sums[reserved]} of the application's`));
          }
        }
      },
    ),
    { seed: 20260717, numRuns: 300 },
  );
});
