/**
 * The floors' figures on the application row are kept in SQL (server/store/quotas/usage-writes.ts:
 * the namespace level of every usage change, and `reservationStatements` for configure), and
 * decided on in TypeScript (server/domain/floors.ts). Here MariaDB runs the writers on real rows
 * of an application with three namespaces, over generated sequences of reservation changes,
 * counter changes and starts, and after every step the application row must hold what the
 * domain's definitions make of the namespace rows: the sums of the reservations,
 * Σ max(0, reserved - usage) for unfinished tasks and active attempts, Σ min(starts in the
 * application's window, reserved rate). The guarded admission with floors never admits what
 * the domain rule refuses. Seeded, by case count; every case rolls back.
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
import { millisToSql } from '../../server/time.ts';
import { fitsBesideAllFloors, idleOf, roomFor } from '../../server/domain/floors.ts';
import { startFloorLedger, windowAfterStarts, windowOfRow } from '../../server/domain/start-window.ts';
import {
  reservationStatements,
  startWindowsGuardedStatements,
  unfinishedGuardedStatements,
  usageStatements,
  type Reservations,
} from '../../server/store/quotas/usage-writes.ts';
import type { NamespaceUsageRow } from '../../server/store/quotas/namespace-resources.ts';

const SEED = 20261204;
let t: TestDatabase;
let applicationId: Buffer;
const NAMES = ['a', 'b', 'c'] as const;
const owners: Array<{ namespaceId: Buffer; queueId: Buffer }> = [];

before(async () => {
  t = await freshDatabase('floors_rules');
  const first = await createTenant(t.db, { namespace: 'a', queues: ['qa'] });
  await createTenant(t.db, { applicationId: first.applicationId, namespace: 'b', queues: ['qb'] });
  await createTenant(t.db, { applicationId: first.applicationId, namespace: 'c', queues: ['qc'] });
  applicationId = Buffer.from(first.applicationId, 'hex');
  const rows = await t.db.rows<{ queue_id: Buffer; namespace_id: Buffer }>(
    sql`SELECT q.queue_id, q.namespace_id FROM orbit_queues q JOIN orbit_namespaces n ON n.namespace_id = q.namespace_id
         WHERE q.application_id = ${applicationId} ORDER BY n.name`,
  );
  for (const r of rows) owners.push({ namespaceId: r.namespace_id, queueId: r.queue_id });
});
after(async () => {
  await assertCountersMatchRecount(t.db);
  await t.drop();
});

const rolledBack = <T>(fn: (tx: Transaction) => Promise<T>) => rolledBackIn(t.db, fn);

type NamespaceRow = NamespaceUsageRow;

/** The rows; `lock` at a case's start (in lock order), plain reads of the rows it holds after that. */
async function rows(tx: Transaction, lock = false) {
  const forUpdate = (level: string) => (lock ? sql.raw(`FOR UPDATE /* lock: ${level} */`) : sql``);
  const [app] = await tx.rows<Record<string, string | null> & { window_started_at: string | null }>(
    sql`SELECT window_started_at, reserved_unfinished_tasks, reserved_concurrency, reserved_rate_per_second,
               idle_reserved_unfinished_tasks, idle_reserved_concurrency, window_reserved_starts
          FROM orbit_application_resources WHERE application_id = ${applicationId} ${forUpdate('application')}`,
  );
  const namespaces = await tx.rows<NamespaceRow>(
    sql`SELECT namespace_id, reserved_unfinished_tasks, reserved_concurrency, reserved_rate_per_second, unfinished_tasks, active_attempts,
               pending_starts, window_started_at, window_starts
          FROM orbit_namespace_resources WHERE application_id = ${applicationId} ORDER BY namespace_id ${forUpdate('namespace')}`,
  );
  return { app: app as Record<string, string | null> & { window_started_at: string | null }, namespaces };
}

