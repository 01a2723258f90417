/**
 * Trigger points and the plan of one schedule round (server/domain/schedule-points.ts): cron in a
 * time zone across daylight-saving changes (croner's rules, time-travelled here), interval
 * arithmetic, and what each misfire policy does with overdue points.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { countWaiting, firstPoint, planRound, pointAfter, triggerProblem, type Step, type Trigger } from '../../server/domain/schedule-points.ts';

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
const at = (text: string) => Date.parse(text);
function points(trigger: Trigger, fromText: string, n: number): Array<string | null> {
  const out: Array<string | null> = [];
  let p: number | null = at(fromText);
  for (let i = 0; i < n && p !== null; i++) {
    p = pointAfter(trigger, p, 0);
    out.push(iso(p));
  }
  return out;
}

describe('cron trigger points in a time zone', () => {
  test('Europe/Berlin spring forward: 02:30 does not exist on 2026-03-29 and moves to the first instant after the gap (03:00 CEST)', () => {
    const trigger: Trigger = { kind: 'cron', expression: '30 2 * * *', timezone: 'Europe/Berlin' };
    assert.deepEqual(points(trigger, '2026-03-27T12:00:00Z', 3), [
      '2026-03-28T01:30:00.000Z', // 02:30 CET (UTC+1)
      '2026-03-29T01:00:00.000Z', // the gap: 03:00 CEST (UTC+2), once
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
  });

  test('Europe/Berlin fall back: 02:30 happens twice on 2026-10-25; a fixed-hour schedule fires once, at the first', () => {
    const trigger: Trigger = { kind: 'cron', expression: '30 2 * * *', timezone: 'Europe/Berlin' };
    assert.deepEqual(points(trigger, '2026-10-23T12:00:00Z', 3), [
      '2026-10-24T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T00:30:00.000Z', // 02:30 CEST, the first of the two
      '2026-10-26T01:30:00.000Z', // 02:30 CET
    ]);
  });

  test('Europe/Berlin fall back: a wildcard-hour schedule fires in both 02:xx hours', () => {
    const trigger: Trigger = { kind: 'cron', expression: '*/30 * * * *', timezone: 'Europe/Berlin' };
    assert.deepEqual(points(trigger, '2026-10-24T23:50:00Z', 6), [
      '2026-10-25T00:00:00.000Z', // 02:00 CEST
      '2026-10-25T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T01:00:00.000Z', // 02:00 CET
      '2026-10-25T01:30:00.000Z', // 02:30 CET
      '2026-10-25T02:00:00.000Z', // 03:00 CET
      '2026-10-25T02:30:00.000Z',
    ]);
  });

  test('America/New_York: 02:30 is skipped on 2026-03-08 (moves to 03:00 EDT); 01:30 repeats on 2026-11-01 and fires once', () => {
    const springs: Trigger = { kind: 'cron', expression: '30 2 * * *', timezone: 'America/New_York' };
    assert.deepEqual(points(springs, '2026-03-07T12:00:00Z', 2), ['2026-03-08T07:00:00.000Z', '2026-03-09T06:30:00.000Z']);
    const falls: Trigger = { kind: 'cron', expression: '30 1 * * *', timezone: 'America/New_York' };
    assert.deepEqual(points(falls, '2026-10-31T12:00:00Z', 2), ['2026-11-01T05:30:00.000Z', '2026-11-02T06:30:00.000Z']);
  });

  test('six fields: a leading seconds field', () => {
    const trigger: Trigger = { kind: 'cron', expression: '*/20 * * * * *', timezone: 'UTC' };
    assert.deepEqual(points(trigger, '2026-01-01T00:00:00Z', 3), ['2026-01-01T00:00:20.000Z', '2026-01-01T00:00:40.000Z', '2026-01-01T00:01:00.000Z']);
  });

  test('bad definitions name their field', () => {
    assert.equal(triggerProblem({ kind: 'cron', expression: '61 * * * *', timezone: 'UTC' })?.field, 'cron');
    assert.equal(triggerProblem({ kind: 'cron', expression: '* * * *', timezone: 'UTC' })?.field, 'cron');
    assert.equal(triggerProblem({ kind: 'cron', expression: '* * * * * * *', timezone: 'UTC' })?.field, 'cron');
    assert.equal(triggerProblem({ kind: 'cron', expression: '@daily', timezone: 'UTC' })?.field, 'cron');
    assert.equal(triggerProblem({ kind: 'cron', expression: '* * * * *', timezone: 'Mars/Olympus' })?.field, 'timezone');
    assert.equal(triggerProblem({ kind: 'cron', expression: '0 9 * * 1-5', timezone: 'Asia/Shanghai' }), null);
  });
});

describe('interval trigger points', () => {
  test('the first point: start_at when not in the past, else one interval after creation; then whole intervals', () => {
    const created = at('2026-12-01T10:00:00.250Z');
    const interval: Trigger = { kind: 'interval', seconds: 60 };
    assert.equal(iso(firstPoint(interval, created, null).firstMs), '2026-12-01T10:01:00.250Z');
    assert.equal(iso(firstPoint(interval, created, at('2026-12-02T00:00:00Z')).firstMs), '2026-12-02T00:00:00.000Z');
    assert.equal(iso(firstPoint(interval, created, at('2026-11-01T00:00:00Z')).firstMs), '2026-12-01T10:01:00.250Z');
    const { anchorMs } = firstPoint(interval, created, null);
    assert.equal(iso(pointAfter(interval, anchorMs, anchorMs)), '2026-12-01T10:02:00.250Z');
    assert.equal(iso(pointAfter(interval, anchorMs + 1, anchorMs)), '2026-12-01T10:02:00.250Z');
    const cron: Trigger = { kind: 'cron', expression: '0 * * * *', timezone: 'UTC' };
    assert.equal(iso(firstPoint(cron, created, null).firstMs), '2026-12-01T11:00:00.000Z');
    assert.equal(iso(firstPoint(cron, created, at('2026-12-01T12:00:00Z')).firstMs), '2026-12-01T12:00:00.000Z');
  });
});

