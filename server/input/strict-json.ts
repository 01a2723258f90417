/**
 * Strict JSON parsing for HTTP request bodies and WebSocket text frames.
 *
 * `JSON.parse` silently keeps the last of duplicate object keys, which makes a
 * document ambiguous (different parsers disagree on its meaning). This module
 * refuses such documents.
 *
 * Implementation: one linear pass over the text with an explicit stack (no
 * recursion, so deep nesting cannot overflow the call stack) validates the
 * grammar of RFC 8259 exactly as `JSON.parse` does and checks object keys for
 * duplicates (a syntax error anywhere takes precedence over a duplicate; the
 * first duplicate in text order is reported). Values are never materialised
 * by the scanner; once the text is known to be valid and unambiguous,
 * `JSON.parse` builds the value. Keys are
 * taken as raw slices of the input and only decoded (via `JSON.parse` on the
 * quoted slice) when they contain an escape, so `{"a":1,"\u0061":2}` is
 * detected as a duplicate. Seen keys live in an array (small objects) or a
 * `Set`, never in a plain object, so keys such as `__proto__` or
 * `constructor` have no special behaviour.
 *
 * Nesting is bounded (`MAX_JSON_DEPTH`): the scanner itself would cope with any depth, but
 * everything after it - `JSON.parse`, the validators, the request hash, `JSON.stringify` of
 * a stored payload - recurses, and a document a few thousand levels deep would overflow the
 * call stack there. So a too deep document is refused here, before anything recursive runs.
 */

/** How deeply objects and arrays may nest in a request body or a worker frame, user data included (openapi.yaml, asyncapi.yaml). */
export const MAX_JSON_DEPTH = 64;

import { fieldAt, fieldPath } from './field-path.ts';

export type StrictJsonResult = { ok: true; value: unknown } | { ok: false; field: string; reason: string };

/** Internal: thrown by the scanner, caught in `parseStrictJson`. */
class ScanFailure {
  constructor(
    /** A path inside the document (field-path.ts); '' for the document as a whole. */
    readonly field: string,
    readonly reason: string,
  ) {}
}

interface Frame {
  /** true for `{...}`, false for `[...]`. */
  readonly isObject: boolean;
  /** Keys seen so far (objects only): a list while small, then a Set. */
  readonly keyList: string[] | null;
  keySet: Set<string> | null;
  /** Current member key (objects). */
  key: string;
  /** Current element index (arrays). */
  index: number;
}

// Character codes.
const TAB = 0x09;
const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const QUOTE = 0x22;
const PLUS = 0x2b;
const COMMA = 0x2c;
const MINUS = 0x2d;
const DOT = 0x2e;
const SLASH = 0x2f;
const DIGIT_0 = 0x30;
const DIGIT_1 = 0x31;
const DIGIT_9 = 0x39;
const COLON = 0x3a;
const UPPER_E = 0x45;
const LBRACKET = 0x5b;
const BACKSLASH = 0x5c;
const RBRACKET = 0x5d;
const LOWER_B = 0x62;
const LOWER_E = 0x65;
const LOWER_F = 0x66;
const LOWER_N = 0x6e;
const LOWER_R = 0x72;
const LOWER_T = 0x74;
const LOWER_U = 0x75;
const LBRACE = 0x7b;
const RBRACE = 0x7d;

// Scanner modes.
const EXPECT_VALUE = 0;
const EXPECT_KEY = 1;
const AFTER_VALUE = 2;

/**
 * Parses `text` as JSON, refusing duplicate object keys at any depth.
 *
 * - invalid JSON → `{ ok: false, field: <root>, reason: 'is not valid JSON: …' }` (root: `body`
 *   unless `options.root` names the document otherwise, e.g. `frame`)
 * - duplicate key → `{ ok: false, field: <dotted path, e.g. payload.items[2].x>,
 *   reason: 'duplicate key "<key>"' }`
 * - otherwise `{ ok: true, value }` with `value` exactly as `JSON.parse(text)`.
 */
