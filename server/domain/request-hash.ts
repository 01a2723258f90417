/**
 * The identity of a mutating request's content, kept in its idempotency receipt: same key and
 * same hash is a replay, same key and another hash is IDEMPOTENCY_CONFLICT. Object keys are
 * sorted recursively, so two encodings of the same JSON (key order, whitespace, `1.0` vs `1`)
 * are the same content.
 */
import { createHash } from 'node:crypto';

export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.keys(value)
    .sort()
    .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
    .map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`);
  return `{${entries.join(',')}}`;
}

export function requestHash(operation: string, target: Record<string, string>, body: unknown): Buffer {
  return createHash('sha256').update(canonicalJson({ operation, target, body })).digest();
}
