/**
 * Claim: reserve up to `max` attempts for a worker session in ONE transaction of two round trips.
 *
 * Round trip 1 takes the locks in lock order and reads everything that decides the grant:
 *   identity rows (shared) → session row → application row → queue rows (ascending id)
 *   → candidate tasks: per queue, highest priority first, then oldest available_at, at most
 *     `max`, with `FOR UPDATE SKIP LOCKED` so concurrent claimers never wait on each other's rows;
 *   plus the session's held attempts, the nodes waiting for room, and NOW(6) (database time
 *   decides windows and leases).
 * Room = min(session capacity left,
 *            application: max_concurrency - active, rate - starts in the current window - pending starts,
 *            per queue:   the same, and nothing from a paused queue),
 * then at most the node's fair share when several nodes wait on the same scarce room.
 * Keyed tasks need a free permit (permit rows are the last lock, an extra round trip only when
 * keyed tasks are among the candidates); tasks whose key is full are passed over and the pick
 * is repeated without those keys.
 * Round trip 2 writes and commits: attempts (RESERVED), tasks → LEASED, +active/+pending on
 * both levels, permit holders, the session's waiting mark. A reservation is not an attempt:
 * the task's `attempts` only grows at Start.
 */
import { OrbitError } from '../../errors.ts';
import { idToHex as hex, newId, type IdBytes } from '../../ids.ts';
import { windowIsOpen, windowOfRow, type WindowState } from '../../domain/start-window.ts';
import {
  claimBudget, levelRoom, permitKey as permitOf, pickCandidates, queueRoom, sessionRoom,
  type ClaimCandidate, type QueueAllowance, type QuotaLevel,
} from '../../domain/claim-decisions.ts';
import { millisToSql, sqlToMillis } from '../../time.ts';
import { sql, type SQL } from 'drizzle-orm';
import { isGuardError, isRetryableTransactionError, valueList, type Database, type ResultSetHeader, type Row, type Transaction } from '../database/database.ts';
import type { ApplicationResourcesRow, AttemptRow, CredentialRow, KeyPermitRow, QueueRow, TaskRow, WorkerSessionRow } from '../database/schema.ts';
import type { SessionInfo } from './sessions.ts';
import { CREDENTIAL_JOINS, CREDENTIAL_VALID, noLongerValid } from '../tenancy/credentials.ts';
import { byIdAscending, lockRows, type LockLevel, type LockMode } from '../database/lock-order.ts';

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
type CandidateRow = Pick<TaskRow, 'task_id' | 'queue_id' | 'priority' | 'resource_key' | 'payload' | 'attempts' | 'deadline_at' | 'available_at'>;

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


