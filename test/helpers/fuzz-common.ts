/**
 * Shared machinery of the property-based fuzz tests (test/contract/fuzz-*.test.ts):
 *
 * - `runProperty`: fast-check with a fixed seed (ORBIT_FUZZ_SEED overrides it) and a fixed
 *   number of runs (ORBIT_FUZZ_RUNS_SCALE multiplies them) - the same cases on every machine,
 *   however fast; a failure names the property, the seed and path to replay it, and the shrunk
 *   counter-example.
 * - `dbFingerprint`: CHECKSUM TABLE of every orbit_ table plus row counts, to prove that a
 *   refused request or frame changed nothing.
 * - `assertRefused` / `assertNever5xx`: the error envelope of openapi.yaml, X-Request-Id, the
 *   field a 400 names, and the server's own log line when something answered 5xx.
 * - `sendRaw`: exactly these headers and bytes through `app.request()`.
 * - JSON text builders that JSON.stringify cannot write: duplicate keys, deep nesting as a
 *   string (never recursion), raw number literals.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { pino, type Logger } from 'pino';
import type { Database } from '../../server/store/database/database.ts';
import type { TestResponse } from './app.ts';
import { STATUS_OF_CODE, assertErrorEnvelope } from '../contract/spec-validator.ts';
import { RETENTION_FIELDS } from '../../server/domain/retention.ts';

// ---------------------------------------------------------------------------------------------
// Seed, runs, reporting
// ---------------------------------------------------------------------------------------------

export const DEFAULT_FUZZ_SEED = 20260717;

export const FUZZ_SEED: number = (() => {
  const raw = process.env.ORBIT_FUZZ_SEED;
  if (raw === undefined || raw === '') return DEFAULT_FUZZ_SEED;
  const seed = Number(raw);
  if (!Number.isSafeInteger(seed)) throw new Error(`ORBIT_FUZZ_SEED must be an integer, got "${raw}"`);
  return seed | 0;
})();

const RUNS_SCALE: number = (() => {
  const raw = process.env.ORBIT_FUZZ_RUNS_SCALE;
  if (raw === undefined || raw === '') return 1;
  const scale = Number(raw);
  if (!(scale > 0)) throw new Error(`ORBIT_FUZZ_RUNS_SCALE must be a positive number, got "${raw}"`);
  return scale;
})();

/** A stable per-property seed derived from FUZZ_SEED, so properties do not replay each other's inputs. */
function propertySeed(name: string): number {
  let h = FUZZ_SEED ^ 0x9e3779b9;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h | 0;
}

