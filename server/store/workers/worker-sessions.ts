/**
 * Worker session rows. A session belongs to one connection on one server process; its row is
 * the first lock of a claim (lock order step 2), which serialises one session's claims so its
 * capacity cannot be overrun by two claims at once.
 */
import { OrbitError } from '../../errors.ts';
import { newId, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { byIdAscending } from '../database/lock-order.ts';
import { sql } from '../database/sql.ts';
import { valueList, type Database, type Queryable } from '../database/database.ts';
import type { QueueRow, WorkerSessionRow } from '../database/schema.ts';
import { CREDENTIAL_VALID, CREDENTIAL_VALIDITY_FACTS, credentialInvalidCause, type ValidityFacts } from '../tenancy/credentials.ts';

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
export async function sessionOpen(db: Database, params: { principal: Principal; nodeId: string; queues: string[]; capacity: number }): Promise<SessionInfo> {
  const { principal } = params;
  const rows = await db.rows<Pick<QueueRow, 'queue_id' | 'name'>>(
    sql`SELECT queue_id, name FROM orbit_queues WHERE namespace_id = ${principal.namespaceId} AND name IN (${valueList(params.queues)})`,
  );
  const byName = new Map(rows.map((r) => [r.name, r.queue_id]));
  const queues: SessionQueue[] = params.queues.map((name, i) => {
    const queueId = principal.queues === '*' || principal.queues.has(name) ? byName.get(name) : undefined;
    if (!queueId) throw new OrbitError('NOT_FOUND', `queue "${name}" not found`, { details: { field: `queues[${i}]` } });
    return { queueId, name };
  });
  queues.sort((a, b) => byIdAscending(a.queueId, b.queueId));
  const sessionId = newId();
  await db.exec(sql`
    INSERT INTO orbit_worker_sessions
       (session_id, application_id, namespace_id, credential_id, node_id, queues, capacity, state, connected_at, last_seen_at)
     VALUES (${sessionId}, ${principal.applicationId}, ${principal.namespaceId}, ${principal.credentialId}, ${params.nodeId}, ${JSON.stringify(params.queues)}, ${params.capacity}, 'OPEN', NOW(6), NOW(6))`);
  return { sessionId, principal, nodeId: params.nodeId, capacity: params.capacity, queues };
}

/** Marks this process's open sessions alive, so no other process's recovery closes them. */
export async function sessionHeartbeat(db: Queryable, sessionIds: IdBytes[]): Promise<void> {
  if (sessionIds.length === 0) return;
  await db.exec(sql`UPDATE orbit_worker_sessions SET last_seen_at = NOW(6) WHERE session_id IN (${valueList(sessionIds)}) AND state = 'OPEN'`);
}

/**
 * Which of these sessions (this process's open ones) belong to a credential that may no longer
 * act - revoked, expired, or its namespace or application disabled - each with the precise
 * cause, as authentication would name it. One plain read (no lock) that routes by session_id
 * and joins each session to its own application's identity rows by primary key; the gateway
 * runs it on a timer, so a revoke ends open sessions without waiting for their next claim.
 */
export async function sessionsWithInvalidCredential(db: Queryable, sessionIds: IdBytes[]): Promise<Array<{ sessionId: IdBytes; cause: string }>> {
  if (sessionIds.length === 0) return [];
  const rows = await db.rows<Pick<WorkerSessionRow, 'session_id'> & ValidityFacts>(sql`
    SELECT s.session_id, ${sql.raw(CREDENTIAL_VALIDITY_FACTS)}
      FROM orbit_worker_sessions s
      JOIN orbit_credentials c ON c.credential_id = s.credential_id AND c.application_id = s.application_id
      JOIN orbit_namespaces n ON n.namespace_id = c.namespace_id AND n.application_id = c.application_id
      JOIN orbit_applications a ON a.application_id = c.application_id
     WHERE s.session_id IN (${valueList(sessionIds)}) AND NOT (${sql.raw(CREDENTIAL_VALID)})`);
  // The cause is never null here (the row failed CREDENTIAL_VALID); the fallback keeps the type honest.
  return rows.map((r) => ({ sessionId: r.session_id, cause: credentialInvalidCause(r) ?? 'the credential may no longer act' }));
}

export async function sessionMarkClosed(tx: Queryable, sessionId: IdBytes): Promise<void> {
  await tx.exec(
    sql`UPDATE orbit_worker_sessions SET state = 'CLOSED', closed_at = NOW(6), waiting_since = NULL WHERE session_id = ${sessionId} AND state = 'OPEN'`,
  );
}

/** Sessions whose server stopped heartbeating (it died): closed, so fairness stops counting them. Their attempts expire by lease. */
export async function sessionCloseStale(db: Queryable, staleAfterSeconds: number): Promise<number> {
  const result = await db.exec(
    sql`UPDATE /* scatter: recovery-stale-sessions */ orbit_worker_sessions SET state = 'CLOSED', closed_at = NOW(6), waiting_since = NULL
      WHERE state = 'OPEN' AND last_seen_at < NOW(6) - INTERVAL ${staleAfterSeconds} SECOND`,
  );
  return result.affectedRows;
}
