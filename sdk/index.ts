/**
 * Orbit's HTTP SDK: one method per operation of openapi.yaml, named by its operationId, built on
 * openapi-fetch over the generated types.
 *
 * The calling convention (sdk/README.md):
 * - every call takes ONE options object whose fields are named exactly as in openapi.yaml: the
 *   path parameters (`queue`, `task_id`, `schedule_id`, `subscription_id`), the query parameters
 *   (`state`, `limit`, `cursor`, `wait_seconds`, `after`), the request body's fields
 *   (`payload`, `priority`, `reason`, `expected_revision`, …) and `idempotency_key` for the
 *   `Idempotency-Key` header of the operations that have one. Options of the SDK's own
 *   (`signal`) are camelCase. A field the operation does not have is refused before anything is
 *   sent (a GET) or by the server, naming it (a body);
 * - methods return the envelope's `data`, and everything they return survives `JSON.stringify`:
 *   usage counts (`unfinished_tasks`, `active_attempts`, `pending_starts`, a schedule's `fired`,
 *   `skipped_misfire`, `deferred_full`) are numbers, like the limits beside them; revisions and
 *   event sequence numbers (`revision`, `sequence`, `next_after`, `acked_sequence`,
 *   `pruned_through`) stay decimal strings, as on the wire - opaque tokens the caller passes back;
 * - every failure is an `OrbitError`. No response at all (the request may or may not have been
 *   applied) is UNAVAILABLE with status 0, so the caller retries with the same idempotency key;
 * - nothing is retried and no idempotency key is invented: the caller owns operation identity -
 *   except the acks of `subscribe`, whose key is the subscription and the sequence (an ack is the
 *   same request however often it is sent);
 * - middleware (`middleware`, `hooks`, `use()`) sees every request and response, in the style of
 *   openapi-fetch's `client.use()`.
 */
import * as openapiFetch from 'openapi-fetch';
import type { Middleware } from 'openapi-fetch';
import type { components, operations, paths } from './generated/openapi.ts';
import { type CountField, type Counts, OPERATIONS, RESPONSE_COUNTS, type SdkOperationId } from './generated/operations.ts';

// openapi-fetch's default export. In the CommonJS build (dist/index.cjs) the import is Node's
// view of its CommonJS module - `default` is its `exports`, whose own `default` the function is.
const createClient = ((openapiFetch.default as unknown as { default?: typeof openapiFetch.default }).default ??
  openapiFetch.default) as typeof openapiFetch.default;

type Schemas = components['schemas'];

// ---------------------------------------------------------------------------------------------
// Types, derived from the generated ones so that they cannot drift from the spec.

/**
 * A response schema as the SDK returns it: counts (`CountField`, generated from openapi.yaml:
 * the properties whose schema is Counter) are numbers; every other field is as on the wire.
 * openapi-typescript renders a free JSON object (`type: object` without properties:
 * payload, data, before/after, details) as `Record<string, never>`, which no real value
 * satisfies; it becomes `Record<string, unknown>`, and the walk stops there, as the runtime
 * conversion does: user data is never touched.
 */
export type FromWire<T> = T extends readonly (infer U)[]
  ? FromWire<U>[]
  : T extends object
    ? string extends keyof T
      ? Record<string, unknown>
      : { [K in keyof T]: K extends CountField ? number : FromWire<T[K]> }
    : T;

/** A request schema as the SDK accepts it: free JSON objects are `Record<string, unknown>`. */
export type ToWire<T> = {
  [K in keyof T]: string extends keyof NonNullable<T[K]> ? Record<string, unknown> : T[K];
};

type Simplify<T> = { [K in keyof T]: T[K] } & {};
type Present<T> = [T] extends [never] ? unknown : T;
type OperationId = keyof operations;
type PathParams<K extends OperationId> = Present<NonNullable<operations[K]['parameters']['path']>>;
type QueryParams<K extends OperationId> = Present<NonNullable<operations[K]['parameters']['query']>>;
type HeaderParams<K extends OperationId> = NonNullable<operations[K]['parameters']['header']>;
type IdempotencyParam<K extends OperationId> = [HeaderParams<K>] extends [never]
  ? unknown
  : 'Idempotency-Key' extends keyof HeaderParams<K>
    ? {
        /**
         * The operation's identity: the `Idempotency-Key` header (1-128 printable non-space ASCII
         * characters). Sending the same key and content again is the same operation - its
         * original answer comes back (`deduplicated: true`); the same key with other content is
         * 409 IDEMPOTENCY_CONFLICT.
         */
        idempotency_key: string;
      }
    : unknown;
type RequestBody<K extends OperationId> = operations[K] extends { requestBody: { content: { 'application/json': infer B } } } ? ToWire<B> : unknown;
type ResponseData<K extends OperationId> = operations[K]['responses'] extends { 200: { content: { 'application/json': { data: infer D } } } } ? D : never;

/** Options of the SDK's own that every call takes. */
export interface CallOptions {
  /** Abandons the request: the call rejects with UNAVAILABLE (whether the server applied it is unknown). */
  signal?: AbortSignal;
}

/**
 * The one argument of the operation `K`: its path parameters, query parameters, request body
 * fields and `idempotency_key`, all named as in openapi.yaml, plus `signal`.
 */
export type OrbitInput<K extends OperationId> = Simplify<PathParams<K> & QueryParams<K> & IdempotencyParam<K> & RequestBody<K> & CallOptions>;
/** What the operation `K` resolves with: the response's `data`, counts as numbers. */
export type OrbitOutput<K extends OperationId> = FromWire<ResponseData<K>>;