/** What the domain's definitions make of the namespace rows. */
function expectedFigures(appWindow: string | null, namespaces: NamespaceRow[]) {
  const b = (n: string | number) => BigInt(n);
  const sum = (f: (n: NamespaceRow) => bigint) => namespaces.reduce((acc, n) => acc + f(n), 0n).toString();
  const min = (x: bigint, y: bigint) => (x < y ? x : y);
  return {
    reserved_unfinished_tasks: sum((n) => b(n.reserved_unfinished_tasks)),
    reserved_concurrency: sum((n) => b(n.reserved_concurrency)),
    reserved_rate_per_second: sum((n) => b(n.reserved_rate_per_second)),
    idle_reserved_unfinished_tasks: sum((n) => idleOf({ reserved: b(n.reserved_unfinished_tasks), usage: b(n.unfinished_tasks) })),
    idle_reserved_concurrency: sum((n) => idleOf({ reserved: b(n.reserved_concurrency), usage: b(n.active_attempts) })),
    window_reserved_starts: sum((n) =>
      min(n.window_started_at !== null && n.window_started_at === appWindow ? b(n.window_starts) : 0n, b(n.reserved_rate_per_second)),
    ),
  };
}

const step = fc.oneof(
  fc.record({ kind: fc.constant('reserve' as const), ns: fc.nat(2), unfinished: fc.nat(4), concurrency: fc.nat(4), rate: fc.nat(4) }),
  fc.record({ kind: fc.constant('usage' as const), ns: fc.nat(2), unfinished: fc.integer({ min: -3, max: 3 }), active: fc.integer({ min: -3, max: 3 }) }),
  // Starts granted: in the application's current window, or in a new one `newWindowMs` later.
  fc.record({ kind: fc.constant('starts' as const), ns: fc.nat(2), n: fc.integer({ min: 1, max: 4 }), newWindow: fc.boolean() }),
);

test('the application row keeps the floors figures the domain defines, through configure, counter changes and starts', async () => {
  const cases = fc.sample(fc.array(step, { minLength: 1, maxLength: 14 }), { numRuns: 60, seed: SEED });
  let checked = 0;
  for (const steps of cases) {
    await rolledBack(async (tx) => {
      // Room to spare on every limit, so every generated reservation fits.
      await tx.exec(
        sql`UPDATE orbit_application_resources SET max_unfinished_tasks = 1000, max_concurrency = 1000, rate_per_second = 1000, window_started_at = NULL, window_starts = 0
             WHERE application_id = ${applicationId}`,
      );
      await rows(tx, true);
      let windowMs = Date.UTC(2030, 0, 1);
      let appStarts = 0;
      let windowOpen = false;
      for (const s of steps) {
        const { app, namespaces } = await rows(tx);
        const owner = owners[s.ns] as { namespaceId: Buffer; queueId: Buffer };
        const ns = namespaces.find((n) => n.namespace_id.equals(owner.namespaceId)) as NamespaceRow;
        if (s.kind === 'reserve') {
          const next: Reservations = { reserved_unfinished_tasks: s.unfinished, reserved_concurrency: s.concurrency, reserved_rate_per_second: s.rate };
          for (const statement of reservationStatements(applicationId, owner.namespaceId, ns, next, app.window_started_at)) await tx.exec(statement);
        } else if (s.kind === 'usage') {
          // Counters never go below zero (the callers derive deltas from rows they hold).
          const unfinished = Math.max(-Number(ns.unfinished_tasks), s.unfinished);
          const active = Math.max(-Number(ns.active_attempts), s.active);
          if (unfinished === 0 && active === 0) continue;
          // The queue row holds what the namespace does (enough not to go below zero).
          await tx.exec(
            sql`UPDATE orbit_queues SET unfinished_tasks = unfinished_tasks + 100, active_attempts = active_attempts + 100 WHERE queue_id = ${owner.queueId}`,
          );
          await tx.exec(
            sql`UPDATE orbit_application_resources SET unfinished_tasks = unfinished_tasks + 100, active_attempts = active_attempts + 100 WHERE application_id = ${applicationId}`,
          );
          for (const statement of usageStatements(applicationId, { unfinished, active }, [{ ...owner, change: { unfinished, active } }]))
            await tx.exec(statement);
        } else {
          if (s.newWindow || !windowOpen) {
            windowMs += 1500;
            appStarts = 0;
          }
          windowOpen = true;
          appStarts += s.n;
          const window = { startedAt: windowMs, starts: appStarts };
          await tx.exec(sql`UPDATE orbit_application_resources SET pending_starts = pending_starts + ${s.n} WHERE application_id = ${applicationId}`);
          await tx.exec(sql`UPDATE orbit_namespace_resources SET pending_starts = pending_starts + ${s.n} WHERE namespace_id = ${owner.namespaceId}`);
          await tx.exec(
            sql`UPDATE orbit_queues SET pending_starts = pending_starts + ${s.n}, window_started_at = NULL, window_starts = 0 WHERE queue_id = ${owner.queueId}`,
          );
          for (const statement of usageStatements(applicationId, { pending: -s.n, window }, [
            { ...owner, change: { pending: -s.n, window: { startedAt: windowMs, starts: s.n } }, starts: s.n },
          ]))
            await tx.exec(statement);
          const [w] = await tx.rows<{ window_started_at: string }>(
            sql`SELECT window_started_at FROM orbit_application_resources WHERE application_id = ${applicationId}`,
          );
          assert.equal(w?.window_started_at, millisToSql(windowMs).replace('T', ' ').replace('Z', ''), 'the application window written as decided');
        }
        const after = await rows(tx);
        const { window_started_at: _w, ...figures } = after.app;
        assert.deepEqual(figures, expectedFigures(after.app.window_started_at, after.namespaces), JSON.stringify({ steps, at: s }));
        checked++;
      }
    });
  }
  assert.ok(checked > 300, `checked ${checked} steps`);
});

