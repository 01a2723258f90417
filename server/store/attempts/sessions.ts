/**
 * Worker session rows. A session belongs to one connection on one server process; its row is
 * the first lock of a claim (lock order step 2), which serialises one session's claims so its
 * capacity cannot be overrun by two claims at once.
 */
import { OrbitError } from '../../errors.ts';
import { newId, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { byIdAscending } from '../database/lock-order.ts';
import { placeholders, type Database, type Queryable } from '../database/database.ts';

export interface SessionQueue {
  queueId: IdBytes;
  name: string;
}

export interface SessionInfo {
  sessionId: IdBytes;
  principal: Principal;
  nodeId: string;
  capacity: number;
  /** Ascending queue id: the order their rows are locked in. */
  queues: SessionQueue[];
}

/** Opens a session for queues that exist in the caller's namespace and scope (others: NOT_FOUND naming the entry). */
export async function sessionOpen(
  db: Database,
  params: { principal: Principal; nodeId: string; queues: string[]; capacity: number },
): Promise<SessionInfo> {
  const { principal } = params;
  const rows = await db.rows<{ queue_id: Buffer; name: string }>(
    `SELECT queue_id, name FROM orbit_queues WHERE namespace_id = ? AND name IN (${placeholders(params.queues.length)})`,
    [principal.namespaceId, ...params.queues],
  );
  const byName = new Map(rows.map((r) => [r.name, r.queue_id]));
  const queues: SessionQueue[] = params.queues.map((name, i) => {
    const queueId = principal.queues === '*' || principal.queues.has(name) ? byName.get(name) : undefined;
    if (!queueId) throw new OrbitError('NOT_FOUND', `queue "${name}" not found`, { details: { field: `queues[${i}]` } });
    return { queueId, name };
  });
  queues.sort((a, b) => byIdAscending(a.queueId, b.queueId));
  const sessionId = newId();
  await db.exec(
    `INSERT INTO orbit_worker_sessions
       (session_id, application_id, namespace_id, credential_id, node_id, queues, capacity, state, connected_at, last_seen_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, 'OPEN', NOW(6), NOW(6))`,
    [sessionId, principal.applicationId, principal.namespaceId, principal.credentialId, params.nodeId, JSON.stringify(params.queues), params.capacity],
  );
  return { sessionId, principal, nodeId: params.nodeId, capacity: params.capacity, queues };
}

/** Marks this process's open sessions alive, so no other process's recovery closes them. */
export async function sessionHeartbeat(db: Queryable, sessionIds: IdBytes[]): Promise<void> {
  if (sessionIds.length === 0) return;
  await db.exec(`UPDATE orbit_worker_sessions SET last_seen_at = NOW(6) WHERE session_id IN (${placeholders(sessionIds.length)}) AND state = 'OPEN'`, sessionIds);
}

export async function sessionMarkClosed(tx: Queryable, sessionId: IdBytes): Promise<void> {
  await tx.exec("UPDATE orbit_worker_sessions SET state = 'CLOSED', closed_at = NOW(6), waiting_since = NULL WHERE session_id = ? AND state = 'OPEN'", [sessionId]);
}

/** Sessions whose server stopped heartbeating (it died): closed, so fairness stops counting them. Their attempts expire by lease. */
export async function sessionCloseStale(db: Queryable, staleAfterSeconds: number): Promise<number> {
  const result = await db.exec(
    `UPDATE /* scatter: recovery-stale-sessions */ orbit_worker_sessions SET state = 'CLOSED', closed_at = NOW(6), waiting_since = NULL
      WHERE state = 'OPEN' AND last_seen_at < NOW(6) - INTERVAL ? SECOND`,
    [staleAfterSeconds],
  );
  return result.affectedRows;
}