export type ErrorCode = Schemas['ErrorCode'] | 'RATE_LIMITED' | 'LEASE_LOST';
export type TaskState = Schemas['TaskState'];
export type ApplicationResources = FromWire<Schemas['ApplicationResources']>;
export type ConfigureApplicationResourcesResult = FromWire<Schemas['ConfigureApplicationResourcesResult']>;
/** One namespace's floors (its reservations of the application's limits) and its usage (counts as numbers). */
export type NamespaceResources = FromWire<Schemas['NamespaceResources']>;
export type NamespaceResourcesList = FromWire<Schemas['NamespaceResourcesList']>;
export type ConfigureNamespaceResourcesResult = FromWire<Schemas['ConfigureNamespaceResourcesResult']>;
export type RetentionPolicy = FromWire<Schemas['RetentionPolicy']>;
export type ConfigureRetentionResult = FromWire<Schemas['ConfigureRetentionResult']>;
export type Queue = FromWire<Schemas['Queue']>;
export type QueuePage = FromWire<Schemas['QueuePage']>;
export type QueueResult = FromWire<Schemas['QueueResult']>;
export type ConfigureQueueResult = FromWire<Schemas['ConfigureQueueResult']>;
/** One entry of a configure dry run's `effects` (`usage` a number); ignore an entry whose `limit` you do not know. */
export type ConfigureEffect = FromWire<Schemas['ConfigureEffect']>;
export type Task = FromWire<Schemas['Task']>;
export type TaskPage = FromWire<Schemas['TaskPage']>;
export type TaskResult = FromWire<Schemas['TaskResult']>;
export type Attempt = FromWire<Schemas['Attempt']>;
export type AttemptList = FromWire<Schemas['AttemptList']>;
/** One item of `submitTasks`: the fields of a single submit plus its own `idempotency_key`. */
export type SubmitTaskItem = ToWire<Schemas['SubmitTaskItem']>;
export type SubmitTaskItemResult = FromWire<Schemas['SubmitTaskItemResult']>;
export type SubmitTasksResult = FromWire<Schemas['SubmitTasksResult']>;
export type Schedule = FromWire<Schemas['Schedule']>;
export type SchedulePage = FromWire<Schemas['SchedulePage']>;
export type ScheduleResult = FromWire<Schemas['ScheduleResult']>;
export type AuditEvent = FromWire<Schemas['AuditEvent']>;
export type AuditEventPage = FromWire<Schemas['AuditEventPage']>;
export type Event = FromWire<Schemas['Event']>;
export type EventPage = FromWire<Schemas['EventPage']>;
export type Subscription = FromWire<Schemas['Subscription']>;
export type SubscriptionPage = FromWire<Schemas['SubscriptionPage']>;
export type SubscriptionResult = FromWire<Schemas['SubscriptionResult']>;
export type SubscriptionEvents = FromWire<Schemas['SubscriptionEvents']>;

export type GetApplicationResourcesInput = OrbitInput<'getApplicationResources'>;
export type ConfigureApplicationResourcesInput = OrbitInput<'configureApplicationResources'>;
export type ListNamespaceResourcesInput = OrbitInput<'listNamespaceResources'>;
export type ConfigureNamespaceResourcesInput = OrbitInput<'configureNamespaceResources'>;
export type GetRetentionInput = OrbitInput<'getRetention'>;
export type ConfigureRetentionInput = OrbitInput<'configureRetention'>;
export type ListQueuesInput = OrbitInput<'listQueues'>;
export type GetQueueInput = OrbitInput<'getQueue'>;
export type CreateQueueInput = OrbitInput<'createQueue'>;
export type ConfigureQueueInput = OrbitInput<'configureQueue'>;
export type SubmitTaskInput = OrbitInput<'submitTask'>;
/** `submitTasks`: the queue and 1-1,000 items; each item carries its own `idempotency_key` (there is no header). */
export type SubmitTasksInput = Simplify<Omit<OrbitInput<'submitTasks'>, 'tasks'> & { tasks: SubmitTaskItem[] }>;
export type ListTasksInput = OrbitInput<'listTasks'>;
export type ListAllTasksInput = OrbitInput<'listAllTasks'>;
export type GetTaskInput = OrbitInput<'getTask'>;
export type CancelTaskInput = OrbitInput<'cancelTask'>;
export type ResolveTaskInput = OrbitInput<'resolveTask'>;
export type RetryTaskInput = OrbitInput<'retryTask'>;
export type ListTaskAttemptsInput = OrbitInput<'listTaskAttempts'>;
export type ListTaskEventsInput = OrbitInput<'listTaskEvents'>;
export type CreateScheduleInput = OrbitInput<'createSchedule'>;
export type GetScheduleInput = OrbitInput<'getSchedule'>;
export type ListSchedulesInput = OrbitInput<'listSchedules'>;
export type PauseScheduleInput = OrbitInput<'pauseSchedule'>;
export type ResumeScheduleInput = OrbitInput<'resumeSchedule'>;
export type ListAuditEventsInput = OrbitInput<'listAuditEvents'>;
export type ListEventsInput = OrbitInput<'listEvents'>;
export type CreateSubscriptionInput = OrbitInput<'createSubscription'>;
export type GetSubscriptionInput = OrbitInput<'getSubscription'>;
export type ListSubscriptionsInput = OrbitInput<'listSubscriptions'>;
export type PauseSubscriptionInput = OrbitInput<'pauseSubscription'>;
export type ResumeSubscriptionInput = OrbitInput<'resumeSubscription'>;
export type ReadSubscriptionInput = OrbitInput<'readSubscription'>;
export type AckSubscriptionInput = OrbitInput<'ackSubscription'>;

