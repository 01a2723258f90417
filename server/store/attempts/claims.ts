/**
 * Claim: reserve up to `max` attempts for a worker session in ONE transaction of two round trips.
 *
 * Round trip 1 takes the locks in lock order and reads everything that decides the grant:
 *   identity rows (shared) → session row → application row → namespace rows (floors) → queue rows (ascending id)
 *   → candidate tasks: per queue, highest priority first, then oldest available_at, at most
 *     `max`, with `FOR UPDATE SKIP LOCKED` so concurrent claimers never wait on each other's rows;
 *   plus the session's held attempts, the nodes waiting for room, and NOW(6) (database time
 *   decides windows and leases).
 * Room = min(session capacity left,
 *            application: max_concurrency - active, rate - starts in the current window - pending starts,
 *                         each less the other namespaces' idle floors (domain/floors.ts),
 *            per queue:   the same, and nothing from a paused queue),
 * then at most the node's fair share of the shared part when several nodes wait on the same
 * scarce room (a namespace's own idle floor is not shared out).
 * Keyed tasks need a free permit (permit rows are the last lock, an extra round trip only when
 * keyed tasks are among the candidates); tasks whose key is full are passed over and the pick
 * is repeated without those keys.
 * Round trip 2 writes and commits: attempts (RESERVED), tasks → LEASED, +active/+pending on
 * both levels, permit holders, the session's waiting mark. A reservation is not an attempt:
 * the task's `attempts` only grows at Start.
 */
import { OrbitError } from '../../errors.ts';
import { idToHex as hex, newId, type IdBytes } from '../../ids.ts';
import { namespaceStartsInWindow, windowAfterStarts, windowOfRow, type WindowState } from '../../domain/start-window.ts';
import { PermitTally, type PermitRef } from '../../domain/permits.ts';
import { leaseEndMs } from '../../domain/leases.ts';
import { taskEventsEnabled, taskEventsFromRows } from '../records/task-events.ts';
import {
  ApplicationClaimRoom,
  MAX_CLAIMED_PAYLOAD_BYTES,
  type ApplicationQuota,
  type NamespaceQuota,
  pickCandidates,
  planClaim,
  queueRoom,
  type ClaimCandidate,
  type QueueAllowance,
  type QuotaLevel,
} from '../../domain/claim-decisions.ts';
import { millisToSql, sqlToMillis } from '../../time.ts';
import { sql, type SQL } from '../database/sql.ts';
import { updateEachRow } from '../database/set-based.ts';
import { permitHoldersStatement, permitRowsLockStatement, usageStatements, type UsageChange } from '../quotas/usage-writes.ts';
import { namespaceRowsByHex, namespaceRowsLockStatement, type NamespaceUsageRow } from '../quotas/namespace-resources.ts';
import { rowsStatement, valueList, type BatchStatement, type Database, type Transaction } from '../database/database.ts';
import type { ApplicationResourcesRow, AttemptRow, CredentialRow, KeyPermitRow, QueueRow, TaskRow, WorkerSessionRow } from '../database/schema.ts';
import type { SessionInfo } from '../workers/worker-sessions.ts';
import { CREDENTIAL_JOINS, CREDENTIAL_VALID, noLongerValid } from '../tenancy/credentials.ts';
import { byIdAscending, distinctIdsAscending, lockRows } from '../database/lock-order.ts';
import { countBy } from './fast-path-guards.ts';

export interface ClaimedAttemptInfo {
  attemptId: IdBytes;
  taskId: IdBytes;
  queueId: IdBytes;
  queueName: string;
  payload: Record<string, unknown>;
  priority: number;
  resourceKey: string | null;
  attemptNumber: number;
  leaseExpiresAtMs: number;
  deadlineAtMs: number;
  /** Started by the claim itself (`start: true`). */
  started: boolean;
}

/** The quota columns a claim reads, the same on the application row and on queue rows. */
type QuotaColumns = 'max_concurrency' | 'active_attempts' | 'pending_starts' | 'rate_per_second' | 'window_started_at' | 'window_starts';
type QuotaRow = Pick<ApplicationResourcesRow, QuotaColumns>;
type QueueQuotaRow = Pick<QueueRow, QuotaColumns | 'queue_id' | 'key_concurrency' | 'paused'>;
type ApplicationQuotaRow = QuotaRow & Pick<ApplicationResourcesRow, 'idle_reserved_concurrency' | 'reserved_rate_per_second' | 'window_reserved_starts'>;

