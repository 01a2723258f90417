import { test } from 'node:test';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import {
  FINISHED_TASK_STATES,
  OPERATOR_RETRYABLE_STATES,
  UNFINISHED_TASK_STATES,
  afterOperatorRetry,
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

test("unfinished and finished states split openapi.yaml's TaskState enum exactly; a retry leaves only from finished ones", () => {
  const spec = parse(readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8')) as { components: { schemas: { TaskState: { enum: string[] } } } };
  const unfinished = new Set<string>(UNFINISHED_TASK_STATES);
  const finished = new Set<string>(FINISHED_TASK_STATES);
  assert.deepEqual(
    [...unfinished].filter((s) => finished.has(s)),
    [],
    'disjoint',
  );
  assert.deepEqual([...unfinished, ...finished].sort(), [...spec.components.schemas.TaskState.enum].sort());
  for (const state of OPERATOR_RETRYABLE_STATES) assert.ok(finished.has(state), state);
});

test('a retry keeps the deadline length it was submitted with, whenever and however often it comes', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 31_536_000 }),
      fc.option(fc.integer({ min: 1, max: 31_536_000 }), { nil: null }),
      fc.integer({ min: 0, max: 10 ** 12 }),
      fc.integer({ min: 0, max: 10 ** 11 }),
      fc.integer({ min: 0, max: 200 }),
      (submitted, kept, createdAtMs, later, attempts) => {
        const nowMs = createdAtMs + later;
        const next = afterOperatorRetry({ attempts, maxAttempts: 3, deadlineSeconds: kept, createdAtMs, deadlineAtMs: createdAtMs + submitted * 1000 }, nowMs);
        const length = kept ?? submitted;
        assert.equal(next.deadlineSeconds, length);
        assert.equal(next.deadlineAtMs, nowMs + length * 1000);
        assert.equal(next.availableAtMs, nowMs);
        assert.equal(next.maxAttempts, Math.max(3, attempts + 1));
      },
    ),
    { numRuns: 200, seed: 20261203 },
  );
});
