/**
 * Pruning: the statements that remove finished history by an application's retention policy -
 * the SQL form of `mayPrune` (server/domain/retention.ts; test/store/retention-rule.test.ts
 * holds them together on generated histories).
 *
 * How a batch stays off the hot path:
 * - it never takes an application, queue or permit row, an unfinished task or an attempt of one;
 *   the rows it removes are finished history no request locks;
 * - it finds its rows as one range of an index made for it (migrations/0007), oldest first, at
 *   most `limit`, and locks them with SKIP LOCKED: a row someone else holds (a task being
 *   resolved, say) is passed over, never waited for;
 * - each batch is ONE statement (a DELETE whose rows come from a SKIP LOCKED subquery), except
 *   finished tasks, whose ids are locked first and then deleted with their attempts in the
 *   round trip that commits - locks held across that one round trip are the finished task rows'
 *   own, which nothing on the hot path takes (an operator's `:retry` of a task pruning holds
 *   waits for that one round trip, its application row held: rare, and bounded);
 * - it never changes a usage counter: counters count unfinished work only.
 *
 * Events are pruned per namespace, in sequence order up to a bound computed first (plain reads):
 * the older of "before the event retention" and "acknowledged by every ACTIVE subscription of the
 * namespace, or older than the subscription lag" - so a batch scans only rows it removes. Before
 * removing them it marks every subscription of the namespace whose position is below them
 * (`pruned_through`), in the same transaction: a lagging or PAUSED subscription is told, never
 * skipped silently (subscriptions.ts answers its reads with STATE_CONFLICT until it acknowledges).
 */
import type { IdBytes } from '../../ids.ts';
import { RETENTION_FIELDS, type RetentionPolicy } from '../../domain/retention.ts';
import { ACTIVE_ATTEMPT_STATES, FINISHED_TASK_STATES, UNFINISHED_TASK_STATES } from '../../domain/task-transitions.ts';
import { sql, type SQL } from '../database/sql.ts';
import { valueList, type Database, type Queryable } from '../database/database.ts';
import { lockRows } from '../database/lock-order.ts';
import type { RetentionPolicyRow } from '../database/schema.ts';
import { policyOfRow } from './retention-policies.ts';

/** The tables pruning removes rows from (the `table` label of orbit_pruned_rows_total). */
export const PRUNED_TABLES = [
  'orbit_tasks',
  'orbit_attempts',
  'orbit_events',
  'orbit_idempotency_receipts',
  'orbit_audit_events',
  'orbit_worker_sessions',
] as const;
export type PrunedTable = (typeof PRUNED_TABLES)[number];
export type PruneCounts = Record<PrunedTable, number>;

export function noneRemoved(): PruneCounts {
  return Object.fromEntries(PRUNED_TABLES.map((t) => [t, 0])) as PruneCounts;
}

/** `NOW(6) - INTERVAL n SECOND`: the cutoff of a duration, in database time. */
const ago = (seconds: number) => sql`NOW(6) - INTERVAL ${seconds} SECOND`;
const list = (values: readonly string[]) => sql.raw(values.map((v) => `'${v}'`).join(', '));

/**
 * Each kind's rows that may go now, oldest first (constant text but for the bound values): the
 * one place the rule is written in SQL. `alias` is the table's alias in the statement.
 */
