/**
 * Task admission: the application's and the queue's `max_unfinished_tasks`, enforced in the
 * transaction that inserts the task.
 *
 * Fast path - the whole transaction in ONE round trip (docs/quotas-and-locking.md):
 *     START TRANSACTION;
 *     UPDATE application row SET unfinished = IF(unfinished + n <= max, unfinished + n, NULL);
 *     UPDATE each queue row  SET unfinished = IF(unfinished + k <= max, unfinished + k, NULL);  (ascending queue_id)
 *     INSERT tasks; INSERT receipts;
 *     COMMIT
 * In the lock order (lock-order.ts): the hot rows first, then the new rows. Sent in one round
 * trip, the application row is locked only while the server runs these statements and the
 * commit - never across a round trip to this process (its lock lasts until the commit either
 * way). A row without room is "guarded": setting the NOT NULL counter to NULL fails the
 * statement (ER_BAD_NULL_ERROR), the server runs nothing after it (no COMMIT), and the
 * transaction is rolled back: nothing was written. So does a receipt whose credential may no
 * longer act, or whose key is taken.
 * Careful path - after a guard or a duplicate receipt key: lock the application row, then the
 * queue rows (FOR UPDATE), look up the receipts, and decide item by item in order: replay,
 * APPLICATION_FULL (checked first, so it wins when both are full), QUEUE_FULL, or accept; then
 * insert and update by exact amounts.
 *
 * A refused submission writes nothing at all - no task, no counter change, no receipt - so the
 * same key can succeed later. A replay of an accepted submission returns its original receipt
 * even when the application or the queue is full now.
 */
