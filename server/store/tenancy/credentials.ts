/**
 * Credentials: bearer tokens bound to one namespace. A token is
 * `orbit_<credential id hex>_<secret>`; only SHA-256 of the secret is stored (the secret is 32
 * random bytes, so a fast hash is enough) and it is compared in constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { OrbitError } from '../../errors.ts';
import { hexToId, idToHex, newId, type IdBytes } from '../../ids.ts';
import { effectiveActions, type Action } from '../../domain/actions.ts';
import type { Principal } from '../../domain/principal.ts';
import { sql } from '../database/sql.ts';
import type { Queryable, Transaction } from '../database/database.ts';
import type { ApplicationRow, CredentialRow, NamespaceRow } from '../database/schema.ts';
import { distinctIdsAscending, lockRows } from '../database/lock-order.ts';

const TOKEN = /^orbit_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$/;

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

export function newToken(): { credentialId: IdBytes; token: string; secretSha256: Buffer } {
  const credentialId = newId();
  const secret = randomBytes(32).toString('base64url');
  return { credentialId, token: `orbit_${idToHex(credentialId)}_${secret}`, secretSha256: sha256(secret) };
}

/**
 * Computed by the statements below (`CREDENTIAL_VALIDITY_FACTS`): `revoked` and `expired` are
 * 0/1 expressions over the credential row, the two flags are the namespace's and the
 * application's `enabled`.
 */
export interface ValidityFacts {
  revoked: number;
  expired: number;
  namespace_enabled: NamespaceRow['enabled'];
  application_enabled: ApplicationRow['enabled'];
}

/** Why a credential may not act (told only to a caller that presented its right secret), or null. */
export function credentialInvalidCause(row: ValidityFacts): string | null {
  if (row.revoked) return 'the credential was revoked';
  if (row.expired) return 'the credential has expired';
  if (!row.application_enabled) return 'the application is disabled';
  if (!row.namespace_enabled) return 'the namespace is disabled';
  return null;
}

/** What authentication reads: the credential's columns, the validity facts and the namespace's name. */
type AuthenticationRow = Pick<CredentialRow, 'credential_id' | 'application_id' | 'namespace_id' | 'secret_sha256' | 'actions' | 'queue_scope'> &
  ValidityFacts & { namespace: NamespaceRow['name'] };

/**
 * The principal behind a bearer token, or UNAUTHENTICATED. A revoked or expired credential and
 * a disabled namespace or application are all 401; the message says which, but only to a
 * caller that presented the right secret.
 */
export async function credentialAuthenticate(db: Queryable, token: string): Promise<Principal> {
  const match = TOKEN.exec(token);
  if (!match) throw new OrbitError('UNAUTHENTICATED', 'the bearer token is malformed');
  const [, idHex, secret] = match as unknown as [string, string, string];
  const [row] = await db.rows<AuthenticationRow>(sql`
    SELECT c.credential_id, c.application_id, c.namespace_id, c.secret_sha256, c.actions, c.queue_scope,
           c.revoked_at IS NOT NULL AS revoked,
           (c.expires_at IS NOT NULL AND c.expires_at <= NOW(6)) AS expired,
           n.name AS namespace, n.enabled AS namespace_enabled, a.enabled AS application_enabled
      FROM orbit_credentials c
      JOIN orbit_namespaces n ON n.namespace_id = c.namespace_id
      JOIN orbit_applications a ON a.application_id = n.application_id
     WHERE c.credential_id = ${hexToId(idHex)}`);
  const presented = sha256(secret);
  // Compare even when the row is missing, so timing does not tell which ids exist.
  const stored = row?.secret_sha256 ?? Buffer.alloc(32);
  if (!timingSafeEqual(presented, stored) || !row) throw new OrbitError('UNAUTHENTICATED', 'the bearer token is not valid');
  const cause = credentialInvalidCause(row);
  if (cause !== null) throw new OrbitError('UNAUTHENTICATED', cause);
  const actions = effectiveActions(JSON.parse(row.actions) as string[]);
  const scope = JSON.parse(row.queue_scope) as string[];
  return {
    credentialId: row.credential_id,
    applicationId: row.application_id,
    namespaceId: row.namespace_id,
    namespace: row.namespace,
    actions: new Set<Action>(actions),
    queues: scope.includes('*') ? '*' : new Set(scope),
  };
}

export interface CredentialCreateParams {
  applicationId: IdBytes;
  namespaceId: IdBytes;
  actions: readonly Action[];
  queues: readonly string[];
  description?: string;
  expiresAt?: string | null;
}

