/**
 * Reading and writing frames. Incoming text is parsed strictly (duplicate keys refused) and
 * validated by the generated validator for its `type`; anything wrong becomes an OrbitError
 * INVALID_ARGUMENT naming the field, which the session sends back as an `error` frame.
 */
import { invalidArgument } from '../errors.ts';
import * as validators from '../generated/frame-validators.js';
import { parseStrictJson } from '../input/strict-json.ts';
import { validationError } from '../input/validation-errors.ts';
import { WORKER_FRAME_TYPES, type ErrorFrame, type ServerFrame, type WorkerFrame } from '../generated/frames.ts';
import type { OrbitError } from '../errors.ts';

/** Frames larger than this are refused by the WebSocket layer (results are at most 256 KiB). */
export const MAX_FRAME_BYTES = 1024 * 1024;

export function parseWorkerFrame(data: unknown): WorkerFrame {
  if (typeof data !== 'string') throw invalidArgument('frame', 'must be a JSON text frame', 'frame');
  const parsed = parseStrictJson(data, { root: 'frame' });
  if (!parsed.ok) throw invalidArgument(parsed.field, parsed.reason, 'frame');
  const value = parsed.value;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalidArgument('frame', 'must be a JSON object', 'frame');
  const type = (value as { type?: unknown }).type;
  if (type === undefined) throw invalidArgument('type', 'is required', 'frame');
  if (typeof type !== 'string' || !(WORKER_FRAME_TYPES as readonly string[]).includes(type)) {
    throw invalidArgument('type', `must be one of ${WORKER_FRAME_TYPES.join(', ')}`, 'frame');
  }
  const validate = validators[type as (typeof WORKER_FRAME_TYPES)[number]];
  if (!validate(value)) throw validationError(validate.errors, 'frame');
  return value as WorkerFrame;
}

export function errorFrame(error: OrbitError, ids: { attempt_id?: string; claim_id?: string } = {}, retryAfterMs?: number): ErrorFrame {
  const frame: ErrorFrame = { type: 'error', code: error.code as ErrorFrame['code'], message: error.message, ...ids };
  if (retryAfterMs !== undefined) frame.retry_after_ms = retryAfterMs;
  if (error.details !== undefined) frame.details = error.details;
  return frame;
}

export function encodeFrame(frame: ServerFrame): string {
  return JSON.stringify(frame);
}