export interface SubscribeInput {
  /** The subscription to read (`createSubscription` answers it; `getSubscriptionByName` finds it by name). */
  subscription_id: string;
  /** Stops the loop: a waiting read is abandoned and the iterator ends. */
  signal: AbortSignal;
  /** How long each read waits for events (0-30 seconds; default 20). */
  wait_seconds?: number;
  /** Events per read (1-100; default the server's 50). */
  limit?: number;
}

export interface WaitForTaskInput {
  task_id: string;
  /** How long to wait in all, in milliseconds (each request waits at most 30 s). */
  timeoutMs: number;
  /** Abandons the wait: the call rejects with UNAVAILABLE. */
  signal?: AbortSignal;
}

export interface WaitForTaskResult {
  /** The task once it settled, or as it was when the time ran out. */
  task: Task;
  /**
   * True when the time ran out before the task was terminal or NEEDS_REVIEW (the server's
   * `X-Orbit-Wait: timed_out`); false when it settled (`X-Orbit-Wait: settled`).
   */
  timed_out: boolean;
}

/** The states `waitForTask` stops at: the terminal ones and NEEDS_REVIEW (which waits for an operator). */
export const SETTLED_TASK_STATES: ReadonlySet<TaskState> = new Set<TaskState>(['SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED', 'NEEDS_REVIEW']);

/**
 * The operations of openapi.yaml the client has a method for: every operation answered with the
 * JSON envelope (every /v1 operation but the worker's WebSocket), generated from the spec.
 */
export type OrbitOperation = SdkOperationId;

// ---------------------------------------------------------------------------------------------
// Middleware

/** What a middleware callback is told about the call it sees. */
export interface OrbitMiddlewareContext {
  /** The Fetch API request (in onRequest: about to be sent; mutable headers, or return a new Request). */
  readonly request: Request;
  /** The operation, by its operationId in openapi.yaml: `submitTask`, `getTask`, … */
  readonly operation: OrbitOperation;
  /** The path template of openapi.yaml, e.g. `/v1/queues/{queue}/tasks`. */
  readonly schemaPath: string;
  /** The same for one call's onRequest, onResponse and onError: correlates them. */
  readonly id: string;
}

/**
 * Middleware in the style of openapi-fetch's `client.use()`: `onRequest` runs before a request
 * is sent, in the order registered (return a new Request to replace it, or a Response to answer
 * it without sending); `onResponse` runs on every HTTP answer - errors included, before the SDK
 * turns them into an OrbitError - in reverse order (return a new Response to replace it);
 * `onError` runs when no answer came (the error is an OrbitError UNAVAILABLE; return a Response
 * to recover or an Error to throw instead). Returning nothing changes nothing. An error a
 * callback throws ends the call with that error. Bodies are streams: read a clone
 * (`response.clone().json()`).
 */
export interface OrbitMiddleware {
  onRequest?: (context: OrbitMiddlewareContext) => Returns<Request | Response>;
  onResponse?: (context: OrbitMiddlewareContext & { readonly response: Response }) => Returns<Response>;
  onError?: (context: OrbitMiddlewareContext & { readonly error: unknown }) => Returns<Response | Error>;
}

/** What a middleware callback may return: `T`, or nothing (changes nothing), now or later - as in openapi-fetch. */
// biome-ignore lint/suspicious/noConfusingVoidType: a callback that returns nothing (void) changes nothing
export type Returns<T> = T | undefined | void | Promise<T | undefined | void>;

/** `hooks` of createOrbitClient: one middleware, run after those of `middleware`. */
export type OrbitHooks = OrbitMiddleware;

export interface OrbitClientOptions {
  /** http(s) URL of an Orbit server, optionally with a path prefix; a trailing slash is fine. */
  baseUrl: string;
  /**
   * A credential token (`orbit-admin bootstrap` / `credential create`), or a function the SDK
   * calls before every request for the current one (to rotate or refresh it; cache it yourself).
   */
  token: string | (() => string | Promise<string>);
  /** Defaults to the global fetch; useful for proxies and tests. */
  fetch?: (request: Request) => Promise<Response>;
  /** Middleware for every call, in order (see OrbitMiddleware); `use()` adds more later. */
  middleware?: OrbitMiddleware[];
  /** A single middleware, e.g. `{ onRequest({ request }) {…}, onResponse({ response }) {…} }`: for logging, tracing, auth. */
  hooks?: OrbitHooks;
}

// ---------------------------------------------------------------------------------------------
// Errors

const ORBIT_ERROR = Symbol.for('@orbit-tasks/sdk.OrbitError');

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
    // A brand, so isOrbitError also knows an error from the package's other module format.
    Object.defineProperty(this, ORBIT_ERROR, { value: true });
  }

  /** For logs: `JSON.stringify(error)` keeps what the error says. */
  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      code: this.code,
      message: this.message,
      status: this.status,
      requestId: this.requestId,
      details: this.details,
      retryAfter: this.retryAfter,
    };
  }
}