const DUE = {
  tasks: (applicationId: IdBytes, seconds: number) =>
    sql`FROM orbit_tasks WHERE application_id = ${applicationId} AND finished_at < ${ago(seconds)} AND state IN (${list(FINISHED_TASK_STATES)}) ORDER BY finished_at`,
  // The receipt of an unfinished task stays however old it is (a replay must find its task).
  receipts: (applicationId: IdBytes, seconds: number) =>
    sql`FROM orbit_idempotency_receipts r WHERE r.application_id = ${applicationId} AND r.created_at < ${ago(seconds)}
         AND NOT EXISTS (SELECT 1 FROM orbit_tasks t WHERE t.task_id = r.resource_id AND t.state IN (${list(UNFINISHED_TASK_STATES)}))
       ORDER BY r.created_at`,
  audit: (applicationId: IdBytes, seconds: number) =>
    sql`FROM orbit_audit_events WHERE application_id = ${applicationId} AND created_at < ${ago(seconds)} ORDER BY created_at`,
  // A closed session that still has an attempt reserved or running (recovery has not settled it) stays.
  sessions: (applicationId: IdBytes, seconds: number) =>
    sql`FROM orbit_worker_sessions s WHERE s.application_id = ${applicationId} AND s.state = 'CLOSED' AND s.closed_at < ${ago(seconds)}
         AND NOT EXISTS (SELECT 1 FROM orbit_attempts a WHERE a.session_id = s.session_id AND a.state IN (${list(ACTIVE_ATTEMPT_STATES)}))
       ORDER BY s.closed_at`,
  /** A namespace's events up to `through` that may go: old enough, and not held by an ACTIVE subscription within its lag. */
  events: (namespaceId: IdBytes, through: string | SQL, policy: RetentionPolicy, floor: string | null) =>
    sql`FROM orbit_events WHERE namespace_id = ${namespaceId} AND sequence <= ${through}
         AND occurred_at < ${ago(policy.event_retention_seconds as number)}
         ${floor === null ? sql`` : sql`AND (sequence <= ${floor}${policy.subscription_max_lag_seconds === null ? sql`` : sql` OR occurred_at < ${ago(policy.subscription_max_lag_seconds)}`})`}
       ORDER BY sequence`,
};

const affected = (result: unknown) => (result as { affectedRows: number }).affectedRows;

/**
 * The applications whose turn it is, at most `max`: the policy rows due longest ago, locked with
 * SKIP LOCKED (another process takes others) and moved `intervalMs` on. A turn that leaves a
 * backlog is made due again at once (`pruneDueAgain`), behind the applications already waiting.
 */
export async function pruneTurnsTake(db: Database, max: number, intervalMs: number): Promise<Array<{ applicationId: IdBytes; policy: RetentionPolicy }>> {
  return db.transaction(async (tx) => {
    const rows = await tx.rows<Pick<RetentionPolicyRow, 'application_id' | (typeof RETENTION_FIELDS)[number]>>(
      sql`SELECT application_id, ${sql.raw(RETENTION_FIELDS.join(', '))} FROM orbit_retention_policies /* scatter: prune-turns */
           WHERE next_prune_at <= NOW(6) ORDER BY next_prune_at LIMIT ${max} ${lockRows('retention', 'skip-locked')}`,
    );
    if (rows.length === 0) return [];
    await tx.finish(
      sql`UPDATE orbit_retention_policies SET next_prune_at = NOW(6) + INTERVAL ${Math.max(1, Math.round(intervalMs / 1000))} SECOND
           WHERE application_id IN (${valueList(rows.map((r) => r.application_id))})`,
    );
    return rows.map((r) => ({ applicationId: r.application_id, policy: policyOfRow(r) }));
  });
}

/** The application has more to prune: due again now (its next turn comes after those already due). */
export async function pruneDueAgain(db: Queryable, applicationId: IdBytes): Promise<void> {
  await db.exec(sql`UPDATE orbit_retention_policies SET next_prune_at = NOW(6) WHERE application_id = ${applicationId}`);
}

/** One batch of finished tasks and their attempts: the task rows locked (SKIP LOCKED), then both deleted with the COMMIT. */
export async function pruneFinishedTasks(db: Database, applicationId: IdBytes, seconds: number, limit: number): Promise<{ tasks: number; attempts: number }> {
  return db.transaction(async (tx) => {
    const due = await tx.rows<{ task_id: IdBytes }>(sql`SELECT task_id ${DUE.tasks(applicationId, seconds)} LIMIT ${limit} ${lockRows('task', 'skip-locked')}`);
    if (due.length === 0) return { tasks: 0, attempts: 0 };
    const ids = valueList(due.map((r) => r.task_id));
    const [attempts, tasks] = await tx.finish([
      // Lock order: task rows (held), then their attempts.
      sql`DELETE FROM orbit_attempts WHERE task_id IN (${ids})`,
      sql`DELETE FROM orbit_tasks WHERE task_id IN (${ids})`,
    ]);
    return { tasks: affected(tasks), attempts: affected(attempts) };
  });
}

