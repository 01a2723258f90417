/**
 * The ordered event feed. Rule: an application's events are inserted only by a transaction that
 * holds its `orbit_application_resources` row locked and writes it. Sequence numbers come from
 * AUTO_INCREMENT at insert time, so under that lock one application's events commit in sequence
 * order, and a reader paging with `after=` never skips an event that commits later. The write is
 * for a Galera cluster, where the lock is local to a node (`eventInsert`, 0011_event_order.sql).
 */
import { newId, idToHex, type IdBytes } from '../../ids.ts';
import { sqlToRfc3339 } from '../../time.ts';
import { sql, type SQL } from '../database/sql.ts';
import { rowsStatement, valueList, type Queryable } from '../database/database.ts';
import type { RowsStatement } from '../database/packets.ts';
import type { EventRow } from '../database/schema.ts';

export interface EventRecord {
  applicationId: IdBytes;
  namespaceId: IdBytes;
  type: string;
  subject: string;
  data: Record<string, unknown>;
  /** The queue the event is about (task lifecycle and schedule events): who may read it depends on it. */
  queue?: string | null;
}

/**
 * One event, and a write of its application row (`event_writes`) in the same round trip: what
 * configuration and state changes use, which change no usage. The hot paths insert theirs with
 * `eventInsertStatement` beside the usage UPDATEs of the same row. Either way the transaction
 * writes the application row, which orders the feed on a cluster too (0011_event_order.sql; the
 * lock-order check holds every transaction to it).
 */
export async function eventInsert(tx: Queryable, event: EventRecord): Promise<void> {
  await tx.batch([
    eventInsertStatement([event]).toSql(),
    sql`UPDATE orbit_application_resources SET event_writes = event_writes + 1 WHERE application_id = ${event.applicationId}`,
  ]);
}

/**
 * The INSERT of these events, in this order (their sequence numbers follow it): one statement,
 * or several of consecutive events when they would not fit in one packet (packets.ts) - the
 * order is the same. Only under the application row's lock, held by the same transaction (the
 * rule at the top).
 */
export function eventInsertStatement(events: readonly EventRecord[]): RowsStatement {
  const rows = events.map(
    (e) => sql`(${newId()}, ${e.applicationId}, ${e.namespaceId}, ${e.type}, ${e.subject}, ${JSON.stringify(e.data)}, NOW(6), ${e.queue ?? null})`,
  );
  return rowsStatement(sql`INSERT INTO orbit_events (event_id, application_id, namespace_id, type, subject, data, occurred_at, queue_name) VALUES `, rows);
}

/** The columns eventList reads. */
type FeedRow = Pick<EventRow, 'sequence' | 'event_id' | 'type' | 'subject' | 'data' | 'occurred_at'>;

/** Which events a reader sees: its credential's queue scope, and a subscription's filters. */
export interface EventFilter {
  /** Queues the credential may see; events about no queue are visible to every reader of the namespace. */
  scope: '*' | ReadonlySet<string>;
  /** Only these types (a subscription's `types`). */
  types?: readonly string[] | null;
  /** Only events about these queues (a subscription's `queues`). */
  queues?: readonly string[] | null;
}

export function eventFilterSql(filter: EventFilter): SQL {
  const parts: SQL[] = [];
  const list = (values: Iterable<string>) =>
    sql.join(
      [...values].map((v) => sql`${v}`),
      sql`, `,
    );
  if (filter.scope !== '*')
    parts.push(filter.scope.size === 0 ? sql` AND queue_name IS NULL` : sql` AND (queue_name IS NULL OR queue_name IN (${list(filter.scope)}))`);
  if (filter.types && filter.types.length > 0) parts.push(sql` AND type IN (${list(filter.types)})`);
  if (filter.queues && filter.queues.length > 0) parts.push(sql` AND queue_name IN (${list(filter.queues)})`);
  return sql.join(parts, sql``);
}

export async function eventList(
  db: Queryable,
  params: {
    namespaceId: IdBytes;
    namespace: string;
    after: string;
    limit: number;
    filter?: EventFilter;
    /**
     * Only the events of this kind (`task`: `task.*`) about this subject (a task id): one range of
     * ix_orbit_events_subject. The kind matters: subjects of different kinds may look alike (a
     * queue may be named like a task id), and a task's history is its own events only.
     */
    subject?: { kind: 'task'; id: string };
  },
): Promise<{ events: Record<string, unknown>[]; nextAfter: string }> {
  const subject = params.subject === undefined ? sql`` : sql` AND subject = ${params.subject.id} AND type LIKE ${`${params.subject.kind}.%`}`;
  const rows = await db.rows<FeedRow>(sql`
    SELECT sequence, event_id, type, subject, data, occurred_at
      FROM orbit_events
     WHERE namespace_id = ${params.namespaceId}${subject} AND sequence > ${params.after}${params.filter ? eventFilterSql(params.filter) : sql``}
     ORDER BY sequence
     LIMIT ${params.limit}`);
  return {
    nextAfter: rows.at(-1)?.sequence ?? params.after,
    events: rows.map((row) => ({
      sequence: row.sequence,
      event_id: idToHex(row.event_id),
      type: row.type,
      namespace: params.namespace,
      subject: row.subject,
      data: JSON.parse(row.data) as unknown,
      occurred_at: sqlToRfc3339(row.occurred_at),
    })),
  };
}

/** What the event watcher needs of an event: where it is, what it is, what it is about. */
export type EventHeader = Pick<EventRow, 'sequence' | 'namespace_id' | 'type' | 'subject'>;

/**
 * Events after `after`, plus the sequence numbers in `missing` (numbers the watcher passed over
 * that may still commit: sequences come from AUTO_INCREMENT at insert, and two applications'
 * transactions commit in either order). A plain read across applications, one per watcher tick.
 */
export async function eventHeadersSince(db: Queryable, after: string, missing: readonly string[], limit: number): Promise<EventHeader[]> {
  const gaps = missing.length > 0 ? sql` OR sequence IN (${valueList(missing)})` : sql``;
  return db.rows<EventHeader>(sql`
    SELECT /* scatter: event-watcher */ sequence, namespace_id, type, subject FROM orbit_events
     WHERE sequence > ${after}${gaps}
     ORDER BY sequence
     LIMIT ${limit}`);
}

/** The newest sequence number of the whole feed ('0' when empty). */
export async function eventHead(db: Queryable): Promise<string> {
  const [row] = await db.rows<{ head: string | null }>(sql`SELECT /* scatter: event-watcher */ MAX(sequence) AS head FROM orbit_events`);
  return row?.head ?? '0';
}
