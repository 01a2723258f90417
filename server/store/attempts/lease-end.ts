/**
 * The SQL form of `leaseEndMs` (server/domain/leases.ts), for the statements that set a lease in
 * database time (Start's one-round-trip path, renewals). One helper so the rule is written once
 * in SQL; test/store/lease-end-rule.test.ts evaluates it in MariaDB against the TypeScript
 * form.
 */
import { sql, type SQL } from '../database/sql.ts';

/** `LEAST(now + lease, deadline)`; `deadline` is the attempt row's `deadline_at` unless given. */
export function leaseEndSql(now: SQL, leaseSeconds: number, deadline: SQL = sql.raw('deadline_at')): SQL {
  return sql`LEAST(${now} + INTERVAL ${leaseSeconds} SECOND, ${deadline})`;
}
