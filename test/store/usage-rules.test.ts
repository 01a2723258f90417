/**
 * The usage rules that exist twice - once in TypeScript (server/domain) for the careful paths,
 * once in SQL (server/store/quotas/usage-writes.ts) for the one-round-trip paths - run side by
 * side on generated rows: MariaDB runs the guarded statement on a real application row and
 * queue row, the domain function decides the same case, and both must agree (granted or not,
 * and the row afterwards). The exact form the careful paths write is checked the same way.
 * Seeded, by case count; every case rolls back.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { rolledBack as rolledBackIn } from '../helpers/rolled-back.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { createTenant } from '../helpers/tenants.ts';
import { sql } from '../../server/store/database/sql.ts';
import type { Transaction } from '../../server/store/database/database.ts';
import { millisToSql, sqlToMillis } from '../../server/time.ts';
import { tryStart, windowAfterStarts, windowOfRow, type WindowState } from '../../server/domain/start-window.ts';
import { UnfinishedRoom } from '../../server/domain/admission.ts';
import { startWindowsGuardedStatements, unfinishedGuardedStatements, usageStatements } from '../../server/store/quotas/usage-writes.ts';

const SEED = 20261203;
let t: TestDatabase;
let applicationId: Buffer;
let queueId: Buffer;
let namespaceId: Buffer;

before(async () => {
  t = await freshDatabase('usage_rules');
  const tenant = await createTenant(t.db, { queues: ['q'] });
  applicationId = Buffer.from(tenant.applicationId, 'hex');
  const [row] = await t.db.rows<{ queue_id: Buffer; namespace_id: Buffer }>(
    sql`SELECT queue_id, namespace_id FROM orbit_queues WHERE application_id = ${applicationId}`,
  );
  queueId = (row as { queue_id: Buffer }).queue_id;
  namespaceId = (row as { namespace_id: Buffer }).namespace_id;
});
after(async () => {
  await assertCountersMatchRecount(t.db);
  await t.drop();
});

const rolledBack = <T>(fn: (tx: Transaction) => Promise<T>) => rolledBackIn(t.db, fn);

type Level = 'orbit_application_resources' | 'orbit_queues';
const keyOf = (level: Level) => (level === 'orbit_queues' ? sql`queue_id = ${queueId}` : sql`application_id = ${applicationId}`);

/** The guard error: the statement set a NOT NULL column to NULL. */
const isGuard = (error: unknown) => (error as { errno?: number }).errno === 1048;

// ---------------------------------------------------------------------------------------------

const windowCase = fc.record({
  nowMs: fc.integer({ min: Date.UTC(2024, 0, 1), max: Date.UTC(2036, 0, 1) }),
  rate: fc.integer({ min: 1, max: 8 }),
  // No window yet, or one that started up to 2.5 s ago (open or ended), edges included.
  startedAgoMs: fc.oneof(fc.constant(null), fc.integer({ min: 0, max: 2500 }), fc.constantFrom(0, 999, 1000, 1001)),
  starts: fc.integer({ min: 0, max: 10 }),
  n: fc.integer({ min: 1, max: 10 }),
  level: fc.constantFrom<Level>('orbit_application_resources', 'orbit_queues'),
});

/**
 * Both rows set up in lock order (the application row, then the queue row): the level under
 * test gets the window, the other one room to spare, so that only the level under test decides.
 * Both hold `n` pending starts (the reservations being started).
 */
