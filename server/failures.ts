/**
 * Anything thrown → the OrbitError the caller sees, for both transports: the HTTP error
 * handler (server/http/app.ts, rendered by envelope.ts) and the worker session
 * (server/worker/session.ts, rendered as an `error` frame). An OrbitError stays as it is; a
 * failure the store classifies as "the database is unreachable or busy" becomes UNAVAILABLE
 * (the outcome is unknown: keep the key and retry); anything else is INTERNAL.
 *
 * Lives beside errors.ts rather than in it: errors.ts is imported by every layer, the store
 * included, while this classification depends on the store's knowledge of database errors.
 */
import { OrbitError } from './errors.ts';
import type { Principal } from './domain/principal.ts';
import { isDatabaseUnreachable, isRetryableTransactionError, type Queryable } from './store/database/database.ts';
import { credentialExplainInvalid, isNoLongerValid } from './store/tenancy/credentials.ts';

export function toOrbitError(error: unknown): OrbitError {
  if (error instanceof OrbitError) return error;
  if (isRetryableTransactionError(error) || isDatabaseUnreachable(error)) {
    return new OrbitError('UNAVAILABLE', 'the database is unavailable or busy; the outcome is unknown - retry with the same Idempotency-Key', { cause: error });
  }
  return new OrbitError('INTERNAL', 'internal error', { cause: error });
}

/**
 * `toOrbitError` for a failure of an authenticated caller's request or frame: a write refused
 * inside its transaction because the credential may no longer act (it may have been
 * authenticated from the cache) names the precise cause, as a fresh authentication would - the
 * caller presented the right secret.
 */
export async function toCallerError(error: unknown, db: Queryable, principal: Principal | undefined): Promise<OrbitError> {
  const orbitError = toOrbitError(error);
  if (!isNoLongerValid(error) || principal === undefined) return orbitError;
  return credentialExplainInvalid(db, principal.credentialId, orbitError).catch(() => orbitError);
}