test('the guarded admission never admits what the floors refuse; when it does not fit, the domain decides', async () => {
  const cases = fc.sample(
    fc.record({
      limit: fc.integer({ min: 2, max: 12 }),
      reserved: fc.tuple(fc.nat(4), fc.nat(4), fc.nat(4)),
      used: fc.tuple(fc.nat(5), fc.nat(5), fc.nat(5)),
      ns: fc.nat(2),
      n: fc.integer({ min: 1, max: 4 }),
    }),
    { numRuns: 200, seed: SEED + 1 },
  );
  let fast = 0;
  for (const c of cases) {
    if (c.reserved.reduce((a, r) => a + r, 0) > c.limit) continue;
    const usage = c.used.reduce((a, u) => a + u, 0);
    const idle = c.reserved.reduce((a, r, i) => a + Math.max(0, r - (c.used[i] as number)), 0);
    const own = { reserved: BigInt(c.reserved[c.ns] as number), usage: BigInt(c.used[c.ns] as number) };
    const exactRoom = roomFor({ limit: BigInt(c.limit), usage: BigInt(usage), idleReserved: BigInt(idle) }, own);
    const admitted = await rolledBack(async (tx) => {
      await rows(tx, true);
      await tx.exec(
        sql`UPDATE orbit_application_resources SET max_unfinished_tasks = ${c.limit}, unfinished_tasks = ${usage}, idle_reserved_unfinished_tasks = ${idle}
             WHERE application_id = ${applicationId}`,
      );
      for (const [i, o] of owners.entries())
        await tx.exec(
          sql`UPDATE orbit_namespace_resources SET reserved_unfinished_tasks = ${c.reserved[i]}, unfinished_tasks = ${c.used[i]} WHERE namespace_id = ${o.namespaceId}`,
        );
      for (const [i, o] of owners.entries())
        await tx.exec(sql`UPDATE orbit_queues SET max_unfinished_tasks = 100, unfinished_tasks = ${c.used[i]} WHERE queue_id = ${o.queueId}`);
      const owner = owners[c.ns] as { namespaceId: Buffer; queueId: Buffer };
      try {
        for (const statement of unfinishedGuardedStatements(applicationId, c.n, [{ ...owner, count: c.n }])) await tx.exec(statement);
      } catch (error) {
        if ((error as { errno?: number }).errno === 1048) return false;
        throw error;
      }
      const { app, namespaces } = await rows(tx);
      assert.equal(app.idle_reserved_unfinished_tasks, expectedFigures(app.window_started_at, namespaces).idle_reserved_unfinished_tasks, 'idle kept');
      return true;
    });
    // The SQL guard is fitsBesideAllFloors (the queues have room to spare here)...
    assert.equal(admitted, fitsBesideAllFloors({ limit: BigInt(c.limit), usage: BigInt(usage), idleReserved: BigInt(idle) }, BigInt(c.n)), JSON.stringify(c));
    if (admitted) {
      fast++;
      // ...and so never admits what the floors refuse.
      assert.ok(exactRoom >= BigInt(c.n), `the guard admitted ${c.n} where the floors leave ${exactRoom}: ${JSON.stringify(c)}`);
    }
  }
  assert.ok(fast > 20, `the guard admitted ${fast} cases`);
});