/** One single-statement batch: the rows of `due` (at most `limit`), chosen and locked with SKIP LOCKED, deleted by primary key. */
/**
 * The single-statement batches (receipts, audit records, closed sessions): the rows of the
 * kind's DUE range, at most `limit`, chosen and locked with SKIP LOCKED, deleted by primary key.
 * Exported for the plan test (test/store/statement-plans.test.ts).
 */
export const PRUNE_BATCH = {
  receipts: (applicationId: IdBytes, seconds: number, limit: number) =>
    deleteJoined('orbit_idempotency_receipts', ['namespace_id', 'idempotency_key'], DUE.receipts(applicationId, seconds), limit, 'records'),
  audit: (applicationId: IdBytes, seconds: number, limit: number) =>
    deleteJoined('orbit_audit_events', ['sequence'], DUE.audit(applicationId, seconds), limit, 'records'),
  sessions: (applicationId: IdBytes, seconds: number, limit: number) =>
    deleteJoined('orbit_worker_sessions', ['session_id'], DUE.sessions(applicationId, seconds), limit, 'session'),
  events: (namespaceId: IdBytes, through: string | SQL, policy: RetentionPolicy, floor: string | null, limit: number) =>
    deleteJoined('orbit_events', ['sequence'], DUE.events(namespaceId, through, policy, floor), limit, 'records'),
};

/**
 * `DELETE x FROM table x JOIN (SELECT key … LIMIT n FOR UPDATE SKIP LOCKED) AS due ON x.key =
 * due.key`. The join form, not `WHERE key IN (SELECT …)`: MariaDB 10.11 plans a single-table
 * DELETE with an IN subquery as a scan of the whole table with the subquery checked per row (no
 * semi-join for single-table DELETE before 11.1) - measured: 375 rows scanned per row pruned and
 * 1,900 rows/s, against 1 key lookup per row and 37,000 rows/s in the join form, which looks
 * each row up by its key (test/store/statement-plans.test.ts holds the plan).
 */
function deleteJoined(table: string, key: readonly string[], due: SQL, limit: number, level: 'records' | 'session'): SQL {
  const on = sql.raw(key.map((k) => `x.${k} = due.${k}`).join(' AND '));
  return sql`DELETE x FROM ${sql.raw(table)} x JOIN (SELECT ${sql.raw(key.join(', '))} ${due} LIMIT ${limit} ${lockRows(level, 'skip-locked')}) AS due ON ${on}`;
}

export async function pruneReceipts(db: Queryable, applicationId: IdBytes, seconds: number, limit: number): Promise<number> {
  return (await db.exec(PRUNE_BATCH.receipts(applicationId, seconds, limit))).affectedRows;
}

export async function pruneAudit(db: Queryable, applicationId: IdBytes, seconds: number, limit: number): Promise<number> {
  return (await db.exec(PRUNE_BATCH.audit(applicationId, seconds, limit))).affectedRows;
}

export async function pruneSessions(db: Queryable, applicationId: IdBytes, seconds: number, limit: number): Promise<number> {
  return (await db.exec(PRUNE_BATCH.sessions(applicationId, seconds, limit))).affectedRows;
}

/**
 * Where a namespace's event pruning may go up to now (plain reads): the newest event older than
 * the event retention, lowered to what every ACTIVE subscription has acknowledged - or raised
 * back to the newest event older than the subscription lag. Null when nothing may go.
 */
async function eventBound(
  db: Queryable,
  applicationId: IdBytes,
  namespaceId: IdBytes,
  policy: RetentionPolicy,
): Promise<{ through: string; floor: string | null } | null> {
  if (policy.event_retention_seconds === null) return null;
  const newestBefore = (seconds: number) =>
    sql`SELECT sequence FROM orbit_events WHERE namespace_id = ${namespaceId} AND occurred_at < ${ago(seconds)} ORDER BY occurred_at DESC, sequence DESC LIMIT 1`;
  const statements = [
    sql`SELECT MIN(acked_sequence) AS floor FROM orbit_subscriptions WHERE application_id = ${applicationId} AND namespace_id = ${namespaceId} AND state = 'ACTIVE'`,
    newestBefore(policy.event_retention_seconds),
  ];
  if (policy.subscription_max_lag_seconds !== null) statements.push(newestBefore(policy.subscription_max_lag_seconds));
  const [floors, retained, lagged] = (await db.batch(statements)) as Array<Array<Record<string, string | null>>>;
  const cut = retained?.[0]?.sequence;
  if (cut === undefined || cut === null) return null;
  const floor = floors?.[0]?.floor ?? null;
  if (floor === null) return { through: cut, floor: null };
  const lag = BigInt(lagged?.[0]?.sequence ?? '0');
  const held = BigInt(floor) > lag ? BigInt(floor) : lag;
  const through = BigInt(cut) < held ? BigInt(cut) : held;
  return through > 0n ? { through: through.toString(), floor } : null;
}

