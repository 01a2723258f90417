/**
 * `orbit-admin prune [--dry-run] [--application-id ID]`: finished history by each application's
 * retention policy, now - what the servers' pruning loops do in the background, for an operator
 * who wants to see (`--dry-run`: counted, nothing removed) or to catch up at once.
 *
 * stdout, one line per application with something to remove, then a summary:
 *
 *   application <id>: orbit_tasks 1200, orbit_attempts 1250, orbit_events 3600, orbit_idempotency_receipts 1200
 *   would prune 7250 rows of 1 application (dry run: nothing removed)
 *
 * The same statements as the loop (server/store/retention/prune.ts), without its throttle:
 * batches of ORBIT_PRUNE_BATCH_ROWS rows, one after another, until nothing due is left.
 */
import { loadConfig } from '../config.ts';
import { PruneLoop } from '../loops/prune.ts';
import { silentLogger } from '../log.ts';
import { OrbitError } from '../errors.ts';
import { noneRemoved, pruneCountDue, PRUNED_TABLES, type PruneCounts } from '../store/retention/prune.ts';
import { retentionPoliciesList } from '../store/retention/retention-policies.ts';
import { hexToId, idToHex, isHexId } from '../ids.ts';
import { UsageError } from './args.ts';
import type { AdminCommand } from './orbit-admin.ts';

function line(counts: PruneCounts): string {
  return PRUNED_TABLES.filter((t) => counts[t] > 0)
    .map((t) => `${t} ${counts[t]}`)
    .join(', ');
}

const sum = (counts: PruneCounts) => PRUNED_TABLES.reduce((n, t) => n + counts[t], 0);

export const pruneCommand: AdminCommand = {
  synopsis: 'prune [--dry-run] [--application-id ID]',
  help: `Removes the finished history that each application's retention policy lets go
(GET /v1/application/retention): finished tasks with their attempts, events, idempotency
receipts, audit records and closed worker sessions - never an unfinished task, the receipt
of one, or an event an ACTIVE subscription still needs within its lag. The servers' pruning
loops do the same in the background (ORBIT_PRUNE_INTERVAL_MS); this does it now, unthrottled,
in batches of ORBIT_PRUNE_BATCH_ROWS rows. Safe beside running servers.
Prints, per application, the rows removed per table and a summary line.

  --dry-run             count what would go; remove nothing
  --application-id ID   only this application (32 lowercase hex characters)`,
  flags: { 'dry-run': { type: 'boolean' }, 'application-id': { type: 'string' } },
  async run(flags, ctx) {
    const idText = flags.string('application-id');
    if (idText !== undefined && !isHexId(idText)) throw new UsageError('--application-id must be 32 lowercase hex characters');
    const dryRun = flags.boolean('dry-run');
    const db = ctx.db();
    const policies = await retentionPoliciesList(db, idText === undefined ? undefined : hexToId(idText));
    if (idText !== undefined && policies.length === 0) throw new OrbitError('NOT_FOUND', `application ${idText} does not exist`);
    const config = loadConfig(ctx.io.env);
    const loop = new PruneLoop({ db, log: silentLogger(), metrics: null, intervalMs: 1000, batchRows: config.pruneBatchRows, maxShare: 1 });
    let total = 0;
    let applications = 0;
    for (const { applicationId, policy } of policies) {
      let counts = noneRemoved();
      if (dryRun) counts = await pruneCountDue(db, applicationId, policy);
      else {
        for (let more = true; more; ) {
          const turn = await loop.turn(applicationId, policy);
          for (const t of PRUNED_TABLES) counts[t] += turn.counts[t];
          more = turn.more;
        }
      }
      const n = sum(counts);
      if (n === 0) continue;
      total += n;
      applications += 1;
      ctx.io.stdout(`application ${idToHex(applicationId)}: ${line(counts)}\n`);
    }
    const of = `${applications} application${applications === 1 ? '' : 's'}`;
    ctx.io.stdout(dryRun ? `would prune ${total} rows of ${of} (dry run: nothing removed)\n` : `pruned ${total} rows of ${of}\n`);
  },
};
