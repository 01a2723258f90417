/**
 * The lines `orbit-admin verify` prints for people (the command: verify-command.ts; the recount and
 * the repair: server/store/quotas/usage-recount.ts). Pure text: the same report prints the same
 * bytes, and the test helper and the benchmarks print a difference with the same line.
 */
import type { CounterDifference, VerifyReport } from '../store/quotas/usage-recount.ts';

/** One greppable line: `queue <id>/<namespace>/<queue> active_attempts: stored 2, recount 1`. */
export function formatDifference(d: CounterDifference): string {
  return `${d.subject} ${d.counter}: stored ${d.stored}, recount ${d.recount}${d.missingRow ? ' (no permit row)' : ''}`;
}

/** `verified 3 applications, 7 queues, 2 permits: 3 differences`. */
export function formatVerifySummary(report: VerifyReport): string {
  return `verified ${report.applications} applications, ${report.queues} queues, ${report.permits} permits: ${report.differences.length} differences`;
}

/** `repaired <subject> <counter>: <stored> -> <recount>`, one per change a repair made. */
export function formatRepaired(d: CounterDifference): string {
  return `repaired ${d.subject} ${d.counter}: ${d.stored} -> ${d.recount}${d.missingRow ? ' (permit row created)' : ''}`;
}

/** The repair's last line; the audit records' request id when anything changed. */
export function formatRepairSummary(changed: number, applications: number, requestId: string): string {
  return `repaired ${changed} differences in ${applications} applications${changed > 0 ? ` (audit request_id ${requestId})` : ''}`;
}
