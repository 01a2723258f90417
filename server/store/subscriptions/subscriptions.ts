/**
 * Subscriptions: durable cursors over a namespace's event feed. A subscription is a row with a
 * position (`acked_sequence`) and optional filters (`types`, `queues`); reading returns the
 * events after the position that match the filters and the reader's queue scope, and an ack
 * moves the position forward, never back.
 *
 * Changes follow the lock order (lock-order.ts): the subscription row (schedule level), then -
 * only where an event is written - the application row (the feed's ordering rule), then records.
 * An ack writes no event and no audit record (it is a consumer's position), so it locks the
 * subscription row alone.
 *
 * The head an ack is checked against, and where `from: now` starts, is the newest event of the
 * namespace (a routed read), not of the whole feed: one application's events commit in
 * sequence order (they are inserted under its application row), so every event of the
 * namespace that commits later has a higher sequence than that head. The head of the whole
 * feed gives no such promise - another application may have committed a higher number while
 * this one's transaction still holds a lower one - and reading it would scatter.
 */
import { sql } from '../database/sql.ts';
import { OrbitError, notFound } from '../../errors.ts';
import { idToHex, newId, type IdBytes } from '../../ids.ts';
import type { Principal } from '../../domain/principal.ts';
import { canAccessQueue } from '../../domain/principal.ts';
import { subscriptionLag } from '../../domain/retention.ts';
import { millisToSql, sqlToRfc3339 } from '../../time.ts';
import type { components } from '../../generated/openapi.ts';
import { auditInsert } from '../records/audit.ts';
import { stateChangeRecords } from '../records/state-changes.ts';
import { eventInsert, eventList } from '../records/events.ts';
import { idempotentMutation, type ReceiptIdentity } from '../records/receipts.ts';
import { isDuplicateKeyError, type Database, type Queryable, type Transaction } from '../database/database.ts';
import { lockRows } from '../database/lock-order.ts';
import type { SubscriptionRow } from '../database/schema.ts';
import { applicationRowLock } from '../quotas/application-resources.ts';

export type Subscription = components['schemas']['Subscription'];
export type SubscriptionState = Subscription['state'];

/** Every column of orbit_subscriptions (constant SQL text). */
const SUBSCRIPTION_COLUMNS = sql.raw(
  'subscription_id, application_id, namespace_id, name, types, queues, state, acked_sequence, acked_at, created_at, updated_at, pruned_through',
);

function listOf(text: string | null): string[] | null {
  if (text === null) return null;
  const value = JSON.parse(text) as unknown;
  return Array.isArray(value) && value.length > 0 ? value.map(String) : null;
}

/** The subscription's filters as stored. */
export function filtersOfRow(row: Pick<SubscriptionRow, 'types' | 'queues'>): { types: string[] | null; queues: string[] | null } {
  return { types: listOf(row.types), queues: listOf(row.queues) };
}

/** The API shape; absent values are omitted, never null. */
export function toSubscription(row: SubscriptionRow, namespace: string): Subscription {
  const { types, queues } = filtersOfRow(row);
  const subscription: Subscription = {
    subscription_id: idToHex(row.subscription_id),
    namespace,
    name: row.name,
    state: row.state as SubscriptionState,
    acked_sequence: String(row.acked_sequence),
    created_at: sqlToRfc3339(row.created_at),
  };
  if (types) subscription.types = types;
  if (queues) subscription.queues = queues;
  const lag = subscriptionLag(BigInt(row.acked_sequence), BigInt(row.pruned_through));
  if (lag) subscription.pruned_through = lag.prunedThrough;
  return subscription;
}

/**
 * Whether the credential may see the subscription: its `queues` filter, when it has one, names
 * only queues in the credential's scope. Otherwise it is 404 to that credential, like a schedule
 * of a queue outside the scope: the object names those queues, and out of scope is never a hint.
 */
function visibleTo(principal: Principal, row: Pick<SubscriptionRow, 'queues'>): boolean {
  const queues = listOf(row.queues);
  return queues === null || queues.every((q) => canAccessQueue(principal, q));
}

