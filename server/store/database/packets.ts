/**
 * Every round trip to MySQL fits in one packet. The server refuses a command larger than its
 * `max_allowed_packet` (16 MiB by default on MariaDB, 64 MiB on MySQL 8) and drops the
 * connection; how large a batch of statements is depends on tenant data (a payload of 256 KiB
 * made of quotes is 512 KiB once escaped, a group of results carries each one's JSON), so a
 * batch that is fine for one tenant can be refused for another. Batches are therefore split by
 * their encoded size, measured against the limit the server reports (`PacketLimit`, read on
 * every new connection and at start-up), never only by their number of rows:
 *
 * - a list of statements is sent in as many round trips as it needs, each under the limit
 *   (`planRoundTrips`), in order, in the same transaction - atomicity does not change, only the
 *   number of round trips of a batch that would not fit;
 * - a multi-row INSERT built with `rowsStatement` is split into several INSERTs of fewer rows
 *   when it alone would not fit; its results are merged back into one, so callers that read
 *   results by position see what they would have seen;
 * - a single statement that cannot fit is refused before it is sent (`PacketTooLarge`).
 *
 * Sizes are upper bounds, cheap to compute on the hot paths: mysql2 formats the parameters into
 * the statement text, a string grows at most to twice its UTF-8 length plus its quotes (each
 * escaped character becomes two), a Buffer to `X'…'` of twice its length plus 3. The common
 * case - a batch well under the limit - costs one pass over the parameters; only a batch over
 * the limit is compiled statement by statement and packed.
 */
import { type SQL, sql } from './sql.ts';

/**
 * The limit assumed until the server has said (the smallest default of any supported server);
 * the first connection's set-up replaces it with the server's own value.
 */
export const ASSUMED_MAX_PACKET_BYTES = 1024 * 1024;
/**
 * The smallest `max_allowed_packet` Orbit runs with: the largest single statement it sends (a
 * result of 256 KiB of JSON and an error of 256 KiB, escaped, with the rest of its UPDATE) fits
 * with room to spare. orbit-server refuses to start below it.
 */
export const MIN_MAX_PACKET_BYTES = 4 * 1024 * 1024;
/** Kept free in every round trip for the protocol's framing and the statements' separators. */
const PACKET_MARGIN_BYTES = 16 * 1024;

/** The server's `max_allowed_packet`, as this process knows it. */
export class PacketLimit {
  private bytes = ASSUMED_MAX_PACKET_BYTES;

  /** What the server said (the smallest value seen, should connections disagree). */
  learn(maxAllowedPacket: number): void {
    if (Number.isSafeInteger(maxAllowedPacket) && maxAllowedPacket > 0) {
      this.bytes = this.known ? Math.min(this.bytes, maxAllowedPacket) : maxAllowedPacket;
      this.known = true;
    }
  }

  private known = false;

  get maxPacketBytes(): number {
    return this.bytes;
  }

  /** The most one round trip may carry. */
  get budgetBytes(): number {
    return Math.max(1024, this.bytes - PACKET_MARGIN_BYTES);
  }
}

/** A statement that cannot fit in one packet however it is sent. Not retryable; a request that needs it is refused. */
export class PacketTooLarge extends Error {
  readonly code = 'ORBIT_PACKET_TOO_LARGE';
  constructor(
    readonly bytes: number,
    readonly budget: number,
  ) {
    super(`one statement of about ${bytes} bytes would not fit in the database's max_allowed_packet (${budget} bytes usable)`);
    this.name = 'PacketTooLarge';
  }
}

/** An upper bound of the bytes one parameter takes once mysql2 has formatted it into the text. */
export function valueBytesBound(value: unknown): number {
  if (value === null || value === undefined) return 4;
  switch (typeof value) {
    case 'string':
      return 2 * Buffer.byteLength(value, 'utf8') + 2;
    case 'number':
    case 'bigint':
      return 24;
    case 'boolean':
      return 5;
    default:
      break;
  }
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return 2 * value.byteLength + 3;
  if (value instanceof Date) return 32;
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + valueBytesBound(v) + 2, 2);
  // mysql2 writes an object as `key` = value pairs: its JSON, escaped, bounds that.
  return 2 * Buffer.byteLength(JSON.stringify(value) ?? '', 'utf8') + 64;
}

/** An upper bound of the bytes of a statement text with its parameters formatted in. */
export function encodedBytesBound(text: string, params: readonly unknown[]): number {
  let bytes = Buffer.byteLength(text, 'utf8');
  for (const value of params) bytes += valueBytesBound(value);
  return bytes;
}

/**
 * A multi-row statement whose rows may be sent in several statements: `head`, the rows joined by
 * `separator`, `tail`. For `INSERT … VALUES (…), (…)` and `INSERT … SELECT … UNION ALL SELECT …`
 * of new rows, where fewer rows per statement change nothing but the number of statements.
 */
export class RowsStatement {
  constructor(
    readonly head: SQL,
    readonly rows: readonly SQL[],
    readonly separator: SQL,
    readonly tail: SQL,
  ) {
    if (rows.length === 0) throw new Error('rowsStatement: at least one row');
  }

  /** The whole statement as one. */
  toSql(): SQL {
    return sql`${this.head}${sql.join([...this.rows], this.separator)}${this.tail}`;
  }
}

/** `INSERT INTO t (…) VALUES ` + rows joined by `, ` (or `separator`), split by size when it must be. */
export function rowsStatement(head: SQL, rows: readonly SQL[], options: { separator?: SQL; tail?: SQL } = {}): RowsStatement {
  return new RowsStatement(head, rows, options.separator ?? sql`, `, options.tail ?? sql``);
}

