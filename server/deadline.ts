/**
 * How long the work of one request may still wait. Every HTTP request and every worker frame
 * runs inside a deadline (`withDeadline`), and every wait it makes on the database - for a
 * pooled connection, a statement, a transaction and its retries, the COMMIT, a place in a
 * group commit - takes at most what is left of it (store/database/database.ts and
 * batcher.ts read `remainingMs`). So a request is answered (503 UNAVAILABLE at worst)
 * within one bound however many waits it makes and however long the database stays frozen:
 * the bound is per request, not per wait.
 *
 * Code outside any deadline (the background loops, the admin commands) has no request to
 * answer: each of its waits is bounded only by the database layer's own per-wait timeout.
 *
 * AsyncLocalStorage carries the deadline through every `await` of the request, into the
 * store, without passing it by hand through each signature.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

interface DeadlineScope {
  /** Epoch milliseconds (this process's clock) after which nothing more may be waited for. */
  readonly atMs: number;
}

const scope = new AsyncLocalStorage<DeadlineScope>();

/** Runs `fn` with a deadline `budgetMs` from now (a shorter enclosing one stays in force). */
export function withDeadline<T>(budgetMs: number, fn: () => T): T {
  const atMs = Date.now() + budgetMs;
  const outer = scope.getStore();
  return scope.run({ atMs: outer ? Math.min(outer.atMs, atMs) : atMs }, fn);
}

/** Runs `fn` with a fresh deadline, ignoring any enclosing one (a long-poll's read after its wait). */
export function withFreshDeadline<T>(budgetMs: number, fn: () => T): T {
  return scope.run({ atMs: Date.now() + budgetMs }, fn);
}

/** Runs `fn` outside any deadline: work shared by many requests (a group commit) sets its own. */
export function withoutDeadline<T>(fn: () => T): T {
  return scope.exit(fn);
}

/** The deadline in force (epoch ms), or undefined outside any. */
export function currentDeadline(): number | undefined {
  return scope.getStore()?.atMs;
}

/**
 * Milliseconds left before the deadline in force, capped at `capMs`; `capMs` itself outside a
 * deadline. 0 or less: the time is up.
 */
export function remainingMs(capMs: number): number {
  const at = scope.getStore()?.atMs;
  return at === undefined ? capMs : Math.min(capMs, at - Date.now());
}

/** The error of a wait that did not begin because the request's time was already up (a 503: the database is too slow). */
export class DeadlineExceeded extends Error {
  readonly code = 'ORBIT_DEADLINE';
  constructor(what: string) {
    super(`the request's time ran out before ${what}`);
    this.name = 'DeadlineExceeded';
  }
}