function permitKey(queueId: Buffer, resourceKey: string): string {
  return permitOf(hex(queueId), resourceKey);
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
export async function attemptClaimGroup(db: Database, requests: ClaimRequest[], leaseSeconds: number, metrics?: { fastPath(hit: boolean): void }): Promise<ClaimOutcome[]> {
  if (requests.length === 0) return [];
  const applicationId = (requests[0] as ClaimRequest).session.principal.applicationId;
  if (requests.some((r) => !r.session.principal.applicationId.equals(applicationId))) throw new Error('a claim group holds the claims of one application');
  const queueIds = uniqueIds(requests.flatMap((r) => r.session.queues.map((q) => q.queueId)));
  const plain = readStatements(requests, queueIds, false);
  // The fast path: read without locks, decide, and write with every limit re-checked by guards
  // in ONE round trip that carries the COMMIT, so the application row is held only while the
  // server runs it. A guard that fires (the room changed since the read, another claimer took a
  // candidate) rolls it back untouched, and the careful path below decides under locks. Keyed
  // candidates always take the careful path (their permits are decided under lock).
  const read = readResults(await db.batch(plain));
  if (read.pool.length === 0) return requests.map(() => ({ ok: true, claimed: [] }));
  if (!read.pool.some((c) => c.resource_key !== null)) {
    const plan = decide(requests, read, leaseSeconds, null);
    const decided = await plan.picked;
    const claimedAny = decided.some((d) => !(d instanceof OrbitError) && d.claimed.length > 0);
    if (claimedAny) {
      try {
        await db.oneShot(writeStatements({ applicationId, claims: writesOf(decided), now: sql`@now`, guarded: { sessionCapacity: plan.capacityOf }, windows: null }), undefined, { retries: 0 });
        metrics?.fastPath(true);
        return outcomesOf(decided);
      } catch (error) {
        if (!isGuardError(error) && !isRetryableTransactionError(error)) throw error;
        metrics?.fastPath(false);
      }
    }
  }
  return db.transaction(async (tx) => {
    const locked = readResults(await tx.batch(readStatements(requests, queueIds, true)));
    const plan = decide(requests, locked, leaseSeconds, tx);
    const decided = await plan.picked;
    const writes = writesOf(decided);
    if (writes.length > 0) {
      await tx.finish(
        writeStatements({
          applicationId,
          claims: writes,
          now: sql`${locked.app.now}`,
          guarded: null,
          windows: { nowMs: locked.nowMs, application: windowOfRow(locked.app), queues: new Map(locked.queueRows.map((q) => [hex(q.queue_id), windowOfRow(q)])) },
        }),
      );
    }
    return outcomesOf(decided);
  });
}

/** What the first round trip returns, read with locks (careful path) or without (fast path). */
interface GroupRead {
  valid: Set<string>;
  sessionOf: Map<string, Pick<WorkerSessionRow, 'session_id' | 'capacity' | 'state'>>;
  heldOf: Map<string, number>;
  app: QuotaRow & { now: string };
  nowMs: number;
  queueRows: QueueQuotaRow[];
  waitingNodes: number;
  pool: CandidateRow[];
}

/**
 * The first round trip: identity rows of the credentials, the session rows (ascending), what the
 * sessions hold, the application row, the union of their queues' rows (ascending), the other
 * waiting nodes, and per queue at most what the claims on it could take of its candidates in
 * claim order. With `locked`, each read takes its level's locks in lock order (lockRows; the
 * candidates with SKIP LOCKED, so concurrent claimers never wait on each other's rows);
 * without, the reads lock nothing (the fast path re-checks everything when it writes).
 */
function readStatements(requests: ClaimRequest[], queueIds: IdBytes[], locked: boolean): SQL {
  const applicationId = (requests[0] as ClaimRequest).session.principal.applicationId;
  const credentialIds = uniqueIds(requests.map((r) => r.session.principal.credentialId));
  const sessionIds = uniqueIds(requests.map((r) => r.session.sessionId));
  const nodeIds = [...new Set(requests.map((r) => r.session.nodeId))];
  const lock = (level: LockLevel, mode: LockMode = 'update') => (locked ? lockRows(level, mode) : sql``);
  const candidateLimit = (queueId: IdBytes) =>
    Math.min(
      MAX_CANDIDATES_PER_QUEUE,
      requests.filter((r) => r.session.queues.some((q) => q.queueId.equals(queueId))).reduce((n, r) => n + Math.min(r.max, r.session.capacity), 0),
    );
  // CREDENTIAL_VALID and CREDENTIAL_JOINS are constant SQL text (credentials.ts); the window is a constant too.
  return sql.join(
    [
      sql`SELECT c.credential_id, ${sql.raw(CREDENTIAL_VALID)} AS valid FROM ${sql.raw(CREDENTIAL_JOINS)}
           WHERE c.credential_id IN (${valueList(credentialIds)}) ORDER BY c.credential_id ${lock('identity', 'share')}`,
      sql`SELECT session_id, capacity, state FROM orbit_worker_sessions WHERE session_id IN (${valueList(sessionIds)}) ORDER BY session_id ${lock('session')}`,
      sql`SELECT session_id, COUNT(*) AS held FROM orbit_attempts WHERE session_id IN (${valueList(sessionIds)}) AND state IN ('RESERVED', 'RUNNING') GROUP BY session_id`,
      sql`SELECT NOW(6) AS now, max_concurrency, active_attempts, pending_starts, rate_per_second, window_started_at, window_starts
     FROM orbit_application_resources WHERE application_id = ${applicationId} ${lock('application')}`,
      sql`SELECT queue_id, max_concurrency, active_attempts, pending_starts, rate_per_second, window_started_at, window_starts, key_concurrency, paused
     FROM orbit_queues WHERE queue_id IN (${valueList(queueIds)}) ORDER BY queue_id ${lock('queue')}`,
      sql`SELECT COUNT(DISTINCT node_id) AS nodes FROM orbit_worker_sessions
    WHERE application_id = ${applicationId} AND state = 'OPEN' AND waiting_since IS NOT NULL
      AND last_seen_at > NOW(6) - INTERVAL ${sql.raw(String(WAITING_WINDOW_SECONDS))} SECOND AND node_id NOT IN (${valueList(nodeIds)})`,
      ...queueIds.map((queueId) => candidateSql({ queueId, excludedKeys: [], excludedTasks: [], limit: candidateLimit(queueId), locked })),
    ],
    sql`;\n`,
  );
}

function readResults(results: Array<Row[] | ResultSetHeader>): GroupRead {
  const [identityRows, sessionRows, heldRows, appRows, queueRows, waitingNodes] = results as [
    Array<Pick<CredentialRow, 'credential_id'> & { valid: number }>,
    Array<Pick<WorkerSessionRow, 'session_id' | 'capacity' | 'state'>>,
    Array<Pick<AttemptRow, 'session_id'> & { held: string }>,
    Array<QuotaRow & { now: string }>,
    QueueQuotaRow[],
    Array<{ nodes: string }>,
  ];
  const app = appRows[0];
  if (!app) throw new OrbitError('INTERNAL', 'the application has no resources row');
  return {
    valid: new Set(identityRows.filter((r) => r.valid === 1).map((r) => hex(r.credential_id))),
    sessionOf: new Map(sessionRows.map((r) => [hex(r.session_id), r])),
    heldOf: new Map(heldRows.map((r) => [hex(r.session_id), Number(r.held)])),
    app,
    nowMs: sqlToMillis(app.now),
    queueRows,
    waitingNodes: Number(waitingNodes[0]?.nodes ?? 0),
    pool: (results.slice(6) as CandidateRow[][]).flat(),
  };
}

type Decided = Array<{ request: ClaimRequest; claimed: ClaimedAttemptInfo[]; waiting: boolean } | OrbitError>;

/**
 * Decides the group's claims in order, sharing the room: each claim's budget comes out of what
 * the claims before it left, and while the room it competes for is scarce each takes at most
 * its fair share among every node waiting for it - the group's own nodes included. With a
 * transaction (careful path) keyed tasks are picked with their permits, locked on demand;
 * without (fast path, no keyed candidates) the pick needs no database.
 */
function decide(requests: ClaimRequest[], read: GroupRead, leaseSeconds: number, tx: Transaction | null): { picked: Promise<Decided>; capacityOf: Map<string, number> } {
  const { nowMs } = read;
  const applicationId = (requests[0] as ClaimRequest).session.principal.applicationId;
  const nodeCount = new Set(requests.map((r) => r.session.nodeId)).size;
  const applicationRoom = levelRoom(levelOf(read.app), nowMs);
  const otherWaitingNodes = read.waitingNodes + nodeCount - 1;
  const state: PickState = {
    queues: new Map(read.queueRows.map((q) => [hex(q.queue_id), { room: queueRoom({ ...levelOf(q), paused: Boolean(q.paused) }, nowMs), keyConcurrency: q.key_concurrency }])),
    taken: new Set<string>(),
    fullKeys: new Set<string>(),
    holders: new Map<string, number>(),
  };
  const initialQueueRoom = new Map([...state.queues].map(([q, a]) => [q, a.room]));
  const capacityOf = new Map([...read.sessionOf].map(([id, row]) => [id, row.capacity]));
  const leaseMs = leaseSeconds * 1000;
  const decided: Decided = [];
  let granted = 0;
  const run = async (): Promise<Decided> => {
    for (const request of requests) {
      const { session } = request;
      const row = read.sessionOf.get(hex(session.sessionId));
      if (!read.valid.has(hex(session.principal.credentialId))) {
        decided.push(noLongerValid());
        continue;
      }
      if (!row || row.state !== 'OPEN') {
        decided.push(new OrbitError('STATE_CONFLICT', 'the session is closed'));
        continue;
      }
      const held = read.heldOf.get(hex(session.sessionId)) ?? 0;
      const own = new Set(session.queues.map((q) => hex(q.queueId)));
      // The scarce room this claim competes for: the application's, or its queues' when those
      // have less (as they were when the group began, so every claim of the group sees the same).
      const ownQueueRoom = [...own].reduce((n, q) => n + (initialQueueRoom.get(q) ?? 0), 0);
      const fair = claimBudget({ max: request.max, sessionRoom: sessionRoom(row.capacity, held), applicationRoom: Math.min(applicationRoom, ownQueueRoom), otherWaitingNodes });
      const budget = Math.min(fair.budget, applicationRoom - granted);
      const chosen: CandidateRow[] = [];
      if (budget > 0) {
        if (tx) await pick(tx, { budget, own, applicationId, chosen, pool: read.pool, state });
        else pickFromPool({ budget, own, chosen, pool: read.pool, state });
      }
      granted += chosen.length;
      // The same session twice in one group (a second claim frame before the first answer):
      // the second sees what the first took.
      read.heldOf.set(hex(session.sessionId), held + chosen.length);
      const nameOf = new Map(session.queues.map((q) => [hex(q.queueId), q.name]));
      const claimed = chosen.map((c): ClaimedAttemptInfo => {
        const deadlineAtMs = sqlToMillis(c.deadline_at);
        return {
          attemptId: newId(nowMs),
          taskId: c.task_id,
          queueId: c.queue_id,
          queueName: nameOf.get(hex(c.queue_id)) as string,
          payload: JSON.parse(c.payload) as Record<string, unknown>,
          priority: c.priority,
          resourceKey: c.resource_key,
          attemptNumber: c.attempts + 1,
          leaseExpiresAtMs: Math.min(nowMs + leaseMs, deadlineAtMs),
          deadlineAtMs,
          started: request.start === true,
        };
      });
      decided.push({ request, claimed, waiting: claimed.length < fair.wanted });
    }
    return decided;
  };
  return { picked: run(), capacityOf };
}

function writesOf(decided: Decided) {
  return decided.filter((d): d is Exclude<typeof d, OrbitError> => !(d instanceof OrbitError)).map((w) => ({ session: w.request.session, claimed: w.claimed, waiting: w.waiting }));
}

function outcomesOf(decided: Decided): ClaimOutcome[] {
  return decided.map((d): ClaimOutcome => (d instanceof OrbitError ? { ok: false, error: d } : { ok: true, claimed: d.claimed }));
}

/** Distinct ids in ascending order (the order their rows are locked in). */
function uniqueIds(ids: IdBytes[]): IdBytes[] {
  return [...new Map(ids.map((id) => [hex(id), id])).values()].sort(byIdAscending);
}

/** One queue's claimable tasks in claim order, at most `limit`, without the excluded keys and tasks, locked with SKIP LOCKED. */
function candidateSql(options: { queueId: IdBytes; excludedKeys: string[]; excludedTasks: IdBytes[]; limit: number; locked?: boolean }): SQL {
  const { excludedKeys, excludedTasks } = options;
  return sql`SELECT task_id, queue_id, priority, resource_key, payload, attempts, deadline_at, available_at
      FROM orbit_tasks FORCE INDEX (ix_orbit_tasks_claim)
     WHERE queue_id = ${options.queueId} AND state = 'WAITING' AND available_at <= NOW(6) AND deadline_at > NOW(6)
       ${excludedKeys.length > 0 ? sql`AND (resource_key IS NULL OR resource_key NOT IN (${valueList(excludedKeys)}))` : sql``}
       ${excludedTasks.length > 0 ? sql`AND task_id NOT IN (${valueList(excludedTasks)})` : sql``}
     ORDER BY priority DESC, available_at, task_id
     LIMIT ${options.limit} ${options.locked === false ? sql`` : lockRows('task', 'skip-locked')}`;
}

/** What the claims of one group share while they pick: queue room, the tasks taken, permit holders and full keys. */
interface PickState {
  /** Each queue's room and key_concurrency; replaced after each pick by what is left. */
  queues: Map<string, QueueAllowance>;
  /** Task ids (hex) read by this transaction: picked by a claim, or passed over. */
  taken: Set<string>;
  /** Permits (`queue/key`) found full. */
  fullKeys: Set<string>;
  /** Holders per permit, for the permits locked so far. */
  holders: Map<string, number>;
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
      const excludedTasks = uniqueIds(ctx.pool.map((c) => c.task_id));
      const statements = queues.map(([queueHex, room]) =>
        candidateSql({
          queueId: Buffer.from(queueHex, 'hex'),
          excludedKeys: [...state.fullKeys].filter((k) => k.startsWith(`${queueHex}/`)).map((k) => k.slice(queueHex.length + 1)),
          excludedTasks,
          limit: Math.min(left, room),
        }),
      );
      // One statement alone comes back as plain rows, several as a list of row sets.
      candidates =
        statements.length === 1 ? await tx.rows<CandidateRow>(statements[0] as SQL) : ((await tx.batch(sql.join(statements, sql`;\n`))) as CandidateRow[][]).flat();
      // Rows read here are locked by this transaction and may be picked by the next claims too.
      ctx.pool.push(...candidates);
    }
    if (candidates.length === 0) return;
    // Permit rows for keys not seen yet: created on demand, then locked (last in the lock order).
    const newKeys = [...new Set(candidates.filter((c) => c.resource_key !== null).map((c) => permitKey(c.queue_id, c.resource_key as string)))].filter(
      (k) => !state.holders.has(k),
    );
    if (newKeys.length > 0) await lockPermits(tx, ctx.applicationId, newKeys, state.holders);
    // Claim order, budget, queue room and keyed permits: claim-decisions.ts.
    const picked = pickCandidates(
      candidates.map((row): ClaimCandidate & { row: CandidateRow } => ({
        queue: hex(row.queue_id), taskId: hex(row.task_id), priority: row.priority, availableAt: row.available_at, resourceKey: row.resource_key, row,
      })),
      { left: ctx.budget - ctx.chosen.length, queues: state.queues, holders: state.holders },
    );
    ctx.chosen.push(...picked.picked.map((c) => c.row));
    for (const c of picked.picked) state.taken.add(hex(c.row.task_id));
    state.queues = picked.queues;
    state.holders = picked.holders;
    for (const key of picked.fullKeys) state.fullKeys.add(key);
    // A task passed over for a full key stays passed over: holders only grow in this transaction.
    for (const c of candidates) if (c.resource_key !== null && state.fullKeys.has(permitKey(c.queue_id, c.resource_key))) state.taken.add(hex(c.task_id));
    if (picked.fullKeys.length === 0) return;
  }
}