/**
 * One batch of a namespace's events, in one round trip: the highest sequence of the batch
 * (plain read), the subscriptions below it marked (schedule level, locked before the event rows
 * by the lock order), the events deleted.
 */
export async function pruneEvents(
  db: Database,
  applicationId: IdBytes,
  namespaceId: IdBytes,
  policy: RetentionPolicy,
  limit: number,
): Promise<{ events: number; subscriptionsTold: number }> {
  const bound = await eventBound(db, applicationId, namespaceId, policy);
  if (bound === null) return { events: 0, subscriptionsTold: 0 };
  const due = (through: string | SQL) => DUE.events(namespaceId, through, policy, bound.floor);
  const results = await db.oneShot([
    sql`SET @orbit_pruned_through = (SELECT MAX(sequence) FROM (SELECT sequence ${due(bound.through)} LIMIT ${limit}) AS due)`,
    sql`UPDATE orbit_subscriptions SET pruned_through = GREATEST(pruned_through, @orbit_pruned_through)
         WHERE application_id = ${applicationId} AND namespace_id = ${namespaceId} AND acked_sequence < @orbit_pruned_through`,
    PRUNE_BATCH.events(namespaceId, sql`@orbit_pruned_through`, policy, bound.floor, limit),
  ]);
  return { events: affected(results[2]), subscriptionsTold: affected(results[1]) };
}

/** The namespaces of an application (plain read): events are pruned per namespace. */
export async function namespacesOf(db: Queryable, applicationId: IdBytes): Promise<IdBytes[]> {
  const rows = await db.rows<{ namespace_id: IdBytes }>(
    sql`SELECT namespace_id FROM orbit_namespaces WHERE application_id = ${applicationId} ORDER BY namespace_id`,
  );
  return rows.map((r) => r.namespace_id);
}

/**
 * What pruning would remove now, without removing it (`orbit-admin prune --dry-run`): the same
 * conditions, counted.
 */
export async function pruneCountDue(db: Database, applicationId: IdBytes, policy: RetentionPolicy): Promise<PruneCounts> {
  const counts = noneRemoved();
  const count = async (due: SQL) => Number((await db.rows<{ n: string }>(sql`SELECT COUNT(*) AS n ${due}`))[0]?.n ?? 0);
  if (policy.finished_task_retention_seconds !== null) {
    const seconds = policy.finished_task_retention_seconds;
    counts.orbit_tasks = await count(DUE.tasks(applicationId, seconds));
    const [attempts] = await db.rows<{ n: string }>(
      sql`SELECT COUNT(*) AS n FROM orbit_attempts WHERE task_id IN (SELECT task_id FROM (SELECT task_id ${DUE.tasks(applicationId, seconds)}) AS due)`,
    );
    counts.orbit_attempts = Number(attempts?.n ?? 0);
    counts.orbit_worker_sessions = await count(DUE.sessions(applicationId, seconds));
  }
  if (policy.receipt_retention_seconds !== null) counts.orbit_idempotency_receipts = await count(DUE.receipts(applicationId, policy.receipt_retention_seconds));
  if (policy.audit_retention_seconds !== null) counts.orbit_audit_events = await count(DUE.audit(applicationId, policy.audit_retention_seconds));
  for (const namespaceId of await namespacesOf(db, applicationId)) {
    const bound = await eventBound(db, applicationId, namespaceId, policy);
    if (bound !== null) counts.orbit_events += await count(DUE.events(namespaceId, bound.through, policy, bound.floor));
  }
  return counts;
}
