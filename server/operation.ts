/**
 * What a piece of work is, for the database layer's own figures: the operation a statement or a
 * transaction is sent for - an HTTP operation's id, a worker group (`claim`, `start`,
 * `complete`), a loop (`recovery`, `schedules`). The metrics `orbit_db_statements_total`,
 * `orbit_db_round_trips_total` and `orbit_db_transaction_held_seconds` are labelled with it, so
 * statements per transaction and the time a transaction holds its connection (and the hot
 * rows it locks) can be told apart per kind of work (bench/RESULTS.md).
 *
 * AsyncLocalStorage carries it through every `await` into the store without a parameter.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

const scope = new AsyncLocalStorage<string>();

/** Runs `fn` as the operation `name` (an inner one replaces an outer one for its duration). */
export function withOperation<T>(name: string, fn: () => T): T {
  return scope.run(name, fn);
}

/** The operation in force, or `other` outside any. */
export function currentOperation(): string {
  return scope.getStore() ?? 'other';
}
