import type { Handlers } from '../../generated/routes.ts';
import type { RequestContext } from '../operations.ts';
import type { AppDeps } from '../deps.ts';
import { withFreshDeadline } from '../../deadline.ts';
import { OrbitError, invalidArgument, notFound } from '../../errors.ts';
import { hexToId, idToHex, isHexId, type IdBytes } from '../../ids.ts';
import { canAccessQueue } from '../../domain/principal.ts';
import { TASK_DEFAULTS } from '../../domain/limits.ts';
import { isTerminal } from '../../domain/task-transitions.ts';
import type { TaskState } from '../../store/tasks/tasks.ts';
import type { SubmitItem, SubmitRequest } from '../../store/tasks/admission.ts';
import type { components } from '../../generated/openapi.ts';
import * as validators from '../../generated/validators.js';
import { validationError } from '../../input/validation-errors.ts';
import { fieldPath } from '../../input/field-path.ts';
import { errorObject } from '../envelope.ts';
import { taskAttempts, taskGetVisible, taskList, taskListNewest, toTask } from '../../store/tasks/tasks.ts';
import { taskCancel, taskResolve, taskRetry } from '../../store/tasks/operator-operations.ts';
import { queueIdsVisible } from '../../store/quotas/queues.ts';
import { eventList } from '../../store/records/events.ts';
import { DEFAULT_PAGE_SIZE, decodeCursor, encodeCursor } from '../cursor.ts';
import { receiptIdentity } from './receipt-identity.ts';

type TaskHandlers = Pick<
  Handlers<RequestContext>,
  'submitTask' | 'submitTasks' | 'listTasks' | 'listAllTasks' | 'listTaskAttempts' | 'listTaskEvents' | 'getTask' | 'cancelTask' | 'resolveTask' | 'retryTask'
>;
type SubmitTaskBody = components['schemas']['SubmitTaskRequest'];
type SubmitTaskItem = components['schemas']['SubmitTaskItem'];
type ItemResult = components['schemas']['SubmitTaskItemResult'];

/**
 * A submission with the defaults filled in, and the content its idempotency identity covers:
 * leaving out `priority` and sending the default are the same submission - sent singly or as
 * an item of a batch.
 */
