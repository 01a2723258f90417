/**
 * The one place that renders Orbit's envelope: `{request_id, data}` on success and
 * `{request_id, error: {code, message, details}}` on failure, with `X-Request-Id` (and
 * `Retry-After` for 429) headers. Anything that is not an OrbitError becomes UNAVAILABLE when
 * the database is unreachable or busy (the outcome is unknown: keep the key and retry) and
 * INTERNAL otherwise.
 */
import type { Context } from 'hono';
import { OrbitError } from '../errors.ts';
import { isDatabaseUnreachable, isRetryableTransactionError } from '../store/database/database.ts';

export function toOrbitError(error: unknown): OrbitError {
  if (error instanceof OrbitError) return error;
  if (isRetryableTransactionError(error) || isDatabaseUnreachable(error)) {
    return new OrbitError('UNAVAILABLE', 'the database is unavailable or busy; the outcome is unknown - retry with the same Idempotency-Key', { cause: error });
  }
  return new OrbitError('INTERNAL', 'internal error', { cause: error });
}

export function errorBody(requestId: string, error: OrbitError): Record<string, unknown> {
  const body: Record<string, unknown> = { code: error.code, message: error.message };
  if (error.details !== undefined) body.details = error.details;
  return { request_id: requestId, error: body };
}

export function renderError(c: Context, requestId: string, error: OrbitError): Response {
  const headers: Record<string, string> = { 'X-Request-Id': requestId };
  if (error.retryAfter !== undefined) headers['Retry-After'] = String(error.retryAfter);
  return c.json(errorBody(requestId, error), error.status as 400, headers);
}

export function renderData(c: Context, requestId: string, data: unknown): Response {
  return c.json({ request_id: requestId, data }, 200, { 'X-Request-Id': requestId });
}
