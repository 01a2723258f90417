/**
 * The one place that renders Orbit's HTTP envelope: `{request_id, data}` on success and
 * `{request_id, error: {code, message, details}}` on failure, with `X-Request-Id` (and
 * `Retry-After` for 429) headers. What an arbitrary failure becomes (UNAVAILABLE, INTERNAL)
 * is decided before, for HTTP and worker frames alike, by `toOrbitError` (server/failures.ts).
 */
import type { Context } from 'hono';
import type { OrbitError } from '../errors.ts';

/** An error as the API shows it: `{code, message, details}` (also inside per-item results). */
export function errorObject(error: OrbitError): { code: string; message: string; details?: Record<string, unknown> } {
  return error.details === undefined ? { code: error.code, message: error.message } : { code: error.code, message: error.message, details: error.details };
}

export function errorBody(requestId: string, error: OrbitError): Record<string, unknown> {
  return { request_id: requestId, error: errorObject(error) };
}

export function renderError(c: Context, requestId: string, error: OrbitError): Response {
  const headers: Record<string, string> = { 'X-Request-Id': requestId };
  if (error.retryAfter !== undefined) headers['Retry-After'] = String(error.retryAfter);
  return c.json(errorBody(requestId, error), error.status as 400, headers);
}

export function renderData(c: Context, requestId: string, data: unknown): Response {
  return c.json({ request_id: requestId, data }, 200, { 'X-Request-Id': requestId });
}
