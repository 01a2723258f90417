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
import { windowOfRow } from '../../domain/start-window.ts';
import {
  claimBudget, levelRoom, permitKey as permitOf, pickCandidates, queueRoom, sessionRoom,
  type ClaimCandidate, type QueueAllowance, type QuotaLevel,
} from '../../domain/claim-decisions.ts';
import { millisToSql, sqlToMillis } from '../../time.ts';
import { placeholders, type Database, type Queryable, type Row, type Transaction } from '../database/database.ts';
import type { SessionInfo } from './sessions.ts';
import { CREDENTIAL_JOINS, CREDENTIAL_VALID, noLongerValid } from '../tenancy/credentials.ts';

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
}

interface QuotaRow extends Row {
  max_concurrency: number;
  active_attempts: string;
  pending_starts: string;
  rate_per_second: number;
  window_started_at: string | null;
  window_starts: number;
}

interface QueueQuotaRow extends QuotaRow {
  queue_id: Buffer;
  key_concurrency: number;
  paused: number;
}

interface CandidateRow extends Row {
  task_id: Buffer;
  queue_id: Buffer;
  priority: number;
  resource_key: string | null;
  payload: string;
  attempts: number;
  deadline_at: string;
  available_at: string;
}

/** How long a node counts as waiting for room after its last unsatisfied claim. */
const WAITING_WINDOW_SECONDS = 10;
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

export async function attemptClaimBatch(
  db: Database,
  params: { session: SessionInfo; max: number; leaseSeconds: number },
): Promise<ClaimedAttemptInfo[]> {
  const { session } = params;
  const principal = session.principal;
  const queueIds = session.queues.map((q) => q.queueId);
  // Nothing claimable: answer without taking any lock (an idle worker polling costs one read).
  const [any] = await db.rows(
    `SELECT 1 FROM orbit_tasks WHERE queue_id IN (${placeholders(queueIds.length)}) AND state = 'WAITING' AND available_at <= NOW(6) LIMIT 1`,
    queueIds,
  );
  if (!any) return [];

  // Candidates are read in the first round trip, before the room is known: at most `max` per
  // queue, locked with SKIP LOCKED (others pass over them until this commits).
  const candidateLimit = Math.min(params.max, session.capacity);
  return db.transaction(async (tx) => {
    const results = await tx.batch(
      `SELECT ${CREDENTIAL_VALID} AS valid FROM ${CREDENTIAL_JOINS} WHERE c.credential_id = ? LOCK IN SHARE MODE;
       SELECT capacity, state FROM orbit_worker_sessions WHERE session_id = ? FOR UPDATE;
       SELECT COUNT(*) AS held FROM orbit_attempts WHERE session_id = ? AND state IN ('RESERVED', 'RUNNING');
       SELECT NOW(6) AS now, max_concurrency, active_attempts, pending_starts, rate_per_second, window_started_at, window_starts
         FROM orbit_application_resources WHERE application_id = ? FOR UPDATE;
       SELECT queue_id, max_concurrency, active_attempts, pending_starts, rate_per_second, window_started_at, window_starts, key_concurrency, paused
         FROM orbit_queues WHERE queue_id IN (${placeholders(queueIds.length)}) ORDER BY queue_id FOR UPDATE;
       SELECT COUNT(DISTINCT node_id) AS nodes FROM orbit_worker_sessions
        WHERE application_id = ? AND state = 'OPEN' AND waiting_since IS NOT NULL
          AND last_seen_at > NOW(6) - INTERVAL ${WAITING_WINDOW_SECONDS} SECOND AND node_id <> ?;
       ${queueIds.map(() => candidateSql({ excludedKeys: 0, excludedTasks: 0 })).join(';\n')}`,
      [
        principal.credentialId,
        session.sessionId,
        session.sessionId,
        principal.applicationId,
        ...queueIds,
        principal.applicationId,
        session.nodeId,
        ...queueIds.flatMap((queueId) => [queueId, candidateLimit]),
      ],
    );
    const [identity, sessionRows, held, appRows, queueRows, waitingNodes] = results as [
      Array<{ valid: number }>,
      Array<{ capacity: number; state: string }>,
      Array<{ held: string }>,
      Array<QuotaRow & { now: string }>,
      QueueQuotaRow[],
      Array<{ nodes: string }>,
    ];
    const initial = (results.slice(6) as CandidateRow[][]).flat();
    if (identity[0]?.valid !== 1) throw noLongerValid();
    const sessionRow = sessionRows[0];
    if (!sessionRow || sessionRow.state !== 'OPEN') throw new OrbitError('STATE_CONFLICT', 'the session is closed');
    const app = appRows[0];
    if (!app) throw new OrbitError('INTERNAL', 'the application has no resources row');
    const nowMs = sqlToMillis(app.now);

    // Scarce room: take at most this node's fair share among the nodes waiting for it.
    const { wanted, budget } = claimBudget({
      max: params.max,
      sessionRoom: sessionRoom(sessionRow.capacity, Number(held[0]?.held ?? 0)),
      applicationRoom: levelRoom(levelOf(app), nowMs),
      otherWaitingNodes: Number(waitingNodes[0]?.nodes ?? 0),
    });
    const queues = new Map<string, QueueAllowance>();
    for (const q of queueRows) {
      queues.set(hex(q.queue_id), { room: queueRoom({ ...levelOf(q), paused: Boolean(q.paused) }, nowMs), keyConcurrency: q.key_concurrency });
    }

    const chosen: CandidateRow[] = [];
    if (budget > 0) await pick(tx, { budget, queues, applicationId: principal.applicationId, chosen, initial });

    const nameOf = new Map(session.queues.map((q) => [hex(q.queueId), q.name]));
    const leaseMs = params.leaseSeconds * 1000;
    const claimed: ClaimedAttemptInfo[] = chosen.map((row) => {
      const deadlineAtMs = sqlToMillis(row.deadline_at);
      return {
        attemptId: newId(nowMs),
        taskId: row.task_id,
        queueId: row.queue_id,
        queueName: nameOf.get(hex(row.queue_id)) as string,
        payload: JSON.parse(row.payload) as Record<string, unknown>,
        priority: row.priority,
        resourceKey: row.resource_key,
        attemptNumber: row.attempts + 1,
        leaseExpiresAtMs: Math.min(nowMs + leaseMs, deadlineAtMs),
        deadlineAtMs,
      };
    });
    await writeClaims(tx, { session, claimed, now: app.now, waiting: claimed.length < wanted });
    return claimed;
  });
}