export function parseStrictJson(text: string, options: { root?: string } = {}): StrictJsonResult {
  const root = options.root ?? 'body';
  try {
    scan(text);
  } catch (err) {
    if (err instanceof ScanFailure) {
      return { ok: false, field: fieldAt(root, err.field), reason: err.reason };
    }
    throw err;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    // Unreachable if the scanner matches JSON.parse; fail closed anyway.
    const message = err instanceof Error ? err.message : String(err);
    return { ok: false, field: root, reason: `is not valid JSON: ${truncate(message, 120)}` };
  }
  return { ok: true, value };
}

function scan(text: string): void {
  const len = text.length;
  const stack: Frame[] = [];
  let top: Frame | undefined;
  let mode = EXPECT_VALUE;
  let i = skipWhitespace(text, 0);
  /** First duplicate key (or number JSON.parse would change) found; reported only if the whole text is valid JSON. */
  let duplicate: ScanFailure | undefined;

  for (;;) {
    if (mode === EXPECT_VALUE) {
      if (i >= len) throw endOfInput(i);
      const c = text.charCodeAt(i);
      if (c === LBRACE || c === LBRACKET) {
        if (stack.length >= MAX_JSON_DEPTH) throw tooDeep(stack);
      }
      if (c === LBRACE) {
        i = skipWhitespace(text, i + 1);
        if (i < len && text.charCodeAt(i) === RBRACE) {
          i++;
          mode = AFTER_VALUE;
        } else {
          top = { isObject: true, keyList: [], keySet: null, key: '', index: 0 };
          stack.push(top);
          mode = EXPECT_KEY;
        }
        continue;
      }
      if (c === LBRACKET) {
        i = skipWhitespace(text, i + 1);
        if (i < len && text.charCodeAt(i) === RBRACKET) {
          i++;
          mode = AFTER_VALUE;
        } else {
          top = { isObject: false, keyList: null, keySet: null, key: '', index: 0 };
          stack.push(top);
          // mode stays EXPECT_VALUE
        }
        continue;
      }
      if (c === QUOTE) {
        i = scanString(text, i);
      } else if (c === MINUS || (c >= DIGIT_0 && c <= DIGIT_9)) {
        const start = i;
        i = scanNumber(text, i);
        // `1e400` is valid JSON, but JSON.parse makes it Infinity (stored as null), and `1e-400`
        // becomes 0: user data must come back as it was sent, so such a number is refused.
        const problem = unrepresentable(text.slice(start, i));
        // Like a duplicate, reported only if the whole text is valid JSON.
        if (problem !== null && duplicate === undefined) duplicate = new ScanFailure(pathToCurrent(stack), problem);
      } else if (c === LOWER_T) {
        i = scanLiteral(text, i, 'true');
      } else if (c === LOWER_F) {
        i = scanLiteral(text, i, 'false');
      } else if (c === LOWER_N) {
        i = scanLiteral(text, i, 'null');
      } else {
        throw unexpected(text, i);
      }
      mode = AFTER_VALUE;
      continue;
    }

    if (mode === EXPECT_KEY) {
      // `top` is an object frame and `i` is at a non-whitespace position.
      if (i >= len) throw endOfInput(i);
      if (text.charCodeAt(i) !== QUOTE) throw unexpected(text, i, 'expected property name');
      const start = i;
      i = scanString(text, start);
      const frame = top as Frame;
      const key = lastStringHadEscape ? (JSON.parse(text.slice(start, i)) as string) : text.slice(start + 1, i - 1);
      if (duplicate === undefined) {
        if (!addKey(frame, key)) {
          // Keep scanning: a syntax error anywhere takes precedence.
          duplicate = new ScanFailure(pathTo(stack, key), `duplicate key ${JSON.stringify(key)}`);
        }
      }
      frame.key = key;
      i = skipWhitespace(text, i);
      if (i >= len) throw endOfInput(i);
      if (text.charCodeAt(i) !== COLON) throw unexpected(text, i, "expected ':'");
      i = skipWhitespace(text, i + 1);
      mode = EXPECT_VALUE;
      continue;
    }

    // AFTER_VALUE
    i = skipWhitespace(text, i);
    if (top === undefined) {
      if (i < len) throw unexpected(text, i, 'expected end of input');
      if (duplicate !== undefined) throw duplicate;
      return;
    }
    if (i >= len) throw endOfInput(i);
    const c = text.charCodeAt(i);
    if (c === COMMA) {
      i = skipWhitespace(text, i + 1);
      if (top.isObject) {
        mode = EXPECT_KEY;
      } else {
        top.index++;
        mode = EXPECT_VALUE;
      }
      continue;
    }
    if (c === (top.isObject ? RBRACE : RBRACKET)) {
      i++;
      stack.pop();
      top = stack.length > 0 ? stack[stack.length - 1] : undefined;
      continue;
    }
    throw unexpected(text, i, top.isObject ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

/** Objects with more members than this switch from a linear list to a Set. */
const SMALL_OBJECT = 8;

/** Records `key` as a member of object `frame`; false if it was already there. */
function addKey(frame: Frame, key: string): boolean {
  const set = frame.keySet;
  if (set !== null) {
    if (set.has(key)) return false;
    set.add(key);
    return true;
  }
  const list = frame.keyList as string[];
  for (let k = 0; k < list.length; k++) {
    if (list[k] === key) return false;
  }
  if (list.length < SMALL_OBJECT) {
    list.push(key);
  } else {
    const created = new Set(list);
    created.add(key);
    frame.keySet = created;
  }
  return true;
}

function skipWhitespace(text: string, i: number): number {
  const len = text.length;
  while (i < len) {
    const c = text.charCodeAt(i);
    if (c !== SPACE && c !== LF && c !== CR && c !== TAB) break;
    i++;
  }
  return i;
}

/**
 * Set by `scanString`: whether the string just scanned contained a backslash.
 * A module-level flag avoids allocating a result object per string.
 */
let lastStringHadEscape = false;

/** A (possibly empty) run of string characters needing no attention. Sticky. */
const STRING_RUN = /[^"\\\u0000-\u001f]*/y;

/** `i` is at the opening quote; returns the index just past the closing quote. */
function scanString(text: string, i: number): number {
  const len = text.length;
  const start = i;
  let escaped = false;
  i++;
  for (;;) {
    // Skip the run of ordinary characters: a plain loop is fastest for short
    // runs, the sticky regex (native code) for long ones.
    const shortEnd = Math.min(i + 16, len);
    let c = -1;
    while (i < shortEnd) {
      c = text.charCodeAt(i);
      if (c === QUOTE || c === BACKSLASH || c < SPACE) break;
      i++;
    }
    if (i === shortEnd) {
      STRING_RUN.lastIndex = i;
      STRING_RUN.test(text);
      i = STRING_RUN.lastIndex;
      if (i >= len) throw invalid(`unterminated string starting at offset ${start}`);
      c = text.charCodeAt(i);
    }
    if (c === QUOTE) {
      lastStringHadEscape = escaped;
      return i + 1;
    }
    if (c === BACKSLASH) {
      escaped = true;
      if (i + 1 >= len) throw invalid(`unterminated string starting at offset ${start}`);
      const e = text.charCodeAt(i + 1);
      if (e === QUOTE || e === BACKSLASH || e === SLASH || e === LOWER_B || e === LOWER_F || e === LOWER_N || e === LOWER_R || e === LOWER_T) {
        i += 2;
      } else if (e === LOWER_U) {
        for (let k = i + 2; k < i + 6; k++) {
          if (k >= len) throw invalid(`unterminated string starting at offset ${start}`);
          if (!isHexDigit(text.charCodeAt(k))) throw invalid(`invalid \\u escape at offset ${i}`);
        }
        i += 6;
      } else {
        throw invalid(`invalid escape at offset ${i}`);
      }
      continue;
    }
    if (c < SPACE) throw invalid(`control character ${describeCode(c)} in string at offset ${i}`);
    i++;
  }
}

function isHexDigit(c: number): boolean {
  return (c >= DIGIT_0 && c <= DIGIT_9) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** `i` is at '-' or a digit; returns the index just past the number. */
function scanNumber(text: string, i: number): number {
  const len = text.length;
  if (text.charCodeAt(i) === MINUS) i++;
  if (i >= len) throw endOfInput(i);
  let c = text.charCodeAt(i);
  if (c === DIGIT_0) {
    i++;
  } else if (c >= DIGIT_1 && c <= DIGIT_9) {
    i = skipDigits(text, i + 1);
  } else {
    throw unexpected(text, i, 'expected digit');
  }
  if (i < len && text.charCodeAt(i) === DOT) {
    i++;
    if (i >= len) throw endOfInput(i);
    c = text.charCodeAt(i);
    if (c < DIGIT_0 || c > DIGIT_9) throw unexpected(text, i, 'expected digit');
    i = skipDigits(text, i + 1);
  }
  if (i < len) {
    c = text.charCodeAt(i);
    if (c === LOWER_E || c === UPPER_E) {
      i++;
      if (i < len) {
        c = text.charCodeAt(i);
        if (c === PLUS || c === MINUS) i++;
      }
      if (i >= len) throw endOfInput(i);
      c = text.charCodeAt(i);
      if (c < DIGIT_0 || c > DIGIT_9) throw unexpected(text, i, 'expected digit');
      i = skipDigits(text, i + 1);
    }
  }
  return i;
}

function skipDigits(text: string, i: number): number {
  const len = text.length;
  while (i < len) {
    const c = text.charCodeAt(i);
    if (c < DIGIT_0 || c > DIGIT_9) break;
    i++;
  }
  return i;
}

function scanLiteral(text: string, i: number, literal: string): number {
  for (let k = 0; k < literal.length; k++) {
    if (i + k >= text.length) throw endOfInput(i + k);
    if (text.charCodeAt(i + k) !== literal.charCodeAt(k)) throw unexpected(text, i + k);
  }
  return i + literal.length;
}

/** Dotted path of member `key` inside the innermost object on `stack`. */
/** The segments of every frame's current child but the innermost frame's, which is at `key`. */
function pathTo(stack: readonly Frame[], key: string): string {
  const segments: Array<string | number> = [];
  for (let d = 0; d < stack.length - 1; d++) {
    const frame = stack[d] as Frame;
    segments.push(frame.isObject ? frame.key : frame.index);
  }
  segments.push(key);
  return fieldPath(segments);
}

/** Why JSON.parse would not keep this number literal (beyond the double range), or null. */
function unrepresentable(literal: string): string | null {
  const value = Number(literal);
  if (!Number.isFinite(value)) return 'is a number too large to represent (beyond ±1.8e308)';
  // Zero from a mantissa with a non-zero digit: the exponent took it below the smallest double.
  if (value === 0 && /[1-9]/.test(literal.split(/[eE]/)[0] as string)) return 'is a number too small to represent (it would become 0)';
  return null;
}

/** The position of the value being scanned: every frame contributes its current child ('' at the root). */
function pathToCurrent(stack: readonly Frame[]): string {
  return fieldPath(stack.map((frame) => (frame.isObject ? frame.key : frame.index)));
}

function tooDeep(stack: readonly Frame[]): ScanFailure {
  return new ScanFailure(pathToCurrent(stack), `nests objects and arrays more than ${MAX_JSON_DEPTH} levels deep`);
}

function invalid(description: string): ScanFailure {
  return new ScanFailure('', `is not valid JSON: ${description}`);
}

function endOfInput(i: number): ScanFailure {
  return invalid(`unexpected end of input at offset ${i}`);
}

function unexpected(text: string, i: number, expectation?: string): ScanFailure {
  const what = `unexpected character ${describeCode(text.charCodeAt(i))} at offset ${i}`;
  return invalid(expectation === undefined ? what : `${what} (${expectation})`);
}

function describeCode(c: number): string {
  if (c > 0x20 && c < 0x7f) return `'${String.fromCharCode(c)}'`;
  return `U+${c.toString(16).toUpperCase().padStart(4, '0')}`;
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max)}…`;
}
