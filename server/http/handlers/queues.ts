import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { QUEUE_DEFAULTS } from '../../domain/limits.ts';
import { queueConfigure, queueConfigureDryRun, queueCreate, queueGetVisible, queueList, toQueue } from '../../store/quotas/queues.ts';
import { DEFAULT_PAGE_SIZE, decodeCursor, encodeCursor } from '../cursor.ts';
import { receiptIdentity } from './receipt-identity.ts';

type QueueHandlers = Pick<Handlers<RequestContext>, 'listQueues' | 'getQueue' | 'createQueue' | 'configureQueue'>;

export function queueHandlers(deps: AppDeps): QueueHandlers {
  return {
    async listQueues(input, ctx) {
      const principal = ctx.principal();
      const limit = input.query.limit ?? DEFAULT_PAGE_SIZE;
      const { queues, more } = await queueList(deps.db, { principal, after: decodeCursor(input.query.cursor) ?? '', limit });
      const last = queues.at(-1);
      return more && last ? { queues, next_cursor: encodeCursor(last.queue) } : { queues };
    },
    async getQueue(input, ctx) {
      const principal = ctx.principal();
      return toQueue(await queueGetVisible(deps.db, principal, input.path.queue), principal.namespace);
    },
    async createQueue(input, ctx) {
      const principal = ctx.principal();
      const { name, reason, ...limits } = input.body;
      return queueCreate(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'createQueue', {}, input.body),
        name,
        reason,
        limits: { ...QUEUE_DEFAULTS, ...limits },
      });
    },
    async configureQueue(input, ctx) {
      const principal = ctx.principal();
      const { expected_revision, reason, dry_run, ...limits } = input.body;
      if (dry_run === true) {
        // No receipt: a dry run neither replays a key nor keeps one (openapi.yaml).
        const { queue, effects } = await queueConfigureDryRun(deps.db, { principal, name: input.path.queue, expectedRevision: expected_revision, limits });
        return { queue, deduplicated: false, dry_run: true, effects };
      }
      return queueConfigure(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'configureQueue', { queue: input.path.queue }, input.body),
        name: input.path.queue,
        expectedRevision: expected_revision,
        reason,
        limits,
      });
    },
  };
}