/** Whether `error` is an OrbitError - of either build of the package (ESM or CommonJS), where `instanceof` could say no. */
export function isOrbitError(error: unknown): error is OrbitError {
  return error instanceof OrbitError || (typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[ORBIT_ERROR] === true);
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
// The operations: where each option goes on the wire - OPERATIONS in generated/operations.ts,
// from openapi.yaml (test/integration/sdk.test.ts checks every method's requests against it).

// ---------------------------------------------------------------------------------------------
// Counts: uint64 decimal strings on the wire, numbers for the caller.

class CountOverflow extends Error {
  constructor(
    readonly field: string,
    readonly value: string,
  ) {
    super(`${field} is ${value}, which a JS number cannot hold exactly (above Number.MAX_SAFE_INTEGER)`);
  }
}

function count(value: unknown, field: string): number {
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n)) throw new CountOverflow(field, String(value));
  return n;
}

/**
 * `value` with the counts that `counts` says it holds (RESPONSE_COUNTS in generated/operations.ts,
 * from openapi.yaml) turned into numbers; everything else, free JSON included, as it came. A
 * count that is required and absent is refused like one too large.
 */
function fromWire(value: unknown, counts: Counts, field: string): unknown {
  if (counts === 'count' || counts === 'count?') return count(value, field);
  if (isTuple(counts)) return Array.isArray(value) ? value.map((item) => fromWire(item, counts[0], field)) : value;
  if (!isObject(value)) return value;
  const out: Record<string, unknown> = { ...value };
  for (const [name, inner] of Object.entries(counts)) {
    if (value[name] === undefined && inner !== 'count') continue;
    out[name] = fromWire(value[name], inner, name);
  }
  return out;
}

const isTuple = (counts: Counts): counts is readonly [Counts] => Array.isArray(counts);

// ---------------------------------------------------------------------------------------------
// Small helpers

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

/** A bad key would make fetch refuse the header (indistinguishable from a network failure) or the server answer 400. */
function idempotencyKey(key: unknown): string {
  if (typeof key !== 'string' || !/^[!-~]{1,128}$/.test(key)) throw invalid('idempotency_key', 'must be 1-128 printable non-space ASCII characters', 'header');
  return key;
}

/** openapi-fetch percent-encodes path values, but "." and ".." survive that and the URL parser would resolve them away. */
function segment(name: string, value: unknown): string {
  if (typeof value !== 'string' || value === '' || value === '.' || value === '..')
    throw invalid(name, 'is required: a non-empty string (not "." or "..")', 'path');
  return value;
}

