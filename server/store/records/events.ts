/**
 * The ordered event feed. Rule: an application's events are inserted only while its
 * `orbit_application_resources` row is locked by the same transaction. Sequence numbers come
 * from AUTO_INCREMENT at insert time, so under that lock one application's events commit in
 * sequence order, and a reader paging with `after=` never skips an event that commits later.
 */
import { newId, idToHex, type IdBytes } from '../../ids.ts';
import { sqlToRfc3339 } from '../../time.ts';
import { sql } from 'drizzle-orm';
import type { Queryable } from '../database/database.ts';
import type { EventRow } from '../database/schema.ts';

export interface EventRecord {
  applicationId: IdBytes;
  namespaceId: IdBytes;
  type: string;
  subject: string;
  data: Record<string, unknown>;
}

export async function eventInsert(tx: Queryable, event: EventRecord): Promise<void> {
  await tx.exec(sql`
    INSERT INTO orbit_events (event_id, application_id, namespace_id, type, subject, data, occurred_at)
    VALUES (${newId()}, ${event.applicationId}, ${event.namespaceId}, ${event.type}, ${event.subject}, ${JSON.stringify(event.data)}, NOW(6))`);
}

/** The columns eventList reads. */
type FeedRow = Pick<EventRow, 'sequence' | 'event_id' | 'type' | 'subject' | 'data' | 'occurred_at'>;

export async function eventList(
  db: Queryable,
  params: { namespaceId: IdBytes; namespace: string; after: string; limit: number },
): Promise<{ events: Record<string, unknown>[]; nextAfter: string }> {
  const rows = await db.rows<FeedRow>(sql`
    SELECT sequence, event_id, type, subject, data, occurred_at
      FROM orbit_events
     WHERE namespace_id = ${params.namespaceId} AND sequence > ${params.after}
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
