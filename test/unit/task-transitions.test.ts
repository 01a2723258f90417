import { test } from 'node:test';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import {
  afterLostLease,
  afterResult,
  afterUnstartedReservation,
  resultStateWithoutFacts,
  retryBackoffMs,
  type AttemptOutcome,
  type TaskFacts,
} from '../../server/domain/task-transitions.ts';

const base: TaskFacts = { attempts: 1, maxAttempts: 3, onUnknownOutcome: 'retry', cancelRequested: false, deadlineMs: 100_000 };

test('results', () => {
  assert.deepEqual(afterResult(base, 'succeeded', false, 0), { state: 'SUCCEEDED' });
  assert.deepEqual(afterResult(base, 'cancelled', false, 0), { state: 'CANCELLED' });
  assert.deepEqual(afterResult(base, 'failed', false, 0), { state: 'FAILED' });
  assert.deepEqual(afterResult(base, 'failed', true, 50), { state: 'WAITING', availableAtMs: 1_050 });
  assert.deepEqual(afterResult({ ...base, attempts: 3 }, 'failed', true, 50), { state: 'FAILED' });
  assert.deepEqual(afterResult({ ...base, cancelRequested: true }, 'failed', true, 50), { state: 'FAILED' });
  assert.deepEqual(afterResult(base, 'failed', true, 100_000), { state: 'FAILED' });
});

test('a lost lease of a running attempt is an unknown outcome', () => {
  assert.deepEqual(afterLostLease(base, 10), { state: 'WAITING', availableAtMs: 1_010 });
  assert.deepEqual(afterLostLease({ ...base, onUnknownOutcome: 'review' }, 10), { state: 'NEEDS_REVIEW' });
  assert.deepEqual(afterLostLease({ ...base, cancelRequested: true }, 10), { state: 'NEEDS_REVIEW' });
  assert.deepEqual(afterLostLease({ ...base, attempts: 3 }, 10), { state: 'NEEDS_REVIEW' });
  assert.deepEqual(afterLostLease(base, 100_000), { state: 'EXPIRED' });
});

test('an unstarted reservation is not an attempt', () => {
  assert.deepEqual(afterUnstartedReservation(base, 10), { state: 'WAITING' });
  assert.deepEqual(afterUnstartedReservation(base, 100_000), { state: 'EXPIRED' });
});

test('backoff doubles and is capped', () => {
  assert.deepEqual([1, 2, 3, 4].map(retryBackoffMs), [1000, 2000, 4000, 8000]);
  assert.equal(retryBackoffMs(30), 300_000);
});

test('resultStateWithoutFacts: where it answers, afterResult answers the same for every task; it declines only retryable failures', () => {
  fc.assert(
    fc.property(
      fc.constantFrom<AttemptOutcome>('succeeded', 'failed', 'cancelled'),
      fc.boolean(),
      fc.record({
        attempts: fc.integer({ min: 1, max: 10 }),
        maxAttempts: fc.integer({ min: 1, max: 10 }),
        onUnknownOutcome: fc.constantFrom<'retry' | 'review'>('retry', 'review'),
        cancelRequested: fc.boolean(),
        deadlineMs: fc.integer({ min: 0, max: 2_000_000 }),
      }),
      fc.integer({ min: 0, max: 2_000_000 }),
      (outcome, retryable, facts, nowMs) => {
        const known = resultStateWithoutFacts(outcome, retryable);
        if (known === null) assert.ok(outcome === 'failed' && retryable);
        else assert.equal(afterResult(facts, outcome, retryable, nowMs).state, known);
      },
    ),
    { seed: 0x7a5c, numRuns: 2000 },
  );
});
