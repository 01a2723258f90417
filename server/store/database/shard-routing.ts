/**
 * Scale-out as a test (docs/scale-out.md): on Vitess, keyspace `orbit` is sharded by
 * application_id, and a statement reaches one shard only when vtgate can compute the shard from
 * its conditions - application_id itself (the primary vindex) or a column with a lookup vindex
 * (task_id → orbit_tasks_task_id_lookup, …). `routeOf` classifies one statement the way the
 * doc describes; with `checkShardRouting` (ORBIT_CHECK_SHARD_ROUTING=1, which `npm test` sets)
 * every statement the store sends is classified and one that would scatter throws.
 *
 * The rule: a statement that touches a per-application table (SELECT/UPDATE/DELETE … FROM/JOIN/
 * UPDATE orbit_x) must compare application_id or one of that table's lookup-vindex columns with
 * a value (`col = ?`, `col IN (?, …)`, `(col, other) IN ((?, ?), …)`) in its WHERE clause or JOIN
 * conditions; an INSERT must name application_id in its column list. Statements that scan
 * across applications on purpose carry a marker comment `/* scatter: <name> *\/` whose name is
 * one of `SCATTER_EXCEPTIONS` (on Vitess they run on every shard); an unknown name is a violation.
 */
import { rememberedByText, splitStatements } from './lock-order.ts';

/** The primary vindex column of every per-application table. */
export const SHARDING_COLUMN = 'application_id';

/** Lookup vindexes: column → the vindex (and its lookup table in keyspace orbit_lookup) and the table that owns it. */
export const LOOKUP_VINDEXES: Readonly<Record<string, { vindex: string; owner: string; column: string }>> = {
  orbit_tasks_task_id_lookup: { vindex: 'orbit_tasks_task_id_lookup', owner: 'orbit_tasks', column: 'task_id' },
  orbit_attempts_attempt_id_lookup: { vindex: 'orbit_attempts_attempt_id_lookup', owner: 'orbit_attempts', column: 'attempt_id' },
  orbit_queues_queue_id_lookup: { vindex: 'orbit_queues_queue_id_lookup', owner: 'orbit_queues', column: 'queue_id' },
  orbit_worker_sessions_session_id_lookup: { vindex: 'orbit_worker_sessions_session_id_lookup', owner: 'orbit_worker_sessions', column: 'session_id' },
  orbit_credentials_credential_id_lookup: { vindex: 'orbit_credentials_credential_id_lookup', owner: 'orbit_credentials', column: 'credential_id' },
  orbit_namespaces_namespace_id_lookup: { vindex: 'orbit_namespaces_namespace_id_lookup', owner: 'orbit_namespaces', column: 'namespace_id' },
  orbit_applications_name_lookup: { vindex: 'orbit_applications_name_lookup', owner: 'orbit_applications', column: 'name' },
  orbit_schedules_schedule_id_lookup: { vindex: 'orbit_schedules_schedule_id_lookup', owner: 'orbit_schedules', column: 'schedule_id' },
  orbit_subscriptions_subscription_id_lookup: { vindex: 'orbit_subscriptions_subscription_id_lookup', owner: 'orbit_subscriptions', column: 'subscription_id' },
};

/**
 * Every per-application table (all of Orbit's tables but the migration ledger) and the columns
 * a statement may route it by: application_id first, then the lookup-vindex columns the table
 * has (owned or not), as deploy/vitess/vschema.json declares them.
 */
export const ROUTING_COLUMNS: Readonly<Record<string, readonly string[]>> = {
  orbit_applications: ['application_id', 'name'],
  orbit_namespaces: ['application_id', 'namespace_id'],
  orbit_credentials: ['application_id', 'credential_id', 'namespace_id'],
  orbit_application_resources: ['application_id'],
  orbit_namespace_resources: ['application_id', 'namespace_id'],
  orbit_queues: ['application_id', 'queue_id', 'namespace_id'],
  orbit_idempotency_receipts: ['application_id', 'namespace_id'],
  orbit_audit_events: ['application_id', 'namespace_id'],
  orbit_events: ['application_id', 'namespace_id'],
  orbit_tasks: ['application_id', 'task_id', 'queue_id', 'namespace_id'],
  orbit_attempts: ['application_id', 'attempt_id', 'task_id', 'queue_id', 'session_id'],
  orbit_worker_sessions: ['application_id', 'session_id'],
  orbit_key_permits: ['application_id', 'queue_id'],
  orbit_schedules: ['application_id', 'schedule_id', 'queue_id', 'namespace_id'],
  orbit_subscriptions: ['application_id', 'subscription_id', 'namespace_id'],
  orbit_retention_policies: ['application_id'],
};

