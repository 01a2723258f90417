/**
 * Identifiers are 16 bytes (`BINARY(16)` in MySQL) shown as 32 lowercase hex characters.
 * New ids start with a 48-bit millisecond timestamp (like UUIDv7), so they sort by creation
 * time: inserts land at the right edge of the primary key, and "order by id" is "oldest first".
 */
import { randomFillSync } from 'node:crypto';

export type IdBytes = Buffer;

let lastMillis = 0;
let sequence = 0;

/**
 * Random bytes drawn 4 KiB at a time: one call into the CSPRNG for 256 ids instead of one per
 * id (several ids are made per task; the per-call cost showed in profiles of the drain).
 */
const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let poolOffset = POOL_BYTES;

function random16(): Buffer {
  if (poolOffset + 16 > POOL_BYTES) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  // A copy: the pool is refilled in place.
  const out = Buffer.allocUnsafe(16);
  pool.copy(out, 0, poolOffset, poolOffset + 16);
  poolOffset += 16;
  return out;
}

export function newId(now: number = Date.now()): IdBytes {
  const id = random16();
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
  return random16().toString('hex');
}
