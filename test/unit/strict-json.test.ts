import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_JSON_DEPTH, parseStrictJson } from '../../server/input/strict-json.ts';

function expectOk(text: string): unknown {
  const result = parseStrictJson(text);
  assert.equal(result.ok, true, `expected ok for ${JSON.stringify(text)}: ${JSON.stringify(result)}`);
  assert.ok(result.ok);
  assert.deepStrictEqual(result.value, JSON.parse(text));
  return result.value;
}

function expectDuplicate(text: string, field: string, key: string): void {
  assert.deepStrictEqual(parseStrictJson(text), {
    ok: false,
    field,
    reason: `duplicate key ${JSON.stringify(key)}`,
  });
}

function expectInvalid(text: string): string {
  assert.throws(() => JSON.parse(text), SyntaxError, `JSON.parse should reject ${JSON.stringify(text)}`);
  const result = parseStrictJson(text);
  assert.equal(result.ok, false, `expected failure for ${JSON.stringify(text)}`);
  assert.ok(!result.ok);
  assert.equal(result.field, 'body');
  assert.match(result.reason, /^is not valid JSON: .* at offset \d+/);
  return result.reason;
}

test('valid documents of all shapes equal JSON.parse', () => {
  const docs = [
    '{}',
    '[]',
    '0',
    '-0',
    '1',
    '-12.5e+3',
    '1E-2',
    '0.000001',
    '123456789012345678901234567890',
    'true',
    'false',
    'null',
    '""',
    '"hello"',
    '"esc \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00"',
    '"lone \\ud800 surrogate"',
    '"raw \u2028 \u2029 é 😀"',
    ' \t\r\n{ "a" : [ 1 , 2 , { "b" : null } ] , "c" : { } } \n',
    '[[[[[]]]]]',
    '[{},{},[]]',
    '{"a":{"b":{"c":{"d":[1,[2,[3]]]}}}}',
    '{"":1,"x":""}',
    '{"a.b":1,"c[0]":2}',
    '{"constructor":1,"toString":2,"hasOwnProperty":3}',
    `"${'x'.repeat(15)}"`,
    `"${'x'.repeat(16)}"`,
    `"${'x'.repeat(17)}"`,
    `"${'long run '.repeat(20)}\\n${'é'.repeat(40)}\\u0041${'x'.repeat(33)}"`,
    `{"${'k'.repeat(50)}":1,"${'k'.repeat(48)}\\u006b":2}`, // 50 vs 49 k's: distinct
  ];
  for (const text of docs) expectOk(text);
});

test('__proto__ key is kept exactly as JSON.parse keeps it', () => {
  const value = expectOk('{"__proto__":1,"a":{"__proto__":{"x":2}}}') as Record<string, unknown>;
  assert.ok(Object.hasOwn(value, '__proto__'));
  assert.equal(Object.getOwnPropertyDescriptor(value, '__proto__')?.value, 1);
  assert.equal(Object.getPrototypeOf(value), Object.prototype);
  expectDuplicate('{"__proto__":1,"__proto__":2}', '__proto__', '__proto__');
  expectDuplicate('{"constructor":1,"constructor":2}', 'constructor', 'constructor');
});

test('duplicate key at top level', () => {
  expectDuplicate('{"reason":"a","reason":"b"}', 'reason', 'reason');
  expectDuplicate('{"a":1,"b":2,"a":3}', 'a', 'a');
  expectDuplicate('{"":1,"":2}', 'body[""]', '');
});

test('duplicate key nested in objects', () => {
  expectDuplicate('{"payload":{"a":{"b":1,"b":2}}}', 'payload.a.b', 'b');
  expectDuplicate('{"x":1,"payload":{"y":{},"a":{"c":[],"b":{},"b":[]}}}', 'payload.a.b', 'b');
});

test('duplicate key inside arrays', () => {
  expectDuplicate('{"payload":{"items":[{},{"x":1},{"x":1,"x":2}]}}', 'payload.items[2].x', 'x');
  expectDuplicate('[{"a":1,"a":1}]', 'body[0].a', 'a');
  expectDuplicate('[1,[2,{"k":[0,0,{"z":0,"z":0}]}]]', 'body[1][1].k[2].z', 'z');
});