function applicationQuotaOf(row: ApplicationQuotaRow): ApplicationQuota {
  return {
    ...levelOf(row),
    idleReservedConcurrency: BigInt(row.idle_reserved_concurrency),
    reservedRate: BigInt(row.reserved_rate_per_second),
    windowReservedStarts: BigInt(row.window_reserved_starts),
  };
}

/** The namespace rows as the claim's room reads them: starts count only in the application's own window. */
function namespaceQuotas(app: ApplicationQuotaRow, rows: Map<string, NamespaceUsageRow>): Array<[string, NamespaceQuota]> {
  return [...rows].map(([key, n]) => [
    key,
    {
      reservedConcurrency: BigInt(n.reserved_concurrency),
      activeAttempts: BigInt(n.active_attempts),
      reservedRate: BigInt(n.reserved_rate_per_second),
      windowStarts: BigInt(namespaceStartsInWindow(n, app.window_started_at)),
      pendingStarts: BigInt(n.pending_starts),
    },
  ]);
}
/**
 * A candidate as the first round trip reads it: its payload's size, not the payload - candidates
 * are read before the room is known, and most may not be granted; the payloads of the granted
 * ones come with the writes (writeClaims).
 */
type CandidateRow = Pick<TaskRow, 'task_id' | 'queue_id' | 'priority' | 'resource_key' | 'attempts' | 'deadline_at' | 'available_at'> & {
  payload_bytes: number;
};

/** How long a node counts as waiting for room after its last unsatisfied claim. */
const WAITING_WINDOW_SECONDS = 10;
/** Candidates read per queue in the first round trip, at most. */
const MAX_CANDIDATES_PER_QUEUE = 1000;
/** Re-picks when keyed tasks were passed over because their key was full. */
const MAX_PICK_ROUNDS = 3;

/** One quota row as the claim decisions (server/domain/claim-decisions.ts) take it. */
function levelOf(row: QuotaRow): QuotaLevel {
  return {
    maxConcurrency: row.max_concurrency,
    activeAttempts: Number(row.active_attempts),
    pendingStarts: Number(row.pending_starts),
    ratePerSecond: row.rate_per_second,
    window: windowOfRow(row),
  };
}

/** The permit of a keyed task or attempt row. */
function permitOf(queueId: Buffer, resourceKey: string): PermitRef {
  return { queue: hex(queueId), resourceKey };
}

/** One session's claim in a group. */
export interface ClaimRequest {
  session: SessionInfo;
  max: number;
  /**
   * Start what is granted in the same transaction: the attempts are counted in both start
   * windows at once instead of as pending starts (the claim's room already kept that window
   * room for them, so the grant is the same), the tasks are RUNNING and their attempts count.
   */
  start?: boolean;
}

/** What one claim of a group gets: its reservations, or why it got nothing (the others go on). */
export type ClaimOutcome = { ok: true; claimed: ClaimedAttemptInfo[] } | { ok: false; error: OrbitError };

/**
 * The claims of several sessions of ONE application, decided in one transaction (group commit:
 * the gateway gathers the claims that arrive while the previous group runs). The locks, in
 * order: the identity rows of their credentials (shared), their session rows (ascending), the
 * application row, the union of their queues' rows (ascending), candidate tasks (SKIP LOCKED),
 * permits. The room is shared: each claim takes its budget from what the ones before it left,
 * and at most its fair share when the room is scarce - the sessions of the group count among
 * the nodes waiting for it. One transaction serves them all, so adding worker sessions adds
 * claims to a group instead of transactions queueing on the application row.
 */
