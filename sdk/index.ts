/**
 * Orbit's HTTP SDK: one method per operation of openapi.yaml, built on openapi-fetch over the
 * generated `paths`, so paths, parameters and bodies are checked against the spec at compile time.
 *
 * What the SDK adds on top of the wire format (docs/http-api.md):
 * - methods return the envelope's `data`; uint64 counters, revisions and event sequences come
 *   back as `bigint` (a JS number loses precision above 2^53);
 * - every failure is an `OrbitError`. No response at all (the request may or may not have been
 *   applied) is UNAVAILABLE with status 0, so the caller retries with the same Idempotency-Key;
 * - nothing is retried and no Idempotency-Key is invented: the caller owns operation identity.
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
  | 'deferred_full';

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

type Query<Op extends keyof operations> = NonNullable<operations[Op]['parameters']['query']>;
export type ListQueuesParams = Query<'listQueues'>;
export type ListTasksParams = Query<'listTasks'>;
export type ListSchedulesParams = Query<'listSchedules'>;
export type ListAuditEventsParams = Query<'listAuditEvents'>;
export type ListEventsParams = Omit<Query<'listEvents'>, 'after'> & { after?: bigint | string };

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
const eventPage = (p: Schemas['EventPage']): EventPage => ({
  events: p.events.map((e) => ({ ...e, sequence: BigInt(e.sequence) })),
  next_after: BigInt(p.next_after),
});

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

  return {
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
  };
}

export type OrbitClient = ReturnType<typeof createOrbitClient>;