/** The pick of the fast path: no keyed candidates, so one pass over the pool decides. */
function pickFromPool(ctx: { budget: number; own: Set<string>; chosen: CandidateRow[]; pool: CandidateRow[]; state: PickState }): void {
  const { state } = ctx;
  const picked = pickCandidates(
    ctx.pool
      .filter((c) => ctx.own.has(hex(c.queue_id)) && !state.taken.has(hex(c.task_id)))
      .map((row): ClaimCandidate & { row: CandidateRow } => ({
        queue: hex(row.queue_id), taskId: hex(row.task_id), priority: row.priority, availableAt: row.available_at, resourceKey: row.resource_key, row,
      })),
    { left: ctx.budget, queues: state.queues, holders: state.holders },
  );
  ctx.chosen.push(...picked.picked.map((c) => c.row));
  for (const c of picked.picked) state.taken.add(hex(c.row.task_id));
  state.queues = picked.queues;
}

async function lockPermits(tx: Transaction, applicationId: IdBytes, keys: string[], holders: Map<string, number>): Promise<void> {
  keys.sort();
  const pairs = keys.map((k) => {
    const slash = k.indexOf('/');
    return [Buffer.from(k.slice(0, slash), 'hex'), k.slice(slash + 1)] as const;
  });
  const [, rows] = (await tx.batch(
    sql.join(
      [
        sql`INSERT IGNORE INTO orbit_key_permits (queue_id, resource_key, application_id, holders, updated_at)
       VALUES ${sql.join(pairs.map(([q, k]) => sql`(${q}, ${k}, ${applicationId}, 0, NOW(6))`), sql`, `)}`,
        sql`SELECT queue_id, resource_key, holders FROM orbit_key_permits
      WHERE (queue_id, resource_key) IN (${sql.join(pairs.map(([q, k]) => sql`(${q}, ${k})`), sql`, `)})
      ORDER BY queue_id, resource_key ${lockRows('permit')}`,
      ],
      sql`;\n`,
    ),
  )) as [unknown, Array<Pick<KeyPermitRow, 'queue_id' | 'resource_key' | 'holders'>>];
  for (const row of rows) holders.set(permitKey(row.queue_id, row.resource_key), row.holders);
}