/**
 * One queue's claimable tasks in claim order, locked with SKIP LOCKED. Parameters: queue_id,
 * then the excluded keys, then the excluded task ids, then the limit.
 */
function candidateSql(options: { excludedKeys: number; excludedTasks: number }): string {
  return `SELECT task_id, queue_id, priority, resource_key, payload, attempts, deadline_at, available_at
      FROM orbit_tasks FORCE INDEX (ix_orbit_tasks_claim)
     WHERE queue_id = ? AND state = 'WAITING' AND available_at <= NOW(6) AND deadline_at > NOW(6)
       ${options.excludedKeys > 0 ? `AND (resource_key IS NULL OR resource_key NOT IN (${Array(options.excludedKeys).fill('?').join(', ')}))` : ''}
       ${options.excludedTasks > 0 ? `AND task_id NOT IN (${Array(options.excludedTasks).fill('?').join(', ')})` : ''}
     ORDER BY priority DESC, available_at, task_id
     LIMIT ? FOR UPDATE SKIP LOCKED`;
}

async function pick(
  tx: Queryable,
  ctx: {
    budget: number;
    /** Each queue's room and key_concurrency; replaced after each round by what is left. */
    queues: Map<string, QueueAllowance>;
    applicationId: IdBytes;
    chosen: CandidateRow[];
    /** Candidates read in the first round trip. */
    initial: CandidateRow[];
  },
): Promise<void> {
  const taken = new Set<string>();
  const fullKeys = new Set<string>();
  let permitHolders = new Map<string, number>();
  for (let round = 0; round < MAX_PICK_ROUNDS && ctx.chosen.length < ctx.budget; round++) {
    let candidates: CandidateRow[];
    if (round === 0) candidates = ctx.initial;
    else {
      // Keyed tasks were passed over because their key was full: look again without those keys.
      const left = ctx.budget - ctx.chosen.length;
      const queues = [...ctx.queues].filter(([, q]) => q.room > 0).map(([queueHex, q]) => [queueHex, q.room] as const);
      if (queues.length === 0) return;
      const statements: string[] = [];
      const args: unknown[] = [];
      for (const [queueHex, room] of queues) {
        const queueKeys = [...fullKeys].filter((k) => k.startsWith(`${queueHex}/`)).map((k) => k.slice(queueHex.length + 1));
        statements.push(candidateSql({ excludedKeys: queueKeys.length, excludedTasks: taken.size }));
        args.push(Buffer.from(queueHex, 'hex'), ...queueKeys, ...[...taken].map((t) => Buffer.from(t, 'hex')), Math.min(left, room));
      }
      // One statement alone comes back as plain rows, several as a list of row sets.
      candidates = statements.length === 1 ? await tx.rows<CandidateRow>(statements[0] as string, args) : ((await tx.batch(statements.join(';\n'), args)) as CandidateRow[][]).flat();
    }
    for (const c of candidates) taken.add(hex(c.task_id));
    // Permit rows for keys not seen yet: created on demand, then locked (last in the lock order).
    const newKeys = [...new Set(candidates.filter((c) => c.resource_key !== null).map((c) => permitKey(c.queue_id, c.resource_key as string)))].filter(
      (k) => !permitHolders.has(k),
    );
    if (newKeys.length > 0) await lockPermits(tx, ctx.applicationId, newKeys, permitHolders);
    // Claim order, budget, queue room and keyed permits: claim-decisions.ts.
    const picked = pickCandidates(
      candidates.map((row): ClaimCandidate & { row: CandidateRow } => ({
        queue: hex(row.queue_id), taskId: hex(row.task_id), priority: row.priority, availableAt: row.available_at, resourceKey: row.resource_key, row,
      })),
      { left: ctx.budget - ctx.chosen.length, queues: ctx.queues, holders: permitHolders },
    );
    ctx.chosen.push(...picked.picked.map((c) => c.row));
    ctx.queues = picked.queues;
    permitHolders = picked.holders;
    for (const key of picked.fullKeys) fullKeys.add(key);
    if (picked.fullKeys.length === 0) return;
  }
}

