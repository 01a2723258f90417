import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FastPathGate } from '../../server/domain/fast-path-gate.ts';

test('the fast path is tried while it hits; after a miss the next attempts go careful, then it is tried again', () => {
  const gate = new FastPathGate(3);
  assert.ok(gate.shouldTry('app'));
  gate.record('app', true);
  assert.ok(gate.shouldTry('app'));
  gate.record('app', false);
  assert.deepEqual([gate.shouldTry('app'), gate.shouldTry('app'), gate.shouldTry('app'), gate.shouldTry('app')], [false, false, false, true]);
  assert.ok(gate.shouldTry('other'), 'keys are independent');
  gate.record('app', false);
  assert.equal(gate.shouldTry('app'), false);
  gate.record('app', true);
  assert.ok(gate.shouldTry('app'), 'a hit (from a probe) clears the backoff');
});