/** Applies a plan with room for `room` fires, as the store does: the steps before the first refusal stand. */
function apply(steps: Step[], room: number) {
  let fired: number[] = [];
  let skipped = 0;
  let head: number | null | undefined;
  let refusedAt: number | null = null;
  for (const step of steps) {
    if (step.kind === 'skip') {
      skipped += step.count;
      head = step.nextHead;
      continue;
    }
    if (fired.length >= room) {
      refusedAt = step.at;
      break;
    }
    fired = [...fired, step.at];
    head = step.nextHead;
  }
  return { fired, skipped, head, refusedAt };
}

describe('one round of a schedule', () => {
  const second: Trigger = { kind: 'interval', seconds: 1 };
  const t0 = at('2026-12-01T00:00:00Z');
  const base = { trigger: second, anchorMs: t0, windowMs: 5_000, headMs: t0, maxPoints: 1000, maxFires: 100 };

  test('points within the window all fire, in order, whatever the policy', () => {
    for (const policy of ['skip', 'fire_once', 'fire_all'] as const) {
      const result = apply(planRound({ ...base, policy, nowMs: t0 + 3_500 }), 100);
      assert.deepEqual(
        result.fired.map((p) => p - t0),
        [0, 1000, 2000, 3000],
        policy,
      );
      assert.equal(result.skipped, 0);
      assert.equal(result.head, t0 + 4000);
    }
  });

  test('overdue points (older than the window): skip drops them, fire_once fires the latest, fire_all fires each', () => {
    const nowMs = t0 + 9_500; // points 0..9 are due; 0..4 are older than 5 s
    const skip = apply(planRound({ ...base, policy: 'skip', nowMs }), 100);
    assert.deepEqual([skip.skipped, skip.fired.map((p) => (p - t0) / 1000)], [5, [5, 6, 7, 8, 9]]);
    const once = apply(planRound({ ...base, policy: 'fire_once', nowMs }), 100);
    assert.deepEqual([once.skipped, once.fired.map((p) => (p - t0) / 1000)], [4, [4, 5, 6, 7, 8, 9]]);
    const all = apply(planRound({ ...base, policy: 'fire_all', nowMs }), 100);
    assert.deepEqual([all.skipped, all.fired.map((p) => (p - t0) / 1000)], [0, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]);
  });

  test('a refusal keeps the refused point as the head; nothing after it is skipped or fired', () => {
    const result = apply(planRound({ ...base, policy: 'skip', nowMs: t0 + 3_500 }), 2);
    assert.deepEqual(
      result.fired.map((p) => p - t0),
      [0, 1000],
    );
    assert.equal(result.refusedAt, t0 + 2000);
    assert.equal(result.head, t0 + 2000);
  });

  test('the deferred count: each waiting due point is counted once across rounds', () => {
    const first = countWaiting(second, t0, t0 + 2000, t0 + 4_500, null, 1000);
    assert.deepEqual([first.count, first.through], [3, t0 + 4000]);
    const again = countWaiting(second, t0, t0 + 2000, t0 + 6_200, first.through, 1000);
    assert.deepEqual([again.count, again.through], [2, t0 + 6000]);
    const nothingNew = countWaiting(second, t0, t0 + 2000, t0 + 6_900, again.through, 1000);
    assert.equal(nothingNew.count, 0);
  });

  test('property: for any schedule state, every due point is fired or skipped exactly once, in order, over enough rounds', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('skip', 'fire_once', 'fire_all' as const),
        fc.integer({ min: 1, max: 7 }),
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 0, max: 200 }),
        fc.integer({ min: 1, max: 30 }),
        (policy, seconds, windowSeconds, overdueSeconds, maxPoints) => {
          const trigger: Trigger = { kind: 'interval', seconds };
          const nowMs = t0 + overdueSeconds * 1000;
          let head: number | null = t0;
          const seen: number[] = [];
          let skipped = 0;
          for (let round = 0; round < 1000 && head !== null && head <= nowMs; round++) {
            const steps = planRound({ trigger, anchorMs: t0, policy, windowMs: windowSeconds * 1000, nowMs, headMs: head, maxPoints, maxFires: 100 });
            const r = apply(steps, Infinity);
            seen.push(...r.fired);
            skipped += r.skipped;
            if (r.head !== undefined) head = r.head;
          }
          const due = Math.floor(overdueSeconds / seconds) + 1;
          assert.equal(seen.length + skipped, due, 'every due point is fired or skipped once');
          assert.deepEqual(
            seen,
            [...seen].sort((a, b) => a - b),
          );
          assert.equal(new Set(seen).size, seen.length);
          const cutoff = nowMs - windowSeconds * 1000;
          const recent = seen.filter((p) => p >= cutoff).length;
          assert.equal(
            recent,
            Array.from({ length: due }, (_, k) => t0 + k * seconds * 1000).filter((p) => p >= cutoff).length,
            'points within the window all fire',
          );
          if (policy === 'fire_all') assert.equal(skipped, 0);
          if (policy === 'skip') assert.equal(seen.length, recent);
          if (policy === 'fire_once') assert.ok(seen.length - recent <= Math.max(1, Math.ceil(due / maxPoints)), 'overdue points fire at most once per run');
        },
      ),
      { numRuns: 300, seed: 20261201 },
    );
  });
});