test('the guarded Start with rate floors never grants what the floors refuse, and keeps the used part of them exact', async () => {
  const nowMs = Date.UTC(2030, 5, 1, 12);
  const cases = fc.sample(
    fc.record({
      rate: fc.integer({ min: 2, max: 12 }),
      reserved: fc.tuple(fc.nat(4), fc.nat(4), fc.nat(4)),
      starts: fc.tuple(fc.nat(4), fc.nat(4), fc.nat(4)),
      // The application's window: open (started 0-999 ms ago) or ended.
      startedAgoMs: fc.oneof(fc.integer({ min: 0, max: 999 }), fc.constant(1500)),
      ns: fc.nat(2),
      n: fc.integer({ min: 1, max: 4 }),
    }),
    { numRuns: 200, seed: SEED + 2 },
  );
  let granted = 0;
  for (const c of cases) {
    if (c.reserved.reduce((a, r) => a + r, 0) > c.rate) continue;
    const open = c.startedAgoMs < 1000;
    const appStarts = c.starts.reduce((a, s) => a + s, 0);
    if (open && appStarts > c.rate) continue; // a window never holds more than the rate
    const windowAt = millisToSql(nowMs - c.startedAgoMs);
    const used = c.reserved.reduce((a, r, i) => a + Math.min(c.starts[i] as number, r), 0);
    const ledger = startFloorLedger(
      {
        ratePerSecond: c.rate,
        window: { startedAt: nowMs - c.startedAgoMs, starts: appStarts },
        reservedRate: BigInt(c.reserved.reduce((a, r) => a + r, 0)),
        windowReservedStarts: BigInt(used),
      },
      NAMES.map((k, i) => [k, { reserved: BigInt(c.reserved[i] as number), windowStarts: BigInt(c.starts[i] as number) }] as const),
      nowMs,
    );
    let fits = 0;
    while (fits < c.n && ledger.room(NAMES[c.ns] as string) >= 1n) {
      ledger.take(NAMES[c.ns] as string);
      fits++;
    }
    const ok = await rolledBack(async (tx) => {
      await rows(tx, true);
      await tx.exec(
        sql`UPDATE orbit_application_resources SET rate_per_second = ${c.rate}, window_started_at = ${windowAt}, window_starts = ${appStarts}, pending_starts = ${c.n},
               reserved_rate_per_second = ${c.reserved.reduce((a, r) => a + r, 0)}, window_reserved_starts = ${used}
             WHERE application_id = ${applicationId}`,
      );
      for (const [i, o] of owners.entries())
        await tx.exec(
          sql`UPDATE orbit_namespace_resources SET reserved_rate_per_second = ${c.reserved[i]}, window_started_at = ${windowAt}, window_starts = ${c.starts[i]},
                 pending_starts = ${i === c.ns ? c.n : 0} WHERE namespace_id = ${o.namespaceId}`,
        );
      const owner = owners[c.ns] as { namespaceId: Buffer; queueId: Buffer };
      await tx.exec(
        sql`UPDATE orbit_queues SET rate_per_second = 1000, window_started_at = NULL, window_starts = 0, pending_starts = ${c.n} WHERE queue_id = ${owner.queueId}`,
      );
      try {
        for (const statement of startWindowsGuardedStatements(applicationId, [{ ...owner, count: c.n }], sql`CAST(${millisToSql(nowMs)} AS DATETIME(6))`))
          await tx.exec(statement);
      } catch (error) {
        if ((error as { errno?: number }).errno === 1048) return false;
        throw error;
      }
      const after = await rows(tx);
      assert.equal(
        after.app.window_reserved_starts,
        expectedFigures(after.app.window_started_at, after.namespaces).window_reserved_starts,
        `the used part kept: ${JSON.stringify(c)}`,
      );
      return true;
    });
    if (ok) {
      granted++;
      assert.equal(fits, c.n, `the guard granted ${c.n} starts where the floors allow ${fits}: ${JSON.stringify(c)}`);
    }
  }
  assert.ok(granted > 20, `the guard granted ${granted} cases`);
});

