/**
 * The check every integration test ends with: each usage counter on the application and queue
 * rows, and each keyed permit, equals a recount from the tasks and attempts tables. The recount
 * is the one `orbit-admin verify` runs (server/store/quotas/usage-recount.ts), so every test also exercises it.
 */
import assert from 'node:assert/strict';
import type { Database } from '../../server/store/database/database.ts';
import { formatDifference } from '../../server/cli/verify-report.ts';
import { countersVerify, schedulesDisagreeingWithTasks, tasksDisagreeingWithAttempts } from '../../server/store/quotas/usage-recount.ts';

export async function assertCountersMatchRecount(db: Database): Promise<void> {
  const report = await countersVerify(db);
  const lines = report.differences.map(formatDifference);
  assert.deepEqual(lines, [], `usage counters differ from the recount (${lines.length}):\n  ${lines.join('\n  ')}`);
  assert.equal(await tasksDisagreeingWithAttempts(db), 0, 'tasks whose state disagrees with their active attempts');
  assert.equal(await schedulesDisagreeingWithTasks(db), 0, 'schedules whose fired counter disagrees with the tasks they made');
}
