/**
 * One-second fixed start windows (docs/quotas-and-locking.md#one-second-start-windows), kept per
 * application and per queue in their quota rows and evaluated in database time. The first granted
 * Start after a window has ended opens a new one at that moment. Bursts at window edges are
 * allowed: this is not a sliding window. Pure: the store reads the row and NOW(6), asks these
 * functions, and writes the result back.
 */
import { sqlToMillis } from '../time.ts';

export const WINDOW_MS = 1000;

export interface WindowState {
  /** Epoch ms of the window's start, or null before the first Start. */
  startedAt: number | null;
  starts: number;
}

/** The window kept in a quota row (application or queue). */
export function windowOfRow(row: { window_started_at: string | null; window_starts: number }): WindowState {
  return { startedAt: row.window_started_at === null ? null : sqlToMillis(row.window_started_at), starts: row.window_starts };
}

export function windowIsOpen(window: WindowState, nowMs: number): boolean {
  return window.startedAt !== null && nowMs < window.startedAt + WINDOW_MS;
}

/** Starts already granted in the window that is current at `nowMs` (0 if it has ended). */
export function startsInCurrentWindow(window: WindowState, nowMs: number): number {
  return windowIsOpen(window, nowMs) ? window.starts : 0;
}

/**
 * How many more attempts a claim may reserve under the rate: reservations not yet started
 * (`pendingStarts`) already hold window room, so other queues cannot take it again.
 */
export function claimRoomUnderRate(window: WindowState, pendingStarts: number, ratePerSecond: number, nowMs: number): number {
  return ratePerSecond - startsInCurrentWindow(window, nowMs) - pendingStarts;
}

export type StartDecision = { granted: true; window: WindowState } | { granted: false; retryAfterMs: number };

/** Grants one Start if the current window has room, opening a new window when the old one ended. */
export function tryStart(window: WindowState, ratePerSecond: number, nowMs: number): StartDecision {
  const current: WindowState = windowIsOpen(window, nowMs) ? window : { startedAt: nowMs, starts: 0 };
  if (current.starts >= ratePerSecond) {
    return { granted: false, retryAfterMs: Math.max(1, (current.startedAt as number) + WINDOW_MS - nowMs) };
  }
  return { granted: true, window: { startedAt: current.startedAt, starts: current.starts + 1 } };
}

/**
 * The window after `n` starts granted at `nowMs` (each of which had room): the same window
 * when it is still open, else one opened at `nowMs`. Unchanged when `n` is 0.
 */
export function windowAfterStarts(window: WindowState, n: number, nowMs: number): WindowState {
  if (n === 0) return window;
  return windowIsOpen(window, nowMs) ? { startedAt: window.startedAt, starts: window.starts + n } : { startedAt: nowMs, starts: n };
}