async function setWindows(tx: Transaction, level: Level, window: WindowState, rate: number, n: number): Promise<void> {
  for (const row of ['orbit_application_resources', 'orbit_queues'] as const) {
    const w =
      row === level
        ? { rate, starts: window.starts, startedAt: window.startedAt === null ? null : millisToSql(window.startedAt) }
        : { rate: 1000, starts: 0, startedAt: null };
    await tx.exec(
      sql`UPDATE ${sql.raw(row)} SET rate_per_second = ${w.rate}, window_starts = ${w.starts}, window_started_at = ${w.startedAt}, pending_starts = ${n}, active_attempts = ${n}
        WHERE ${keyOf(row)}`,
    );
    // The namespace row (between the two in lock order) holds the same pending starts.
    if (row === 'orbit_application_resources')
      await tx.exec(sql`UPDATE orbit_namespace_resources SET pending_starts = ${n}, active_attempts = ${n} WHERE namespace_id = ${namespaceId}`);
  }
}

/** `n` starts granted one at a time by the domain rule: the window after them, or null when one is refused. */
function windowByDomain(window: WindowState, rate: number, n: number, nowMs: number): WindowState | null {
  let w = window;
  for (let i = 0; i < n; i++) {
    const decision = tryStart(w, rate, nowMs);
    if (!decision.granted) return null;
    w = decision.window;
  }
  return w;
}

test('the guarded start-window advance (one-round-trip Start) decides as domain/start-window.ts, on both levels', async () => {
  const cases = fc.sample(windowCase, { numRuns: 250, seed: SEED });
  let granted = 0;
  for (const c of cases) {
    const window: WindowState = { startedAt: c.startedAgoMs === null ? null : c.nowMs - c.startedAgoMs, starts: c.startedAgoMs === null ? 0 : c.starts };
    const expected = windowByDomain(window, c.rate, c.n, c.nowMs);
    const now = sql`CAST(${millisToSql(c.nowMs)} AS DATETIME(6))`;
    const actual = await rolledBack(async (tx) => {
      await setWindows(tx, c.level, window, c.rate, c.n);
      try {
        for (const statement of startWindowsGuardedStatements(applicationId, [{ queueId, namespaceId, count: c.n }], now)) await tx.exec(statement);
      } catch (error) {
        if (isGuard(error)) return null;
        throw error;
      }
      const [row] = await tx.rows<{ window_started_at: string | null; window_starts: number; pending_starts: string }>(
        sql`SELECT window_started_at, window_starts, pending_starts FROM ${sql.raw(c.level)} WHERE ${keyOf(c.level)}`,
      );
      const r = row as { window_started_at: string | null; window_starts: number; pending_starts: string };
      assert.equal(Number(r.pending_starts), 0, 'the pending starts are given back');
      return windowOfRow(r);
    });
    assert.deepEqual(actual, expected, JSON.stringify({ ...c, window }));
    if (expected !== null) granted++;
  }
  // The generated cases cover both answers, not only one.
  assert.ok(granted > 30 && granted < cases.length - 30, `granted ${granted} of ${cases.length}`);
});

test('the exact window write (claims, the careful Start) leaves the row as the guarded advance does', async () => {
  const cases = fc.sample(windowCase, { numRuns: 150, seed: SEED + 1 });
  for (const c of cases) {
    const window: WindowState = { startedAt: c.startedAgoMs === null ? null : c.nowMs - c.startedAgoMs, starts: c.startedAgoMs === null ? 0 : c.starts };
    const expected = windowByDomain(window, c.rate, c.n, c.nowMs);
    if (expected === null) continue; // the careful paths write only starts they granted
    assert.deepEqual(windowAfterStarts(window, c.n, c.nowMs), expected, 'windowAfterStarts is n granted starts');
    const written = await rolledBack(async (tx) => {
      await setWindows(tx, c.level, window, c.rate, c.n);
      const change = { pending: -c.n, window: windowAfterStarts(window, c.n, c.nowMs) };
      const statements =
        c.level === 'orbit_queues' ? usageStatements(applicationId, {}, [{ queueId, namespaceId, change }]) : usageStatements(applicationId, change, []);
      for (const statement of statements) await tx.exec(statement);
      const [row] = await tx.rows<{ window_started_at: string | null; window_starts: number; pending_starts: string }>(
        sql`SELECT window_started_at, window_starts, pending_starts FROM ${sql.raw(c.level)} WHERE ${keyOf(c.level)}`,
      );
      const r = row as { window_started_at: string | null; window_starts: number; pending_starts: string };
      return { window: windowOfRow(r), pending: Number(r.pending_starts) };
    });
    assert.deepEqual(written, { window: expected, pending: 0 }, JSON.stringify(c));
  }
});