test('escaped keys are compared after unescaping', () => {
  expectDuplicate('{"a":1,"\\u0061":2}', 'a', 'a');
  expectDuplicate('{"\\u0061":1,"a":2}', 'a', 'a');
  expectDuplicate('{"q\\"":1,"q\\u0022":2}', 'body["q\\""]', 'q"');
  expectDuplicate('{"p":{"\\n":1,"\\u000a":2}}', 'p["\\n"]', '\n');
  expectDuplicate('{"\\ud83d\\ude00":1,"😀":2}', 'body["😀"]', '😀');
  const long = 'k'.repeat(60);
  expectDuplicate(`{"${long}":1,"${long.slice(1)}\\u006b":2}`, long, long);
  expectOk('{"a":1,"\\u0041":2,"\\\\u0061":3}');
});

test('a key containing dots or brackets is quoted in the path, so the path stays unambiguous', () => {
  expectDuplicate('{"a.b":{"c[1]":1,"c[1]":2}}', 'body["a.b"]["c[1]"]', 'c[1]');
  expectDuplicate('{"payload":{"a.b":{"c":1,"c":2}}}', 'payload["a.b"].c', 'c');
});

test('same key in sibling objects is not a duplicate', () => {
  expectOk('{"a":{"x":1},"b":{"x":2}}');
  expectOk('[{"x":1},{"x":2},{"x":3}]');
  expectOk('{"x":{"x":{"x":1}}}');
  expectOk('{"items":[{"id":1,"tags":[{"k":"a"},{"k":"b"}]},{"id":2,"tags":[{"k":"a"}]}]}');
});

test('invalid JSON is reported on field "body" with an offset', () => {
  const cases = [
    '',
    '   ',
    '{',
    '[',
    '{"a":1,}',
    '[1,]',
    '[,1]',
    '{,}',
    '{"a" 1}',
    '{"a":}',
    '{"a"}',
    '{a:1}',
    'NaN',
    'Infinity',
    '-Infinity',
    'undefined',
    "'single'",
    "{'a':1}",
    '{} x',
    '[] []',
    '1 2',
    '"\u0001"',
    '"tab\there"',
    '"new\nline"',
    '{"a\u0000":1}',
    '"unterminated',
    '"bad \\x escape"',
    '"bad \\u12G4"',
    '"short \\u12"',
    '"\\',
    '01',
    '-',
    '-a',
    '1.',
    '.5',
    '1.e5',
    '1e',
    '1e+',
    '+1',
    '0x10',
    'tru',
    'nul',
    'True',
    '\uFEFF{}',
    '{"a":1}}',
    '[1]]',
    '{"a":[1}',
    '[{"a":1]',
    '\u00a0{}',
    `"${'x'.repeat(40)}\u0007${'y'.repeat(40)}"`,
    `"${'x'.repeat(40)}`,
    `"${'x'.repeat(40)}\\`,
    `"${'x'.repeat(40)}\\q"`,
    `["${'x'.repeat(16)}`,
  ];
  for (const text of cases) expectInvalid(text);
});

test('invalid JSON descriptions are short and precise', () => {
  assert.equal(expectInvalid(''), 'is not valid JSON: unexpected end of input at offset 0');
  assert.equal(expectInvalid('{} x'), "is not valid JSON: unexpected character 'x' at offset 3 (expected end of input)");
  assert.equal(expectInvalid('{"a":1,}'), "is not valid JSON: unexpected character '}' at offset 7 (expected property name)");
  assert.equal(expectInvalid('"a\nb"'), 'is not valid JSON: control character U+000A in string at offset 2');
  // The description never echoes large parts of the body.
  const big = `{"a":"${'x'.repeat(10_000)}"} trailing`;
  assert.ok(expectInvalid(big).length < 120);
});

test('a syntax error takes precedence over duplicates; the first duplicate is reported', () => {
  expectInvalid('{"a":1,"a":2,}');
  expectInvalid('{"a":1,"a":2} x');
  expectInvalid('{"a":1,, "a":2}');
  expectDuplicate('{"x":{"a":1,"a":2},"y":{"b":1,"b":2},"x":3}', 'x.a', 'a');
});

test('a 256 KiB payload parses correctly', () => {
  const items: unknown[] = [];
  let i = 0;
  let text = '';
  while (text.length < 256 * 1024) {
    for (let k = 0; k < 100; k++, i++) {
      items.push({
        id: i,
        name: `item-${i} \u00e9 "quoted" \\ back`,
        score: i * 1.5 - 1000,
        tags: ['a', 'b', `t${i % 7}`],
        nested: { ok: i % 2 === 0, none: null, deep: { level: [i, { x: i }] } },
      });
    }
    text = JSON.stringify({ payload: { items } });
  }
  assert.ok(text.length >= 256 * 1024);
  const value = expectOk(text);
  assert.deepStrictEqual(value, { payload: { items } });

  // A duplicate injected near the end of the big payload is found with its path.
  const last = items.length - 1;
  const injected = text.replace(`{"id":${last},`, `{"id":${last},"id":0,`);
  expectDuplicate(injected, `payload.items[${last}].id`, 'id');
});

