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
import { isDatabaseUnreachable, isRetryableTransactionError } from './store/database/database.ts';

export function toOrbitError(error: unknown): OrbitError {
  if (error instanceof OrbitError) return error;
  if (isRetryableTransactionError(error) || isDatabaseUnreachable(error)) {
    return new OrbitError('UNAVAILABLE', 'the database is unavailable or busy; the outcome is unknown - retry with the same Idempotency-Key', { cause: error });
  }
  return new OrbitError('INTERNAL', 'internal error', { cause: error });
}
