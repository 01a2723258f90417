/**
 * The one error type of Orbit. Whatever layer finds a problem throws an OrbitError; the HTTP
 * error handler and the worker session each render it in one place (envelope or error frame).
 */
import type { components } from './generated/openapi.ts';

/** HTTP error codes (openapi.yaml) plus the two the worker protocol adds. */
export type ErrorCode = components['schemas']['ErrorCode'] | 'RATE_LIMITED' | 'LEASE_LOST';

const STATUS: Record<ErrorCode, number> = {
  INVALID_ARGUMENT: 400,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  NOT_FOUND: 404,
  STATE_CONFLICT: 409,
  IDEMPOTENCY_CONFLICT: 409,
  APPLICATION_FULL: 429,
  QUEUE_FULL: 429,
  RATE_LIMITED: 429,
  LEASE_LOST: 409,
  METHOD_NOT_ALLOWED: 405,
  UNAVAILABLE: 503,
  INTERNAL: 500,
};

export type ErrorDetails = Record<string, unknown>;

export class OrbitError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: ErrorDetails | undefined;
  /** Seconds, for `Retry-After`. */
  readonly retryAfter: number | undefined;

  constructor(code: ErrorCode, message: string, options: { details?: ErrorDetails; retryAfter?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'OrbitError';
    this.code = code;
    this.status = STATUS[code];
    this.details = options.details;
    this.retryAfter = options.retryAfter ?? (code === 'APPLICATION_FULL' || code === 'QUEUE_FULL' ? 1 : undefined);
  }
}

export type FieldLocation = 'body' | 'query' | 'path' | 'header' | 'frame';

export function invalidArgument(field: string, reason: string, location: FieldLocation = 'body'): OrbitError {
  return new OrbitError('INVALID_ARGUMENT', `${field}: ${reason}`, { details: { field, location, reason } });
}

export function notFound(what: string): OrbitError {
  return new OrbitError('NOT_FOUND', `${what} not found`);
}

/**
 * The namespaces' floors would not fit in the application's limit (domain/floor-sums.ts): a
 * namespace's configure that would raise their sum above it (`by: 'floor'`), or the
 * application's that would lower the limit below it (`by: 'limit'`). Both figures are named.
 */
export function floorsAboveLimit(by: 'floor' | 'limit', found: { reserved: string; limit: string; reservedSum: number; applicationLimit: number }): OrbitError {
  const message =
    by === 'floor'
      ? `the namespaces' ${found.reserved} would total ${found.reservedSum}, above the application's ${found.limit} ${found.applicationLimit}`
      : `the namespaces' ${found.reserved} total ${found.reservedSum}, above the new ${found.limit} ${found.applicationLimit}: lower the reservations first`;
  return new OrbitError('STATE_CONFLICT', message, {
    details: {
      field: by === 'floor' ? found.reserved : found.limit,
      limit: found.limit,
      reserved_sum: found.reservedSum,
      application_limit: found.applicationLimit,
    },
  });
}

/** A configure's compare-and-set lost: `expected_revision` is not the row's current revision. */
export function revisionConflict(expected: string, current: string): OrbitError {
  return new OrbitError('STATE_CONFLICT', `expected_revision is ${expected} but the current revision is ${current}`, {
    details: { field: 'expected_revision', current_revision: current },
  });
}
