/**
 * Leases that run out when the test says, not when the clock says: a test that is about what
 * recovery does with an expired lease ends it in the database (as if the worker had gone silent
 * for the whole lease) and waits for recovery, instead of running with a lease of a second or two
 * that a loaded machine can overrun in the steps before. The servers of such tests use long
 * leases and a quick recovery interval.
 */
import type { Database } from '../../server/store/database/database.ts';

/** The leases of these attempts (hex ids) end now, if they are still RESERVED or RUNNING. */
export async function endLeases(db: Database, attemptIds: readonly string[]): Promise<void> {
  for (const attemptId of attemptIds) {
    await db.exec("UPDATE orbit_attempts SET lease_expires_at = NOW(6) WHERE attempt_id = UNHEX(?) AND state IN ('RESERVED', 'RUNNING')", [attemptId]);
  }
}
