/**
 * Orbit's HTTP SDK: one method per operation of openapi.yaml, built on openapi-fetch over the
 * generated `paths`, so paths, parameters and bodies are checked against the spec at compile time.
 *
 * What the SDK adds on top of the wire format (docs/http-api.md):
 * - methods return the envelope's `data`; uint64 counters, revisions and event sequences come
 *   back as `bigint` (a JS number loses precision above 2^53);
 * - every failure is an `OrbitError`. No response at all (the request may or may not have been
 *   applied) is UNAVAILABLE with status 0, so the caller retries with the same Idempotency-Key;
 * - nothing is retried and no Idempotency-Key is invented: the caller owns operation identity -
 *   except the acks of `subscribe`, whose key is the subscription and the sequence (an ack is the
 *   same request however often it is sent).
 */
import createClient from 'openapi-fetch';
import type { components, operations, paths } from './generated/openapi.ts';

type Schemas = components['schemas'];

// ---------------------------------------------------------------------------------------------
// Public types, derived from the generated schemas so they cannot drift from the spec.

/** Wire fields that are uint64 decimal strings and that the SDK hands out as `bigint`. */
type BigintField =
  | 'revision'
  | 'unfinished_tasks'
  | 'active_attempts'
  | 'pending_starts'
  | 'sequence'
  | 'next_after'
  | 'fired'
  | 'skipped_misfire'
  | 'deferred_full'
  | 'acked_sequence'
  | 'pruned_through';

/**
 * A response schema as the SDK returns it. openapi-typescript renders a free JSON object
 * (`type: object` without properties: payload, data, before/after, details) as
 * `Record<string, never>`, which no real value satisfies; it becomes `Record<string, unknown>`,
 * and the walk stops there, as the runtime conversion does: user data is never touched.
 */
export type FromWire<T> = T extends readonly (infer U)[]
  ? FromWire<U>[]
  : T extends object
    ? string extends keyof T
      ? Record<string, unknown>
      : { [K in keyof T]: K extends BigintField ? bigint : FromWire<T[K]> }
    : T;

/** A request schema as the SDK accepts it: a revision may be a bigint (as read) or its decimal string. */
export type ToWire<T> = {
  [K in keyof T]: K extends 'expected_revision' ? bigint | string : string extends keyof NonNullable<T[K]> ? Record<string, unknown> : T[K];
};

export type ErrorCode = Schemas['ErrorCode'] | 'RATE_LIMITED' | 'LEASE_LOST';
export type TaskState = Schemas['TaskState'];
export type ApplicationResources = FromWire<Schemas['ApplicationResources']>;
export type ConfigureApplicationResourcesRequest = ToWire<Schemas['ConfigureApplicationResourcesRequest']>;
export type ConfigureApplicationResourcesResult = FromWire<Schemas['ConfigureApplicationResourcesResult']>;
export type RetentionPolicy = FromWire<Schemas['RetentionPolicy']>;
export type ConfigureRetentionRequest = ToWire<Schemas['ConfigureRetentionRequest']>;
export type ConfigureRetentionResult = FromWire<Schemas['ConfigureRetentionResult']>;
export type Queue = FromWire<Schemas['Queue']>;
export type QueuePage = FromWire<Schemas['QueuePage']>;
export type QueueResult = FromWire<Schemas['QueueResult']>;
export type CreateQueueRequest = ToWire<Schemas['CreateQueueRequest']>;
export type ConfigureQueueRequest = ToWire<Schemas['ConfigureQueueRequest']>;
export type Task = FromWire<Schemas['Task']>;
export type TaskPage = FromWire<Schemas['TaskPage']>;
export type TaskResult = FromWire<Schemas['TaskResult']>;
export type SubmitTaskRequest = ToWire<Schemas['SubmitTaskRequest']>;
/** One item of `submitTasks`: a submit request with its own idempotency key. */
export type SubmitTaskItem = ToWire<Schemas['SubmitTaskItem']>;
export type SubmitTaskItemResult = FromWire<Schemas['SubmitTaskItemResult']>;
export type SubmitTasksResult = FromWire<Schemas['SubmitTasksResult']>;
export type CancelTaskRequest = ToWire<Schemas['CancelTaskRequest']>;
export type ResolveTaskRequest = ToWire<Schemas['ResolveTaskRequest']>;
export type Schedule = FromWire<Schemas['Schedule']>;
export type SchedulePage = FromWire<Schemas['SchedulePage']>;
export type ScheduleResult = FromWire<Schemas['ScheduleResult']>;
export type CreateScheduleRequest = ToWire<Schemas['CreateScheduleRequest']>;
export type ScheduleStateRequest = ToWire<Schemas['ScheduleStateRequest']>;
export type AuditEvent = FromWire<Schemas['AuditEvent']>;
export type AuditEventPage = FromWire<Schemas['AuditEventPage']>;
export type Event = FromWire<Schemas['Event']>;
export type EventPage = FromWire<Schemas['EventPage']>;
export type Subscription = FromWire<Schemas['Subscription']>;
export type SubscriptionPage = FromWire<Schemas['SubscriptionPage']>;
export type SubscriptionResult = FromWire<Schemas['SubscriptionResult']>;
export type SubscriptionEvents = FromWire<Schemas['SubscriptionEvents']>;
export type CreateSubscriptionRequest = ToWire<Schemas['CreateSubscriptionRequest']>;
export type SubscriptionStateRequest = ToWire<Schemas['SubscriptionStateRequest']>;