/** Shortens long strings inside a counter-example (1 MiB bodies, 10,000-level nesting) for the report. */
export function summarize(value: unknown, max = 1500): string {
  const text = fc.stringify(value);
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} characters)`;
}

export interface PropertyOptions {
  /** Exactly this many generated cases (times ORBIT_FUZZ_RUNS_SCALE), whatever the machine's speed. */
  numRuns: number;
}

/**
 * How long shrinking a counter-example may take. Only a failure is shrunk, and only the report
 * depends on it (how small the counter-example shown is): whether a property passes never
 * depends on the clock.
 */
const SHRINK_TIME_LIMIT_MS = 20_000;

/**
 * Runs one property: exactly `numRuns` cases (no time limit: a slow, loaded machine runs the
 * same cases as a fast one, only slower). Throws an Error naming the property, seed, replay
 * path, shrunk counter-example and the predicate's error (its message carries the server's log
 * line when there was one).
 */
export async function runProperty<T>(
  name: string,
  arbitrary: fc.Arbitrary<T>,
  predicate: (value: T) => Promise<void>,
  options: PropertyOptions,
): Promise<void> {
  const seed = propertySeed(name);
  const numRuns = Math.max(1, Math.round(options.numRuns * RUNS_SCALE));
  // The runs: every case to its end, stopping at the first failure (not shrunk here).
  const found = await fc.check(fc.asyncProperty(arbitrary, predicate), { seed, numRuns, endOnFailure: true });
  if (!found.failed) return;
  // Shrinking the failure, from its path, within SHRINK_TIME_LIMIT_MS. fc.interruptAfterTimeLimit
  // abandons the run in progress, still running: its request would land in the middle of the
  // next property (whose "a refused request changed nothing" fingerprints then see it), so the
  // abandoned run is awaited here.
  let inFlight: Promise<unknown> | null = null;
  const shrunk = await fc.check(
    fc.asyncProperty(arbitrary, async (value) => {
      const run = predicate(value);
      const current = run.then(
        () => null,
        () => null,
      );
      inFlight = current;
      try {
        await run;
      } finally {
        if (inFlight === current) inFlight = null;
      }
    }),
    { seed, numRuns, path: found.counterexamplePath ?? undefined, endOnFailure: false, plugins: [fc.interruptAfterTimeLimit(SHRINK_TIME_LIMIT_MS)] },
  );
  if (inFlight) await inFlight;
  // The replay failed again: its shrunk counter-example; else (it passed this time) the one found.
  const details = shrunk.failed ? shrunk : found;
  const error = details.errorInstance;
  const message = error instanceof Error ? error.message : String(error);
  const counterexample = details.counterexample ? summarize((details.counterexample as unknown[])[0]) : '(none)';
  throw new Error(
    [
      `property "${name}" failed after ${found.numRuns} run(s), shrunk ${shrunk.failed ? shrunk.numShrinks : 0} time(s)${
        shrunk.failed && shrunk.interrupted ? ' (shrinking cut short by its time limit)' : shrunk.failed ? '' : ' (the replay to shrink it passed)'
      }`,
      `  seed: ORBIT_FUZZ_SEED=${FUZZ_SEED} (property seed ${seed}, path "${details.counterexamplePath}")`,
      `  counterexample: ${counterexample}`,
      `  error: ${message.split('\n').join('\n    ')}`,
    ].join('\n'),
    { cause: error },
  );
}

// ---------------------------------------------------------------------------------------------
// "Nothing changed": a fingerprint of every orbit_ table
// ---------------------------------------------------------------------------------------------
const tableCache = new WeakMap<Database, string[]>();

async function orbitTables(db: Database): Promise<string[]> {
  let tables = tableCache.get(db);
  if (!tables) {
    const rows = await db.rows<{ TABLE_NAME: string }>(
      "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'orbit\\_%' ORDER BY TABLE_NAME",
    );
    tables = rows.map((r) => r.TABLE_NAME);
    assert.ok(tables.length >= 13, `expected the orbit_ tables, found ${tables.join(', ')}`);
    tableCache.set(db, tables);
  }
  return tables;
}

export interface FingerprintOptions {
  /**
   * Tables compared by row count and these columns only (background loops of a live server
   * touch them, e.g. the heartbeat's `last_seen_at` on orbit_worker_sessions).
   */
  partial?: Record<string, string[]>;
}

/**
 * `CHECKSUM TABLE` of every orbit_ table and each table's row count, plus the usage counters and
 * revisions of the quota rows (so a difference is readable), as one comparable object.
 */
export async function dbFingerprint(db: Database, options: FingerprintOptions = {}): Promise<Record<string, string>> {
  const tables = await orbitTables(db);
  // The pruning loop of a live server moves each policy's turn (next_prune_at): bookkeeping, not
  // a change any request made.
  const partial: Record<string, string[]> = {
    orbit_retention_policies: ['application_id', 'revision', ...RETENTION_FIELDS, 'updated_at'],
    ...options.partial,
  };
  const full = tables.filter((t) => !(t in partial));
  const out: Record<string, string> = {};
  const sums = await db.rows<{ Table: string; Checksum: string | number | null }>(`CHECKSUM TABLE ${full.map((t) => `\`${t}\``).join(', ')}`);
  for (const row of sums) out[`checksum ${row.Table.split('.').pop()}`] = String(row.Checksum);
  const counts = await db.rows<Record<string, number | string>>(`SELECT ${tables.map((t) => `(SELECT COUNT(*) FROM \`${t}\`) AS \`${t}\``).join(', ')}`);
  for (const [table, n] of Object.entries(counts[0] ?? {})) out[`rows ${table}`] = String(n);
  for (const [table, columns] of Object.entries(partial)) {
    const rows = await db.rows<Record<string, unknown>>(`SELECT ${columns.map((c) => `\`${c}\``).join(', ')} FROM \`${table}\` ORDER BY 1`);
    out[`columns ${table}`] = JSON.stringify(rows, (_k, v) =>
      typeof v === 'bigint' ? String(v) : v && v.type === 'Buffer' ? Buffer.from(v.data).toString('hex') : v,
    );
  }
  const quota = await db.rows<Record<string, unknown>>(
    // Ordered by a unique key: queue names repeat across namespaces (two `default` queues), and
    // rows that tie may come back in either order.
    `SELECT 'application' AS level, HEX(application_id) AS id, '' AS queue_id, revision, unfinished_tasks, active_attempts, pending_starts FROM orbit_application_resources
     UNION ALL SELECT 'queue', name, HEX(queue_id), revision, unfinished_tasks, active_attempts, pending_starts FROM orbit_queues ORDER BY 1, 2, 3`,
  );
  out.quota = JSON.stringify(quota);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/**
 * Exactly these headers and bytes through `app.request()` (no Content-Type is added). `signal`
 * is the request's own (a long-poll answers at once when it is aborted).
 */
