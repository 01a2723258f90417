/** Opaque page cursors: base64url of a small JSON value, checked on the way back in. */
import { invalidArgument } from '../errors.ts';

export function encodeCursor(value: string): string {
  return Buffer.from(JSON.stringify([value]), 'utf8').toString('base64url');
}

export function decodeCursor(cursor: string | undefined): string | null {
  if (cursor === undefined) return null;
  try {
    const value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(value) && value.length === 1 && typeof value[0] === 'string') return value[0];
  } catch {
    // fall through
  }
  throw invalidArgument('cursor', 'is not a cursor returned by this operation', 'query');
}

export const DEFAULT_PAGE_SIZE = 50;
