// A repeated Start of a running attempt (answered `started`, not counted) is decided before the
// window is asked, in server/store/attempts/attempts.ts; the worker-protocol integration test covers it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { WINDOW_MS, claimRoomUnderRate, startsInCurrentWindow, tryStart, windowOfRow, type WindowState } from '../../server/domain/start-window.ts';

test('the first Start opens a window; starts count until the rate, then RATE_LIMITED until the window ends', () => {
  let window: WindowState = { startedAt: null, starts: 0 };
  for (let i = 0; i < 3; i++) {
    const d = tryStart(window, 3, 10_000 + i * 100);
    assert.equal(d.granted, true);
    if (d.granted) window = d.window;
  }
  assert.deepEqual(window, { startedAt: 10_000, starts: 3 });
  const refused = tryStart(window, 3, 10_400);
  assert.deepEqual(refused, { granted: false, retryAfterMs: 600 });
  // At the edge the window ends and the next Start opens a new one (fixed windows, not sliding).
  const next = tryStart(window, 3, 11_000);
  assert.deepEqual(next, { granted: true, window: { startedAt: 11_000, starts: 1 } });
});

test('pending starts hold window room for claims', () => {
  const window: WindowState = { startedAt: 5_000, starts: 2 };
  assert.equal(startsInCurrentWindow(window, 5_999), 2);
  assert.equal(startsInCurrentWindow(window, 6_000), 0);
  assert.equal(claimRoomUnderRate(window, 3, 10, 5_500), 5);
  assert.equal(claimRoomUnderRate(window, 3, 10, 6_500), 7);
  // Lowering the rate below what is reserved leaves no room (negative), never a reset.
  assert.equal(claimRoomUnderRate(window, 3, 4, 5_500), -1);
});

test('window boundaries: the window is [startedAt, startedAt + 1000); the last millisecond still counts', () => {
  const full: WindowState = { startedAt: 20_000, starts: 2 };
  assert.deepEqual(tryStart(full, 2, 20_000), { granted: false, retryAfterMs: 1000 });
  // retry_after_ms is never 0: a worker told to retry at once would be refused again.
  assert.deepEqual(tryStart(full, 2, 20_999), { granted: false, retryAfterMs: 1 });
  assert.deepEqual(tryStart(full, 2, 21_000), { granted: true, window: { startedAt: 21_000, starts: 1 } });
  // A Start long after the window ended opens the new window at that moment, not on a 1 s grid.
  assert.deepEqual(tryStart(full, 2, 25_432), { granted: true, window: { startedAt: 25_432, starts: 1 } });
  assert.equal(startsInCurrentWindow(full, 20_999), 2);
  assert.equal(startsInCurrentWindow(full, 21_000), 0);
  assert.equal(startsInCurrentWindow({ startedAt: null, starts: 0 }, 20_000), 0);
});

test('a burst at the end of one window and the start of the next is allowed (fixed windows, not sliding)', () => {
  let window: WindowState = { startedAt: 30_000, starts: 0 };
  const granted: number[] = [];
  for (const at of [30_990, 30_995, 30_999, 30_999, 31_000, 31_001, 31_002, 31_003]) {
    const d = tryStart(window, 3, at);
    if (d.granted) {
      window = d.window;
      granted.push(at);
    }
  }
  // Six Starts within 13 ms at a rate of 3 per second: three in each window.
  assert.deepEqual(granted, [30_990, 30_995, 30_999, 31_000, 31_001, 31_002]);
});

test('a rate lowered below the starts of the open window refuses until it ends; nothing is reset', () => {
  const window: WindowState = { startedAt: 40_000, starts: 8 };
  assert.deepEqual(tryStart(window, 3, 40_500), { granted: false, retryAfterMs: 500 });
  assert.deepEqual(tryStart(window, 3, 41_000), { granted: true, window: { startedAt: 41_000, starts: 1 } });
  assert.equal(claimRoomUnderRate(window, 0, 3, 40_500), -5);
  assert.equal(claimRoomUnderRate(window, 0, 3, 41_000), 3);
});

test('the window of a quota row is read in database time (DATETIME(6) text, UTC)', () => {
  assert.deepEqual(windowOfRow({ window_started_at: null, window_starts: 0 }), { startedAt: null, starts: 0 });
  assert.deepEqual(windowOfRow({ window_started_at: '2024-03-01 12:00:00.123456', window_starts: 7 }), {
    startedAt: Date.UTC(2024, 2, 1, 12, 0, 0, 123),
    starts: 7,
  });
});

test('property: never more than the rate per window, at most twice the rate over any one-second span; a refusal says when to retry', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 5 }), fc.array(fc.integer({ min: 0, max: 200 }), { maxLength: 60 }), (rate, gaps) => {
      let window: WindowState = { startedAt: null, starts: 0 };
      let now = 100_000;
      const granted: number[] = [];
      const perWindow = new Map<number, number>();
      for (const gap of gaps) {
        now += gap;
        const d = tryStart(window, rate, now);
        if (d.granted) {
          window = d.window;
          granted.push(now);
          const start = d.window.startedAt as number;
          assert.ok(now >= start && now < start + WINDOW_MS);
          perWindow.set(start, (perWindow.get(start) ?? 0) + 1);
        } else {
          assert.ok(d.retryAfterMs >= 1 && d.retryAfterMs <= WINDOW_MS);
          assert.equal(window.starts >= rate && now < (window.startedAt as number) + WINDOW_MS, true);
          // Retrying when told is granted (nobody else started meanwhile).
          assert.equal(tryStart(window, rate, now + d.retryAfterMs).granted, true);
        }
      }
      for (const n of perWindow.values()) assert.ok(n <= rate);
      for (const t of granted) assert.ok(granted.filter((u) => u >= t && u < t + WINDOW_MS).length <= 2 * rate);
    }),
    { seed: 0x57a7, numRuns: 300 },
  );
});