export async function sendRaw(
  app: { request(path: string, init?: RequestInit): Response | Promise<Response> },
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string | Uint8Array,
  signal?: AbortSignal,
): Promise<TestResponse> {
  const init: RequestInit = { method, headers };
  if (body !== undefined) init.body = typeof body === 'string' ? new TextEncoder().encode(body) : body;
  if (signal !== undefined) init.signal = signal;
  const raw = await app.request(path, init);
  const text = await raw.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: raw.status, headers: raw.headers, text, body: parsed };
}

/** Error lines of a server log, kept so a 5xx can be reported with its stack. */
export class LogCapture {
  readonly lines: Array<Record<string, any>> = [];
  readonly logger: Logger = pino({ level: 'warn' }, { write: (line: string) => void this.push(line) });

  private push(line: string): void {
    try {
      this.lines.push(JSON.parse(line));
    } catch {
      this.lines.push({ msg: line });
    }
    if (this.lines.length > 200) this.lines.splice(0, this.lines.length - 200);
  }

  /** The most recent error line, with the first lines of its stack, for assertion messages. */
  last(): string {
    return describeLogLine(this.lines.at(-1));
  }

  clear(): void {
    this.lines.length = 0;
  }
}

export function describeLogLine(line: Record<string, any> | undefined): string {
  if (!line) return '(no server log line)';
  const stack = typeof line.err?.stack === 'string' ? (line.err.stack as string).split('\n').slice(0, 5).join(' | ') : '';
  return `server log: level ${line.level} "${line.msg}"${line.err?.message ? ` err: ${line.err.message}` : ''}${stack ? ` stack: ${stack}` : ''}`;
}

export interface RefusalExpectation {
  status?: number | number[];
  code?: string | string[];
  /** The field a 400 must name: one name, a set of acceptable names, or a test. */
  field?: string | readonly string[] | ((field: string) => boolean);
  location?: string | readonly string[];
}

const asList = <T>(v: T | readonly T[] | undefined): readonly T[] | undefined =>
  v === undefined ? undefined : Array.isArray(v) ? (v as readonly T[]) : [v as T];

/** Never a 5xx; the message carries the server's log line when there is one. */
export function assertNever5xx(response: TestResponse, where: string, log?: LogCapture): void {
  if (response.status >= 500) assert.fail(`${where}: answered ${response.status}: ${response.text.slice(0, 300)}\n    ${log ? log.last() : ''}`);
}

/**
 * A refusal in the error envelope: `{"request_id": <32 hex>, "error": {code, message, details?}}`
 * valid per openapi.yaml's ErrorEnvelope, the same id in X-Request-Id, the HTTP status of the
 * code, and for 400 INVALID_ARGUMENT a `details.field` (and `location`) naming the offending field.
 */
