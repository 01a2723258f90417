import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

// The spec's Revision and Uint64 patterns encode 0 < n ≤ 2^64-1 as regular expressions; check them against BigInt.
const spec = parse(readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8')) as { components: { schemas: Record<string, { pattern: string }> } };
const revision = new RegExp(spec.components.schemas.Revision!.pattern, 'u');
const uint64 = new RegExp(spec.components.schemas.Uint64!.pattern, 'u');
const MAX = 2n ** 64n - 1n;

test('Revision and Uint64 patterns agree with BigInt bounds', () => {
  const samples = [
    '0',
    '1',
    '9',
    '10',
    '01',
    '-1',
    '1.0',
    '',
    ' 1',
    '18446744073709551615',
    '18446744073709551616',
    '18446744073709551614',
    '99999999999999999999',
    '100000000000000000000',
    '9999999999999999999',
    '10000000000000000000',
  ];
  let seed = 7;
  for (let i = 0; i < 3000; i++) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    const digits = 1 + (seed % 21);
    let text = '';
    for (let d = 0; d < digits; d++) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      text += String(seed % 10);
    }
    samples.push(text, (MAX - BigInt(seed)).toString(), (MAX + BigInt(seed % 1000)).toString());
  }
  for (const text of samples) {
    const canonical = /^(0|[1-9][0-9]*)$/.test(text);
    const value = canonical ? BigInt(text) : -1n;
    assert.equal(uint64.test(text), canonical && value <= MAX, `Uint64 ${text}`);
    assert.equal(revision.test(text), canonical && value >= 1n && value <= MAX, `Revision ${text}`);
  }
});
