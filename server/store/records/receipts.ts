/**
 * Idempotency receipts: one per successful mutating request, keyed by (namespace, key). A
 * request that fails leaves none (its transaction rolled back), so the same key may be sent
 * again. Same key + same content replays the stored snapshot; other content is
 * IDEMPOTENCY_CONFLICT.
 */
import { sql } from '../database/sql.ts';
import { OrbitError } from '../../errors.ts';
import type { IdBytes } from '../../ids.ts';
import { isDuplicateKeyError, type Database, type Queryable, type Transaction } from '../database/database.ts';
import type { IdempotencyReceiptRow } from '../database/schema.ts';
import { credentialsStillValid, noLongerValid } from '../tenancy/credentials.ts';

export interface ReceiptIdentity {
  applicationId: IdBytes;
  namespaceId: IdBytes;
  /** Who asks: re-checked inside the transaction (a cached authentication may be up to a second old). */
  credentialId: IdBytes;
  key: string;
  operation: string;
  requestSha256: Buffer;
}

/** What replaying or refusing a request needs of its receipt (admission's careful path reads these and a few more). */
export type ReceiptRow = Pick<IdempotencyReceiptRow, 'operation' | 'request_sha256' | 'response'>;

export async function receiptFind(db: Queryable, namespaceId: IdBytes, key: string): Promise<ReceiptRow | null> {
  const [row] = await db.rows<ReceiptRow>(
    sql`SELECT operation, request_sha256, response FROM orbit_idempotency_receipts WHERE namespace_id = ${namespaceId} AND idempotency_key = ${key}`,
  );
  return row ?? null;
}

/** The stored snapshot when the receipt is for this very request; IDEMPOTENCY_CONFLICT otherwise. */
export function receiptReplay<T>(receipt: ReceiptRow, identity: ReceiptIdentity): T {
  if (receipt.operation !== identity.operation || !receipt.request_sha256.equals(identity.requestSha256)) {
    throw new OrbitError(
      'IDEMPOTENCY_CONFLICT',
      `Idempotency-Key "${identity.key}" was already used in this namespace for a different request (${receipt.operation})`,
      { details: { operation: receipt.operation } },
    );
  }
  return JSON.parse(receipt.response) as T;
}

export async function receiptInsert(db: Queryable, identity: ReceiptIdentity, resourceId: IdBytes | null, response: unknown): Promise<void> {
  await db.exec(sql`
    INSERT INTO orbit_idempotency_receipts
      (namespace_id, idempotency_key, application_id, operation, request_sha256, resource_id, response, created_at)
    VALUES (${identity.namespaceId}, ${identity.key}, ${identity.applicationId}, ${identity.operation}, ${identity.requestSha256},
            ${resourceId}, ${JSON.stringify(response)}, NOW(6))`);
}

/**
 * Runs a management mutation under an idempotency key:
 * 1. a receipt already there → replay it (or IDEMPOTENCY_CONFLICT), even if the request would
 *    now fail (a later revision, a full quota);
 * 2. otherwise one transaction: the credential is re-checked under shared locks (lock order
 *    step 1), then `work` locks its rows in lock order, checks, writes (audit and event
 *    included) and returns the response snapshot; the receipt is inserted last;
 * 3. if that fails because a concurrent request with the same key won (duplicate receipt, or a
 *    CAS that the winner's change broke), the winner's receipt decides: replay or conflict.
 */
export async function idempotentMutation<T>(
  db: Database,
  identity: ReceiptIdentity,
  work: (tx: Transaction) => Promise<{ response: T; resourceId: IdBytes | null }>,
): Promise<{ response: T; deduplicated: boolean }> {
  const existing = await receiptFind(db, identity.namespaceId, identity.key);
  if (existing) return { response: receiptReplay<T>(existing, identity), deduplicated: true };
  try {
    const response = await db.transaction(async (tx) => {
      if ((await credentialsStillValid(tx, [identity.credentialId])).size === 0) throw noLongerValid();
      const { response, resourceId } = await work(tx);
      await receiptInsert(tx, identity, resourceId, response);
      return response;
    });
    return { response, deduplicated: false };
  } catch (error) {
    if (error instanceof OrbitError || isDuplicateKeyError(error)) {
      const winner = await receiptFind(db, identity.namespaceId, identity.key);
      if (winner) return { response: receiptReplay<T>(winner, identity), deduplicated: true };
    }
    throw error;
  }
}