/** A subscription by id within a namespace; with `lock`, its row is locked (schedule level). */
async function subscriptionFind(db: Queryable, namespaceId: IdBytes, subscriptionId: IdBytes): Promise<SubscriptionRow | null>;
async function subscriptionFind(tx: Transaction, namespaceId: IdBytes, subscriptionId: IdBytes, options: { lock: true }): Promise<SubscriptionRow | null>;
async function subscriptionFind(
  db: Queryable,
  namespaceId: IdBytes,
  subscriptionId: IdBytes,
  options: { lock?: boolean } = {},
): Promise<SubscriptionRow | null> {
  const [row] = await db.rows<SubscriptionRow>(sql`
    SELECT ${SUBSCRIPTION_COLUMNS} FROM orbit_subscriptions
     WHERE subscription_id = ${subscriptionId} AND namespace_id = ${namespaceId}${options.lock ? sql` ${lockRows('schedule')}` : sql``}`);
  return row ?? null;
}

const missing = (subscriptionId: IdBytes) => notFound(`subscription ${idToHex(subscriptionId)}`);

/** The subscription, or 404 when it is in another namespace or names a queue outside the credential's scope. */
export async function subscriptionGetVisible(db: Queryable, principal: Principal, subscriptionId: IdBytes): Promise<SubscriptionRow> {
  const row = await subscriptionFind(db, principal.namespaceId, subscriptionId);
  if (!row || !visibleTo(principal, row)) throw missing(subscriptionId);
  return row;
}

/** The locked row, or 404 (see subscriptionGetVisible). */
async function subscriptionLockVisible(tx: Transaction, principal: Principal, subscriptionId: IdBytes): Promise<SubscriptionRow> {
  const row = await subscriptionFind(tx, principal.namespaceId, subscriptionId, { lock: true });
  if (!row || !visibleTo(principal, row)) throw missing(subscriptionId);
  return row;
}

/** The newest sequence number of the namespace's events ('0' when it has none). A plain read, routed by namespace. */
export async function namespaceEventHead(db: Queryable, applicationId: IdBytes, namespaceId: IdBytes): Promise<string> {
  // The newest by the (namespace_id, sequence) index: one entry read, not the namespace's rows.
  const [row] = await db.rows<{ head: string | number }>(
    sql`SELECT sequence AS head FROM orbit_events WHERE application_id = ${applicationId} AND namespace_id = ${namespaceId} ORDER BY sequence DESC LIMIT 1`,
  );
  return row === undefined ? '0' : String(row.head);
}

/** What the events of a subscription say about it. The queue filter is left out: events about no queue are read by every credential of the namespace. */
function eventData(subscription: Subscription): Record<string, unknown> {
  return {
    name: subscription.name,
    state: subscription.state,
    acked_sequence: subscription.acked_sequence,
    ...(subscription.types ? { types: subscription.types } : {}),
  };
}

/** A validated subscription definition (the handler checks the fields). */
export interface SubscriptionDefinition {
  name: string;
  types: string[] | null;
  queues: string[] | null;
  from: 'now' | 'beginning';
}

export async function subscriptionCreate(
  db: Database,
  params: { principal: Principal; requestId: string; receipt: ReceiptIdentity; reason: string; nowMs: number; definition: SubscriptionDefinition },
): Promise<{ subscription: Subscription; deduplicated: boolean }> {
  const { principal, definition: d } = params;
  // Out of scope answers exactly like a queue that does not exist.
  for (const queue of d.queues ?? []) if (!canAccessQueue(principal, queue)) throw notFound(`queue "${queue}"`);
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    if (d.queues) {
      // Queues are never deleted, so a plain read is enough to know they exist.
      const rows = await tx.rows<{ name: string }>(sql`
        SELECT name FROM orbit_queues
         WHERE namespace_id = ${principal.namespaceId} AND name IN (${sql.join(
           d.queues.map((q) => sql`${q}`),
           sql`, `,
         )})`);
      const found = new Set(rows.map((r) => r.name));
      const absent = d.queues.find((q) => !found.has(q));
      if (absent !== undefined) throw notFound(`queue "${absent}"`);
    }
    const subscriptionId = newId(params.nowMs);
    const created = millisToSql(params.nowMs);
    try {
      await tx.exec(sql`
        INSERT INTO orbit_subscriptions
          (subscription_id, application_id, namespace_id, name, types, queues, state, acked_sequence, created_at, updated_at)
        VALUES (${subscriptionId}, ${principal.applicationId}, ${principal.namespaceId}, ${d.name},
                ${d.types ? JSON.stringify(d.types) : null}, ${d.queues ? JSON.stringify(d.queues) : null}, 'ACTIVE', 0, ${created}, ${created})`);
    } catch (error) {
      if (isDuplicateKeyError(error)) {
        throw new OrbitError('STATE_CONFLICT', `the namespace already has a subscription named "${d.name}"`, { details: { field: 'name' } });
      }
      throw error;
    }
    // Lock order: the subscription row (just inserted, locked again by key so the position can
    // be set after the application row), then the application row, under which the event is
    // written, then records.
    const inserted = await subscriptionFind(tx, principal.namespaceId, subscriptionId, { lock: true });
    if (!inserted) throw new OrbitError('INTERNAL', 'the new subscription is missing');
    await applicationRowLock(tx, principal.applicationId);
    const draft = toSubscription(inserted, principal.namespace);
    // Its position is not known yet for `from: now` (it is after this very event): `from` says it.
    const { acked_sequence: _position, ...described } = eventData(draft);
    await eventInsert(tx, {
      applicationId: principal.applicationId,
      namespaceId: principal.namespaceId,
      type: 'subscription.created',
      subject: draft.subscription_id,
      data: { ...described, from: d.from },
    });
    // `now`: after the newest event of the namespace, this subscription's own creation included
    // (read under the application row, so nothing of this namespace commits in between).
    let row = inserted;
    if (d.from === 'now') {
      const head = await namespaceEventHead(tx, principal.applicationId, principal.namespaceId);
      await tx.exec(sql`UPDATE orbit_subscriptions SET acked_sequence = ${head} WHERE subscription_id = ${subscriptionId}`);
      row = { ...inserted, acked_sequence: head };
    }
    const subscription = toSubscription(row, principal.namespace);
    await auditInsert(tx, {
      principal,
      action: 'subscription.create',
      resourceType: 'subscription',
      resource: subscription.subscription_id,
      reason: params.reason,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      before: null,
      after: { ...subscription, from: d.from },
    });
    return { response: subscription, resourceId: subscriptionId };
  });
  return { subscription: response, deduplicated };
}