function submission(body: SubmitTaskBody, within: ReadonlyArray<string | number> = []): { request: SubmitRequest; normalized: Record<string, unknown> } {
  const request: SubmitRequest = {
    payload: body.payload,
    payloadJson: JSON.stringify(body.payload),
    priority: body.priority ?? TASK_DEFAULTS.priority,
    resourceKey: body.resource_key ?? null,
    maxAttempts: body.max_attempts ?? TASK_DEFAULTS.max_attempts,
    deadlineSeconds: body.deadline_seconds ?? TASK_DEFAULTS.deadline_seconds,
    delaySeconds: body.delay_seconds ?? TASK_DEFAULTS.delay_seconds,
    onUnknownOutcome: body.on_unknown_outcome ?? TASK_DEFAULTS.on_unknown_outcome,
  };
  if (request.delaySeconds >= request.deadlineSeconds) {
    throw invalidArgument(fieldPath([...within, 'delay_seconds']), `must be less than deadline_seconds (${request.deadlineSeconds})`);
  }
  const normalized = {
    payload: request.payload,
    priority: request.priority,
    resource_key: request.resourceKey,
    max_attempts: request.maxAttempts,
    deadline_seconds: request.deadlineSeconds,
    delay_seconds: request.delaySeconds,
    on_unknown_outcome: request.onUnknownOutcome,
  };
  return { request, normalized };
}

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
      const { request, normalized } = submission(input.body);
      const receipt = receiptIdentity(principal, input.headers['Idempotency-Key'], 'submitTask', { queue: queueName }, normalized);
      const outcome = await deps.admission.submit(idToHex(principal.applicationId), { principal, queueId, queueName, receipt, request });
      if (!outcome.ok) {
        deps.metrics.submissions.inc({ result: outcome.error.code.toLowerCase() });
        throw outcome.error;
      }
      deps.metrics.submissions.inc({ result: outcome.deduplicated ? 'deduplicated' : 'accepted' });
      return { task: outcome.task, deduplicated: outcome.deduplicated };
    },
    async submitTasks(input, ctx) {
      const principal = ctx.principal();
      const queueName = input.path.queue;
      const queueId = await visibleQueueId(ctx, queueName);
      // Each item is checked on its own: a bad item is refused in its result, the others go on.
      const results: Array<ItemResult | null> = [];
      const items: SubmitItem[] = [];
      const itemIndex: number[] = [];
      (input.body.tasks as unknown[]).forEach((raw, i) => {
        const claimed = (raw as { idempotency_key?: unknown }).idempotency_key;
        const key = typeof claimed === 'string' ? claimed : '';
        try {
          if (!validators.schema_SubmitTaskItem(raw)) throw validationError(validators.schema_SubmitTaskItem.errors, 'body', ['tasks', i]);
          const { idempotency_key: itemKey, ...body } = raw as unknown as SubmitTaskItem;
          const { request, normalized } = submission(body, ['tasks', i]);
          // The same identity as a single submit with this key: a task submitted singly can be
          // replayed in a batch and the other way round.
          const receipt = receiptIdentity(principal, itemKey, 'submitTask', { queue: queueName }, normalized);
          items.push({ principal, queueId, queueName, receipt, request });
          itemIndex.push(i);
          results.push(null);
        } catch (error) {
          if (!(error instanceof OrbitError)) throw error;
          results.push({ idempotency_key: key, status: 'refused', error: errorObject(error) as ItemResult['error'] });
        }
      });
      // One transaction for the whole batch, in order (admission.ts): when a quota fills in
      // the middle, the items before stay accepted and the rest are refused.
      const outcomes = await deps.submitBatch(items);
      outcomes.forEach((outcome, n) => {
        const item = items[n] as SubmitItem;
        results[itemIndex[n] as number] = outcome.ok
          ? { idempotency_key: item.receipt.key, status: outcome.deduplicated ? 'replayed' : 'accepted', task: outcome.task }
          : { idempotency_key: item.receipt.key, status: 'refused', error: errorObject(outcome.error) as ItemResult['error'] };
      });
      const done = results as ItemResult[];
      const count = (status: ItemResult['status']) => done.filter((r) => r.status === status).length;
      for (const r of done)
        deps.metrics.submissions.inc({
          result: r.status === 'refused' ? (r.error?.code ?? 'invalid_argument').toLowerCase() : r.status === 'replayed' ? 'deduplicated' : 'accepted',
        });
      return { results: done, accepted: count('accepted'), replayed: count('replayed'), refused: count('refused') };
    },
    async listTasks(input, ctx) {
      const principal = ctx.principal();
      const queueId = await visibleQueueId(ctx, input.path.queue);
      return taskPage(
        await taskList(deps.db, {
          queueId,
          state: input.query.state,
          after: cursorTaskId(input.query.cursor),
          limit: input.query.limit ?? DEFAULT_PAGE_SIZE,
          namespace: principal.namespace,
        }),
      );
    },
    async listAllTasks(input, ctx) {
      const principal = ctx.principal();
      const queueIds = input.query.queue === undefined ? await queueIdsVisible(deps.db, principal) : [await visibleQueueId(ctx, input.query.queue)];
      return taskPage(
        await taskListNewest(deps.db, {
          queueIds,
          state: input.query.state,
          before: cursorTaskId(input.query.cursor),
          limit: input.query.limit ?? DEFAULT_PAGE_SIZE,
          namespace: principal.namespace,
        }),
      );
    },
    async listTaskAttempts(input, ctx) {
      const task = await taskGetVisible(deps.db, ctx.principal(), hexToId(input.path.task_id));
      return { attempts: await taskAttempts(deps.db, task.task_id) };
    },
    async listTaskEvents(input, ctx) {
      const principal = ctx.principal();
      await taskGetVisible(deps.db, principal, hexToId(input.path.task_id));
      const page = await eventList(deps.db, {
        namespaceId: principal.namespaceId,
        namespace: principal.namespace,
        subject: { kind: 'task', id: input.path.task_id },
        after: input.query.after ?? '0',
        limit: input.query.limit ?? DEFAULT_PAGE_SIZE,
      });
      return { events: page.events as components['schemas']['Event'][], next_after: page.nextAfter };
    },
    async getTask(input, ctx) {
      const principal = ctx.principal();
      const taskId = hexToId(input.path.task_id);
      const waitMs = (input.query.wait_seconds ?? 0) * 1000;
      if (waitMs === 0) return toTask(await taskGetVisible(deps.db, principal, taskId), principal.namespace);
      // Wait without a database connection: the process's watcher wakes this request on an
      // event about the task (registered before each read, so none can slip between). The wait
      // is the caller's; each read after it has the request's database bound afresh.
      const fresh = <T>(fn: () => Promise<T>) => withFreshDeadline(deps.requestTimeoutMs, fn);
      const read = () => fresh(() => taskGetVisible(deps.db, principal, taskId));
      // The answer says whether the wait ended because the task settled or because time ran out.
      const waited = (row: Awaited<ReturnType<typeof taskGetVisible>>, settled: boolean) => {
        ctx.hono.header('X-Orbit-Wait', settled ? 'settled' : 'timed_out');
        return toTask(row, principal.namespace);
      };
      const until = Date.now() + waitMs;
      const signal = ctx.hono.req.raw.signal;
      for (;;) {
        const waiter = await fresh(() => deps.watcher.register({ namespaceId: idToHex(principal.namespaceId), subject: input.path.task_id }));
        let row: Awaited<ReturnType<typeof taskGetVisible>>;
        try {
          row = await read();
        } catch (error) {
          waiter.cancel();
          throw error;
        }
        const left = until - Date.now();
        const settled = isSettled(row.state as TaskState);
        if (settled || left <= 0 || signal.aborted) {
          waiter.cancel();
          return waited(row, settled);
        }
        // Not woken (the time is up, the client left, the server stops): one last read answers.
        if (!(await waiter.wait(left, signal))) {
          const last = await read();
          return waited(last, isSettled(last.state as TaskState));
        }
      }
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
    async retryTask(input, ctx) {
      const principal = ctx.principal();
      return taskRetry(deps.db, {
        principal,
        requestId: ctx.requestId,
        receipt: receiptIdentity(principal, input.headers['Idempotency-Key'], 'retryTask', { task_id: input.path.task_id }, input.body),
        taskId: hexToId(input.path.task_id),
        reason: input.body.reason,
        nowMs: deps.clock.now(),
      });
    },
  };
}

/** The task id a task list's `cursor` names (null: the first page); anything else is 400. */
function cursorTaskId(cursor: string | undefined): IdBytes | null {
  const id = decodeCursor(cursor);
  if (id !== null && !isHexId(id)) throw invalidArgument('cursor', 'is not a cursor returned by this operation', 'query');
  return id === null ? null : hexToId(id);
}

/** A page of tasks, with the cursor of the next one when there is more. */
function taskPage({ tasks, more }: { tasks: components['schemas']['Task'][]; more: boolean }): components['schemas']['TaskPage'] {
  const last = tasks.at(-1);
  return more && last ? { tasks, next_cursor: encodeCursor(last.task_id) } : { tasks };
}

/** A wait ends when the task is terminal or waits for an operator. */
function isSettled(state: TaskState): boolean {
  return isTerminal(state) || state === 'NEEDS_REVIEW';
}