/** The tables that are not per application: the migration ledger (a reference table: every shard holds the same rows). */
export const UNSHARDED_TABLES: readonly string[] = ['orbit_schema_migrations', 'orbit_migration_lock'];

/** application_id and every lookup-vindex column: the columns a statement may route by. */
export const ROUTABLE_KEY_COLUMNS: readonly string[] = [SHARDING_COLUMN, ...Object.values(LOOKUP_VINDEXES).map((v) => v.column)];

/**
 * Statements that read or write across applications on purpose. On Vitess each runs as a
 * scatter query (once per shard, results merged by vtgate); none of them is on a request path.
 * Marked in the SQL with `/* scatter: <name> *\/`.
 */
export const SCATTER_EXCEPTIONS: Readonly<Record<string, string>> = {
  'recovery-expired-leases':
    'the recovery loop looks for attempts whose lease ran out in every application; each application found is then recovered in its own routed transaction',
  'recovery-deadlines':
    'the recovery loop looks for WAITING tasks past their deadline in every application; each application found is then expired in its own routed transaction',
  'recovery-stale-sessions':
    'the recovery loop closes OPEN worker sessions of every application whose server stopped heartbeating; one UPDATE of session rows that holds no other lock',
  'prune-turns':
    "each server process's pruning loop takes the retention policies whose turn it is, in every application (SKIP LOCKED, so processes take different ones); each application's history is then pruned in its own routed statements",
  'prune-admin':
    'orbit-admin prune reads the retention policy of every application when no application is named; each is then pruned in its own routed statements',
  'metrics-retention':
    'the retention gauges of /metrics read the oldest kept row of each pruned table across applications (one loose index scan per table) on a scrape; plain reads, no lock',
  'schedules-due': 'the schedule loop looks for due trigger points in every application; each application found is then fired in its own routed transaction',
  'event-watcher':
    "each server process's event watcher reads the headers of events committed since its last look, in every application, to wake the requests waiting for them (long-polls); one plain read per tick, and only while someone waits",
  'metrics-usage':
    "the gauges of /metrics read every application's and the busiest queues' limits and usage (and open sessions, the oldest WAITING task) on a scrape; plain reads, no lock",
  'verify-recount': 'orbit-admin verify (and the tests after every scenario) recount the counters of every application at once when no application is named',
  'verify-schedule-fired': "a consistency count of every schedule's fired counter against the tasks it made (the test helper), not on a request path",
  'verify-task-attempt-agreement':
    'a consistency count over all tasks and attempts (orbit-admin verify, the test helper), not a counter and not on a request path',
};

/**
 * Statements written in the test files themselves (assertions that count or inspect rows of
 * the whole test database, schema-drift's information_schema reads, fixture edits): they are not
 * Orbit's statements, so `assertRoutable` exempts a statement whose caller is a file under
 * test/. Orbit's own statements called from tests are still checked.
 */
export const TEST_INSPECTION_EXCEPTION = 'statements written in test files inspect the whole test database; they are not sent by Orbit';

export interface Route {
  /** Would vtgate send it to one shard (or is it a named scatter)? */
  routable: boolean;
  /** The per-application tables it touches. */
  tables: string[];
  /** How it routes: `table.column` pairs compared with a value, `insert.application_id`, or none. */
  by: string[];
  /** The named exception it carries, if any. */
  scatter?: string;
  /** Why it is not routable. */
  problem?: string;
}

const KEYWORDS = new Set([
  'WHERE',
  'SET',
  'JOIN',
  'LEFT',
  'RIGHT',
  'INNER',
  'OUTER',
  'CROSS',
  'STRAIGHT_JOIN',
  'ON',
  'USING',
  'FORCE',
  'USE',
  'IGNORE',
  'ORDER',
  'GROUP',
  'LIMIT',
  'FOR',
  'LOCK',
  'HAVING',
  'VALUES',
  'SELECT',
  'UNION',
  'AS',
  'PARTITION',
]);
const TABLE_REF = /\b(FROM|JOIN|UPDATE|INTO)\s+(orbit_[a-z_]+)\b(?:\s+(?:AS\s+)?([a-z_][a-z0-9_]*))?/gi;
const VALUE = String.raw`(?:\?|@\w+|'(?:[^'\\]|\\.)*'|x'[0-9a-f]*'|0x[0-9a-f]+|-?\d+|UNHEX\(\s*\?\s*\))`;
const COLUMN = String.raw`(?:\b([a-z_][a-z0-9_]*)\.)?\b([a-z_][a-z0-9_]*)`;
const EQUALS = new RegExp(`${COLUMN}\\s*(?:=|<=>)\\s*${VALUE}|${VALUE}\\s*=\\s*${COLUMN}`, 'gi');
const IN_LIST = new RegExp(`${COLUMN}\\s+IN\\s*\\(\\s*${VALUE}`, 'gi');
const TUPLE_IN = new RegExp(String.raw`\(([a-z0-9_., ]+)\)\s+IN\s*\(\s*\(\s*` + VALUE, 'gi');
const MARKER = /\/\*\s*scatter:\s*([a-z0-9-]+)\s*\*\//i;

