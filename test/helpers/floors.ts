/**
 * A namespace's floors set the way configure sets them - the application row, then the namespace
 * row, locked, and `reservationStatements` (server/store/quotas/usage-writes.ts) - for tests and
 * benchmarks that are about what floors do, not about the configure operation (its own tests
 * call POST /v1/application/namespaces/{namespace}:configure).
 */
import type { Database } from '../../server/store/database/database.ts';
import { sql } from '../../server/store/database/sql.ts';
import { lockRows } from '../../server/store/database/lock-order.ts';
import { namespaceRowsLock } from '../../server/store/quotas/namespace-resources.ts';
import { reservationStatements, type Reservations } from '../../server/store/quotas/usage-writes.ts';

export async function setFloors(db: Database, tenant: { applicationId: string; namespaceId: string }, floors: Reservations): Promise<void> {
  const applicationId = Buffer.from(tenant.applicationId, 'hex');
  const namespaceId = Buffer.from(tenant.namespaceId, 'hex');
  await db.transaction(async (tx) => {
    const [app] = await tx.rows<{ window_started_at: string | null }>(
      sql`SELECT window_started_at FROM orbit_application_resources WHERE application_id = ${applicationId} ${lockRows('application')}`,
    );
    const before = (await namespaceRowsLock(tx, [namespaceId])).get(tenant.namespaceId);
    if (!app || !before) throw new Error('setFloors: the application or the namespace has no resources row');
    for (const statement of reservationStatements(applicationId, namespaceId, before, floors, app.window_started_at)) await tx.exec(statement);
  });
}