export async function attemptClaimGroup(db: Database, requests: ClaimRequest[], leaseSeconds: number): Promise<ClaimOutcome[]> {
  if (requests.length === 0) return [];
  const principal = (requests[0] as ClaimRequest).session.principal;
  const applicationId = principal.applicationId;
  if (requests.some((r) => !r.session.principal.applicationId.equals(applicationId))) throw new Error('a claim group holds the claims of one application');
  const queueIds = distinctIdsAscending(requests.flatMap((r) => r.session.queues.map((q) => q.queueId)));
  // Nothing claimable: answer without taking any lock (idle workers polling cost one read).
  const [any] = await db.rows(
    sql`SELECT 1 FROM orbit_tasks WHERE queue_id IN (${valueList(queueIds)}) AND state = 'WAITING' AND available_at <= NOW(6) LIMIT 1`,
  );
  if (!any) return requests.map(() => ({ ok: true, claimed: [] }));

  const credentialIds = distinctIdsAscending(requests.map((r) => r.session.principal.credentialId));
  const sessionIds = distinctIdsAscending(requests.map((r) => r.session.sessionId));
  const namespaceIds = distinctIdsAscending(requests.map((r) => r.session.principal.namespaceId));
  const nodeIds = [...new Set(requests.map((r) => r.session.nodeId))];
  // Candidates are read in the first round trip, before the room is known: per queue, at most
  // what the claims on it could take, locked with SKIP LOCKED (others pass over them until this
  // commits).
  const candidateLimit = (queueId: IdBytes) =>
    Math.min(
      MAX_CANDIDATES_PER_QUEUE,
      requests.filter((r) => r.session.queues.some((q) => q.queueId.equals(queueId))).reduce((n, r) => n + Math.min(r.max, r.session.capacity), 0),
    );
  return db.transaction(async (tx) => {
    // CREDENTIAL_VALID and CREDENTIAL_JOINS are constant SQL text (credentials.ts); the window is a constant too.
    const results = await tx.batch(
      sql.join(
        [
          sql`SELECT c.credential_id, ${sql.raw(CREDENTIAL_VALID)} AS valid FROM ${sql.raw(CREDENTIAL_JOINS)}
               WHERE c.credential_id IN (${valueList(credentialIds)}) ORDER BY c.credential_id ${lockRows('identity', 'share')}`,
          sql`SELECT session_id, capacity, state FROM orbit_worker_sessions WHERE session_id IN (${valueList(sessionIds)}) ORDER BY session_id ${lockRows('session')}`,
          sql`SELECT session_id, COUNT(*) AS held FROM orbit_attempts WHERE session_id IN (${valueList(sessionIds)}) AND state IN ('RESERVED', 'RUNNING') GROUP BY session_id`,
          // A plain read, before the application row is taken: what it adds to the row's hold is
          // the statements after that lock, and fairness needs no exact count of waiting nodes.
          sql`SELECT COUNT(DISTINCT node_id) AS nodes FROM orbit_worker_sessions
        WHERE application_id = ${applicationId} AND state = 'OPEN' AND waiting_since IS NOT NULL
          AND last_seen_at > NOW(6) - INTERVAL ${sql.raw(String(WAITING_WINDOW_SECONDS))} SECOND AND node_id NOT IN (${valueList(nodeIds)})`,
          sql`SELECT NOW(6) AS now, max_concurrency, active_attempts, pending_starts, rate_per_second, window_started_at, window_starts,
                idle_reserved_concurrency, reserved_rate_per_second, window_reserved_starts
         FROM orbit_application_resources WHERE application_id = ${applicationId} ${lockRows('application')}`,
          namespaceRowsLockStatement(namespaceIds) as SQL,
          sql`SELECT queue_id, max_concurrency, active_attempts, pending_starts, rate_per_second, window_started_at, window_starts, key_concurrency, paused
         FROM orbit_queues WHERE queue_id IN (${valueList(queueIds)}) ORDER BY queue_id ${lockRows('queue')}`,
          candidatesSql(queueIds.map((queueId) => ({ queueId, excludedKeys: [], excludedTasks: [], limit: candidateLimit(queueId) }))),
        ],
        sql`;\n`,
      ),
    );
    const [identityRows, sessionRows, heldRows, waitingNodes, appRows, namespaceRows, queueRows] = results as [
      Array<Pick<CredentialRow, 'credential_id'> & { valid: number }>,
      Array<Pick<WorkerSessionRow, 'session_id' | 'capacity' | 'state'>>,
      Array<Pick<AttemptRow, 'session_id'> & { held: string }>,
      Array<{ nodes: string }>,
      Array<ApplicationQuotaRow & { now: string }>,
      NamespaceUsageRow[],
      QueueQuotaRow[],
    ];
    const pool = [...(results[7] as CandidateRow[])];
    const app = appRows[0];
    if (!app) throw new OrbitError('INTERNAL', 'the application has no resources row');
    const nowMs = sqlToMillis(app.now);
    const valid = new Set(identityRows.filter((r) => r.valid === 1).map((r) => hex(r.credential_id)));
    const sessionOf = new Map(sessionRows.map((r) => [hex(r.session_id), r]));
    const heldOf = new Map(heldRows.map((r) => [hex(r.session_id), Number(r.held)]));

    // The room of the application level, shared by the group: each claim's budget comes out of
    // what the claims before it left, and while it is scarce each takes at most its fair share
    // among every node waiting for it - the group's own nodes included.
    // Under the floors (domain/floors.ts) that room is each namespace's own.
    // Two ledgers of the same rows: the room as the group began (what fair shares are of) and the room left.
    const quota = applicationQuotaOf(app);
    const namespaces = namespaceQuotas(app, namespaceRowsByHex(namespaceRows, namespaceIds.length));
    const roomAtStart = new ApplicationClaimRoom(quota, namespaces, nowMs);
    const room = new ApplicationClaimRoom(quota, namespaces, nowMs);
    const otherWaitingNodes = Number(waitingNodes[0]?.nodes ?? 0) + nodeIds.length - 1;
    const shared: PickState = {
      queues: new Map(
        queueRows.map((q) => [hex(q.queue_id), { room: queueRoom({ ...levelOf(q), paused: Boolean(q.paused) }, nowMs), keyConcurrency: q.key_concurrency }]),
      ),
      taken: new Set<string>(),
      fullKeys: new PermitTally(),
      holders: new PermitTally(),
    };
    const initialQueueRoom = new Map([...shared.queues].map(([q, a]) => [q, a.room]));
    const decided: Array<{ request: ClaimRequest; claimed: ClaimedAttemptInfo[]; waiting: boolean } | OrbitError> = [];
    for (const request of requests) {
      const { session } = request;
      const row = sessionOf.get(hex(session.sessionId));
      const held = heldOf.get(hex(session.sessionId)) ?? 0;
      const own = new Set(session.queues.map((q) => hex(q.queueId)));
      const namespaceOf = hex(session.principal.namespaceId);
      // Credential, session, budget and fair share: claim-decisions.ts.
      const plan = planClaim({
        credentialValid: valid.has(hex(session.principal.credentialId)),
        sessionOpen: row?.state === 'OPEN',
        capacity: row?.capacity ?? 0,
        held,
        max: request.max,
        applicationRoom: roomAtStart.room(namespaceOf),
        grantedInGroup: roomAtStart.room(namespaceOf) - room.room(namespaceOf),
        ownRoom: roomAtStart.ownRoom(namespaceOf),
        ownQueueRoom: [...own].reduce((n, q) => n + (initialQueueRoom.get(q) ?? 0), 0),
        otherWaitingNodes,
      });
      if (plan.kind === 'credential-no-longer-valid') {
        decided.push(noLongerValid());
        continue;
      }
      if (plan.kind === 'session-closed') {
        decided.push(new OrbitError('STATE_CONFLICT', 'the session is closed'));
        continue;
      }
      const chosen: CandidateRow[] = [];
      if (plan.budget > 0)
        await pick(tx, { budget: plan.budget, own, applicationId, chosen, pool, state: shared, payloadBytesLeft: MAX_CLAIMED_PAYLOAD_BYTES });
      room.take(namespaceOf, chosen.length);
      // The same session twice in one group (a second claim frame before the first answer):
      // the second sees what the first took.
      heldOf.set(hex(session.sessionId), held + chosen.length);
      const nameOf = new Map(session.queues.map((q) => [hex(q.queueId), q.name]));
      const claimed = chosen.map((c): ClaimedAttemptInfo => {
        const deadlineAtMs = sqlToMillis(c.deadline_at);
        return {
          attemptId: newId(nowMs),
          taskId: c.task_id,
          queueId: c.queue_id,
          queueName: nameOf.get(hex(c.queue_id)) as string,
          payload: {}, // filled in from the writes' round trip below
          priority: c.priority,
          resourceKey: c.resource_key,
          attemptNumber: c.attempts + 1,
          leaseExpiresAtMs: leaseEndMs(nowMs, leaseSeconds, deadlineAtMs),
          deadlineAtMs,
          started: request.start === true,
        };
      });
      decided.push({ request, claimed, waiting: claimed.length < plan.wanted });
    }
    const writes = decided.filter((d): d is Exclude<typeof d, OrbitError> => !(d instanceof OrbitError));
    if (writes.length > 0) {
      const payloads = await writeClaims(tx, {
        applicationId,
        claims: writes.map((w) => ({ session: w.request.session, claimed: w.claimed, waiting: w.waiting })),
        now: app.now,
        nowMs,
        windows: { application: windowOfRow(app), queues: new Map(queueRows.map((q) => [hex(q.queue_id), windowOfRow(q)])) },
      });
      for (const w of writes) for (const c of w.claimed) c.payload = JSON.parse(payloads.get(hex(c.taskId)) as string) as Record<string, unknown>;
    }
    return decided.map((d): ClaimOutcome => (d instanceof OrbitError ? { ok: false, error: d } : { ok: true, claimed: d.claimed }));
  });
}