// ---------------------------------------------------------------------------------------------

test('the guarded admission (one-round-trip submit) decides as domain/admission.ts: all n, application first, or nothing', async () => {
  const cases = fc.sample(
    // Room from -2 (usage above a lowered limit) to 10 at each level.
    fc
      .record({
        appMax: fc.integer({ min: 2, max: 12 }),
        appRoom: fc.integer({ min: -2, max: 10 }),
        queueMax: fc.integer({ min: 2, max: 12 }),
        queueRoom: fc.integer({ min: -2, max: 10 }),
        n: fc.integer({ min: 1, max: 6 }),
      })
      .map((c) => ({ ...c, appUsed: Math.max(0, c.appMax - c.appRoom), queueUsed: Math.max(0, c.queueMax - c.queueRoom) })),
    { numRuns: 250, seed: SEED + 2 },
  );
  let accepted = 0;
  for (const c of cases) {
    // The domain rule, one task at a time, as the careful path decides.
    const room = new UnfinishedRoom(
      { unfinished_tasks: c.appUsed, max_unfinished_tasks: c.appMax, idle_reserved_unfinished_tasks: 0 },
      [['n', { reserved_unfinished_tasks: 0, unfinished_tasks: 0 }]],
      [['q', { unfinished_tasks: c.queueUsed, max_unfinished_tasks: c.queueMax }, 'n']],
    );
    let fits = 0;
    while (fits < c.n && room.full('q') === null) {
      room.take('q');
      fits++;
    }
    const expected = fits === c.n ? { app: c.appUsed + c.n, queue: c.queueUsed + c.n } : null;
    const actual = await rolledBack(async (tx) => {
      await tx.exec(
        sql`UPDATE orbit_application_resources SET max_unfinished_tasks = ${c.appMax}, unfinished_tasks = ${c.appUsed} WHERE application_id = ${applicationId}`,
      );
      // The namespace row, between the two in lock order: no floor.
      await tx.exec(sql`UPDATE orbit_namespace_resources SET unfinished_tasks = 0 WHERE namespace_id = ${namespaceId}`);
      await tx.exec(sql`UPDATE orbit_queues SET max_unfinished_tasks = ${c.queueMax}, unfinished_tasks = ${c.queueUsed} WHERE queue_id = ${queueId}`);
      try {
        for (const statement of unfinishedGuardedStatements(applicationId, c.n, [{ queueId, namespaceId, count: c.n }])) await tx.exec(statement);
      } catch (error) {
        if (isGuard(error)) return null;
        throw error;
      }
      const [app] = await tx.rows<{ n: string }>(sql`SELECT unfinished_tasks AS n FROM orbit_application_resources WHERE application_id = ${applicationId}`);
      const [queue] = await tx.rows<{ n: string }>(sql`SELECT unfinished_tasks AS n FROM orbit_queues WHERE queue_id = ${queueId}`);
      return { app: Number(app?.n), queue: Number(queue?.n) };
    });
    assert.deepEqual(actual, expected, JSON.stringify(c));
    if (expected !== null) accepted++;
  }
  assert.ok(accepted > 30 && accepted < cases.length - 30, `accepted ${accepted} of ${cases.length}`);
});

test('sqlToMillis reads back the window start the exact form writes (milliseconds survive the round trip)', () => {
  for (const ms of [Date.UTC(2026, 11, 3, 12, 0, 0, 0), Date.UTC(2026, 11, 3, 12, 0, 0, 999)]) assert.equal(sqlToMillis(millisToSql(ms)), ms);
});