test('nesting up to MAX_JSON_DEPTH is accepted, one level more is refused naming where', () => {
  const ok = '['.repeat(MAX_JSON_DEPTH) + ']'.repeat(MAX_JSON_DEPTH);
  assert.equal(parseStrictJson(ok).ok, true);
  const over = '['.repeat(MAX_JSON_DEPTH + 1) + ']'.repeat(MAX_JSON_DEPTH + 1);
  const result = parseStrictJson(over);
  assert.equal(result.ok, false);
  if (!result.ok) {
    assert.equal(result.field, `body${'[0]'.repeat(MAX_JSON_DEPTH)}`);
    assert.match(result.reason, /more than 64 levels deep/);
  }
  const objects = `{"payload":${'{"a":'.repeat(MAX_JSON_DEPTH)}1${'}'.repeat(MAX_JSON_DEPTH)}}`;
  const refused = parseStrictJson(objects);
  assert.equal(refused.ok, false);
  if (!refused.ok) assert.equal(refused.field, `payload${'.a'.repeat(MAX_JSON_DEPTH - 1)}`);
});

test('a document 50,000 levels deep is refused without overflowing the stack', () => {
  const depth = 50_000;
  for (const text of ['['.repeat(depth) + ']'.repeat(depth), '{"a":'.repeat(depth) + '1' + '}'.repeat(depth), '['.repeat(depth)]) {
    const result = parseStrictJson(text);
    assert.equal(result.ok, false);
    if (!result.ok) assert.match(result.reason, /levels deep/);
  }
});

// ---------------------------------------------------------------------------
// Property-based style checks with a deterministic PRNG.

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const KEY_POOL = ['a', 'b', 'id', '', '__proto__', 'constructor', 'a.b', 'x[0]', 'é', '😀', '"', '\\', '\n', '\u0000'];

function randomString(rnd: () => number): string {
  const len = Math.floor(rnd() * 12);
  let s = '';
  for (let i = 0; i < len; i++) {
    const r = rnd();
    if (r < 0.6) s += String.fromCharCode(0x20 + Math.floor(rnd() * 95));
    else if (r < 0.7) s += String.fromCharCode(Math.floor(rnd() * 0x20));
    else if (r < 0.8) s += String.fromCharCode(0x80 + Math.floor(rnd() * 0x780));
    else if (r < 0.9)
      s += String.fromCharCode(0xd800 + Math.floor(rnd() * 0x800)); // lone surrogates
    else s += '"\\/\u2028';
  }
  return s;
}

function randomNumber(rnd: () => number): number {
  const r = rnd();
  if (r < 0.3) return Math.floor(rnd() * 1000) - 500;
  if (r < 0.6) return (rnd() - 0.5) * 1e6;
  if (r < 0.8) return (rnd() - 0.5) * 10 ** Math.floor(rnd() * 600 - 300);
  return [0, -0, 1e21, 5e-324, Number.MAX_SAFE_INTEGER, 1.7976931348623157e308][Math.floor(rnd() * 6)] ?? 0;
}