export type BatchStatement = SQL | RowsStatement;

/** One round trip: its text, its parameters, and for each statement in it, which statement of the batch it is (a split one appears several times). */
export interface RoundTrip {
  text: string;
  params: unknown[];
  slots: number[];
}

const SEPARATOR = ';\n';

function compile(statement: SQL): { text: string; params: unknown[] } {
  return { text: statement.text, params: statement.params as unknown[] };
}

const asSql = (s: BatchStatement): SQL => (s instanceof RowsStatement ? s.toSql() : s);

interface Piece {
  text: string;
  params: unknown[];
  bytes: number;
  slot: number;
}

/** A RowsStatement too large for one packet, as statements of consecutive rows that each fit. */
function splitRows(statement: RowsStatement, slot: number, budget: number): Piece[] {
  const head = compile(statement.head);
  const tail = compile(statement.tail);
  const separator = compile(statement.separator);
  const fixed = encodedBytesBound(head.text, head.params) + encodedBytesBound(tail.text, tail.params);
  const separatorBytes = encodedBytesBound(separator.text, separator.params);
  const pieces: Piece[] = [];
  let texts: string[] = [];
  let params: unknown[] = [];
  let bytes = fixed;
  const flush = () => {
    if (texts.length === 0) return;
    pieces.push({
      text: head.text + texts.join(separator.text) + tail.text,
      params: [...head.params, ...params, ...tail.params],
      bytes,
      slot,
    });
    texts = [];
    params = [];
    bytes = fixed;
  };
  for (const row of statement.rows) {
    const compiled = compile(row);
    const rowBytes = encodedBytesBound(compiled.text, compiled.params);
    if (fixed + rowBytes > budget) throw new PacketTooLarge(fixed + rowBytes, budget);
    const extra = texts.length === 0 ? rowBytes : rowBytes + separatorBytes;
    if (bytes + extra > budget) flush();
    bytes += texts.length === 0 ? rowBytes : rowBytes + separatorBytes;
    texts.push(compiled.text);
    // The separator's own parameters (none in practice) go between rows, in order.
    if (texts.length > 1) params.push(...separator.params);
    params.push(...compiled.params);
  }
  flush();
  return pieces;
}

/**
 * How to send `statements` in round trips of at most `budget` bytes each, in order. `extraBytes`
 * is what the caller adds to a round trip (START TRANSACTION, COMMIT). One round trip when the
 * whole batch fits - the usual case, at the cost of one pass over the parameters.
 */
export function planRoundTrips(statements: readonly BatchStatement[], budget: number, extraBytes = 0): RoundTrip[] {
  if (statements.length === 0) return [];
  const whole = compile(sql.join(statements.map(asSql), sql.raw(SEPARATOR)));
  if (encodedBytesBound(whole.text, whole.params) + extraBytes <= budget) {
    return [{ text: whole.text, params: whole.params, slots: statements.map((_, i) => i) }];
  }
  const room = budget - extraBytes;
  const pieces: Piece[] = [];
  statements.forEach((statement, slot) => {
    const compiled = compile(asSql(statement));
    const bytes = encodedBytesBound(compiled.text, compiled.params);
    if (bytes <= room) pieces.push({ ...compiled, bytes, slot });
    else if (statement instanceof RowsStatement) pieces.push(...splitRows(statement, slot, room));
    else throw new PacketTooLarge(bytes, room);
  });
  const trips: RoundTrip[] = [];
  let current: Piece[] = [];
  let bytes = 0;
  const flush = () => {
    if (current.length === 0) return;
    trips.push({
      text: current.map((p) => p.text).join(SEPARATOR),
      params: current.flatMap((p) => p.params),
      slots: current.map((p) => p.slot),
    });
    current = [];
    bytes = 0;
  };
  for (const piece of pieces) {
    const extra = current.length === 0 ? piece.bytes : piece.bytes + SEPARATOR.length;
    if (bytes + extra > room) flush();
    bytes += current.length === 0 ? piece.bytes : piece.bytes + SEPARATOR.length;
    current.push(piece);
  }
  flush();
  return trips;
}

/** The header of a write as mysql2 returns it (the fields Orbit reads, and the ones merged). */
interface WriteHeader {
  affectedRows?: number;
  changedRows?: number;
  insertId?: number;
  warningStatus?: number;
}

function isRows(result: unknown): result is unknown[] {
  return Array.isArray(result);
}

/**
 * The results of the round trips, one per statement of the batch: a statement split into
 * several gets one header with their affected rows summed (and the first insert id).
 */
export function mergeResults<R>(slots: readonly number[], results: readonly R[], count: number): R[] {
  const out = new Array<R>(count);
  const seen = new Array<boolean>(count).fill(false);
  slots.forEach((slot, i) => {
    const result = results[i] as R;
    if (!seen[slot]) {
      out[slot] = result;
      seen[slot] = true;
      return;
    }
    const a = out[slot] as unknown;
    const b = result as unknown;
    if (isRows(a) || isRows(b)) throw new Error('only the writes of a split statement can be merged');
    const x = a as WriteHeader;
    const y = b as WriteHeader;
    out[slot] = {
      ...x,
      affectedRows: (x.affectedRows ?? 0) + (y.affectedRows ?? 0),
      changedRows: (x.changedRows ?? 0) + (y.changedRows ?? 0),
      warningStatus: (x.warningStatus ?? 0) + (y.warningStatus ?? 0),
    } as R;
  });
  return out;
}