/** A guard: fails the transaction unless the previous statement changed exactly `n` rows (as in attempt-fast-paths.ts). */
function guard(n: number, applicationId: IdBytes): SQL {
  return sql`UPDATE orbit_application_resources SET active_attempts = IF(ROW_COUNT() = ${n}, active_attempts, NULL) WHERE application_id = ${applicationId}`;
}

/**
 * The claims' writes, in lock order: session rows, the application row, queue rows
 * (ascending), task rows (ascending), the new attempts, permits. Careful path (`guarded` null):
 * every row was locked and every limit decided under the locks in the first round trip, and
 * the start windows are the ones read then. Fast path: nothing was locked, so each statement
 * re-checks what the decision assumed - the session open with the capacity, the credential
 * valid, the room under max_concurrency and under the rate at both levels (window decided in
 * SQL at @now), the queue not paused, every picked task still WAITING and due - and a guard
 * fails the whole round trip (ER_BAD_NULL_ERROR on a NOT NULL column) if anything differs.
 */
function writeStatements(params: {
  applicationId: IdBytes;
  claims: Array<{ session: SessionInfo; claimed: ClaimedAttemptInfo[]; waiting: boolean }>;
  /** Database time: `@now` (fast path, set by the first statement) or the text read under the locks. */
  now: SQL;
  guarded: { sessionCapacity: Map<string, number> } | null;
  /** Careful path: the start windows as read under the locks. */
  windows: { nowMs: number; application: WindowState; queues: Map<string, WindowState> } | null;
}): SQL {
  const { applicationId, now, guarded } = params;
  const statements: SQL[] = guarded ? [sql`SET @now = NOW(6)`] : [];
  // One statement per session (a session may have claimed twice in the group).
  const perSession = new Map<string, { session: SessionInfo; n: number; waiting: boolean }>();
  for (const { session, claimed, waiting } of params.claims) {
    const entry = perSession.get(hex(session.sessionId)) ?? { session, n: 0, waiting };
    entry.n += claimed.length;
    entry.waiting = waiting;
    perSession.set(hex(session.sessionId), entry);
  }
  // Fast path: each session's row must match (open, with the capacity, its credential valid);
  // the matches are added up and checked once, so every session row is written before the
  // application row is touched (lock order).
  if (guarded) statements.push(sql`SET @sessions_matched = 0`);
  for (const [, { session, n, waiting }] of [...perSession].sort(([a], [b]) => a.localeCompare(b))) {
    const set = sql`waiting_since = ${waiting ? sql`COALESCE(waiting_since, ${now})` : sql`NULL`}, last_seen_at = ${now}`;
    if (!guarded) {
      statements.push(sql`UPDATE orbit_worker_sessions SET ${set} WHERE session_id = ${session.sessionId}`);
      continue;
    }
    statements.push(
      sql`UPDATE orbit_worker_sessions SET ${set}
           WHERE session_id = ${session.sessionId} AND state = 'OPEN'
             AND capacity >= ${n} + (SELECT COUNT(*) FROM orbit_attempts WHERE session_id = ${session.sessionId} AND state IN ('RESERVED', 'RUNNING'))
             AND EXISTS (SELECT 1 FROM ${sql.raw(CREDENTIAL_JOINS)} WHERE c.credential_id = ${session.principal.credentialId} AND ${sql.raw(CREDENTIAL_VALID)})`,
      sql`SET @sessions_matched = @sessions_matched + ROW_COUNT()`,
    );
  }
  if (guarded) {
    statements.push(
      sql`UPDATE orbit_application_resources SET active_attempts = IF(@sessions_matched = ${perSession.size}, active_attempts, NULL) WHERE application_id = ${applicationId}`,
    );
  }
  const all = params.claims.flatMap(({ session, claimed }) => claimed.map((c) => ({ session, c })));
  if (all.length > 0) {
    /**
     * A quota row's counters: +active for every attempt, +pending for the reserved ones, and the
     * started ones counted in its start window - opened now when the last one has ended, as
     * start-window.ts decides. Careful path: the row is locked and the claim's room already
     * left them room. Fast path: the room is checked here, against the row as it is now (SET
     * assigns left to right: the check comes first, on the values before this statement, and
     * window_starts is set before window_started_at, which its condition reads).
     */
    const counters = (n: number, startedHere: number, window: WindowState | null, extraRoom: SQL) => {
      const open = sql`(window_started_at IS NOT NULL AND window_started_at + INTERVAL 1 SECOND > ${now})`;
      const set = [
        window === null
          ? sql`active_attempts = IF(active_attempts + ${n} <= max_concurrency AND IF(${open}, window_starts, 0) + pending_starts + ${n} <= rate_per_second${extraRoom}, active_attempts + ${n}, NULL)`
          : sql`active_attempts = active_attempts + ${n}`,
        sql`pending_starts = pending_starts + ${n - startedHere}`,
      ];
      if (startedHere > 0) {
        if (window === null) set.push(sql`window_starts = IF(${open}, window_starts + ${startedHere}, ${startedHere})`, sql`window_started_at = IF(${open}, window_started_at, ${now})`);
        else set.push(windowIsOpen(window, params.windows?.nowMs ?? 0) ? sql`window_starts = window_starts + ${startedHere}` : sql`window_started_at = ${now}, window_starts = ${startedHere}`);
      }
      return sql.join(set, sql`, `);
    };
    const startedTotal = all.filter(({ c }) => c.started).length;
    statements.push(
      sql`UPDATE orbit_application_resources SET ${counters(all.length, startedTotal, params.windows?.application ?? null, sql``)} WHERE application_id = ${applicationId}`,
    );
    const perQueue = new Map<string, { n: number; started: number }>();
    const perKey = new Map<string, number>();
    for (const { c } of all) {
      const q = perQueue.get(hex(c.queueId)) ?? { n: 0, started: 0 };
      q.n += 1;
      if (c.started) q.started += 1;
      perQueue.set(hex(c.queueId), q);
      if (c.resourceKey !== null) perKey.set(permitKey(c.queueId, c.resourceKey), (perKey.get(permitKey(c.queueId, c.resourceKey)) ?? 0) + 1);
    }
    for (const [queueHex, q] of [...perQueue].sort(([a], [b]) => a.localeCompare(b))) {
      const window = params.windows ? (params.windows.queues.get(queueHex) ?? { startedAt: null, starts: 0 }) : null;
      statements.push(sql`UPDATE orbit_queues SET ${counters(q.n, q.started, window, sql` AND paused = 0`)} WHERE queue_id = ${Buffer.from(queueHex, 'hex')}`);
    }
    // Task rows by ascending id: reserved ones LEASED; started ones RUNNING, their attempt counted.
    for (const started of [false, true]) {
      const tasks = all.filter(({ c }) => c.started === started).sort((a, b) => byIdAscending(a.c.taskId, b.c.taskId));
      if (tasks.length === 0) continue;
      statements.push(
        sql`UPDATE orbit_tasks SET ${started ? sql`state = 'RUNNING', attempts = attempts + 1` : sql`state = 'LEASED'`}, updated_at = ${now},
                current_attempt_id = CASE task_id ${sql.join(tasks.map(({ c }) => sql`WHEN ${c.taskId} THEN ${c.attemptId}`), sql` `)} END
          WHERE task_id IN (${valueList(tasks.map(({ c }) => c.taskId))})${guarded ? sql` AND state = 'WAITING' AND available_at <= ${now} AND deadline_at > ${now}` : sql``}`,
      );
      if (guarded) statements.push(guard(tasks.length, applicationId));
    }
    const rows = all.map(
      ({ session, c }) =>
        sql`(${c.attemptId}, ${applicationId}, ${session.principal.namespaceId}, ${c.queueId}, ${c.taskId}, ${session.sessionId}, ${c.attemptNumber}, ${c.started ? 'RUNNING' : 'RESERVED'}, ${c.resourceKey}, ${now}, ${c.started ? now : null}, ${millisToSql(c.leaseExpiresAtMs)}, ${millisToSql(c.deadlineAtMs)})`,
    );
    statements.push(
      sql`INSERT INTO orbit_attempts
         (attempt_id, application_id, namespace_id, queue_id, task_id, session_id, attempt_number, state, resource_key,
          claimed_at, started_at, lease_expires_at, deadline_at)
       VALUES ${sql.join(rows, sql`, `)}`,
    );
    for (const [key, n] of [...perKey].sort(([a], [b]) => a.localeCompare(b))) {
      const slash = key.indexOf('/');
      statements.push(
        sql`UPDATE orbit_key_permits SET holders = holders + ${n}, updated_at = ${now} WHERE queue_id = ${Buffer.from(key.slice(0, slash), 'hex')} AND resource_key = ${key.slice(slash + 1)}`,
      );
    }
  }
  // With the COMMIT, in one round trip: the hot rows are not held across another.
  return sql.join(statements, sql`;\n`);
}