test('a window opened by the guarded Start at a microsecond and used by the careful one keeps the used part of the rate floors', async () => {
  await rolledBack(async (tx) => {
    await rows(tx, true);
    const [a, b] = owners as [{ namespaceId: Buffer; queueId: Buffer }, { namespaceId: Buffer; queueId: Buffer }];
    await tx.exec(
      sql`UPDATE orbit_application_resources SET rate_per_second = 10, window_started_at = NULL, window_starts = 0, pending_starts = 4, reserved_rate_per_second = 6, window_reserved_starts = 0
           WHERE application_id = ${applicationId}`,
    );
    await tx.exec(sql`UPDATE orbit_namespace_resources SET reserved_rate_per_second = 3, pending_starts = 3 WHERE namespace_id = ${a.namespaceId}`);
    await tx.exec(sql`UPDATE orbit_namespace_resources SET reserved_rate_per_second = 3, pending_starts = 1 WHERE namespace_id = ${b.namespaceId}`);
    await tx.exec(
      sql`UPDATE orbit_queues SET rate_per_second = 1000, window_started_at = NULL, window_starts = 0, pending_starts = 3 WHERE queue_id = ${a.queueId}`,
    );
    await tx.exec(
      sql`UPDATE orbit_queues SET rate_per_second = 1000, window_started_at = NULL, window_starts = 0, pending_starts = 1 WHERE queue_id = ${b.queueId}`,
    );
    // The one-round-trip Start of 3 in a, at a time with microseconds (NOW(6) in production).
    const now = sql`CAST('2030-06-01 12:00:00.123456' AS DATETIME(6))`;
    for (const statement of startWindowsGuardedStatements(applicationId, [{ ...a, count: 3 }], now)) await tx.exec(statement);
    // Then the careful path starts 1 in b, in the same window, as it decides: from the row, in milliseconds.
    const [app] = await tx.rows<{ window_started_at: string; window_starts: number }>(
      sql`SELECT window_started_at, window_starts FROM orbit_application_resources WHERE application_id = ${applicationId}`,
    );
    const window = windowAfterStarts(windowOfRow(app as { window_started_at: string; window_starts: number }), 1, Date.UTC(2030, 5, 1, 12, 0, 0, 500));
    for (const statement of usageStatements(applicationId, { pending: -1, window }, [
      { ...b, change: { pending: -1, window: { startedAt: window.startedAt, starts: 1 } }, starts: 1 },
    ]))
      await tx.exec(statement);
    const after = await rows(tx);
    assert.equal(after.app.window_reserved_starts, '4', 'a used 3 of its floor, b 1 of its own');
    assert.equal(after.app.window_reserved_starts, expectedFigures(after.app.window_started_at, after.namespaces).window_reserved_starts);
  });
});