function checkToken(token: unknown): string {
  if (typeof token !== 'string' || !/^[!-~]+$/.test(token)) throw invalid('token', 'must be a non-empty token of printable non-space ASCII', 'options');
  return token;
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

function checkBaseUrl(baseUrl: unknown): string {
  let url: URL;
  try {
    url = new URL(String(baseUrl));
  } catch {
    throw invalid('baseUrl', 'is not a URL', 'options');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('baseUrl', 'must be an http or https URL', 'options');
  // fetch refuses URLs with credentials; a query or fragment would end up in the middle of every path.
  if (url.username || url.password || url.search || url.hash) throw invalid('baseUrl', 'must not contain credentials, a query or a fragment', 'options');
  return url.href.replace(/\/+$/, '');
}

/**
 * A Response made by another Fetch implementation than the global one (a process whose global
 * Response was replaced, as @hono/node-server does, while `Response.json()` still makes the
 * original kind) is copied into a global one: openapi-fetch accepts only `instanceof Response`.
 */
function ownResponse<T>(value: T): T | Response {
  if (value instanceof Response || !isObject(value) || 'method' in value) return value;
  const r = value as unknown as Response;
  if (typeof r.status !== 'number' || typeof r.text !== 'function' || !('headers' in r)) return value;
  return new Response(r.body, { status: r.status, statusText: r.statusText, headers: r.headers });
}

/** Statuses whose Response may not have a body. */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

// ---------------------------------------------------------------------------------------------
// The client

export interface OrbitClient {
  /** GET /v1/application/resources: the application's three limits, revision and live usage (counts as numbers). */
  getApplicationResources(input?: GetApplicationResourcesInput): Promise<ApplicationResources>;
  /**
   * POST /v1/application/resources:configure: replaces the three limits (a full replacement),
   * compare-and-set on `expected_revision` (the `revision` read before; 409 STATE_CONFLICT when
   * someone changed them meanwhile). With `dry_run: true` nothing is written (no receipt
   * either): the answer is what the change would make, with `dry_run: true` and `effects` -
   * what each limit would mean for the usage of right now.
   */
  configureApplicationResources(input: ConfigureApplicationResourcesInput): Promise<ConfigureApplicationResourcesResult>;
  /**
   * GET /v1/application/namespaces: every namespace of the application, by name, with its floors
   * (`reserved_unfinished_tasks`, `reserved_concurrency`, `reserved_rate_per_second`; 0 for none),
   * their `revision` and its live usage (counts as numbers).
   */
  listNamespaceResources(input?: ListNamespaceResourcesInput): Promise<NamespaceResourcesList>;
  /**
   * POST /v1/application/namespaces/{namespace}:configure: replaces one namespace's three floors
   * (a full replacement), compare-and-set on that namespace's `expected_revision`. Floors whose
   * sum would exceed the application's limit are 409 STATE_CONFLICT (`details.reserved_sum`,
   * `details.application_limit`). With `dry_run: true` nothing is written (no receipt either):
   * the answer is what the change would make, with `dry_run: true` and `effects`.
   */
  configureNamespaceResources(input: ConfigureNamespaceResourcesInput): Promise<ConfigureNamespaceResourcesResult>;
  /** GET /v1/application/retention: how long finished history is kept (an absent duration: forever). */
  getRetention(input?: GetRetentionInput): Promise<RetentionPolicy>;
  /** POST /v1/application/retention:configure: replaces the retention policy (a full replacement: an absent duration keeps that history forever). */
  configureRetention(input: ConfigureRetentionInput): Promise<ConfigureRetentionResult>;

  /** GET /v1/queues: the queues of the credential's namespace and scope, by name; page with `cursor` = the previous `next_cursor`. */
  listQueues(input?: ListQueuesInput): Promise<QueuePage>;
  /** GET /v1/queues/{queue}: one queue's limits and live usage. */
  getQueue(input: GetQueueInput): Promise<Queue>;
  /** POST /v1/queues: creates a queue named `name`; limits left out take their defaults. */
  createQueue(input: CreateQueueInput): Promise<QueueResult>;
  /**
   * POST /v1/queues/{queue}:configure: replaces a queue's limits and pause flag (compare-and-set
   * on `expected_revision`). With `dry_run: true` nothing is written (no receipt either): the
   * answer is what the change would make, with `dry_run: true` and `effects`.
   */
  configureQueue(input: ConfigureQueueInput): Promise<ConfigureQueueResult>;

  /**
   * POST /v1/queues/{queue}/tasks: submits a task; `idempotency_key` is the submission's
   * identity. A full quota is 429 APPLICATION_FULL or QUEUE_FULL (`retryAfter` 1): nothing was
   * written, and the same key may be sent again.
   */
  submitTask(input: SubmitTaskInput): Promise<TaskResult>;
  /**
   * POST /v1/queues/{queue}/tasks:batch: up to 1,000 tasks in one request and one transaction.
   * There is no idempotency_key for the request: EACH ITEM carries its own `idempotency_key`
   * (the same key and content sent singly or in a batch is the same submission). One result
   * per item, in order (`accepted`, `replayed` or `refused` with its error); refused items wrote
   * nothing and may be sent again with the same key. The call itself throws only when the whole
   * request is refused (a bad request, a missing action, an unknown queue, the server unavailable).
   */
  submitTasks(input: SubmitTasksInput): Promise<SubmitTasksResult>;
  /** GET /v1/queues/{queue}/tasks: a queue's tasks, oldest first, optionally in one `state`. */
  listTasks(input: ListTasksInput): Promise<TaskPage>;
  /** GET /v1/tasks: the tasks of every queue in the credential's scope, newest first, optionally of one `queue` and in one `state`. */
  listAllTasks(input?: ListAllTasksInput): Promise<TaskPage>;
  /**
   * GET /v1/tasks/{task_id}: one task. With `wait_seconds` (1-30) the answer comes once the task
   * is terminal or NEEDS_REVIEW, or when the time is up (the task as it is then) - `waitForTask`
   * tells the two apart and waits longer than 30 s.
   */
  getTask(input: GetTaskInput): Promise<Task>;
  /** POST /v1/tasks/{task_id}:cancel: WAITING, LEASED and NEEDS_REVIEW tasks end CANCELLED at once; a RUNNING one's worker is told. */
  cancelTask(input: CancelTaskInput): Promise<TaskResult>;
  /** POST /v1/tasks/{task_id}:resolve: decides a NEEDS_REVIEW task (`outcome` succeeded, failed or retry). */
  resolveTask(input: ResolveTaskInput): Promise<TaskResult>;
  /**
   * POST /v1/tasks/{task_id}:retry: puts a FAILED, EXPIRED or CANCELLED task back to WAITING with
   * one more attempt, admitted like a submission (429 APPLICATION_FULL or QUEUE_FULL without room).
   */
  retryTask(input: RetryTaskInput): Promise<TaskResult>;
  /** GET /v1/tasks/{task_id}/attempts: every attempt of the task, first to last. */
  listTaskAttempts(input: ListTaskAttemptsInput): Promise<AttemptList>;
  /** GET /v1/tasks/{task_id}/events: the task's lifecycle events in order; page with `after` = the previous `next_after`. */
  listTaskEvents(input: ListTaskEventsInput): Promise<EventPage>;

  /**
   * POST /v1/queues/{queue}/schedules: a cron or interval schedule on a queue. Its tasks are
   * admitted like submissions; a full quota defers a trigger point, never skips it; only points
   * older than `misfire_window_seconds` follow `misfire_policy`, which cannot be changed later.
   */
  createSchedule(input: CreateScheduleInput): Promise<ScheduleResult>;
  /** GET /v1/schedules/{schedule_id}: one schedule with its trigger points and counts. */
  getSchedule(input: GetScheduleInput): Promise<Schedule>;
  /** GET /v1/queues/{queue}/schedules: a queue's schedules, by name. */
  listSchedules(input: ListSchedulesInput): Promise<SchedulePage>;
  /** POST /v1/schedules/{schedule_id}:pause */
  pauseSchedule(input: PauseScheduleInput): Promise<ScheduleResult>;
  /** POST /v1/schedules/{schedule_id}:resume */
  resumeSchedule(input: ResumeScheduleInput): Promise<ScheduleResult>;

  /** GET /v1/audit-events: management audit records, oldest first. */
  listAuditEvents(input?: ListAuditEventsInput): Promise<AuditEventPage>;
  /** GET /v1/events: the namespace's event feed after the sequence `after` (a decimal string; default "0"). */
  listEvents(input?: ListEventsInput): Promise<EventPage>;

  /**
   * POST /v1/subscriptions: a durable cursor over the namespace's event feed, with optional
   * `types` and `queues` filters, starting after the newest event (`from: 'now'`, the default)
   * or before the first (`from: 'beginning'`).
   */
  createSubscription(input: CreateSubscriptionInput): Promise<SubscriptionResult>;
  /** GET /v1/subscriptions/{subscription_id} */
  getSubscription(input: GetSubscriptionInput): Promise<Subscription>;
  /**
   * Not an operation of its own: the subscription named `name`, found in `listSubscriptions`'
   * pages (NOT_FOUND when there is none). Every other subscription call takes `subscription_id`.
   */
  getSubscriptionByName(input: { name: string; signal?: AbortSignal }): Promise<Subscription>;
  /** GET /v1/subscriptions: by name. */
  listSubscriptions(input?: ListSubscriptionsInput): Promise<SubscriptionPage>;
  /** POST /v1/subscriptions/{subscription_id}:pause */
  pauseSubscription(input: PauseSubscriptionInput): Promise<SubscriptionResult>;
  /** POST /v1/subscriptions/{subscription_id}:resume */
  resumeSubscription(input: ResumeSubscriptionInput): Promise<SubscriptionResult>;
  /** GET /v1/subscriptions/{subscription_id}/events: the events after the acknowledged position (reading does not move it), waiting up to `wait_seconds` for the first one. */
  readSubscription(input: ReadSubscriptionInput): Promise<SubscriptionEvents>;
  /** POST /v1/subscriptions/{subscription_id}:ack: acknowledges every event up to and including `sequence`; the current position again is accepted and changes nothing. */
  ackSubscription(input: AckSubscriptionInput): Promise<SubscriptionResult>;

  /**
   * `for await (const event of orbit.subscribe({ subscription_id, signal })) { … }`: the events
   * of the subscription, one by one, in sequence order, long-polling for more.
   *
   * Each event is acknowledged when the loop body is done with it - when the loop asks for the
   * next event (or the iterator ends because `signal` aborted meanwhile) - with the idempotency
   * key `ack-<subscription_id>-<sequence>`, so an ack repeated after a lost answer is the same
   * ack. Leaving the loop early (`break`, `return`, a throw) does NOT acknowledge the event in
   * hand: the iterator cannot tell a `break` from a failure, so that event comes again
   * (delivery is at-least-once). A position another reader already moved past is left alone.
   *
   * No answer, UNAVAILABLE and a PAUSED subscription are waited out with a backoff (100 ms
   * doubling to 5 s, at least the server's Retry-After) and tried again; other errors (a
   * missing subscription or action, a bad option, pruned events) end the iteration by throwing.
   * When `signal` aborts, a waiting read is abandoned and the iteration ends.
   */
  subscribe(input: SubscribeInput): AsyncGenerator<Event, void, undefined>;

  /**
   * Waits until the task is terminal (SUCCEEDED, FAILED, CANCELLED, EXPIRED) or NEEDS_REVIEW, or
   * until `timeoutMs` has passed: resolves `{ task, timed_out }`. Long-polls `getTask` with
   * `wait_seconds` (at most 30 s a request; the server's `X-Orbit-Wait` says which it was);
   * errors are thrown, not retried.
   */
  waitForTask(input: WaitForTaskInput): Promise<WaitForTaskResult>;

  /** Adds middleware for the calls from now on (after what is there). */
  use(...middleware: OrbitMiddleware[]): void;
  /** Removes middleware added by `middleware`, `hooks` or `use()`. */
  eject(...middleware: OrbitMiddleware[]): void;
}

type LooseRequest = (method: string, path: string, init: Record<string, unknown>) => Promise<{ data?: unknown; error?: unknown; response: Response }>;

export function createOrbitClient(options: OrbitClientOptions): OrbitClient {
  if (!isObject(options)) throw invalid('options', 'createOrbitClient takes one options object: { baseUrl, token }', 'options');
  const baseUrl = checkBaseUrl(options.baseUrl);
  const token = options.token;
  if (typeof token !== 'function') checkToken(token);
  const baseFetch = options.fetch ?? ((request: Request) => globalThis.fetch(request));

  /**
   * The transport under openapi-fetch: the caller's fetch, with the whole body read here, so a
   * connection lost mid-body is caught too. No answer at all is UNAVAILABLE (thrown, so
   * middleware's onError sees it); any answer goes back to openapi-fetch and its onResponse
   * middleware as a complete Response.
   */
  const transport = async (request: Request): Promise<Response> => {
    const what = `${request.method} ${new URL(request.url).pathname}`;
    try {
      const response = await baseFetch(request);
      const text = await response.text();
      const complete = new Response(NULL_BODY.has(response.status) ? null : text, {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
      Object.defineProperty(complete, 'url', { value: response.url || request.url });
      return complete;
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new OrbitError('UNAVAILABLE', `${what}: no response from Orbit (${reason}); the outcome is unknown - retry with the same idempotency_key`, {
        status: 0,
        cause,
      });
    }
  };
  const api = createClient<paths>({ baseUrl, fetch: transport, bodySerializer: serializeBody });
  const request = api.request as unknown as LooseRequest;

  /** The Authorization header: first, so the caller's middleware sees (and may replace) it. */
  const authorization: Middleware = {
    async onRequest({ request }) {
      const current = typeof token === 'function' ? checkToken(await token()) : token;
      request.headers.set('Authorization', `Bearer ${current}`);
      return request;
    },
  };
  const middleware: OrbitMiddleware[] = [];
  const use = (...more: OrbitMiddleware[]) => {
    for (const m of more) {
      if (!isObject(m) || !(['onRequest', 'onResponse', 'onError'] as const).some((k) => typeof m[k] === 'function'))
        throw invalid('middleware', 'each must be an object with onRequest, onResponse or onError', 'options');
      middleware.push(m);
    }
  };
  use(...(options.middleware ?? []), ...(options.hooks ? [options.hooks] : []));

  /** The caller's middleware for one call, told which operation it is. */
  function bound(operation: OrbitOperation): Middleware[] {
    type Seen = { request: Request; schemaPath: string; id: string };
    return middleware.map((m) => {
      const out: Record<string, unknown> = {};
      const context = (c: Seen) => ({ request: c.request, operation, schemaPath: c.schemaPath, id: c.id });
      if (m.onRequest) out.onRequest = async (c: Seen) => ownResponse(await m.onRequest?.(context(c)));
      if (m.onResponse) out.onResponse = async (c: Seen & { response: Response }) => ownResponse(await m.onResponse?.({ ...context(c), response: c.response }));
      if (m.onError) out.onError = async (c: Seen & { error: unknown }) => ownResponse(await m.onError?.({ ...context(c), error: c.error }));
      return out as Middleware;
    });
  }

  /**
   * One call: the options object split into path, query, header and body by the operation's
   * table entry; the answer checked to be an Orbit envelope (an error envelope is thrown as its
   * OrbitError; anything else - a proxy's page, a truncated body - is UNAVAILABLE, because the
   * server may or may not have applied the request).
   */
  async function send(name: OrbitOperation, input: unknown): Promise<{ data: unknown; response: Response }> {
    const op = OPERATIONS[name];
    if (input === undefined && op.pathParams.length === 0 && !op.body) input = {};
    if (!isObject(input)) {
      throw invalid(
        name,
        `takes one options object with the fields of openapi.yaml (e.g. { ${[...op.pathParams, ...(op.idempotent ? ['idempotency_key'] : [])].join(', ') || 'limit'}, … })`,
        'options',
      );
    }
    const path: Record<string, string> = {};
    const query: Record<string, unknown> = {};
    const header: Record<string, string> = {};
    const body: Record<string, unknown> = {};
    let signal: AbortSignal | undefined;
    for (const [key, value] of Object.entries(input)) {
      if (value === undefined) continue;
      if (key === 'signal') {
        if (!(value instanceof AbortSignal)) throw invalid('signal', 'must be an AbortSignal', 'options');
        signal = value;
      } else if (op.pathParams.includes(key)) path[key] = segment(key, value);
      else if (op.query.includes(key)) query[key] = value;
      else if (key === 'idempotency_key' && op.idempotent) header['Idempotency-Key'] = idempotencyKey(value);
      else if (op.body) body[key] = value;
      else throw invalid(key, `is not a parameter of ${name} (${op.method} ${op.path})`, 'options');
    }
    for (const p of op.pathParams) if (!(p in path)) segment(p, undefined);
    if (op.idempotent && header['Idempotency-Key'] === undefined) idempotencyKey(undefined);

    const { data, error, response } = await request(op.method, op.path, {
      params: { path, query, header },
      ...(op.body ? { body } : {}),
      ...(signal ? { signal } : {}),
      parseAs: 'text',
      middleware: [authorization, ...bound(name)],
    });
    const what = `${op.method} ${response.url ? new URL(response.url).pathname : op.path}`;
    const requestId = response.headers.get('x-request-id') ?? undefined;
    const retryAfter = parseRetryAfter(response.headers.get('retry-after'));
    if (response.ok) {
      let envelope: unknown;
      try {
        envelope = typeof data === 'string' ? JSON.parse(data) : undefined;
      } catch {
        envelope = undefined;
      }
      if (isObject(envelope) && 'data' in envelope && typeof envelope.request_id === 'string') return { data: envelope.data, response };
    } else if (isObject(error) && isObject(error.error) && typeof error.error.code === 'string') {
      const { code, message, details } = error.error;
      throw new OrbitError(code as ErrorCode, typeof message === 'string' ? message : code, {
        status: response.status,
        requestId: typeof error.request_id === 'string' ? error.request_id : requestId,
        details: isObject(details) ? details : undefined,
        retryAfter,
      });
    }
    throw new OrbitError(
      'UNAVAILABLE',
      `${what}: HTTP ${response.status} without an Orbit envelope (a proxy or load balancer answered?); the outcome is unknown - retry with the same idempotency_key`,
      { status: response.status, requestId, retryAfter },
    );
  }

  async function call<T>(name: OrbitOperation, input: unknown): Promise<T> {
    const { data, response } = await send(name, input);
    const counts = RESPONSE_COUNTS[name];
    if (!counts) return data as T;
    try {
      return fromWire(data, counts, 'data') as T;
    } catch (error) {
      if (!(error instanceof CountOverflow)) throw error;
      throw new OrbitError('INTERNAL', `${name}: ${error.message}`, {
        status: response.status,
        requestId: response.headers.get('x-request-id') ?? undefined,
        details: { field: error.field, value: error.value },
      });
    }
  }

  const client: OrbitClient = {
    getApplicationResources: (input) => call('getApplicationResources', input),
    configureApplicationResources: (input) => call('configureApplicationResources', input),
    listNamespaceResources: (input) => call('listNamespaceResources', input),
    configureNamespaceResources: (input) => call('configureNamespaceResources', input),
    getRetention: (input) => call('getRetention', input),
    configureRetention: (input) => call('configureRetention', input),
    listQueues: (input) => call('listQueues', input),
    getQueue: (input) => call('getQueue', input),
    createQueue: (input) => call('createQueue', input),
    configureQueue: (input) => call('configureQueue', input),
    submitTask: (input) => call('submitTask', input),
    submitTasks: (input) => call('submitTasks', input),
    listTasks: (input) => call('listTasks', input),
    listAllTasks: (input) => call('listAllTasks', input),
    getTask: (input) => call('getTask', input),
    cancelTask: (input) => call('cancelTask', input),
    resolveTask: (input) => call('resolveTask', input),
    retryTask: (input) => call('retryTask', input),
    listTaskAttempts: (input) => call('listTaskAttempts', input),
    listTaskEvents: (input) => call('listTaskEvents', input),
    createSchedule: (input) => call('createSchedule', input),
    getSchedule: (input) => call('getSchedule', input),
    listSchedules: (input) => call('listSchedules', input),
    pauseSchedule: (input) => call('pauseSchedule', input),
    resumeSchedule: (input) => call('resumeSchedule', input),
    listAuditEvents: (input) => call('listAuditEvents', input),
    listEvents: (input) => call('listEvents', input),
    createSubscription: (input) => call('createSubscription', input),
    getSubscription: (input) => call('getSubscription', input),
    listSubscriptions: (input) => call('listSubscriptions', input),
    pauseSubscription: (input) => call('pauseSubscription', input),
    resumeSubscription: (input) => call('resumeSubscription', input),
    readSubscription: (input) => call('readSubscription', input),
    ackSubscription: (input) => call('ackSubscription', input),

    async getSubscriptionByName(input) {
      if (!isObject(input) || typeof input.name !== 'string' || input.name === '') throw invalid('name', 'is required: the subscription name', 'options');
      const { name, signal } = input;
      let cursor: string | undefined;
      for (;;) {
        const page = await client.listSubscriptions({ limit: 100, ...(cursor !== undefined ? { cursor } : {}), ...(signal ? { signal } : {}) });
        const found = page.subscriptions.find((s) => s.name === name);
        if (found) return found;
        if (page.next_cursor === undefined) break;
        cursor = page.next_cursor;
      }
      throw new OrbitError('NOT_FOUND', `subscription "${name}" not found`, { status: 0, details: { name } });
    },

    async *subscribe(input) {
      if (!isObject(input) || !(input.signal instanceof AbortSignal)) throw invalid('signal', 'is required: an AbortSignal that ends the loop', 'options');
      const { signal } = input;
      const subscription_id = segment('subscription_id', input.subscription_id);
      const wait_seconds = input.wait_seconds ?? 20;
      let failures = 0;
      const backoff = async (error: unknown) => {
        failures += 1;
        await sleep(backoffMs(failures, error), signal);
      };
      /** Acknowledges one event, retrying what is worth retrying; false when the signal stopped it first. */
      const ack = async (sequence: string): Promise<boolean> => {
        for (;;) {
          try {
            await client.ackSubscription({ subscription_id, idempotency_key: `ack-${subscription_id}-${sequence}`, sequence });
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

      while (!signal.aborted) {
        let events: Event[];
        try {
          events = (await client.readSubscription({ subscription_id, wait_seconds, signal, ...(input.limit !== undefined ? { limit: input.limit } : {}) }))
            .events;
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
          if (!(await ack(e.sequence)) || signal.aborted) return;
        }
      }
    },

    async waitForTask(input) {
      if (!isObject(input) || typeof input.timeoutMs !== 'number' || !(input.timeoutMs >= 0))
        throw invalid('timeoutMs', 'is required: how long to wait in all, in milliseconds', 'options');
      const { task_id, signal } = input;
      segment('task_id', task_id);
      const deadline = Date.now() + input.timeoutMs;
      for (;;) {
        const remaining = deadline - Date.now();
        const started = Date.now();
        let answer: { data: unknown; response: Response };
        if (remaining >= 1000) {
          answer = await send('getTask', { task_id, wait_seconds: Math.min(30, Math.floor(remaining / 1000)), signal });
        } else {
          // Less than a second left: wait it out, then look once more (whole seconds only would overshoot the timeout).
          await sleep(remaining, signal);
          answer = await send('getTask', { task_id, signal });
        }
        const task = answer.data as Task;
        // X-Orbit-Wait says how a waiting request ended; the state says the same for one that did not wait.
        const settled = answer.response.headers.get('x-orbit-wait') === 'settled' || SETTLED_TASK_STATES.has(task.state);
        if (settled) return { task, timed_out: false };
        if (Date.now() >= deadline) return { task, timed_out: true };
        // An answer that came back at once without the task settled (a server that does not wait): do not spin.
        if (Date.now() - started < 100) await sleep(Math.min(250, deadline - Date.now()), signal);
      }
    },

    use,
    eject(...more) {
      for (const m of more) {
        const at = middleware.indexOf(m);
        if (at !== -1) middleware.splice(at, 1);
      }
    },
  };
  return client;
}