async function lockPermits(tx: Queryable, applicationId: IdBytes, keys: string[], holders: Map<string, number>): Promise<void> {
  keys.sort();
  const pairs = keys.map((k) => {
    const slash = k.indexOf('/');
    return [Buffer.from(k.slice(0, slash), 'hex'), k.slice(slash + 1)] as const;
  });
  const [, rows] = (await tx.batch(
    `INSERT IGNORE INTO orbit_key_permits (queue_id, resource_key, application_id, holders, updated_at)
       VALUES ${pairs.map(() => '(?, ?, ?, 0, NOW(6))').join(', ')};
     SELECT queue_id, resource_key, holders FROM orbit_key_permits
      WHERE (queue_id, resource_key) IN (${pairs.map(() => '(?, ?)').join(', ')})
      ORDER BY queue_id, resource_key FOR UPDATE`,
    [...pairs.flatMap(([q, k]) => [q, k, applicationId]), ...pairs.flatMap(([q, k]) => [q, k])],
  )) as [unknown, Array<{ queue_id: Buffer; resource_key: string; holders: number }>];
  for (const row of rows) holders.set(permitKey(row.queue_id, row.resource_key), row.holders);
}

async function writeClaims(tx: Transaction, params: { session: SessionInfo; claimed: ClaimedAttemptInfo[]; now: string; waiting: boolean }): Promise<void> {
  const { session, claimed } = params;
  const principal = session.principal;
  const statements: string[] = [
    `UPDATE orbit_worker_sessions SET waiting_since = ${params.waiting ? 'COALESCE(waiting_since, ?)' : 'NULL'}, last_seen_at = ? WHERE session_id = ?`,
  ];
  const args: unknown[] = [...(params.waiting ? [params.now] : []), params.now, session.sessionId];
  if (claimed.length > 0) {
    statements.push(
      `INSERT INTO orbit_attempts
         (attempt_id, application_id, namespace_id, queue_id, task_id, session_id, attempt_number, state, resource_key,
          claimed_at, lease_expires_at, deadline_at)
       VALUES ${claimed.map(() => "(?, ?, ?, ?, ?, ?, ?, 'RESERVED', ?, ?, ?, ?)").join(', ')}`,
    );
    for (const c of claimed) {
      args.push(
        c.attemptId, principal.applicationId, principal.namespaceId, c.queueId, c.taskId, session.sessionId, c.attemptNumber, c.resourceKey,
        params.now, millisToSql(c.leaseExpiresAtMs), millisToSql(c.deadlineAtMs),
      );
    }
    statements.push(
      `UPDATE orbit_tasks SET state = 'LEASED', updated_at = ?,
              current_attempt_id = CASE task_id ${claimed.map(() => 'WHEN ? THEN ?').join(' ')} END
        WHERE task_id IN (${placeholders(claimed.length)})`,
    );
    args.push(params.now, ...claimed.flatMap((c) => [c.taskId, c.attemptId]), ...claimed.map((c) => c.taskId));
    statements.push('UPDATE orbit_application_resources SET active_attempts = active_attempts + ?, pending_starts = pending_starts + ? WHERE application_id = ?');
    args.push(claimed.length, claimed.length, principal.applicationId);
    const perQueue = new Map<string, number>();
    const perKey = new Map<string, number>();
    for (const c of claimed) {
      perQueue.set(hex(c.queueId), (perQueue.get(hex(c.queueId)) ?? 0) + 1);
      if (c.resourceKey !== null) perKey.set(permitKey(c.queueId, c.resourceKey), (perKey.get(permitKey(c.queueId, c.resourceKey)) ?? 0) + 1);
    }
    for (const [queueHex, n] of perQueue) {
      statements.push('UPDATE orbit_queues SET active_attempts = active_attempts + ?, pending_starts = pending_starts + ? WHERE queue_id = ?');
      args.push(n, n, Buffer.from(queueHex, 'hex'));
    }
    for (const [key, n] of perKey) {
      const slash = key.indexOf('/');
      statements.push('UPDATE orbit_key_permits SET holders = holders + ?, updated_at = ? WHERE queue_id = ? AND resource_key = ?');
      args.push(n, params.now, Buffer.from(key.slice(0, slash), 'hex'), key.slice(slash + 1));
    }
  }
  // The writes and the COMMIT in one round trip: the hot rows are not held across another.
  await tx.finish(statements.join(';\n'), args);
}