export function assertRefused(response: TestResponse, where: string, expect: RefusalExpectation = {}, log?: LogCapture): void {
  assertNever5xx(response, where, log);
  const show = `${where}: ${response.status} ${response.text.slice(0, 400)}`;
  assert.ok(response.status >= 400, `${where}: expected a refusal, got ${response.status}: ${response.text.slice(0, 300)}`);
  assert.match(response.headers.get('content-type') ?? '', /^application\/json\b/, `${show}: Content-Type of an error`);
  assert.ok(response.body !== undefined, `${show}: the error body is not JSON`);
  try {
    assertErrorEnvelope(response.body);
  } catch (error) {
    assert.fail(`${show}: ${(error as Error).message}`);
  }
  assert.equal(response.headers.get('x-request-id'), response.body.request_id, `${show}: X-Request-Id must equal request_id`);
  const code = response.body.error.code as string;
  assert.equal(response.status, STATUS_OF_CODE[code], `${show}: ${code} is HTTP ${STATUS_OF_CODE[code]}`);
  const statuses = asList(expect.status);
  if (statuses) assert.ok(statuses.includes(response.status), `${show}: expected status ${statuses.join(' or ')}`);
  const codes = asList(expect.code);
  if (codes) assert.ok(codes.includes(code), `${show}: expected code ${codes.join(' or ')}`);
  if (code === 'INVALID_ARGUMENT') {
    const details = response.body.error.details as { field?: unknown; location?: unknown } | undefined;
    assert.equal(typeof details?.field, 'string', `${show}: a 400 must name the offending field in error.details.field`);
    assert.ok(String(details?.field).length > 0, `${show}: error.details.field is empty`);
    const field = details?.field as string;
    if (expect.field !== undefined) {
      const ok = typeof expect.field === 'function' ? expect.field(field) : (asList(expect.field as string | readonly string[]) ?? []).includes(field);
      assert.ok(
        ok,
        `${show}: error.details.field ${JSON.stringify(field)} is not the offending field (expected ${typeof expect.field === 'function' ? 'a matching field' : JSON.stringify(expect.field)})`,
      );
    }
    const locations = asList(expect.location);
    if (locations)
      assert.ok(
        locations.includes(details?.location as string),
        `${show}: error.details.location ${JSON.stringify(details?.location)}, expected ${locations.join(' or ')}`,
      );
  }
}

// ---------------------------------------------------------------------------------------------
// JSON text that JSON.stringify cannot write
// ---------------------------------------------------------------------------------------------

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * The spellings of a place inside a document that count as naming it in `details.field`:
 * dotted (`payload.items[2].sku`) when every key is a non-empty name, and with keys that are
 * not plain names as quoted indexes (`payload["a b"]`, `body[""]`). A path that is empty or
 * starts with an index gets the document's name (`body`, `frame`) in front. Never empty.
 */
export function fieldNames(segments: ReadonlyArray<string | number>, root: string): string[] {
  const PLAIN = /^[A-Za-z_][A-Za-z0-9_-]*$/;
  const at = (path: string) => (path === '' || path.startsWith('[') ? `${root}${path}` : path);
  // A numeric key read from a JSON Pointer may be an array index or an object key "0".
  let variants: Array<{ dotted: string | null; quoted: string }> = [{ dotted: '', quoted: '' }];
  for (const segment of segments) {
    const next: typeof variants = [];
    for (const v of variants) {
      const options: Array<string | number> = typeof segment === 'string' && /^\d+$/.test(segment) ? [segment, Number(segment)] : [segment];
      for (const option of options) {
        if (typeof option === 'number') next.push({ dotted: v.dotted === null ? null : `${v.dotted}[${option}]`, quoted: `${v.quoted}[${option}]` });
        else
          next.push({
            dotted: v.dotted === null || option === '' ? null : v.dotted === '' ? option : `${v.dotted}.${option}`,
            quoted: PLAIN.test(option) ? (v.quoted === '' ? option : `${v.quoted}.${option}`) : `${v.quoted}[${JSON.stringify(option)}]`,
          });
      }
    }
    variants = next.slice(0, 64);
  }
  const out = new Set<string>();
  for (const v of variants) {
    out.add(at(v.quoted));
    if (v.dotted !== null) out.add(at(v.dotted));
  }
  return [...out];
}

/**
 * JSON text of `value` in which the object at `objectPath` repeats its member `key` (which it must
 * have) at its end; `escaped` writes the repeated key with \u escapes (still the same key).
 */
export function jsonWithDuplicate(value: Json, objectPath: ReadonlyArray<string | number>, key: string, escaped = false): string {
  const write = (node: Json, depth: number): string => {
    if (node === null || typeof node !== 'object') return JSON.stringify(node);
    const here = depth === objectPath.length;
    if (Array.isArray(node)) return `[${node.map((item, i) => (!here && objectPath[depth] === i ? write(item, depth + 1) : JSON.stringify(item))).join(',')}]`;
    const members = Object.entries(node).map(([k, v]) => `${JSON.stringify(k)}:${!here && objectPath[depth] === k ? write(v, depth + 1) : JSON.stringify(v)}`);
    if (here) {
      const name = escaped ? escapedKey(key) : JSON.stringify(key);
      members.push(`${name}:${JSON.stringify(node[key] ?? null)}`);
    }
    return `{${members.join(',')}}`;
  };
  return write(value, 0);
}