interface CandidateQuery {
  queueId: IdBytes;
  excludedKeys: string[];
  excludedTasks: IdBytes[];
  limit: number;
}

/**
 * The candidates of every queue in ONE statement: each queue's own claim-order scan of the claim
 * index with its own LIMIT, as parts of a UNION ALL (a statement per queue would cost the group
 * a statement per queue while the application row is held).
 */
function candidatesSql(queries: CandidateQuery[]): SQL {
  if (queries.length === 1) return candidateSql(queries[0] as CandidateQuery);
  return sql.join(
    queries.map((q) => sql`(${candidateSql(q)})`),
    sql` UNION ALL `,
  );
}

/** One queue's claimable tasks in claim order, at most `limit`, without the excluded keys and tasks, locked with SKIP LOCKED. */
function candidateSql(options: CandidateQuery): SQL {
  const { excludedKeys, excludedTasks } = options;
  return sql`SELECT task_id, queue_id, priority, resource_key, LENGTH(payload) AS payload_bytes, attempts, deadline_at, available_at
      FROM orbit_tasks FORCE INDEX (ix_orbit_tasks_claim)
     WHERE queue_id = ${options.queueId} AND state = 'WAITING' AND available_at <= NOW(6) AND deadline_at > NOW(6)
       ${excludedKeys.length > 0 ? sql`AND (resource_key IS NULL OR resource_key NOT IN (${valueList(excludedKeys)}))` : sql``}
       ${excludedTasks.length > 0 ? sql`AND task_id NOT IN (${valueList(excludedTasks)})` : sql``}
     ORDER BY priority DESC, available_at, task_id
     LIMIT ${options.limit} ${lockRows('task', 'skip-locked')}`;
}

