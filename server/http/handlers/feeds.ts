import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { invalidArgument } from '../../errors.ts';
import { auditList } from '../../store/records/audit.ts';
import { eventList } from '../../store/records/events.ts';
import { DEFAULT_PAGE_SIZE, decodeCursor, encodeCursor } from '../cursor.ts';

type FeedHandlers = Pick<Handlers<RequestContext>, 'listAuditEvents' | 'listEvents'>;

export function feedHandlers(deps: AppDeps): FeedHandlers {
  return {
    async listAuditEvents(input, ctx) {
      const principal = ctx.principal();
      const after = decodeCursor(input.query.cursor) ?? '0';
      if (!/^\d{1,20}$/.test(after)) throw invalidArgument('cursor', 'is not a cursor returned by this operation', 'query');
      const { items, lastSequence, more } = await auditList(deps.db, {
        namespaceId: principal.namespaceId,
        namespace: principal.namespace,
        afterSequence: after,
        limit: input.query.limit ?? DEFAULT_PAGE_SIZE,
      });
      const page = { audit_events: items as never[] };
      return more && lastSequence !== null ? { ...page, next_cursor: encodeCursor(lastSequence) } : page;
    },
    async listEvents(input, ctx) {
      const principal = ctx.principal();
      const { events, nextAfter } = await eventList(deps.db, {
        namespaceId: principal.namespaceId,
        namespace: principal.namespace,
        after: input.query.after ?? '0',
        limit: input.query.limit ?? DEFAULT_PAGE_SIZE,
        // Events about a queue outside the credential's scope are not shown (out of scope is never seen).
        filter: { scope: principal.queues },
      });
      return { events: events as never[], next_after: nextAfter };
    },
  };
}
