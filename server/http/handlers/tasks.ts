import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { invalidArgument, notFound } from '../../errors.ts';
import { hexToId, idToHex, isHexId } from '../../ids.ts';
import { canAccessQueue } from '../../domain/principal.ts';
import { TASK_DEFAULTS } from '../../domain/limits.ts';
import type { SubmitRequest } from '../../store/tasks/admission.ts';
import { taskGetVisible, taskList, toTask } from '../../store/tasks/tasks.ts';
import { taskCancel, taskResolve } from '../../store/tasks/task-decisions.ts';
import { DEFAULT_PAGE_SIZE, decodeCursor, encodeCursor } from '../cursor.ts';
import { receiptIdentity } from './receipt-identity.ts';

type TaskHandlers = Pick<Handlers<RequestContext>, 'submitTask' | 'listTasks' | 'getTask' | 'cancelTask' | 'resolveTask'>;

export function taskHandlers(deps: AppDeps): TaskHandlers {
  async function visibleQueueId(ctx: RequestContext, name: string) {
    const principal = ctx.principal();
    const queueId = canAccessQueue(principal, name) ? await deps.queueIds.lookup(deps.db, principal.namespaceId, name) : null;
    if (!queueId) throw notFound(`queue "${name}"`);
    return queueId;
  }

  return {
    async submitTask(input, ctx) {
      const principal = ctx.principal();
      const queueName = input.path.queue;
      const queueId = await visibleQueueId(ctx, queueName);
      const body = input.body;
      const request: SubmitRequest = {
        payload: body.payload,
        priority: body.priority ?? TASK_DEFAULTS.priority,
        resourceKey: body.resource_key ?? null,
        maxAttempts: body.max_attempts ?? TASK_DEFAULTS.max_attempts,
        deadlineSeconds: body.deadline_seconds ?? TASK_DEFAULTS.deadline_seconds,
        delaySeconds: body.delay_seconds ?? TASK_DEFAULTS.delay_seconds,
        onUnknownOutcome: body.on_unknown_outcome ?? TASK_DEFAULTS.on_unknown_outcome,
      };
      if (request.delaySeconds >= request.deadlineSeconds) {
        throw invalidArgument('delay_seconds', `must be less than deadline_seconds (${request.deadlineSeconds})`);
      }
      // The identity covers the request with defaults filled in: leaving out `priority` and
      // sending the default are the same submission.
      const normalized = {
        payload: request.payload,
        priority: request.priority,
        resource_key: request.resourceKey,
        max_attempts: request.maxAttempts,
        deadline_seconds: request.deadlineSeconds,
        delay_seconds: request.delaySeconds,
        on_unknown_outcome: request.onUnknownOutcome,
      };
      const receipt = receiptIdentity(principal, input.headers['Idempotency-Key'], 'submitTask', { queue: queueName }, normalized);
      const outcome = await deps.admission.submit(idToHex(principal.applicationId), { principal, queueId, queueName, receipt, request });
      if (!outcome.ok) {
        deps.metrics.submissions.inc({ result: outcome.error.code.toLowerCase() });
        throw outcome.error;
      }
      deps.metrics.submissions.inc({ result: outcome.deduplicated ? 'deduplicated' : 'accepted' });
      return { task: outcome.task, deduplicated: outcome.deduplicated };
    },
    async listTasks(input, ctx) {
      const principal = ctx.principal();
      const queueId = await visibleQueueId(ctx, input.path.queue);
      const after = decodeCursor(input.query.cursor);
      if (after !== null && !isHexId(after)) throw invalidArgument('cursor', 'is not a cursor returned by this operation', 'query');
      const { tasks, more } = await taskList(deps.db, {
        queueId,
        state: input.query.state,
        after: after === null ? null : hexToId(after),
        limit: input.query.limit ?? DEFAULT_PAGE_SIZE,
        namespace: principal.namespace,
      });
      const last = tasks.at(-1);
      return more && last ? { tasks, next_cursor: encodeCursor(last.task_id) } : { tasks };
    },
    async getTask(input, ctx) {
      const principal = ctx.principal();
      return toTask(await taskGetVisible(deps.db, principal, hexToId(input.path.task_id)), principal.namespace);
    },
    async cancelTask(input, ctx) {
      const principal = ctx.principal();
      return taskCancel(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'cancelTask', { task_id: input.path.task_id }, input.body),
        taskId: hexToId(input.path.task_id),
        reason: input.body.reason,
      });
    },
    async resolveTask(input, ctx) {
      const principal = ctx.principal();
      const body = input.body;
      return taskResolve(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'resolveTask', { task_id: input.path.task_id }, body),
        taskId: hexToId(input.path.task_id),
        reason: body.reason,
        outcome: body.outcome,
        result: body.result,
        error: body.error,
      });
    },
  };
}
