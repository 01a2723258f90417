import { test } from 'node:test';
import assert from 'node:assert/strict';
import { claimRoomUnderRate, startsInCurrentWindow, tryStart, type WindowState } from '../../server/domain/start-window.ts';

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
