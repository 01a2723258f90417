/**
 * How long a lease lasts (docs/worker-protocol.md#leases). Pure; the store's SQL form of the same
 * rule is `leaseEndSql` (server/store/attempts/lease-end.ts), and
 * test/store/lease-end-rule.test.ts holds the two together on generated times.
 */

/**
 * When a lease granted, started or renewed at `nowMs` ends: `leaseSeconds` later, but never past
 * the task's deadline - at the deadline the task expires whatever its lease says, so a lease that
 * outlived it would only keep a worker busy on a task that can no longer succeed.
 */
export function leaseEndMs(nowMs: number, leaseSeconds: number, deadlineAtMs: number): number {
  return Math.min(nowMs + leaseSeconds * 1000, deadlineAtMs);
}