type Query<Op extends keyof operations> = NonNullable<operations[Op]['parameters']['query']>;
export type ListQueuesParams = Query<'listQueues'>;
export type ListTasksParams = Query<'listTasks'>;
export type ListSchedulesParams = Query<'listSchedules'>;
export type ListAuditEventsParams = Query<'listAuditEvents'>;
export type ListEventsParams = Omit<Query<'listEvents'>, 'after'> & { after?: bigint | string };
export type ListSubscriptionsParams = Query<'listSubscriptions'>;

export interface ReadSubscriptionOptions {
  /** At most this many events (1-100; the server's default is 50). */
  limit?: number;
  /** Wait up to this many seconds (0-30) for the first event when there is none yet. */
  waitSeconds?: number;
  /** Abandons the request (the promise rejects with UNAVAILABLE). */
  signal?: AbortSignal;
}

export interface SubscribeOptions {
  /** Stops the loop: a waiting read is abandoned and the iterator ends. */
  signal: AbortSignal;
  /** How long each read waits for events (0-30 seconds; default 20). */
  waitSeconds?: number;
  /** Events per read (1-100; default the server's 50). */
  limit?: number;
}

/** The states `waitForTask` stops at: the terminal ones and NEEDS_REVIEW (which waits for an operator). */
export const SETTLED_TASK_STATES: ReadonlySet<TaskState> = new Set<TaskState>(['SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED', 'NEEDS_REVIEW']);

export interface OrbitClientOptions {
  /** http(s) URL of an Orbit server, optionally with a path prefix; a trailing slash is fine. */
  baseUrl: string;
  /** A credential token (`orbit-admin bootstrap` / `credential create`). */
  token: string;
  /** Defaults to the global fetch; useful for timeouts (AbortSignal), proxies and tests. */
  fetch?: (request: Request) => Promise<Response>;
}

// ---------------------------------------------------------------------------------------------
// Errors

export class OrbitError extends Error {
  readonly code: ErrorCode;
  /** HTTP status; 0 when no HTTP answer was received (or the request was never sent). */
  readonly status: number;
  /** The server's request id, for its logs; undefined when there was no Orbit answer. */
  readonly requestId: string | undefined;
  readonly details: Record<string, unknown> | undefined;
  /** Seconds to wait before trying again (the Retry-After header), when the server said so. */
  readonly retryAfter: number | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options: {
      status: number;
      requestId?: string | undefined;
      details?: Record<string, unknown> | undefined;
      retryAfter?: number | undefined;
      cause?: unknown;
    },
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'OrbitError';
    this.code = code;
    this.status = options.status;
    this.requestId = options.requestId;
    this.details = options.details;
    this.retryAfter = options.retryAfter;
  }
}