/** How one statement routes (see the module comment). */
export function routeOf(statement: string): Route {
  const marker = MARKER.exec(statement)?.[1];
  const text = statement
    .replace(/\/\*[\s\S]*?\*\//g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  const verb = /^(\w+)/.exec(text)?.[1]?.toUpperCase();
  const aliases = new Map<string, string>();
  const tables: string[] = [];
  let insertTable: string | undefined;
  for (const m of text.matchAll(TABLE_REF)) {
    const table = m[2] as string;
    if (!(table in ROUTING_COLUMNS)) continue;
    if (!tables.includes(table)) tables.push(table);
    aliases.set(table, table);
    const alias = m[3];
    if (alias !== undefined && !KEYWORDS.has(alias.toUpperCase())) aliases.set(alias, table);
    if (m[1]?.toUpperCase() === 'INTO' && insertTable === undefined) insertTable = table;
  }
  if (marker !== undefined) {
    if (marker in SCATTER_EXCEPTIONS) return { routable: true, tables, by: [], scatter: marker };
    return { routable: false, tables, by: [], problem: `unknown scatter exception "${marker}"` };
  }
  if (tables.length === 0) return { routable: true, tables, by: [] };

  if ((verb === 'INSERT' || verb === 'REPLACE') && insertTable !== undefined) {
    const columns = new RegExp(`^(?:INSERT|REPLACE)(?: IGNORE)? INTO ${insertTable} ?\\(([^)]*)\\)`, 'i').exec(text)?.[1];
    const names = (columns ?? '').split(',').map((c) => c.trim().replace(/`/g, '').toLowerCase());
    if (names.includes(SHARDING_COLUMN)) return { routable: true, tables, by: [`${insertTable}.${SHARDING_COLUMN}`] };
    return { routable: false, tables, by: [], problem: `INSERT INTO ${insertTable} without application_id in its column list` };
  }

  // The conditions only: no SELECT list, no SET clause (a value assigned is not a condition).
  let conditions = text;
  if (verb === 'UPDATE') conditions = conditions.replace(/\bSET\b[\s\S]*?(?=\bWHERE\b|$)/i, ' ');
  conditions = conditions.replace(/^SELECT\b[\s\S]*?(?=\bFROM\b)/i, ' ');

  const by = new Set<string>();
  const consider = (qualifier: string | undefined, column: string | undefined) => {
    if (column === undefined) return;
    const col = column.toLowerCase();
    const candidates = qualifier !== undefined ? [aliases.get(qualifier)].filter((t): t is string => t !== undefined) : tables;
    for (const table of candidates) if (ROUTING_COLUMNS[table]?.includes(col)) by.add(`${table}.${col}`);
  };
  for (const m of conditions.matchAll(EQUALS)) {
    consider(m[1], m[2]);
    consider(m[3], m[4]);
  }
  for (const m of conditions.matchAll(IN_LIST)) consider(m[1], m[2]);
  for (const m of conditions.matchAll(TUPLE_IN)) {
    for (const part of (m[1] as string).split(',')) {
      const [q, c] = part.trim().includes('.') ? part.trim().split('.') : [undefined, part.trim()];
      consider(q, c);
    }
  }
  if (by.size > 0) return { routable: true, tables, by: [...by] };
  return { routable: false, tables, by: [], problem: `no condition on application_id or a lookup-vindex column of ${tables.join(', ')}` };
}

export class ShardRoutingViolation extends Error {}

/** The file of the first stack frame outside the database layer: who sent the statement. */
function sender(): string {
  const frames = (new Error().stack ?? '').split('\n').slice(1);
  for (const frame of frames) {
    if (/shard-routing\.ts|database\.ts|node:internal|node_modules/.test(frame)) continue;
    return frame;
  }
  return '';
}

/** `routeOf`, remembered per statement text. */
const routeOfSeen = rememberedByText(routeOf);

/** Throws ShardRoutingViolation naming the first statement of `sql` that would not route to one shard. */
export function assertRoutable(sql: string): void {
  for (const statement of splitStatements(sql)) {
    const route = routeOfSeen(statement);
    if (route.routable) continue;
    if (/[/\\]test[/\\]/.test(sender())) continue; // TEST_INSPECTION_EXCEPTION
    throw new ShardRoutingViolation(`shard routing: ${route.problem}\n  statement: ${statement.replace(/\s+/g, ' ').slice(0, 300)}`);
  }
}
