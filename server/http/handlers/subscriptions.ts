import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { hexToId, idToHex } from '../../ids.ts';
import { withFreshDeadline } from '../../deadline.ts';
import type { components } from '../../generated/openapi.ts';
import {
  filtersOfRow,
  subscriptionAck,
  subscriptionCreate,
  subscriptionGetVisible,
  subscriptionList,
  subscriptionRead,
  subscriptionSetState,
  toSubscription,
  type SubscriptionDefinition,
} from '../../store/subscriptions/subscriptions.ts';
import { DEFAULT_PAGE_SIZE, decodeCursor, encodeCursor } from '../cursor.ts';
import { receiptIdentity } from './receipt-identity.ts';
import type { EventMatch } from '../event-watcher.ts';

type SubscriptionHandlers = Pick<
  Handlers<RequestContext>,
  'createSubscription' | 'listSubscriptions' | 'getSubscription' | 'pauseSubscription' | 'resumeSubscription' | 'readSubscription' | 'ackSubscription'
>;
type CreateSubscriptionBody = components['schemas']['CreateSubscriptionRequest'];

/**
 * The definition with the default filled in; the normalized content is what the idempotency
 * identity covers (leaving out `from` and sending `now` are the same request; the reason is
 * not part of it, as for a schedule).
 */
function definitionOf(body: CreateSubscriptionBody): { definition: SubscriptionDefinition; normalized: Record<string, unknown> } {
  const { reason: _reason, ...rest } = body;
  const definition: SubscriptionDefinition = { name: body.name, types: body.types ?? null, queues: body.queues ?? null, from: body.from ?? 'now' };
  return { definition, normalized: { ...rest, from: definition.from } };
}

export function subscriptionHandlers(deps: AppDeps): SubscriptionHandlers {
  type StateInput = Parameters<SubscriptionHandlers['pauseSubscription']>[0] | Parameters<SubscriptionHandlers['resumeSubscription']>[0];
  function setState(input: StateInput, ctx: RequestContext, operation: 'pauseSubscription' | 'resumeSubscription', to: 'PAUSED' | 'ACTIVE') {
    const principal = ctx.principal();
    return subscriptionSetState(deps.db, {
      principal,
      requestId: ctx.requestId,
      receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], operation, { subscription_id: input.path.subscription_id }, input.body),
      subscriptionId: hexToId(input.path.subscription_id),
      reason: input.body.reason,
      to,
    });
  }

  return {
    async createSubscription(input, ctx) {
      const principal = ctx.principal();
      const { definition, normalized } = definitionOf(input.body);
      return subscriptionCreate(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'createSubscription', {}, normalized),
        reason: input.body.reason,
        nowMs: deps.clock.now(),
        definition,
      });
    },
    async listSubscriptions(input, ctx) {
      const principal = ctx.principal();
      const limit = input.query.limit ?? DEFAULT_PAGE_SIZE;
      const { subscriptions, lastName, more } = await subscriptionList(deps.db, { principal, after: decodeCursor(input.query.cursor) ?? '', limit });
      return more && lastName !== null ? { subscriptions, next_cursor: encodeCursor(lastName) } : { subscriptions };
    },
    async getSubscription(input, ctx) {
      const principal = ctx.principal();
      return toSubscription(await subscriptionGetVisible(deps.db, principal, hexToId(input.path.subscription_id)), principal.namespace);
    },
    pauseSubscription: (input, ctx) => setState(input, ctx, 'pauseSubscription', 'PAUSED'),
    resumeSubscription: (input, ctx) => setState(input, ctx, 'resumeSubscription', 'ACTIVE'),

    /**
     * Reads; with `wait_seconds`, when nothing is there, waits without a database connection:
     * the process's watcher wakes the request when an event of the namespace (of the
     * subscription's types) is seen, and it reads again. Each waiter is registered before the
     * read it follows, so an event is either in that read or wakes the waiter.
     */
    async readSubscription(input, ctx) {
      const principal = ctx.principal();
      const subscriptionId = hexToId(input.path.subscription_id);
      const limit = input.query.limit ?? DEFAULT_PAGE_SIZE;
      const waitMs = (input.query.wait_seconds ?? 0) * 1000;
      if (waitMs === 0) return { events: (await subscriptionRead(deps.db, { principal, subscriptionId, limit })).events as never[] };
      // The wait is the caller's; each read after it has the request's database bound afresh.
      const fresh = <T>(fn: () => Promise<T>) => withFreshDeadline(deps.requestTimeoutMs, fn);
      const read = () => fresh(() => subscriptionRead(deps.db, { principal, subscriptionId, limit }));

      const deadline = Date.now() + waitMs;
      const signal = ctx.hono.req.raw.signal;
      // Any event of the namespace wakes the first waiter; once the subscription is read, only
      // events of its types (when it has a types filter) wake the next ones.
      let match: EventMatch = { namespaceId: idToHex(principal.namespaceId) };
      let waiter = await fresh(() => deps.watcher.register(match));
      let last = false;
      try {
        for (;;) {
          const { events, row } = await read();
          if (events.length > 0 || last || Date.now() >= deadline || signal.aborted) return { events: events as never[] };
          const { types } = filtersOfRow(row);
          if (types) match = { ...match, types: new Set(types) };
          // Not woken: the time is up, the caller went away or the watcher stopped - one last read.
          last = !(await waiter.wait(deadline - Date.now(), signal));
          waiter.cancel();
          // A woken waiter is spent: the next one is registered before the next read.
          waiter = await fresh(() => deps.watcher.register(match));
        }
      } finally {
        waiter.cancel();
      }
    },

    async ackSubscription(input, ctx) {
      const principal = ctx.principal();
      return subscriptionAck(deps.db, {
        principal,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'ackSubscription', { subscription_id: input.path.subscription_id }, input.body),
        subscriptionId: hexToId(input.path.subscription_id),
        sequence: input.body.sequence,
      });
    },
  };
}