/** Pause (ACTIVE → PAUSED) or resume (PAUSED → ACTIVE). The other direction from the current state is STATE_CONFLICT. */
export async function subscriptionSetState(
  db: Database,
  params: { principal: Principal; requestId: string; receipt: ReceiptIdentity; subscriptionId: IdBytes; reason: string; to: SubscriptionState },
): Promise<{ subscription: Subscription; deduplicated: boolean }> {
  const { principal } = params;
  const verb = params.to === 'PAUSED' ? 'pause' : 'resume';
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    // Lock order: the subscription row, then the application row (events), then records.
    const row = await subscriptionLockVisible(tx, principal, params.subscriptionId);
    if (row.state === params.to) {
      throw new OrbitError('STATE_CONFLICT', `the subscription is already ${row.state}`, { details: { field: 'state', state: row.state } });
    }
    await applicationRowLock(tx, principal.applicationId);
    await tx.exec(sql`UPDATE orbit_subscriptions SET state = ${params.to}, updated_at = NOW(6) WHERE subscription_id = ${row.subscription_id}`);
    const after = toSubscription({ ...row, state: params.to }, principal.namespace);
    await stateChangeRecords(tx, {
      principal,
      requestId: params.requestId,
      idempotencyKey: params.receipt.key,
      reason: params.reason,
      resourceType: 'subscription',
      resource: after.subscription_id,
      action: `subscription.${verb}`,
      from: row.state,
      to: params.to,
      event: { type: params.to === 'PAUSED' ? 'subscription.paused' : 'subscription.resumed', data: eventData(after) },
    });
    return { response: after, resourceId: row.subscription_id };
  });
  return { subscription: response, deduplicated };
}

/**
 * Moves the position to `sequence`: the current position again is accepted and changes nothing;
 * below it, or beyond the newest event of the namespace, is STATE_CONFLICT. No audit record and
 * no event (a consumer's position is not a management change), so only the subscription row is
 * locked. A PAUSED subscription may be acknowledged (a consumer finishing what it read).
 */