export function isOrbitError(error: unknown): error is OrbitError {
  return error instanceof OrbitError;
}

/** A mistake caught before anything was sent: retrying cannot help, so it is not UNAVAILABLE. */
function invalid(field: string, reason: string, location: string): OrbitError {
  return new OrbitError('INVALID_ARGUMENT', `${field}: ${reason}`, { status: 0, details: { field, location, reason } });
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Retry-After is delta-seconds from Orbit, but an HTTP-date is legal too (e.g. from a proxy). */
function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  if (/^\s*\d+\s*$/.test(value)) return Number(value);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

// ---------------------------------------------------------------------------------------------
// The wire layer: one place that decides what a response means.

/**
 * Wraps the caller's fetch so that openapi-fetch only ever sees an Orbit success envelope.
 * Everything else is thrown as an OrbitError from here (openapi-fetch rethrows fetch errors
 * unchanged): an error envelope as its own code; a failure before the full body arrived, or a
 * body that is not an Orbit envelope (a proxy's HTML 502, a truncated 200), as UNAVAILABLE,
 * because the server may or may not have applied the request.
 */
function orbitFetch(baseFetch: (request: Request) => Promise<Response>) {
  return async (request: Request): Promise<Response> => {
    const what = `${request.method} ${new URL(request.url).pathname}`;
    let response: Response;
    let text: string;
    try {
      response = await baseFetch(request);
      text = await response.text(); // read here, so a connection lost mid-body is caught too
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new OrbitError('UNAVAILABLE', `${what}: no response from Orbit (${reason}); the outcome is unknown - retry with the same Idempotency-Key`, {
        status: 0,
        cause,
      });
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    const headerRequestId = response.headers.get('x-request-id') ?? undefined;
    if (response.ok && isObject(body) && 'data' in body && typeof body.request_id === 'string') {
      return new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
    }
    if (!response.ok && isObject(body) && isObject(body.error) && typeof body.error.code === 'string') {
      const { code, message, details } = body.error;
      throw new OrbitError(code as ErrorCode, typeof message === 'string' ? message : code, {
        status: response.status,
        requestId: typeof body.request_id === 'string' ? body.request_id : headerRequestId,
        details: isObject(details) ? details : undefined,
        retryAfter: parseRetryAfter(response.headers.get('retry-after')),
      });
    }
    throw new OrbitError(
      'UNAVAILABLE',
      `${what}: HTTP ${response.status} without an Orbit envelope (a proxy or load balancer answered?); the outcome is unknown - retry with the same Idempotency-Key`,
      {
        status: response.status,
        requestId: headerRequestId,
        retryAfter: parseRetryAfter(response.headers.get('retry-after')),
      },
    );
  };
}

/** orbitFetch has already thrown for anything but a success envelope, so `data` is present. */
async function unwrap<T>(pending: Promise<{ data?: { data: T } }>): Promise<T> {
  const { data } = await pending;
  if (data === undefined) throw new OrbitError('INTERNAL', 'the server answered without data', { status: 0 });
  return data.data;
}

// Conversions of exactly the schema fields that are uint64 strings; user data is left alone.
function usage<T extends { revision: string; unfinished_tasks: string; active_attempts: string; pending_starts: string }>(row: T): FromWire<T> {
  const { revision, unfinished_tasks, active_attempts, pending_starts } = row;
  return {
    ...row,
    revision: BigInt(revision),
    unfinished_tasks: BigInt(unfinished_tasks),
    active_attempts: BigInt(active_attempts),
    pending_starts: BigInt(pending_starts),
  } as FromWire<T>;
}
const queueResult = (r: Schemas['QueueResult']): QueueResult => ({ ...r, queue: usage(r.queue) });
const schedule = (s: Schemas['Schedule']): Schedule =>
  ({ ...s, fired: BigInt(s.fired), skipped_misfire: BigInt(s.skipped_misfire), deferred_full: BigInt(s.deferred_full) }) as Schedule;
const scheduleResult = (r: Schemas['ScheduleResult']): ScheduleResult => ({ ...r, schedule: schedule(r.schedule) });
const event = (e: Schemas['Event']): Event => ({ ...e, sequence: BigInt(e.sequence) }) as Event;
const eventPage = (p: Schemas['EventPage']): EventPage => ({
  events: p.events.map(event),
  next_after: BigInt(p.next_after),
});
const subscription = (s: Schemas['Subscription']): Subscription =>
  ({
    ...s,
    acked_sequence: BigInt(s.acked_sequence),
    ...(s.pruned_through !== undefined ? { pruned_through: BigInt(s.pruned_through) } : {}),
  }) as Subscription;
const retention = (r: Schemas['RetentionPolicy']): RetentionPolicy => ({ ...r, revision: BigInt(r.revision) });
const subscriptionResult = (r: Schemas['SubscriptionResult']): SubscriptionResult => ({ ...r, subscription: subscription(r.subscription) });

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted || ms <= 0) {
      resolve();
      return;
    }
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });
}

