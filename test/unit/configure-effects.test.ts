/**
 * The effects of a configure dry run (server/domain/configure-effects.ts): the numbers of each
 * entry and its sentence, for the application and for a queue, and - on generated limits and
 * usage - that "until N finish" is exactly the number that makes room for one, the same
 * arithmetic as admission (room = limit - unfinished) and the claim plan (room = limit - active,
 * and claimRoomUnderRate for the rate).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { configureEffects, type EffectLimits, type EffectUsage } from '../../server/domain/configure-effects.ts';
import { claimRoomUnderRate, type WindowState } from '../../server/domain/start-window.ts';

const LIMITS: EffectLimits = { max_unfinished_tasks: 1000, max_concurrency: 400, rate_per_second: 500 };
const usage = (u: Partial<EffectUsage> = {}): EffectUsage => ({ unfinishedTasks: 0n, activeAttempts: 0n, startsInWindow: 0n, pendingStarts: 0n, ...u });

test('one entry per limit, in the order of the API object, with current, proposed and usage (a decimal string)', () => {
  const effects = configureEffects(
    'application',
    LIMITS,
    { max_unfinished_tasks: 100, max_concurrency: 300, rate_per_second: 500 },
    usage({ unfinishedTasks: 120n, activeAttempts: 340n, startsInWindow: 4n, pendingStarts: 6n }),
  );
  assert.deepEqual(effects, [
    {
      limit: 'max_unfinished_tasks',
      current: 1000,
      proposed: 100,
      usage: '120',
      effect: 'unfinished tasks 120 > new max_unfinished_tasks 100: submissions refused (APPLICATION_FULL) until 21 finish',
    },
    {
      limit: 'max_concurrency',
      current: 400,
      proposed: 300,
      usage: '340',
      effect: 'active attempts 340 > new max_concurrency 300: no new claims until 41 finish',
    },
    { limit: 'rate_per_second', current: 500, proposed: 500, usage: '10', effect: 'unchanged' },
  ]);
});

test('room left is "room for N more", at either level; a queue that fills up is QUEUE_FULL', () => {
  const effects = configureEffects(
    'queue',
    LIMITS,
    { max_unfinished_tasks: 2000, max_concurrency: 10, rate_per_second: 50 },
    usage({ unfinishedTasks: 1120n, activeAttempts: 10n, startsInWindow: 5n, pendingStarts: 5n }),
  );
  assert.deepEqual(
    effects.map((e) => e.effect),
    [
      'room for 880 more unfinished tasks',
      // Equal to the limit: no room (admission and claims need room for one).
      'active attempts 10 = new max_concurrency 10: no new claims until 1 finishes',
      'room for 40 more starts in this second',
    ],
  );
  const one = configureEffects(
    'queue',
    LIMITS,
    { max_unfinished_tasks: 2, max_concurrency: 2, rate_per_second: 2 },
    usage({ unfinishedTasks: 1n, activeAttempts: 1n, pendingStarts: 1n }),
  );
  assert.deepEqual(
    one.map((e) => e.effect),
    ['room for 1 more unfinished task', 'room for 1 more active attempt', 'room for 1 more start in this second'],
  );
  const full = configureEffects('queue', LIMITS, { ...LIMITS, max_unfinished_tasks: 1 }, usage({ unfinishedTasks: 1n }));
  assert.equal(full[0]?.effect, 'unfinished tasks 1 = new max_unfinished_tasks 1: submissions refused (QUEUE_FULL) until 1 finishes');
});

test('the rate: starts of this window only hold it until the window ends; reservations not yet started until they start', () => {
  const lower = { ...LIMITS, rate_per_second: 300 };
  const windowOnly = configureEffects('application', LIMITS, lower, usage({ startsInWindow: 290n, pendingStarts: 50n }));
  assert.equal(windowOnly[2]?.usage, '340');
  assert.equal(
    windowOnly[2]?.effect,
    "starts this second 290 + reservations not yet started 50 > new rate_per_second 300: no new claims until this second's window ends",
  );
  const reserved = configureEffects('application', LIMITS, lower, usage({ startsInWindow: 10n, pendingStarts: 330n }));
  assert.equal(
    reserved[2]?.effect,
    'reservations not yet started 330 > new rate_per_second 300: no new claims until 31 of them have started or been released; starts beyond 300 a second answer RATE_LIMITED',
  );
  const exactly = configureEffects('queue', LIMITS, lower, usage({ pendingStarts: 300n }));
  assert.match(exactly[2]?.effect ?? '', /^reservations not yet started 300 = new rate_per_second 300: no new claims until 1 of them has started/);
});

test('unchanged is unchanged, whatever the usage; raising a limit still over usage says what stays refused', () => {
  const over = usage({ unfinishedTasks: 5000n, activeAttempts: 5000n, pendingStarts: 5000n });
  assert.deepEqual(
    configureEffects('application', LIMITS, LIMITS, over).map((e) => e.effect),
    ['unchanged', 'unchanged', 'unchanged'],
  );
  const raised = configureEffects('application', LIMITS, { ...LIMITS, max_unfinished_tasks: 4000 }, over);
  assert.equal(raised[0]?.effect, 'unfinished tasks 5000 > new max_unfinished_tasks 4000: submissions refused (APPLICATION_FULL) until 1001 finish');
});

test('counters beyond 2^53 stay exact', () => {
  const huge = 2n ** 63n + 7n;
  const [first] = configureEffects('application', LIMITS, { ...LIMITS, max_unfinished_tasks: 1 }, usage({ unfinishedTasks: huge }));
  assert.equal(first?.usage, huge.toString());
  assert.match(first?.effect ?? '', new RegExp(`until ${huge} finish$`));
});

/** The number in "until N finish(es)" / "until N of them", or null. */
const needOf = (effect: string) => {
  const m = /until (\d+) (?:finish|of them)/.exec(effect);
  return m ? BigInt(m[1] as string) : null;
};

