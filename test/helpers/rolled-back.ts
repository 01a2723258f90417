/** A transaction that always rolls back: each generated case of a store test leaves nothing behind. */
import type { Database, Transaction } from '../../server/store/database/database.ts';

const ROLLED_BACK = new Error('rolled back');

/** Runs `fn` in a transaction of `db` that is always rolled back, and returns what it returned. */
export async function rolledBack<T>(db: Database, fn: (tx: Transaction) => Promise<T>): Promise<T> {
  let out: T | undefined;
  try {
    await db.transaction(
      async (tx) => {
        out = await fn(tx);
        throw ROLLED_BACK;
      },
      { retries: 0 },
    );
  } catch (error) {
    if (error !== ROLLED_BACK) throw error;
  }
  return out as T;
}