/** A JSON string literal with every UTF-16 code unit written as a \u escape (the same string). */
export function escapedKey(key: string): string {
  let out = '"';
  for (let i = 0; i < key.length; i++) out += `\\u${key.charCodeAt(i).toString(16).padStart(4, '0')}`;
  return `${out}"`;
}

export type NestShape = 'array' | 'object' | 'mixed';

/** `depth` levels of arrays/objects around `inner`, built as a string (no recursion). */
export function nested(depth: number, shape: NestShape, inner = '1'): string {
  const open: string[] = [];
  const close: string[] = [];
  for (let i = 0; i < depth; i++) {
    const object = shape === 'object' || (shape === 'mixed' && i % 2 === 1);
    open.push(object ? '{"k":' : '[');
    close.push(object ? '}' : ']');
  }
  return open.join('') + inner + close.reverse().join('');
}

/** Nesting levels of a JSON text (objects and arrays), counted without parsing (strings skipped). */
export function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) max = Math.max(max, ++depth);
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return max;
}

// ---------------------------------------------------------------------------------------------
// The nesting limit: documented in the specs (once it is), else the expected 64
// ---------------------------------------------------------------------------------------------

/**
 * The maximum nesting depth the specs document ("… at most N levels …" near "nest"/"deep"),
 * or null when neither says.
 */
export function documentedDepthLimit(specText: string): number | null {
  const patterns = [
    /x-orbit-max-(?:json-)?depth:\s*(\d+)/i,
    /(?:nest\w*|deep\w*|depth)[^.\n]{0,80}?\b(\d{2,5})\b\s*(?:levels?)?/i,
    /\b(\d{2,5})\s+levels?\b[^.\n]{0,40}(?:nest|deep)/i,
  ];
  for (const pattern of patterns) {
    const match = pattern.exec(specText);
    if (match) return Number(match[1]);
  }
  return null;
}

/** What the fix under way is expected to document (64 levels for a whole body or frame). */
export const EXPECTED_DEPTH_LIMIT = 64;

// ---------------------------------------------------------------------------------------------
// Small arbitraries shared by the files
// ---------------------------------------------------------------------------------------------

/** A string with a bias to what breaks parsers: long runs, control and non-BMP characters, lone surrogates. */
export const nastyString = (maxLength = 64): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 4, arbitrary: fc.string({ maxLength, unit: 'binary' }) },
    { weight: 2, arbitrary: fc.string({ maxLength, unit: 'grapheme' }) },
    { weight: 1, arbitrary: fc.constantFrom('\ud800', '\udfff', 'a\ud83d', '\ude00b', '\u0000', '\u2028\u2029', '\ufeff', '\u202e', 'é', '𝄞', ' ', '') },
    { weight: 1, arbitrary: fc.tuple(fc.constantFrom('x', 'é', '𝄞', ' ', '\t'), fc.integer({ min: 100, max: 20_000 })).map(([c, n]) => c.repeat(n)) },
  );

/** Numbers outside what the fields allow, and the ones JSON handles badly. */
export const nastyNumber: fc.Arbitrary<number> = fc.oneof(
  fc.constantFrom(0, -0, -1, 0.5, 1e-300, 2 ** 31, 2 ** 32, 2 ** 53, 2 ** 53 + 2, 2 ** 63, 2 ** 64, 1e21, 1e308, -1e308, Number.MAX_VALUE, Number.MIN_VALUE),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.integer(),
);

/** Raw number literals that JSON.parse reads as something else (Infinity, 0, a rounded value). */
export const rawNumberLiteral: fc.Arbitrary<string> = fc.constantFrom(
  '1e400',
  '-1e400',
  '1e-400',
  '123456789012345678901234567890',
  '18446744073709551616',
  '9007199254740993',
  '-0',
  '0.0000000000000000000000000001',
  '1E+2',
  '100.0',
);

/**
 * Runs `fn` and proves it wrote nothing: `readable` (the rows a test names, so that a difference
 * is readable) and the whole database's fingerprint are the same after it as before.
 */
export async function assertWritesNothing<T>(
  db: Database,
  options: { readable: () => Promise<unknown>; what: string; fingerprint?: FingerprintOptions },
  fn: () => Promise<T>,
): Promise<T> {
  const rows = await options.readable();
  const fingerprint = await dbFingerprint(db, options.fingerprint);
  const result = await fn();
  assert.deepEqual(await options.readable(), rows, options.what);
  assert.deepEqual(await dbFingerprint(db, options.fingerprint), fingerprint, 'nothing at all in the database changed');
  return result;
}