test('property: the sentence agrees with the rules - room N is limit - usage, and "until N" is what makes room for exactly one', () => {
  const limit = fc.integer({ min: 1, max: 100_000_000 });
  const count = fc.bigInt({ min: 0n, max: 200_000_000n });
  fc.assert(
    fc.property(
      fc.constantFrom('application' as const, 'queue' as const),
      fc.record({ max_unfinished_tasks: limit, max_concurrency: limit, rate_per_second: limit }),
      fc.record({ max_unfinished_tasks: limit, max_concurrency: limit, rate_per_second: limit }),
      fc.record({ unfinishedTasks: count, activeAttempts: count, startsInWindow: count, pendingStarts: count }),
      (level, current, proposed, u) => {
        const effects = configureEffects(level, current, proposed, u);
        assert.deepEqual(
          effects.map((e) => e.limit),
          ['max_unfinished_tasks', 'max_concurrency', 'rate_per_second'],
        );
        const now = 10_000;
        const window: WindowState = { startedAt: now - 500, starts: Number(u.startsInWindow) };
        const rooms = [
          BigInt(proposed.max_unfinished_tasks) - u.unfinishedTasks,
          BigInt(proposed.max_concurrency) - u.activeAttempts,
          BigInt(claimRoomUnderRate(window, Number(u.pendingStarts), proposed.rate_per_second, now)),
        ];
        for (const [i, e] of effects.entries()) {
          const key = e.limit as keyof EffectLimits;
          assert.equal(e.current, current[key]);
          assert.equal(e.proposed, proposed[key]);
          const room = rooms[i] as bigint;
          assert.equal(BigInt(e.usage), BigInt(proposed[key]) - room, `${e.limit}: usage is what the rule holds the limit against`);
          if (current[key] === proposed[key]) {
            assert.equal(e.effect, 'unchanged');
            continue;
          }
          if (room > 0n) {
            assert.match(e.effect, new RegExp(`^room for ${room} more `));
            continue;
          }
          if (key === 'max_unfinished_tasks') assert.match(e.effect, level === 'application' ? /\(APPLICATION_FULL\)/ : /\(QUEUE_FULL\)/);
          if (key === 'rate_per_second' && u.pendingStarts < BigInt(proposed.rate_per_second)) {
            // The next window, without this one's starts, has room.
            assert.ok(BigInt(claimRoomUnderRate({ startedAt: null, starts: 0 }, Number(u.pendingStarts), proposed.rate_per_second, now)) > 0n);
            assert.match(e.effect, /until this second's window ends$/);
            continue;
          }
          // What is held against the limit once N are gone: room for exactly one.
          const held = key === 'rate_per_second' ? u.pendingStarts : BigInt(e.usage);
          const need = needOf(e.effect);
          assert.ok(need !== null && need > 0n, e.effect);
          assert.equal(BigInt(proposed[key]) - (held - need), 1n, e.effect);
        }
      },
    ),
    { numRuns: 500 },
  );
});
