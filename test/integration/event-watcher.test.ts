/**
 * The event watcher (server/http/event-watcher.ts) against a real database, where sequence
 * numbers are taken at insert time and two applications' transactions commit in either order:
 * a waiter registered while a lower number is still uncommitted is woken when it commits; a
 * waiter is woken by its own namespace's events only; after the last waiter the watcher starts
 * afresh instead of from an old place.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import mysql from 'mysql2/promise';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { EventWatcher } from '../../server/http/event-watcher.ts';
import { silentLogger } from '../../server/log.ts';
import { newId } from '../../server/ids.ts';
import { withDeadline } from '../../server/deadline.ts';
import { waitFor } from '../helpers/wait.ts';

describe('event watcher', () => {
  let t: TestDatabase;
  let a: TestTenant;
  let b: TestTenant;
  let watcher: EventWatcher;

  before(async () => {
    t = await freshDatabase('event_watcher');
    a = await createTenant(t.db, { namespace: 'a' });
    b = await createTenant(t.db, { namespace: 'b' });
    watcher = new EventWatcher(t.db, silentLogger(), { intervalMs: 20 });
  });
  after(async () => {
    watcher.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  /** An event row as the store writes one (a fixture: the test controls when it commits). */
  const insert = (conn: mysql.Connection, tenant: TestTenant, subject: string) =>
    conn.query(
      "INSERT INTO orbit_events (event_id, application_id, namespace_id, type, subject, data, occurred_at) VALUES (?, ?, ?, 'task.succeeded', ?, '{}', NOW(6))",
      [newId(), Buffer.from(tenant.applicationId, 'hex'), Buffer.from(tenant.namespaceId, 'hex'), subject],
    );

  test("a waiter registered by a request whose time is up by now is still woken: the watcher's reads are its own, not that request's", async () => {
    // The first waiter starts the watcher's polling inside its request's deadline (deadline.ts).
    const budgetMs = 200;
    const registeredAt = Date.now();
    const waiter = await withDeadline(budgetMs, () => watcher.register({ namespaceId: a.namespaceId, subject: 'after-the-deadline' }));
    const woken = waiter.wait(30_000);
    // The behaviour under test is what happens once that deadline has passed: wait for it.
    await waitFor(async () => Date.now() > registeredAt + budgetMs * 2);
    const conn = await mysql.createConnection({ uri: t.url });
    try {
      await insert(conn, a, 'after-the-deadline');
    } finally {
      await conn.end();
    }
    assert.equal(await woken, true, 'woken by its event, not by the time running out');
  });

  test('a lower number that commits after a higher one still wakes its waiter', async () => {
    const slow = await mysql.createConnection({ uri: t.url });
    const fast = await mysql.createConnection({ uri: t.url });
    try {
      await slow.query('START TRANSACTION');
      await insert(slow, a, 'late'); // takes the lower number, commits last
      await insert(fast, b, 'early'); // autocommit: the higher number is visible first
      const waiter = await watcher.register({ namespaceId: a.namespaceId, subject: 'late' });
      const woken = waiter.wait(30_000); // true only when woken by its event (the time running out is false)
      // The watcher has passed the higher number once it has woken a waiter for that event.
      const passed = await watcher.register({ namespaceId: b.namespaceId, subject: 'early' });
      assert.equal(await passed.wait(30_000), true, 'the watcher read the event with the higher number');
      await slow.query('COMMIT');
      assert.equal(await woken, true, 'woken by the event that committed late');
    } finally {
      await slow.end();
      await fast.end();
    }
  });

  test("another namespace's events do not wake a waiter; its own do, also after the watcher went idle", async () => {
    const conn = await mysql.createConnection({ uri: t.url });
    try {
      // (A new watcher looks a little behind the newest event, so match one subject: earlier
      // events of namespace a would wake it spuriously, which its users allow.)
      const waiter = await watcher.register({ namespaceId: a.namespaceId, subject: 'shared-subject' });
      const giveUp = new AbortController();
      const woken = waiter.wait(30_000, giveUp.signal);
      // Namespace b's event is read once a waiter of namespace b is woken by it (in the same pass
      // over the event that would wake the first, were it woken by another namespace's events).
      const reader = await watcher.register({ namespaceId: b.namespaceId, subject: 'shared-subject' });
      const read = reader.wait(30_000);
      await insert(conn, b, 'shared-subject');
      assert.equal(await read, true, 'the watcher read the event of namespace b');
      giveUp.abort(); // ends the first wait unless the event already woke it
      assert.equal(await woken, false, 'not woken by namespace b');
      // Idle now; then many events, then a new waiter: it starts near the newest one, not far behind.
      for (let i = 0; i < 50; i++) await insert(conn, b, `noise-${i}`);
      const again = await watcher.register({ namespaceId: a.namespaceId, subject: 'wake-a' });
      const wokenAgain = again.wait(30_000); // true only when woken by its event
      await insert(conn, a, 'wake-a');
      assert.equal(await wokenAgain, true);
    } finally {
      await conn.end();
    }
  });
});
