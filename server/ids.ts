/**
 * Identifiers are 16 bytes (`BINARY(16)` in MySQL) shown as 32 lowercase hex characters.
 * New ids start with a 48-bit millisecond timestamp (like UUIDv7), so they sort by creation
 * time: inserts land at the right edge of the primary key, and "order by id" is "oldest first".
 */
import { randomBytes } from 'node:crypto';

export type IdBytes = Buffer;

let lastMillis = 0;
let sequence = 0;

export function newId(now: number = Date.now()): IdBytes {
  const id = randomBytes(16);
  // Within one millisecond a counter in the next 16 bits keeps ids from one process ordered.
  if (now === lastMillis) sequence = (sequence + 1) & 0xffff;
  else {
    lastMillis = now;
    sequence = id.readUInt16BE(6) & 0x7fff;
  }
  id.writeUIntBE(now, 0, 6);
  id.writeUInt16BE(sequence, 6);
  return id;
}

export function idToHex(id: IdBytes): string {
  return id.toString('hex');
}

const HEX_ID = /^[0-9a-f]{32}$/;

export function isHexId(value: string): boolean {
  return HEX_ID.test(value);
}

/** Callers validate the text first (the spec's `Id` pattern); this only converts. */
export function hexToId(hex: string): IdBytes {
  if (!HEX_ID.test(hex)) throw new Error(`not an id: ${hex}`);
  return Buffer.from(hex, 'hex');
}

export function newRequestId(): string {
  return randomBytes(16).toString('hex');
}