function randomValue(rnd: () => number, depth: number): unknown {
  const r = rnd();
  if (depth <= 0 || r < 0.45) {
    const s = rnd();
    if (s < 0.1) return null;
    if (s < 0.25) return rnd() < 0.5;
    if (s < 0.6) return randomNumber(rnd);
    return randomString(rnd);
  }
  if (r < 0.7) {
    const n = Math.floor(rnd() * 6);
    const arr: unknown[] = [];
    for (let i = 0; i < n; i++) arr.push(randomValue(rnd, depth - 1));
    return arr;
  }
  // Object built with defineProperty so that "__proto__" becomes an own key.
  const obj: Record<string, unknown> = {};
  const n = Math.floor(rnd() * 6);
  for (let i = 0; i < n; i++) {
    const key = rnd() < 0.6 ? (KEY_POOL[Math.floor(rnd() * KEY_POOL.length)] ?? 'k') : randomString(rnd);
    Object.defineProperty(obj, key, {
      value: randomValue(rnd, depth - 1),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return obj;
}

function randomWhitespace(rnd: () => number): string {
  return rnd() < 0.7 ? '' : ([' ', '\t', '\n', '\r\n  '][Math.floor(rnd() * 4)] ?? '');
}

test('2,000 random JSON documents parse exactly like JSON.parse', () => {
  const rnd = mulberry32(0x0b17);
  for (let n = 0; n < 2000; n++) {
    const value = randomValue(rnd, 5);
    const indent = rnd() < 0.3 ? 2 : undefined;
    const text = randomWhitespace(rnd) + JSON.stringify(value, null, indent) + randomWhitespace(rnd);
    const result = parseStrictJson(text);
    if (!result.ok) assert.fail(`document #${n} rejected: ${JSON.stringify(result)} for ${text}`);
    assert.deepStrictEqual(result.value, JSON.parse(text), `document #${n}`);
  }
});

test('random mutations: rejected exactly when JSON.parse rejects (or on duplicates)', () => {
  const rnd = mulberry32(42);
  const alphabet = '{}[],:"\\ 0123456789-+.eE tfnrulas\u0001\n';
  let invalidSeen = 0;
  for (let n = 0; n < 2000; n++) {
    const base = JSON.stringify(randomValue(rnd, 4));
    const chars = [...base];
    const edits = 1 + Math.floor(rnd() * 3);
    for (let e = 0; e < edits; e++) {
      const at = Math.floor(rnd() * (chars.length + 1));
      const ch = alphabet[Math.floor(rnd() * alphabet.length)] ?? ' ';
      const op = rnd();
      if (op < 0.33) chars.splice(at, 1);
      else if (op < 0.66) chars.splice(at, 0, ch);
      else chars.splice(at, 1, ch);
    }
    const text = chars.join('');
    let expected: unknown;
    let parses = true;
    try {
      expected = JSON.parse(text);
    } catch {
      parses = false;
    }
    const result = parseStrictJson(text);
    if (!parses) {
      invalidSeen++;
      assert.equal(result.ok, false, `mutation #${n} should be rejected: ${text}`);
      assert.ok(!result.ok);
      assert.equal(result.field, 'body', `mutation #${n}: ${text}`);
    } else if (result.ok) {
      assert.deepStrictEqual(result.value, expected, `mutation #${n}`);
    } else {
      // JSON.parse accepts it: refused only for a duplicate key or a number it would change (1e999 → Infinity, 1e-999 → 0).
      if (!/^duplicate key /.test(result.reason)) assert.match(result.reason, /^is a number too (large|small) to represent/, `mutation #${n}: ${text}`);
    }
  }
  assert.ok(invalidSeen > 500);
});

test('documents with an injected duplicate are always rejected with the right path', () => {
  const rnd = mulberry32(7);
  for (let n = 0; n < 500; n++) {
    // Build { "root": [ ...random..., { "k": 1, <random members>, "k"|"\u006b": 2 } ] }
    const filler = randomValue(rnd, 3);
    const members = Math.floor(rnd() * 4);
    let inner = '"k":1';
    for (let m = 0; m < members; m++) inner += `,"m${m}":${JSON.stringify(randomValue(rnd, 2))}`;
    inner += rnd() < 0.5 ? ',"k":2' : ',"\\u006b":2';
    const text = `{"root":[${JSON.stringify(filler)},{${inner}}]}`;
    expectDuplicate(text, 'root[1].k', 'k');
  }
});

test('keys that are not plain names are quoted in the field path, so it is never empty', () => {
  expectDuplicate('{"":1,"":2}', 'body[""]', '');
  expectDuplicate('{"payload":{"a b":{"x":1,"x":2}}}', 'payload["a b"].x', 'x');
  expectDuplicate('{"payload":{"数据":[{"k":1,"k":2}]}}', 'payload["数据"][0].k', 'k');
  const frame = parseStrictJson('[{"a":1,"a":2}]', { root: 'frame' });
  assert.deepEqual(frame, { ok: false, field: 'frame[0].a', reason: 'duplicate key "a"' });
});

test('numbers beyond the double range are refused, not turned into null', () => {
  for (const literal of ['1e400', '-1e400', '1' + '0'.repeat(400)]) {
    const result = parseStrictJson(`{"payload":{"n":[${literal}]}}`);
    assert.equal(result.ok, false, literal);
    if (!result.ok) {
      assert.equal(result.field, 'payload.n[0]');
      assert.match(result.reason, /too large/);
    }
  }
  const tiny = parseStrictJson('{"payload":{"m":5e-400}}');
  assert.deepEqual(tiny, { ok: false, field: 'payload.m', reason: 'is a number too small to represent (it would become 0)' });
  assert.deepEqual(parseStrictJson('{"n":1.7976931348623157e308,"z":0.000e-999,"m":-0,"d":5e-324}'), {
    ok: true,
    value: { n: 1.7976931348623157e308, z: 0, m: -0, d: 5e-324 },
  });
});