import { OrbitError } from '../../errors.ts';
import { idToHex, newId, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { millisToSql } from '../../time.ts';
import type { Clock } from '../database/clock.ts';
import { isDuplicateKeyError, isGuardError, placeholders, type Database, type Queryable, type Row } from '../database/database.ts';
import { byIdAscending } from '../database/lock-order.ts';
import { receiptReplay, type ReceiptIdentity } from '../records/receipts.ts';
import { credentialsStillValid, noLongerValid } from '../tenancy/credentials.ts';
import type { Task } from './tasks.ts';

export interface SubmitRequest {
  payload: Record<string, unknown>;
  priority: number;
  resourceKey: string | null;
  maxAttempts: number;
  deadlineSeconds: number;
  delaySeconds: number;
  onUnknownOutcome: 'retry' | 'review';
}

export interface SubmitItem {
  principal: Principal;
  queueId: IdBytes;
  queueName: string;
  receipt: ReceiptIdentity;
  request: SubmitRequest;
}

export type SubmitOutcome = { ok: true; task: Task; deduplicated: boolean } | { ok: false; error: OrbitError };

/** What a receipt of submitTask stores: the task as accepted, without its payload (kept once, on the task row). */
type StoredTask = Omit<Task, 'payload'>;

interface Prepared {
  item: SubmitItem;
  taskId: IdBytes;
  payloadJson: string;
  snapshot: StoredTask;
  times: { created: string; available: string; deadline: string };
}

function prepare(item: SubmitItem, nowMs: number): Prepared {
  const taskId = newId(nowMs);
  const r = item.request;
  const created = nowMs;
  const available = created + r.delaySeconds * 1000;
  const deadline = created + r.deadlineSeconds * 1000;
  const snapshot: StoredTask = {
    task_id: idToHex(taskId),
    queue: item.queueName,
    namespace: item.principal.namespace,
    state: 'WAITING',
    priority: r.priority,
    ...(r.resourceKey === null ? {} : { resource_key: r.resourceKey }),
    attempts: 0,
    max_attempts: r.maxAttempts,
    on_unknown_outcome: r.onUnknownOutcome,
    cancel_requested: false,
    created_at: new Date(created).toISOString(),
    available_at: new Date(available).toISOString(),
    deadline_at: new Date(deadline).toISOString(),
  };
  return {
    item,
    taskId,
    payloadJson: JSON.stringify(r.payload),
    snapshot,
    times: { created: millisToSql(created), available: millisToSql(available), deadline: millisToSql(deadline) },
  };
}

function withPayload(stored: StoredTask, payload: Record<string, unknown>): Task {
  return { ...stored, payload } as Task;
}

/**
 * Receipts are inserted from a SELECT over the submitter's identity rows: when the credential
 * was revoked or expired, or its namespace or application disabled, since the request was
 * authenticated (possibly from the per-process cache), `application_id` comes out NULL and the
 * statement fails like a full quota does - so no write happens for a credential that may no
 * longer act, without an extra round trip.
 */
const RECEIPT_INSERT = `INSERT INTO orbit_idempotency_receipts
  (namespace_id, idempotency_key, application_id, operation, request_sha256, resource_id, response, created_at) `;
const RECEIPT_ROW = `SELECT ?, ?, IF(a.application_id IS NULL, NULL, ?), ?, ?, ?, ?, ?
  FROM (SELECT 1 AS one) AS one
  LEFT JOIN orbit_credentials c ON c.credential_id = ? AND c.revoked_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > NOW(6))
  LEFT JOIN orbit_namespaces n ON n.namespace_id = c.namespace_id AND n.enabled = 1
  LEFT JOIN orbit_applications a ON a.application_id = n.application_id AND a.enabled = 1`;
const TASK_INSERT = `INSERT INTO orbit_tasks
  (task_id, application_id, namespace_id, queue_id, state, priority, resource_key, payload, attempts, max_attempts,
   on_unknown_outcome, cancel_requested, idempotency_key, created_at, available_at, deadline_at, updated_at) VALUES `;

/** The task rows, then their receipts (the lock order: tasks before records). */
function insertStatements(prepared: Prepared[]): { sql: string[]; params: unknown[] } {
  const params: unknown[] = [];
  const taskRows = prepared.map((p) => {
    const r = p.item.request;
    params.push(
      p.taskId, p.item.principal.applicationId, p.item.principal.namespaceId, p.item.queueId, r.priority, r.resourceKey, p.payloadJson,
      r.maxAttempts, r.onUnknownOutcome, p.item.receipt.key, p.times.created, p.times.available, p.times.deadline, p.times.created,
    );
    return "(?, ?, ?, ?, 'WAITING', ?, ?, ?, 0, ?, ?, 0, ?, ?, ?, ?, ?)";
  });
  const receiptRows = prepared.map((p) => {
    const id = p.item.receipt;
    params.push(id.namespaceId, id.key, id.applicationId, id.operation, id.requestSha256, p.taskId, JSON.stringify(p.snapshot), p.times.created, id.credentialId);
    return RECEIPT_ROW;
  });
  return { sql: [TASK_INSERT + taskRows.join(', '), RECEIPT_INSERT + receiptRows.join('\n  UNION ALL ')], params };
}

/** Tasks per queue, in lock order. */
function countByQueue(prepared: Prepared[]): Array<{ queueId: IdBytes; count: number }> {
  const counts = new Map<string, { queueId: IdBytes; count: number }>();
  for (const p of prepared) {
    const key = p.item.queueId.toString('hex');
    const entry = counts.get(key) ?? { queueId: p.item.queueId, count: 0 };
    entry.count += 1;
    counts.set(key, entry);
  }
  return [...counts.values()].sort((a, b) => byIdAscending(a.queueId, b.queueId));
}

function guardedCounterUpdates(applicationId: IdBytes, total: number, perQueue: Array<{ queueId: IdBytes; count: number }>): { sql: string[]; params: unknown[] } {
  const sql = [
    `UPDATE orbit_application_resources
        SET unfinished_tasks = IF(unfinished_tasks + ? <= max_unfinished_tasks, unfinished_tasks + ?, NULL)
      WHERE application_id = ?`,
    ...perQueue.map(
      () => `UPDATE orbit_queues
                SET unfinished_tasks = IF(unfinished_tasks + ? <= max_unfinished_tasks, unfinished_tasks + ?, NULL)
              WHERE queue_id = ?`,
    ),
  ];
  const params: unknown[] = [total, total, applicationId];
  for (const q of perQueue) params.push(q.count, q.count, q.queueId);
  return { sql, params };
}

// The details name the level and the limit, never usage: the application's figures belong to
// every namespace of it, and this caller may not hold application:resources:read.
const applicationFull = () =>
  new OrbitError('APPLICATION_FULL', "the application's max_unfinished_tasks is reached; retry later with the same Idempotency-Key", {
    details: { level: 'application', limit: 'max_unfinished_tasks' },
  });
const queueFull = (queue: string) =>
  new OrbitError('QUEUE_FULL', `queue "${queue}" has reached its max_unfinished_tasks; retry later with the same Idempotency-Key`, {
    details: { level: 'queue', queue, limit: 'max_unfinished_tasks' },
  });

/** All items belong to one application (the batcher groups them so). */
export async function taskSubmitBatch(db: Database, clock: Clock, items: SubmitItem[]): Promise<SubmitOutcome[]> {
  if (items.length === 0) return [];
  const applicationId = (items[0] as SubmitItem).principal.applicationId;
  const nowMs = clock.now();
  const prepared = items.map((item) => prepare(item, nowMs));
  const perQueue = countByQueue(prepared);
  try {
    // Lock order: the application row, the queue rows, then the new tasks and their receipts -
    // all in one round trip with the COMMIT, so the hot rows are held for no round trip at all.
    const updates = guardedCounterUpdates(applicationId, prepared.length, perQueue);
    const inserts = insertStatements(prepared);
    await db.oneShot([...updates.sql, ...inserts.sql].join(';\n'), [...updates.params, ...inserts.params]);
    return prepared.map((p) => ({ ok: true, task: withPayload(p.snapshot, p.item.request.payload), deduplicated: false }));
  } catch (error) {
    // No room somewhere, a credential that may no longer act, or a key already used: nothing
    // was written; decide item by item.
    if (!isGuardError(error) && !isDuplicateKeyError(error)) throw error;
  }
  // A receipt for one of these keys may commit between the careful path's read and its insert
  // (a writer that does not hold the application row): then it decides again, seeing it.
  for (let attempt = 0; ; attempt++) {
    try {
      return await careful(db, applicationId, prepared, perQueue);
    } catch (error) {
      if (attempt >= 2 || !isDuplicateKeyError(error)) throw error;
    }
  }
}

interface ReceiptRow extends Row {
  namespace_id: Buffer;
  idempotency_key: string;
  operation: string;
  request_sha256: Buffer;
  resource_id: Buffer | null;
  response: string;
}

async function careful(db: Database, applicationId: IdBytes, prepared: Prepared[], perQueue: Array<{ queueId: IdBytes; count: number }>): Promise<SubmitOutcome[]> {
  const replayedTaskIds: IdBytes[] = [];
  const outcomes = await db.transaction(async (tx) => {
    // Lock order: identity rows (shared), application row, then queue rows by ascending id.
    const valid = await credentialsStillValid(tx, prepared.map((p) => p.item.receipt.credentialId));
    const [app] = await tx.rows<{ unfinished_tasks: string; max_unfinished_tasks: number }>(
      'SELECT unfinished_tasks, max_unfinished_tasks FROM orbit_application_resources WHERE application_id = ? FOR UPDATE',
      [applicationId],
    );
    if (!app) throw new OrbitError('INTERNAL', 'the application has no resources row');
    const queueRows = await tx.rows<{ queue_id: Buffer; unfinished_tasks: string; max_unfinished_tasks: number }>(
      `SELECT queue_id, unfinished_tasks, max_unfinished_tasks FROM orbit_queues
        WHERE queue_id IN (${placeholders(perQueue.length)}) ORDER BY queue_id FOR UPDATE`,
      perQueue.map((q) => q.queueId),
    );
    const receipts = await tx.rows<ReceiptRow>(
      `SELECT namespace_id, idempotency_key, operation, request_sha256, resource_id, response FROM orbit_idempotency_receipts
        WHERE (namespace_id, idempotency_key) IN (${prepared.map(() => '(?, ?)').join(', ')})`,
      prepared.flatMap((p) => [p.item.receipt.namespaceId, p.item.receipt.key]),
    );
    const receiptOf = new Map(receipts.map((r) => [`${r.namespace_id.toString('hex')}/${r.idempotency_key}`, r]));
    let appUnfinished = BigInt(app.unfinished_tasks);
    const queueRoom = new Map(queueRows.map((q) => [q.queue_id.toString('hex'), { unfinished: BigInt(q.unfinished_tasks), max: BigInt(q.max_unfinished_tasks) }]));
    const acceptedInBatch = new Map<string, Prepared>();
    const accepted: Prepared[] = [];
    const result: SubmitOutcome[] = prepared.map((p) => {
      const keyId = `${p.item.receipt.namespaceId.toString('hex')}/${p.item.receipt.key}`;
      try {
        if (!valid.has(idToHex(p.item.receipt.credentialId))) return { ok: false, error: noLongerValid() };
        const receipt = receiptOf.get(keyId);
        if (receipt) {
          const stored = receiptReplay<StoredTask>(receipt, p.item.receipt);
          if (receipt.resource_id) replayedTaskIds.push(receipt.resource_id);
          return { ok: true, task: stored as Task, deduplicated: true };
        }
        const twin = acceptedInBatch.get(keyId);
        if (twin) {
          // The same key twice in one batch: the second is a replay of the first.
          receiptReplay({ operation: twin.item.receipt.operation, request_sha256: twin.item.receipt.requestSha256, response: '{}' }, p.item.receipt);
          return { ok: true, task: withPayload(twin.snapshot, twin.item.request.payload), deduplicated: true };
        }
        if (appUnfinished >= BigInt(app.max_unfinished_tasks)) return { ok: false, error: applicationFull() };
        const queue = queueRoom.get(p.item.queueId.toString('hex'));
        if (!queue) throw new OrbitError('INTERNAL', 'queue row missing');
        if (queue.unfinished >= queue.max) return { ok: false, error: queueFull(p.item.queueName) };
        appUnfinished += 1n;
        queue.unfinished += 1n;
        acceptedInBatch.set(keyId, p);
        accepted.push(p);
        return { ok: true, task: withPayload(p.snapshot, p.item.request.payload), deduplicated: false };
      } catch (error) {
        if (error instanceof OrbitError && error.code === 'IDEMPOTENCY_CONFLICT') return { ok: false, error };
        throw error;
      }
    });
    if (accepted.length > 0) {
      const inserts = insertStatements(accepted);
      const perAcceptedQueue = countByQueue(accepted);
      // Lock order: counters (rows locked above), then the new tasks and their receipts.
      const sql = [
        'UPDATE orbit_application_resources SET unfinished_tasks = unfinished_tasks + ? WHERE application_id = ?',
        ...perAcceptedQueue.map(() => 'UPDATE orbit_queues SET unfinished_tasks = unfinished_tasks + ? WHERE queue_id = ?'),
        ...inserts.sql,
      ];
      const params = [accepted.length, applicationId, ...perAcceptedQueue.flatMap((q) => [q.count, q.queueId]), ...inserts.params];
      await tx.batch(sql.join(';\n'), params);
    }
    return result;
  });
  return attachReplayedPayloads(db, outcomes, replayedTaskIds);
}

/** Replayed receipts of submitTask carry no payload; it is read from the task row (it never changes). */
async function attachReplayedPayloads(db: Queryable, outcomes: SubmitOutcome[], taskIds: IdBytes[]): Promise<SubmitOutcome[]> {
  if (taskIds.length === 0) return outcomes;
  const rows = await db.rows<{ task_id: Buffer; payload: string }>(
    `SELECT task_id, payload FROM orbit_tasks WHERE task_id IN (${placeholders(taskIds.length)})`,
    taskIds,
  );
  const payloads = new Map(rows.map((r) => [idToHex(r.task_id), JSON.parse(r.payload) as Record<string, unknown>]));
  return outcomes.map((o) => {
    if (!o.ok || !o.deduplicated || o.task.payload !== undefined) return o;
    const payload = payloads.get(o.task.task_id);
    return payload === undefined ? o : { ...o, task: withPayload(o.task, payload) };
  });
}
