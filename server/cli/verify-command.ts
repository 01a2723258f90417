/**
 * `orbit-admin verify [--repair] [--application-id ID]`: the usage counters of every
 * application, queue and keyed permit against a recount from the tasks and attempts
 * (server/store/quotas/usage-recount.ts has the recount and the consistency argument; the lines
 * are built in verify-report.ts).
 *
 * stdout, one line per difference, then a summary:
 *
 *   application <id> unfinished_tasks: stored 5, recount 4
 *   queue <id>/<namespace>/<queue> active_attempts: stored 2, recount 1
 *   permit <id>/<namespace>/<queue> key "k1" holders: stored 1, recount 0
 *   verified 3 applications, 7 queues, 2 permits: 3 differences
 *
 * Exit 0 without differences, 1 with. `--repair` then fixes each application that differed (one
 * transaction each, re-recounted under its locks, one audit record each), prints
 * `repaired <subject> <counter>: <stored> -> <recount>` per change and a summary line, exit 0.
 * Wrong arguments: exit 2. Database problems: exit 1 (reported by orbit-admin's main).
 */
import { DEFAULT_DATABASE_URL, databaseChecksFromEnv } from '../config.ts';
import { hexToId, isHexId, newRequestId } from '../ids.ts';
import { createDatabase } from '../store/database/database.ts';
import { countersRepair, countersVerify } from '../store/quotas/usage-recount.ts';
import { UsageError, parseFlags, wantsHelp } from './args.ts';
import { PROCESS_IO, type ProgramIo } from './io.ts';
import { formatDifference, formatRepairSummary, formatRepaired, formatVerifySummary } from './verify-report.ts';

export const VERIFY_USAGE = `usage: orbit-admin verify [--repair] [--application-id ID]

Compares every application's and queue's usage counters (unfinished_tasks, active_attempts,
pending_starts) and every keyed permit's holders with a recount from the tasks and attempts,
read from one consistent snapshot (safe beside running servers; takes no locks).
Prints one line per difference and a summary; exit 0 when there is none, 1 when there are.

  --application-id ID   only this application (32 lowercase hex characters)
  --repair              set each differing application's counters to the recount, in one
                        transaction per application under its locks, with an audit record
                        (action application.counters.repaired); exit 0 once repaired

Database: ORBIT_DATABASE_URL (default ${DEFAULT_DATABASE_URL}).`;

const REASON = 'orbit-admin verify --repair: stored usage counters differed from a recount of tasks and attempts';

/**
 * Runs the command; returns the exit code. `url` is asked for only once the arguments are good
 * (so `--help` never touches ORBIT_DATABASE_URL or the database). Database errors are thrown for
 * orbit-admin's main to report. Its lines go to `io`, the database checks come from `io.env`.
 */
export async function verifyCommand(args: string[], url: () => string, io: ProgramIo = PROCESS_IO): Promise<number> {
  const out = (line: string) => io.stdout(`${line}\n`);
  if (wantsHelp(args)) {
    out(VERIFY_USAGE);
    return 0;
  }
  const flags = parseFlags(args, { repair: { type: 'boolean' }, 'application-id': { type: 'string' } });
  const idText = flags.string('application-id');
  if (idText !== undefined && !isHexId(idText)) throw new UsageError('--application-id must be 32 lowercase hex characters');
  const applicationId = idText === undefined ? undefined : hexToId(idText);

  // No statement timeout: a recount of a large table may take its time.
  const db = createDatabase({ url: url(), connectionLimit: 2, timeoutMs: 0, ...databaseChecksFromEnv(io.env) });
  try {
    const report = await countersVerify(db, { applicationId });
    if (applicationId !== undefined && report.applications === 0) {
      io.stderr(`orbit-admin: application ${idText} does not exist (it has no resources row)\n`);
      return 1;
    }
    for (const d of report.differences) out(formatDifference(d));
    const found = report.differences.length;
    out(formatVerifySummary(report));
    if (!flags.boolean('repair')) return found === 0 ? 0 : 1;

    // Only the applications the snapshot found differing are locked; each is re-recounted
    // under its locks, and what that finds is what is written and printed.
    const requestId = newRequestId();
    const applications = [...new Set(report.differences.map((d) => d.applicationId))].sort();
    let changed = 0;
    let repaired = 0;
    for (const id of applications) {
      const differences = await countersRepair(db, hexToId(id), { requestId, reason: REASON });
      for (const d of differences) out(formatRepaired(d));
      changed += differences.length;
      if (differences.length > 0) repaired += 1;
    }
    out(formatRepairSummary(changed, repaired, requestId));
    return 0;
  } finally {
    await db.close();
  }
}
