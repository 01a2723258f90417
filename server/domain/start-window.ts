/**
 * One-second fixed start windows (docs/quotas-and-locking.md#one-second-start-windows), kept per
 * application and per queue in their quota rows and evaluated in database time. The first granted
 * Start after a window has ended opens a new one at that moment. Bursts at window edges are
 * allowed: this is not a sliding window. Pure: the store reads the row and NOW(6), asks these
 * functions, and writes the result back.
 */
import { sqlToMillis } from '../time.ts';
import { FloorLedger } from './floors.ts';

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

/** The application row's rate floors as a Start reads them (domain/floors.ts). */
export interface RateFloors {
  ratePerSecond: number;
  window: WindowState;
  /** The sum of the namespaces' rate reservations. */
  reservedRate: bigint;
  /** The used part of them in `window` (meaningless once it has ended). */
  windowReservedStarts: bigint;
}

/**
 * The idle part of the rate floors at `nowMs`: what the namespaces' starts in the application's
 * current window leave of their reservations (`windowReservedStarts`, the used part, summed) -
 * all of them when no window is open. Never negative.
 */
export function idleReservedRate(floors: Pick<RateFloors, 'window' | 'reservedRate' | 'windowReservedStarts'>, nowMs: number): bigint {
  if (!windowIsOpen(floors.window, nowMs)) return floors.reservedRate;
  const idle = floors.reservedRate - floors.windowReservedStarts;
  return idle > 0n ? idle : 0n;
}

/**
 * The application's room for Starts namespace by namespace under the rate floors: a
 * namespace's starts in the current window use its own reservation first; what is idle of the
 * others' is not its to take. `namespaces`: each one's reservation and its starts in the window
 * `floors.window` names (the store gives 0 for a namespace whose last starts were in another).
 */
export function startFloorLedger(
  floors: RateFloors,
  namespaces: Iterable<readonly [string, { reserved: bigint; windowStarts: bigint }]>,
  nowMs: number,
): FloorLedger {
  const open = windowIsOpen(floors.window, nowMs);
  return new FloorLedger(
    {
      limit: BigInt(floors.ratePerSecond),
      usage: BigInt(open ? floors.window.starts : 0),
      idleReserved: idleReservedRate(floors, nowMs),
    },
    [...namespaces].map(([k, n]) => [k, { reserved: n.reserved, usage: open ? n.windowStarts : 0n }] as const),
  );
}

/** When a Start refused by the floors may try again: the current window's end (a new window may have room), at least 1 ms. */
export function floorRetryAfterMs(window: WindowState, nowMs: number): number {
  return windowIsOpen(window, nowMs) ? Math.max(1, (window.startedAt as number) + WINDOW_MS - nowMs) : WINDOW_MS;
}

/**
 * A namespace's starts in the application window that `applicationWindowStartedAt` names: a
 * namespace row's `window_starts` count the starts of the application window its
 * `window_started_at` names (store/quotas/usage-writes.ts writes them so), and none of another.
 * Whether that window is still open is the caller's to ask (`windowIsOpen`).
 */
export function namespaceStartsInWindow(
  namespace: { window_started_at: string | null; window_starts: number },
  applicationWindowStartedAt: string | null,
): number {
  return namespace.window_started_at !== null && namespace.window_started_at === applicationWindowStartedAt ? namespace.window_starts : 0;
}