/** Exponential backoff with jitter, 100 ms doubling up to 5 s, never shorter than the server's Retry-After. */
function backoffMs(failures: number, error: unknown): number {
  const base = Math.min(5_000, 100 * 2 ** Math.min(failures - 1, 10));
  const jittered = base / 2 + Math.random() * (base / 2);
  const retryAfter = isOrbitError(error) && error.retryAfter !== undefined ? error.retryAfter * 1000 : 0;
  return Math.max(jittered, retryAfter);
}

/** What a subscription loop waits out and tries again: no answer or UNAVAILABLE, and a PAUSED subscription (until it is resumed). */
function worthRetrying(error: unknown): boolean {
  if (!isOrbitError(error)) return false;
  return error.code === 'UNAVAILABLE' || (error.code === 'STATE_CONFLICT' && error.details?.field === 'state');
}

/** Request bodies go out with revisions as decimal strings, the wire form. */
function toWire<K extends keyof Schemas>(body: ToWire<Schemas[K]>): Schemas[K] {
  const out: Record<string, unknown> = { ...body };
  if (typeof out.expected_revision === 'bigint') out.expected_revision = out.expected_revision.toString();
  // The cast only undoes ToWire: bigint revisions are strings now, and free JSON is Record<string, never> in the generated types.
  return out as Schemas[K];
}

/** A bad key would make fetch refuse the header (indistinguishable from a network failure) or the server answer 400. */
function idempotencyKey(key: string): { 'Idempotency-Key': string } {
  if (typeof key !== 'string' || !/^[!-~]{1,128}$/.test(key)) throw invalid('Idempotency-Key', 'must be 1-128 printable non-space ASCII characters', 'header');
  return { 'Idempotency-Key': key };
}

/** openapi-fetch percent-encodes path values, but "." and ".." survive that and the URL parser would resolve them away. */
function segment(name: string, value: string): string {
  if (typeof value !== 'string' || value === '' || value === '.' || value === '..') throw invalid(name, 'is not a valid path segment', 'path');
  return value;
}

/** JSON.stringify throws for bigint and cycles in user data; that is the caller's error, and nothing was sent. */
function serializeBody(body: unknown): string {
  try {
    return JSON.stringify(body);
  } catch (cause) {
    throw new OrbitError('INVALID_ARGUMENT', `the request body cannot be serialised as JSON: ${cause instanceof Error ? cause.message : String(cause)}`, {
      status: 0,
      details: { location: 'body' },
      cause,
    });
  }
}