/** What the claims of one group share while they pick: queue room, the tasks taken, permit holders and full keys. */
interface PickState {
  /** Each queue's room and key_concurrency; replaced after each pick by what is left. */
  queues: Map<string, QueueAllowance>;
  /** Task ids (hex) read by this transaction: picked by a claim, or passed over. */
  taken: Set<string>;
  /** Permits found full (each counted once per candidate passed over). */
  fullKeys: PermitTally;
  /** Holders per permit, for the permits locked so far. */
  holders: PermitTally;
}

async function pick(
  tx: Transaction,
  ctx: {
    budget: number;
    /** The queues (hex) this claim's session consumes. */
    own: Set<string>;
    applicationId: IdBytes;
    chosen: CandidateRow[];
    /** Candidates read in the first round trip, for every queue of the group. */
    pool: CandidateRow[];
    state: PickState;
    /** Payload bytes this claim may still take (MAX_CLAIMED_PAYLOAD_BYTES in all). */
    payloadBytesLeft: number;
  },
): Promise<void> {
  const { state } = ctx;
  for (let round = 0; round < MAX_PICK_ROUNDS && ctx.chosen.length < ctx.budget; round++) {
    let candidates: CandidateRow[];
    if (round === 0) candidates = ctx.pool.filter((c) => ctx.own.has(hex(c.queue_id)) && !state.taken.has(hex(c.task_id)));
    else {
      // Keyed tasks were passed over because their key was full: look again without those keys.
      const left = ctx.budget - ctx.chosen.length;
      const queues = [...state.queues].filter(([queueHex, q]) => q.room > 0 && ctx.own.has(queueHex)).map(([queueHex, q]) => [queueHex, q.room] as const);
      if (queues.length === 0) return;
      // Rows this transaction read already (locked by it: SKIP LOCKED would return them again).
      const excludedTasks = distinctIdsAscending(ctx.pool.map((c) => c.task_id));
      candidates = await tx.rows<CandidateRow>(
        candidatesSql(
          queues.map(([queueHex, room]) => ({
            queueId: Buffer.from(queueHex, 'hex'),
            excludedKeys: state.fullKeys
              .entries()
              .filter(([p]) => p.queue === queueHex)
              .map(([p]) => p.resourceKey),
            excludedTasks,
            limit: Math.min(left, room),
          })),
        ),
      );
      // Rows read here are locked by this transaction and may be picked by the next claims too.
      ctx.pool.push(...candidates);
    }
    if (candidates.length === 0) return;
    // Permit rows for keys not seen yet: created on demand, then locked (last in the lock order).
    const newPermits = PermitTally.countOf(candidates, (c) => (c.resource_key === null ? null : permitOf(c.queue_id, c.resource_key)))
      .entries()
      .map(([p]) => p)
      .filter((p) => !state.holders.has(p));
    if (newPermits.length > 0) await lockPermits(tx, ctx.applicationId, newPermits, state.holders);
    // Claim order, budget, queue room and keyed permits: claim-decisions.ts.
    const picked = pickCandidates(
      candidates.map((row): ClaimCandidate & { row: CandidateRow } => ({
        queue: hex(row.queue_id),
        taskId: hex(row.task_id),
        priority: row.priority,
        availableAt: row.available_at,
        resourceKey: row.resource_key,
        payloadBytes: Number(row.payload_bytes),
        row,
      })),
      {
        left: ctx.budget - ctx.chosen.length,
        queues: state.queues,
        holders: state.holders,
        payloadBytesLeft: ctx.payloadBytesLeft,
        firstOfClaim: ctx.chosen.length === 0,
      },
    );
    ctx.chosen.push(...picked.picked.map((c) => c.row));
    for (const c of picked.picked) ctx.payloadBytesLeft -= c.payloadBytes;
    // The payload bound stopped the pick: the claim takes what it has (claim order holds).
    if (picked.stoppedBySize) return;
    for (const c of picked.picked) state.taken.add(hex(c.row.task_id));
    state.queues = picked.queues;
    state.holders = picked.holders;
    for (const permit of picked.fullKeys) state.fullKeys.add(permit, 1);
    // A task passed over for a full key stays passed over: holders only grow in this transaction.
    for (const c of candidates) if (c.resource_key !== null && state.fullKeys.has(permitOf(c.queue_id, c.resource_key))) state.taken.add(hex(c.task_id));
    if (picked.fullKeys.length === 0) return;
  }
}