export async function credentialCreate(db: Queryable, params: CredentialCreateParams): Promise<{ credentialId: IdBytes; token: string }> {
  const { credentialId, token, secretSha256 } = newToken();
  await db.exec(sql`
    INSERT INTO orbit_credentials
      (credential_id, application_id, namespace_id, secret_sha256, actions, queue_scope, description, created_at, expires_at)
    VALUES (${credentialId}, ${params.applicationId}, ${params.namespaceId}, ${secretSha256},
            ${JSON.stringify([...new Set(params.actions)])}, ${JSON.stringify([...new Set(params.queues)])},
            ${params.description ?? ''}, NOW(6), ${params.expiresAt ?? null})`);
  return { credentialId, token };
}

/**
 * Revoking is final; the row stays (nothing is hard-deleted), and a revoked credential keeps its
 * first revoked_at. Null for an unknown id; `alreadyRevoked` when it was revoked before this call.
 */
export async function credentialRevoke(db: Queryable, credentialId: IdBytes): Promise<{ revokedAt: string; alreadyRevoked: boolean } | null> {
  const result = await db.exec(sql`UPDATE orbit_credentials SET revoked_at = NOW(6) WHERE credential_id = ${credentialId} AND revoked_at IS NULL`);
  const [row] = await db.rows<Pick<CredentialRow, 'revoked_at'>>(sql`SELECT revoked_at FROM orbit_credentials WHERE credential_id = ${credentialId}`);
  if (!row) return null;
  // Set by the UPDATE above, or by an earlier revoke (revoked_at is never cleared).
  if (row.revoked_at === null) throw new OrbitError('INTERNAL', 'a revoked credential without revoked_at');
  return { revokedAt: row.revoked_at, alreadyRevoked: result.affectedRows === 0 };
}

/**
 * The conditions under which a credential may act: not revoked or expired, its namespace and
 * application enabled. Constant SQL text with no parameters (plain strings, for `sql.raw`): the
 * statements here and claims.ts's splice it in.
 */
export const CREDENTIAL_VALID = `c.revoked_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > NOW(6)) AND n.enabled = 1 AND a.enabled = 1`;
export const CREDENTIAL_JOINS = `orbit_credentials c
  JOIN orbit_namespaces n ON n.namespace_id = c.namespace_id
  JOIN orbit_applications a ON a.application_id = n.application_id`;
/** The `ValidityFacts` columns over `CREDENTIAL_JOINS`, for `credentialInvalidCause` (constant text, like the two above). */
export const CREDENTIAL_VALIDITY_FACTS = `c.revoked_at IS NOT NULL AS revoked,
  (c.expires_at IS NOT NULL AND c.expires_at <= NOW(6)) AS expired,
  n.enabled AS namespace_enabled, a.enabled AS application_enabled`;

/**
 * Inside a transaction: which of these credentials may still act, re-read under shared locks
 * on the identity rows (lock order step 1), so a write is never carried out for a credential
 * that was revoked or whose namespace or application was disabled before it committed - even
 * when the request was authenticated from the per-process cache.
 */
export async function credentialsStillValid(tx: Transaction, credentialIds: IdBytes[]): Promise<Set<string>> {
  const unique = distinctIdsAscending(credentialIds);
  if (unique.length === 0) return new Set();
  const rows = await tx.rows<Pick<CredentialRow, 'credential_id'>>(sql`
    SELECT c.credential_id FROM ${sql.raw(CREDENTIAL_JOINS)}
     WHERE c.credential_id IN (${sql.join(
       unique.map((id) => sql`${id}`),
       sql`, `,
     )}) AND ${sql.raw(CREDENTIAL_VALID)}
     ${lockRows('identity', 'share')}`);
  return new Set(rows.map((r) => idToHex(r.credential_id)));
}

const recheckErrors = new WeakSet<OrbitError>();

/**
 * A write found, inside its transaction, that the credential may no longer act. The caller was
 * authenticated (maybe from the cache) with the right secret, so the HTTP layer and the worker
 * session replace this with the precise cause from `credentialExplainInvalid`.
 */
export function noLongerValid(): OrbitError {
  const error = new OrbitError('UNAUTHENTICATED', 'the credential was revoked or expired, or its namespace or application was disabled');
  recheckErrors.add(error);
  return error;
}

export function isNoLongerValid(error: unknown): error is OrbitError {
  return error instanceof OrbitError && recheckErrors.has(error);
}

/** The precise 401 for a credential whose secret the caller presented; `fallback` if it is valid again. */
export async function credentialExplainInvalid(db: Queryable, credentialId: IdBytes, fallback: OrbitError): Promise<OrbitError> {
  const [row] = await db.rows<ValidityFacts>(sql`
    SELECT ${sql.raw(CREDENTIAL_VALIDITY_FACTS)}
      FROM ${sql.raw(CREDENTIAL_JOINS)}
     WHERE c.credential_id = ${credentialId}`);
  const cause = row ? credentialInvalidCause(row) : null;
  return cause === null ? fallback : new OrbitError('UNAUTHENTICATED', cause);
}