function checkOptions(options: OrbitClientOptions): { baseUrl: string; token: string } {
  let url: URL;
  try {
    url = new URL(options.baseUrl);
  } catch {
    throw invalid('baseUrl', 'is not a URL', 'options');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('baseUrl', 'must be an http or https URL', 'options');
  // fetch refuses URLs with credentials; a query or fragment would end up in the middle of every path.
  if (url.username || url.password || url.search || url.hash) throw invalid('baseUrl', 'must not contain credentials, a query or a fragment', 'options');
  if (typeof options.token !== 'string' || !/^[!-~]+$/.test(options.token))
    throw invalid('token', 'must be a non-empty token of printable non-space ASCII', 'options');
  return { baseUrl: url.href.replace(/\/+$/, ''), token: options.token };
}

// ---------------------------------------------------------------------------------------------
// The client

export function createOrbitClient(options: OrbitClientOptions) {
  const { baseUrl, token } = checkOptions(options);
  const api = createClient<paths>({
    baseUrl,
    fetch: orbitFetch(options.fetch ?? ((request) => globalThis.fetch(request))),
    headers: { Authorization: `Bearer ${token}` },
    bodySerializer: serializeBody,
  });

  /** The id of the subscription named `name`, from the list (it is sorted by name). */
  async function findSubscription(name: string): Promise<string> {
    let cursor: string | undefined;
    for (;;) {
      const page = await client.listSubscriptions({ limit: 100, ...(cursor !== undefined ? { cursor } : {}) });
      const found = page.subscriptions.find((s) => s.name === name);
      if (found) return found.subscription_id;
      if (page.next_cursor === undefined) break;
      cursor = page.next_cursor;
    }
    throw new OrbitError('NOT_FOUND', `subscription "${name}" not found`, { status: 0, details: { name } });
  }

  const client = {
    async getApplicationResources(): Promise<ApplicationResources> {
      return usage(await unwrap(api.GET('/v1/application/resources')));
    },

    async configureApplicationResources(key: string, request: ConfigureApplicationResourcesRequest): Promise<ConfigureApplicationResourcesResult> {
      const data = await unwrap(
        api.POST('/v1/application/resources:configure', {
          params: { header: idempotencyKey(key) },
          body: toWire<'ConfigureApplicationResourcesRequest'>(request),
        }),
      );
      return { ...data, resources: usage(data.resources) };
    },

    /** The application's retention policy: how long finished history is kept (an absent duration: forever). */
    async getRetention(): Promise<RetentionPolicy> {
      return retention(await unwrap(api.GET('/v1/application/retention')));
    },

    /** Replaces the retention policy (a full replacement: an absent duration keeps that history forever). */
    async configureRetention(key: string, request: ConfigureRetentionRequest): Promise<ConfigureRetentionResult> {
      const data = await unwrap(
        api.POST('/v1/application/retention:configure', {
          params: { header: idempotencyKey(key) },
          body: toWire<'ConfigureRetentionRequest'>(request),
        }),
      );
      return { ...data, retention: retention(data.retention) };
    },

    async listQueues(params: ListQueuesParams = {}): Promise<QueuePage> {
      const data = await unwrap(api.GET('/v1/queues', { params: { query: params } }));
      return { ...data, queues: data.queues.map(usage) };
    },

    async getQueue(queue: string): Promise<Queue> {
      return usage(await unwrap(api.GET('/v1/queues/{queue}', { params: { path: { queue: segment('queue', queue) } } })));
    },

    async createQueue(key: string, request: CreateQueueRequest): Promise<QueueResult> {
      return queueResult(await unwrap(api.POST('/v1/queues', { params: { header: idempotencyKey(key) }, body: toWire<'CreateQueueRequest'>(request) })));
    },

    async configureQueue(key: string, queue: string, request: ConfigureQueueRequest): Promise<QueueResult> {
      return queueResult(
        await unwrap(
          api.POST('/v1/queues/{queue}:configure', {
            params: { header: idempotencyKey(key), path: { queue: segment('queue', queue) } },
            body: toWire<'ConfigureQueueRequest'>(request),
          }),
        ),
      );
    },

    async submitTask(key: string, queue: string, request: SubmitTaskRequest): Promise<TaskResult> {
      return unwrap(
        api.POST('/v1/queues/{queue}/tasks', {
          params: { header: idempotencyKey(key), path: { queue: segment('queue', queue) } },
          body: toWire<'SubmitTaskRequest'>(request),
        }),
      );
    },

    /**
     * Up to 1,000 tasks in one request and one transaction; one result per item, in order
     * (`accepted`, `replayed` or `refused` with its error). Refused items wrote nothing and may
     * be sent again with the same key; the call itself throws only when the whole request is
     * refused (a bad request, a missing action, an unknown queue, the server unavailable).
     */
    async submitTasks(queue: string, tasks: SubmitTaskItem[]): Promise<SubmitTasksResult> {
      return unwrap(
        api.POST('/v1/queues/{queue}/tasks:batch', {
          params: { path: { queue: segment('queue', queue) } },
          // Items are checked one by one by the server; the spec types them as plain objects.
          body: { tasks: tasks as unknown as Array<Record<string, never>> },
        }),
      );
    },

    async listTasks(queue: string, params: ListTasksParams = {}): Promise<TaskPage> {
      return unwrap(api.GET('/v1/queues/{queue}/tasks', { params: { path: { queue: segment('queue', queue) }, query: params } }));
    },

    async getTask(taskId: string): Promise<Task> {
      return unwrap(api.GET('/v1/tasks/{task_id}', { params: { path: { task_id: segment('task_id', taskId) } } }));
    },

    async cancelTask(key: string, taskId: string, request: CancelTaskRequest): Promise<TaskResult> {
      return unwrap(
        api.POST('/v1/tasks/{task_id}:cancel', {
          params: { header: idempotencyKey(key), path: { task_id: segment('task_id', taskId) } },
          body: toWire<'CancelTaskRequest'>(request),
        }),
      );
    },

    async resolveTask(key: string, taskId: string, request: ResolveTaskRequest): Promise<TaskResult> {
      return unwrap(
        api.POST('/v1/tasks/{task_id}:resolve', {
          params: { header: idempotencyKey(key), path: { task_id: segment('task_id', taskId) } },
          body: toWire<'ResolveTaskRequest'>(request),
        }),
      );
    },

    /**
     * A cron or interval schedule on a queue. Its tasks are admitted like submissions (both
     * quota levels); a full quota defers a trigger point, never skips it; only points older than
     * `misfire_window_seconds` follow `misfire_policy`, which cannot be changed later.
     */
    async createSchedule(key: string, queue: string, request: CreateScheduleRequest): Promise<ScheduleResult> {
      return scheduleResult(
        await unwrap(
          api.POST('/v1/queues/{queue}/schedules', {
            params: { header: idempotencyKey(key), path: { queue: segment('queue', queue) } },
            body: toWire<'CreateScheduleRequest'>(request),
          }),
        ),
      );
    },

    async getSchedule(scheduleId: string): Promise<Schedule> {
      return schedule(await unwrap(api.GET('/v1/schedules/{schedule_id}', { params: { path: { schedule_id: segment('schedule_id', scheduleId) } } })));
    },

    async listSchedules(queue: string, params: ListSchedulesParams = {}): Promise<SchedulePage> {
      const data = await unwrap(api.GET('/v1/queues/{queue}/schedules', { params: { path: { queue: segment('queue', queue) }, query: params } }));
      return { ...data, schedules: data.schedules.map(schedule) };
    },

    async pauseSchedule(key: string, scheduleId: string, request: ScheduleStateRequest): Promise<ScheduleResult> {
      return scheduleResult(
        await unwrap(
          api.POST('/v1/schedules/{schedule_id}:pause', {
            params: { header: idempotencyKey(key), path: { schedule_id: segment('schedule_id', scheduleId) } },
            body: toWire<'ScheduleStateRequest'>(request),
          }),
        ),
      );
    },

    async resumeSchedule(key: string, scheduleId: string, request: ScheduleStateRequest): Promise<ScheduleResult> {
      return scheduleResult(
        await unwrap(
          api.POST('/v1/schedules/{schedule_id}:resume', {
            params: { header: idempotencyKey(key), path: { schedule_id: segment('schedule_id', scheduleId) } },
            body: toWire<'ScheduleStateRequest'>(request),
          }),
        ),
      );
    },

    async listAuditEvents(params: ListAuditEventsParams = {}): Promise<AuditEventPage> {
      return unwrap(api.GET('/v1/audit-events', { params: { query: params } }));
    },

    async listEvents(params: ListEventsParams = {}): Promise<EventPage> {
      const { after, ...rest } = params;
      const query = after === undefined ? rest : { ...rest, after: after.toString() };
      return eventPage(await unwrap(api.GET('/v1/events', { params: { query } })));
    },

    /**
     * A durable cursor over the namespace's event feed, with optional `types` and `queues`
     * filters, starting after the newest event (`from: 'now'`, the default) or before the first.
     */
    async createSubscription(key: string, request: CreateSubscriptionRequest): Promise<SubscriptionResult> {
      return subscriptionResult(
        await unwrap(api.POST('/v1/subscriptions', { params: { header: idempotencyKey(key) }, body: toWire<'CreateSubscriptionRequest'>(request) })),
      );
    },

    async getSubscription(subscriptionId: string): Promise<Subscription> {
      return subscription(
        await unwrap(api.GET('/v1/subscriptions/{subscription_id}', { params: { path: { subscription_id: segment('subscription_id', subscriptionId) } } })),
      );
    },

    async listSubscriptions(params: ListSubscriptionsParams = {}): Promise<SubscriptionPage> {
      const data = await unwrap(api.GET('/v1/subscriptions', { params: { query: params } }));
      return { ...data, subscriptions: data.subscriptions.map(subscription) };
    },

    async pauseSubscription(key: string, subscriptionId: string, request: SubscriptionStateRequest): Promise<SubscriptionResult> {
      return subscriptionResult(
        await unwrap(
          api.POST('/v1/subscriptions/{subscription_id}:pause', {
            params: { header: idempotencyKey(key), path: { subscription_id: segment('subscription_id', subscriptionId) } },
            body: toWire<'SubscriptionStateRequest'>(request),
          }),
        ),
      );
    },

    async resumeSubscription(key: string, subscriptionId: string, request: SubscriptionStateRequest): Promise<SubscriptionResult> {
      return subscriptionResult(
        await unwrap(
          api.POST('/v1/subscriptions/{subscription_id}:resume', {
            params: { header: idempotencyKey(key), path: { subscription_id: segment('subscription_id', subscriptionId) } },
            body: toWire<'SubscriptionStateRequest'>(request),
          }),
        ),
      );
    },

    /** The events after the acknowledged position (reading does not move it), waiting up to `waitSeconds` for the first one. */
    async readSubscription(subscriptionId: string, options: ReadSubscriptionOptions = {}): Promise<SubscriptionEvents> {
      const query: Query<'readSubscription'> = {};
      if (options.limit !== undefined) query.limit = options.limit;
      if (options.waitSeconds !== undefined) query.wait_seconds = options.waitSeconds;
      const data = await unwrap(
        api.GET('/v1/subscriptions/{subscription_id}/events', {
          params: { path: { subscription_id: segment('subscription_id', subscriptionId) }, query },
          ...(options.signal ? { signal: options.signal } : {}),
        }),
      );
      return { events: data.events.map(event) };
    },

    /** Acknowledges every event up to and including `sequence`; the current position again is accepted and changes nothing. */
    async ackSubscription(key: string, subscriptionId: string, sequence: bigint | string): Promise<SubscriptionResult> {
      return subscriptionResult(
        await unwrap(
          api.POST('/v1/subscriptions/{subscription_id}:ack', {
            params: { header: idempotencyKey(key), path: { subscription_id: segment('subscription_id', subscriptionId) } },
            body: { sequence: sequence.toString() },
          }),
        ),
      );
    },

    /**
     * `for await (const event of orbit.subscribe('name', { signal })) { … }`: the events of the
     * subscription named `name`, one by one, in sequence order, long-polling for more.
     *
     * Each event is acknowledged when the loop body is done with it - when the loop asks for
     * the next event (or the iterator ends because `signal` aborted meanwhile) - with the
     * Idempotency-Key `ack-<subscription_id>-<sequence>`, so an ack repeated after a lost
     * answer is the same ack. Leaving the loop early (`break`, `return`, a throw) does NOT
     * acknowledge the event in hand: the iterator cannot tell a `break` from a failure, so that
     * event comes again (delivery is at-least-once). A position another reader already moved
     * past is left alone.
     *
     * No answer, UNAVAILABLE and a PAUSED subscription are waited out with a backoff (100 ms
     * doubling to 5 s, at least the server's Retry-After) and tried again; other errors (a
     * missing subscription or action, a bad option) end the iteration by throwing. When
     * `signal` aborts, a waiting read is abandoned and the iteration ends.
     */
    async *subscribe(name: string, options: SubscribeOptions): AsyncGenerator<Event, void, undefined> {
      const { signal } = options;
      const waitSeconds = options.waitSeconds ?? 20;
      let failures = 0;
      const backoff = async (error: unknown) => {
        failures += 1;
        await sleep(backoffMs(failures, error), signal);
      };
      /** Acknowledges one event, retrying what is worth retrying; false when the signal stopped it first. */
      const ack = async (subscriptionId: string, sequence: bigint): Promise<boolean> => {
        for (;;) {
          try {
            await client.ackSubscription(`ack-${subscriptionId}-${sequence}`, subscriptionId, sequence);
            failures = 0;
            return true;
          } catch (error) {
            // Below the position: another reader of the subscription acknowledged further already.
            if (isOrbitError(error) && error.code === 'STATE_CONFLICT' && error.details?.field === 'sequence') return true;
            if (!isOrbitError(error) || error.code !== 'UNAVAILABLE') throw error;
            if (signal.aborted) return false;
            await backoff(error);
            if (signal.aborted) return false;
          }
        }
      };

      const readOptions: ReadSubscriptionOptions = { waitSeconds, signal, ...(options.limit !== undefined ? { limit: options.limit } : {}) };
      let subscriptionId: string | null = null;
      while (!signal.aborted) {
        let events: Event[];
        try {
          subscriptionId ??= await findSubscription(name);
          events = (await client.readSubscription(subscriptionId, readOptions)).events;
          failures = 0;
        } catch (error) {
          if (signal.aborted) return;
          if (!worthRetrying(error)) throw error;
          await backoff(error);
          continue;
        }
        for (const e of events) {
          yield e;
          // Resumed: the loop body is done with `e`.
          if (!(await ack(subscriptionId, e.sequence)) || signal.aborted) return;
        }
      }
    },

    /**
     * The task once it is terminal (SUCCEEDED, FAILED, CANCELLED, EXPIRED) or NEEDS_REVIEW, or
     * as it is when `timeoutMs` has passed. Long-polls `GET /v1/tasks/{id}?wait_seconds=` (at
     * most 30 s a request); errors are thrown, not retried.
     */
    async waitForTask(taskId: string, options: { timeoutMs: number }): Promise<Task> {
      const deadline = Date.now() + options.timeoutMs;
      const path = { task_id: segment('task_id', taskId) };
      for (;;) {
        const remaining = deadline - Date.now();
        const started = Date.now();
        let task: Task;
        if (remaining >= 1000) {
          task = await unwrap(api.GET('/v1/tasks/{task_id}', { params: { path, query: { wait_seconds: Math.min(30, Math.floor(remaining / 1000)) } } }));
        } else {
          // Less than a second left: wait it out, then look once more (whole seconds only would overshoot the timeout).
          await sleep(remaining);
          task = await unwrap(api.GET('/v1/tasks/{task_id}', { params: { path } }));
        }
        if (SETTLED_TASK_STATES.has(task.state) || Date.now() >= deadline) return task;
        // An answer that came back at once without the task settled (a server that does not wait): do not spin.
        if (Date.now() - started < 100) await sleep(Math.min(250, deadline - Date.now()));
      }
    },
  };
  return client;
}

export type OrbitClient = ReturnType<typeof createOrbitClient>;