async function lockPermits(tx: Transaction, applicationId: IdBytes, permits: PermitRef[], holders: PermitTally): Promise<void> {
  const [, rows] = (await tx.batch(permitRowsLockStatement(applicationId, permits))) as [
    unknown,
    Array<Pick<KeyPermitRow, 'queue_id' | 'resource_key' | 'holders'>>,
  ];
  for (const row of rows) holders.set(permitOf(row.queue_id, row.resource_key), row.holders);
}

async function writeClaims(
  tx: Transaction,
  params: {
    applicationId: IdBytes;
    claims: Array<{ session: SessionInfo; claimed: ClaimedAttemptInfo[]; waiting: boolean }>;
    now: string;
    nowMs: number;
    /** The start windows as read under the locks, for attempts the claim starts itself. */
    windows: { application: WindowState; queues: Map<string, WindowState> };
  },
): Promise<Map<string, string>> {
  const { applicationId, now } = params;
  // Session rows (locked in the first round trip) first, then the new attempts, the task rows
  // picked, the counters on rows already held, and the permits.
  // One row per session (the same session twice in a group: its last claim decides whether it waits).
  const waitingOf = new Map(params.claims.map(({ session, waiting }) => [hex(session.sessionId), { sessionId: session.sessionId, waiting }]));
  const statements: BatchStatement[] = [
    updateEachRow({
      table: 'orbit_worker_sessions',
      key: ['session_id'],
      columns: ['waiting_since', 'last_seen_at'],
      rows: [...waitingOf.values()]
        .sort((a, b) => byIdAscending(a.sessionId, b.sessionId))
        .map(({ sessionId, waiting }) => ({ key: [sessionId], values: [waiting ? sql`COALESCE(waiting_since, ${now})` : sql`NULL`, sql`${now}`] })),
    }),
  ];
  const all = params.claims.flatMap(({ session, claimed }) => claimed.map((c) => ({ session, c })));
  if (all.length > 0) {
    const rows = all.map(
      ({ session, c }) =>
        sql`(${c.attemptId}, ${applicationId}, ${session.principal.namespaceId}, ${c.queueId}, ${c.taskId}, ${session.sessionId}, ${c.attemptNumber}, ${c.started ? 'RUNNING' : 'RESERVED'}, ${c.resourceKey}, ${now}, ${c.started ? now : null}, ${millisToSql(c.leaseExpiresAtMs)}, ${millisToSql(c.deadlineAtMs)})`,
    );
    statements.push(
      rowsStatement(
        sql`INSERT INTO orbit_attempts
         (attempt_id, application_id, namespace_id, queue_id, task_id, session_id, attempt_number, state, resource_key,
          claimed_at, started_at, lease_expires_at, deadline_at)
       VALUES `,
        rows,
      ),
    );
    // Task rows by ascending id: reserved ones LEASED; started ones RUNNING, their attempt counted.
    for (const started of [false, true]) {
      const tasks = all.filter(({ c }) => c.started === started).sort((a, b) => byIdAscending(a.c.taskId, b.c.taskId));
      if (tasks.length === 0) continue;
      statements.push(
        sql`UPDATE orbit_tasks SET ${started ? sql`state = 'RUNNING', attempts = attempts + 1` : sql`state = 'LEASED'`}, updated_at = ${now},
                current_attempt_id = CASE task_id ${sql.join(
                  tasks.map(({ c }) => sql`WHEN ${c.taskId} THEN ${c.attemptId}`),
                  sql` `,
                )} END
          WHERE task_id IN (${valueList(tasks.map(({ c }) => c.taskId))})`,
      );
    }
    // Both levels' counters: +active for every attempt, +pending for the reserved ones, and the
    // started ones counted in the start window - opened now when the last one has ended (the
    // rows are locked: the claim's room already left them room).
    const change = (n: number, startedHere: number, window: WindowState): UsageChange => ({
      active: n,
      pending: n - startedHere,
      ...(startedHere === 0 ? {} : { window: windowAfterStarts(window, startedHere, params.nowMs) }),
    });
    const perQueue = countBy(all, ({ c }) => hex(c.queueId));
    const namespaceOfQueue = new Map(all.map(({ session, c }) => [hex(c.queueId), session.principal.namespaceId]));
    const startedPerQueue = countBy(all, ({ c }) => (c.started ? hex(c.queueId) : null));
    statements.push(
      ...usageStatements(
        applicationId,
        change(all.length, all.filter(({ c }) => c.started).length, params.windows.application),
        [...perQueue].map(([queueHex, n]) => ({
          queueId: Buffer.from(queueHex, 'hex'),
          namespaceId: namespaceOfQueue.get(queueHex) as IdBytes,
          change: change(n, startedPerQueue.get(queueHex) ?? 0, params.windows.queues.get(queueHex) ?? { startedAt: null, starts: 0 }),
          starts: startedPerQueue.get(queueHex) ?? 0,
        })),
      ),
    );
    const permits = permitHoldersStatement(
      PermitTally.countOf(all, ({ c }) => (c.resourceKey === null ? null : permitOf(c.queueId, c.resourceKey))),
      sql`${now}`,
    );
    if (permits !== null) statements.push(permits);
  }
  const startedTasks = all.filter(({ c }) => c.started).map(({ c }) => c.taskId);
  if (startedTasks.length > 0 && taskEventsEnabled()) {
    // Records last, under the application row updated above: `task.started` with its number.
    statements.push(taskEventsFromRows(applicationId, startedTasks, sql`'task.started'`, sql`JSON_OBJECT('attempt_number', t.attempts)`));
  }
  // The payloads of the granted tasks only (the candidates were read without them), in the
  // same round trip: rows this transaction holds, a plain read.
  const payloadsAt = statements.length;
  if (all.length > 0) {
    statements.push(
      sql`SELECT task_id, payload FROM orbit_tasks WHERE application_id = ${applicationId} AND task_id IN (${valueList(all.map(({ c }) => c.taskId))})`,
    );
  }
  // The writes and the COMMIT in one round trip: the hot rows are not held across another
  // (a group too large for one packet takes more; packets.ts).
  const results = await tx.finish(statements);
  const payloads = all.length > 0 ? (results[payloadsAt] as Array<Pick<TaskRow, 'task_id' | 'payload'>>) : [];
  return new Map(payloads.map((r) => [hex(r.task_id), r.payload]));
}