export async function subscriptionAck(
  db: Database,
  params: { principal: Principal; receipt: ReceiptIdentity; subscriptionId: IdBytes; sequence: string },
): Promise<{ subscription: Subscription; deduplicated: boolean }> {
  const { principal } = params;
  const { response, deduplicated } = await idempotentMutation(db, params.receipt, async (tx) => {
    const row = await subscriptionLockVisible(tx, principal, params.subscriptionId);
    const current = BigInt(row.acked_sequence);
    const wanted = BigInt(params.sequence);
    if (wanted === current) return { response: toSubscription(row, principal.namespace), resourceId: row.subscription_id };
    if (wanted < current) {
      throw new OrbitError('STATE_CONFLICT', `sequence ${params.sequence} is below the acknowledged position ${row.acked_sequence}`, {
        details: { field: 'sequence', acked_sequence: String(row.acked_sequence) },
      });
    }
    // The newest event may have been pruned: a lagging subscription may always move on to what
    // was pruned after its position (pruned_through), even when nothing newer is left.
    const newest = BigInt(await namespaceEventHead(tx, principal.applicationId, principal.namespaceId));
    const pruned = BigInt(row.pruned_through);
    const head = newest > pruned ? newest : pruned;
    if (wanted > head) {
      throw new OrbitError('STATE_CONFLICT', `sequence ${params.sequence} is beyond the newest event of the feed`, {
        details: { field: 'sequence', acked_sequence: String(row.acked_sequence) },
      });
    }
    await tx.exec(sql`
      UPDATE orbit_subscriptions SET acked_sequence = ${params.sequence}, acked_at = NOW(6), updated_at = NOW(6)
       WHERE subscription_id = ${row.subscription_id}`);
    return { response: toSubscription({ ...row, acked_sequence: params.sequence }, principal.namespace), resourceId: row.subscription_id };
  });
  return { subscription: response, deduplicated };
}

/** Subscriptions of the namespace by name; `after` is the last name of the previous page. Those the credential may not see are left out. */
export async function subscriptionList(
  db: Queryable,
  params: { principal: Principal; after: string; limit: number },
): Promise<{ subscriptions: Subscription[]; lastName: string | null; more: boolean }> {
  const { principal } = params;
  const rows = await db.rows<SubscriptionRow>(sql`
    SELECT ${SUBSCRIPTION_COLUMNS} FROM orbit_subscriptions
     WHERE application_id = ${principal.applicationId} AND namespace_id = ${principal.namespaceId} AND name > ${params.after}
     ORDER BY name LIMIT ${params.limit + 1}`);
  const page = rows.slice(0, params.limit);
  return {
    more: rows.length > params.limit,
    lastName: page.at(-1)?.name ?? null,
    subscriptions: page.filter((row) => visibleTo(principal, row)).map((row) => toSubscription(row, principal.namespace)),
  };
}

/**
 * The events a read of the subscription answers with: after its position, matching its filters
 * and the reader's queue scope, at most `limit`. A PAUSED subscription is STATE_CONFLICT.
 */
export async function subscriptionRead(
  db: Queryable,
  params: { principal: Principal; subscriptionId: IdBytes; limit: number },
): Promise<{ events: Record<string, unknown>[]; row: SubscriptionRow }> {
  const { principal } = params;
  const row = await subscriptionGetVisible(db, principal, params.subscriptionId);
  if (row.state === 'PAUSED') {
    throw new OrbitError('STATE_CONFLICT', 'the subscription is PAUSED; resume it to read', { details: { field: 'state', state: row.state } });
  }
  // Events after the position were pruned (the subscription lagged past the retention policy):
  // say so, never skip them silently. Acknowledging pruned_through moves it on.
  const lag = subscriptionLag(BigInt(row.acked_sequence), BigInt(row.pruned_through));
  if (lag) {
    throw new OrbitError(
      'STATE_CONFLICT',
      `events after the acknowledged position ${row.acked_sequence} were pruned by the retention policy (through ${lag.prunedThrough}); acknowledge ${lag.prunedThrough} to read on from ${lag.oldestSequence}`,
      {
        details: {
          reason: 'events_pruned',
          acked_sequence: String(row.acked_sequence),
          pruned_through: lag.prunedThrough,
          oldest_sequence: lag.oldestSequence,
        },
      },
    );
  }
  const { types, queues } = filtersOfRow(row);
  const { events } = await eventList(db, {
    namespaceId: principal.namespaceId,
    namespace: principal.namespace,
    after: String(row.acked_sequence),
    limit: params.limit,
    filter: { scope: principal.queues, types, queues },
  });
  // A prune may have committed between the row's read and the events' read: read the mark again,
  // so that events pruned meanwhile are never skipped silently.
  const [again] = await db.rows<Pick<SubscriptionRow, 'pruned_through'>>(
    sql`SELECT pruned_through FROM orbit_subscriptions WHERE subscription_id = ${row.subscription_id} AND namespace_id = ${principal.namespaceId}`,
  );
  if (again && BigInt(again.pruned_through) > BigInt(row.pruned_through)) return subscriptionRead(db, params);
  return { events, row };
}
