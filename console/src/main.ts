/**
 * The console (GET /console). It uses only Orbit's public HTTP API, with the token the operator
 * pastes, so it sees exactly what that credential may see. The token is kept in this tab's
 * sessionStorage (gone when the tab closes) and sent only as an Authorization header; never in
 * a URL. What is shown refreshes every two seconds.
 *
 * Two pages, by the URL's hash (so a task can be linked, and the back button works):
 * - `#/` (or none): the application's limits and usage, its namespaces with their floors and
 *   usage (and a form that changes a namespace's floors: a dry run first, "Preview", whose
 *   effects are shown, then the change itself on a second click, "Apply"), the queues in scope,
 *   the tasks waiting for review, the task list (filtered by queue and state, paged newest first)
 *   and the latest events;
 * - `#/tasks/<task_id>`: one task - its fields, payload, result and error, its attempts, its
 *   lifecycle events, and the actions its state allows (cancel, resolve, retry), each with the
 *   reason the audit record keeps.
 */

const TOKEN_KEY = 'orbit.console.token';
const REFRESH_MS = 2_000;
const EVENTS_SHOWN = 20;
/** NEEDS_REVIEW tasks shown on the overview (the task list, filtered by state, has the rest). */
const REVIEWS_SHOWN = 100;
const PAGE_SIZES = [10, 25, 50, 100] as const;
const DEFAULT_PAGE_SIZE = 25;
const TASK_STATES = ['WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'EXPIRED'] as const;
type TaskState = (typeof TASK_STATES)[number];
/** The states each action accepts (openapi.yaml: cancelTask, resolveTask, retryTask). */
const CANCELLABLE: readonly string[] = ['WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW'];
const RETRYABLE: readonly string[] = ['FAILED', 'EXPIRED', 'CANCELLED'];
const TASK_ID = /^[0-9a-f]{32}$/;

interface ApiError {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}
class RequestFailed extends Error {
  constructor(
    readonly status: number,
    readonly error: ApiError,
  ) {
    super(`${error.code}: ${error.message}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Numbers. Limits are JSON numbers on the wire, usage counters decimal strings (uint64). Both are
// shown the same way: counters become numbers where they are read from the API, and stay exact
// strings only past 2^53 (where a number would round); `formatCount` prints either alike.

/** A count as shown: a number, or the exact decimal string of one above Number.MAX_SAFE_INTEGER. */
type Count = number | string;

function count(wire: string): Count {
  const n = Number(wire);
  return /^\d+$/.test(wire) && Number.isSafeInteger(n) ? n : wire;
}

/** Digits grouped by three with commas, the same for a number and for an exact string. */
function formatCount(value: Count): string {
  const digits = typeof value === 'number' ? String(value) : value;
  return /^\d+$/.test(digits) ? digits.replace(/\B(?=(\d{3})+(?!\d))/g, ',') : digits;
}

interface WireResources {
  max_unfinished_tasks: number;
  unfinished_tasks: string;
  max_concurrency: number;
  active_attempts: string;
  pending_starts: string;
  rate_per_second: number;
}
interface Resources {
  max_unfinished_tasks: number;
  unfinished_tasks: Count;
  max_concurrency: number;
  active_attempts: Count;
  pending_starts: Count;
  rate_per_second: number;
}
/** The application's row also carries the namespaces' floors: their sums and the part of them unused now. */
interface WireApplication extends WireResources {
  reserved_unfinished_tasks: number;
  reserved_concurrency: number;
  reserved_rate_per_second: number;
  idle_reserved_unfinished_tasks: string;
  idle_reserved_concurrency: string;
  idle_reserved_rate_per_second: string;
}
interface Application extends Resources {
  reserved_unfinished_tasks: number;
  reserved_concurrency: number;
  reserved_rate_per_second: number;
  idle_reserved_unfinished_tasks: Count;
  idle_reserved_concurrency: Count;
  idle_reserved_rate_per_second: Count;
}
/** The three floors of a namespace (the API's names), as configureNamespaceResources takes them. */
const FLOORS = ['reserved_unfinished_tasks', 'reserved_concurrency', 'reserved_rate_per_second'] as const;
type FloorName = (typeof FLOORS)[number];
type Floors = Record<FloorName, number>;
interface WireNamespace extends Floors {
  namespace: string;
  namespace_id: string;
  environment: string;
  revision: string;
  unfinished_tasks: string;
  active_attempts: string;
  pending_starts: string;
  starts_this_second: string;
}
interface Namespace extends Floors {
  namespace: string;
  environment: string;
  revision: string;
  unfinished_tasks: Count;
  active_attempts: Count;
  pending_starts: Count;
  starts_this_second: Count;
}
interface Effect {
  limit: string;
  current: number;
  proposed: number;
  usage: string;
  effect: string;
}
interface WireQueue extends WireResources {
  queue: string;
  paused: boolean;
  key_concurrency: number;
}
interface Queue extends Resources {
  queue: string;
  paused: boolean;
  key_concurrency: number;
}

const resourcesFrom = (w: WireResources): Resources => ({
  max_unfinished_tasks: w.max_unfinished_tasks,
  unfinished_tasks: count(w.unfinished_tasks),
  max_concurrency: w.max_concurrency,
  active_attempts: count(w.active_attempts),
  pending_starts: count(w.pending_starts),
  rate_per_second: w.rate_per_second,
});
const queueFrom = (w: WireQueue): Queue => ({ ...resourcesFrom(w), queue: w.queue, paused: w.paused, key_concurrency: w.key_concurrency });
const applicationFrom = (w: WireApplication): Application => ({
  ...resourcesFrom(w),
  reserved_unfinished_tasks: w.reserved_unfinished_tasks,
  reserved_concurrency: w.reserved_concurrency,
  reserved_rate_per_second: w.reserved_rate_per_second,
  idle_reserved_unfinished_tasks: count(w.idle_reserved_unfinished_tasks),
  idle_reserved_concurrency: count(w.idle_reserved_concurrency),
  idle_reserved_rate_per_second: count(w.idle_reserved_rate_per_second),
});
const namespaceFrom = (w: WireNamespace): Namespace => ({
  namespace: w.namespace,
  environment: w.environment,
  revision: w.revision,
  reserved_unfinished_tasks: w.reserved_unfinished_tasks,
  reserved_concurrency: w.reserved_concurrency,
  reserved_rate_per_second: w.reserved_rate_per_second,
  unfinished_tasks: count(w.unfinished_tasks),
  active_attempts: count(w.active_attempts),
  pending_starts: count(w.pending_starts),
  starts_this_second: count(w.starts_this_second),
});

interface Task {
  task_id: string;
  queue: string;
  namespace: string;
  state: TaskState;
  priority: number;
  resource_key?: string;
  payload: unknown;
  attempts: number;
  max_attempts: number;
  on_unknown_outcome: string;
  cancel_requested: boolean;
  created_at: string;
  available_at: string;
  deadline_at: string;
  finished_at?: string;
  result?: unknown;
  error?: unknown;
  schedule_id?: string;
  scheduled_for?: string;
  [field: string]: unknown;
}
interface Attempt {
  attempt_id: string;
  attempt_number: number;
  state: string;
  session_id: string;
  node_id?: string;
  claimed_at: string;
  started_at?: string;
  finished_at?: string;
  lease_expires_at: string;
}
interface OrbitEvent {
  sequence: string;
  type: string;
  subject: string;
  data?: unknown;
  occurred_at: string;
}

// ---------------------------------------------------------------------------------------------
// What is shown.

type Route = { page: 'overview' } | { page: 'task'; taskId: string };

interface TaskList {
  queue: string; // '' = every queue in scope
  state: string; // '' = any state
  limit: number;
  /** The cursor of each page from the newest to the one shown ('' for the newest page). */
  cursors: string[];
  tasks: Task[];
  next: string | null;
  loaded: boolean;
  note: string | null;
  error: string | null;
}
interface TaskPage {
  taskId: string;
  task: Task | null;
  attempts: Attempt[];
  events: OrbitEvent[];
  eventsAfter: string;
  loaded: boolean;
  note: string | null;
}
interface View {
  resources: Application | 'denied' | null;
  namespaces: Namespace[] | 'denied' | null;
  queues: Queue[];
  reviews: Task[];
  reviewsMore: boolean;
  reviewNote: string | null;
  list: TaskList;
  task: TaskPage | null;
  events: OrbitEvent[];
  eventsNote: string | null;
  refreshedAt: Date | null;
  refreshes: number;
  error: string | null;
}

const emptyList = (): TaskList => ({
  queue: '',
  state: '',
  limit: DEFAULT_PAGE_SIZE,
  cursors: [''],
  tasks: [],
  next: null,
  loaded: false,
  note: null,
  error: null,
});
const emptyView = (): View => ({
  resources: null,
  namespaces: null,
  queues: [],
  reviews: [],
  reviewsMore: false,
  reviewNote: null,
  list: emptyList(),
  task: null,
  events: [],
  eventsNote: null,
  refreshedAt: null,
  refreshes: 0,
  error: null,
});
const view: View = emptyView();
let eventsAfter = '0';
/** Reasons being typed, by task: the page is redrawn every refresh and must not lose them. */
const reasons = new Map<string, string>();
/** What the last action on a task answered (or that it is under way), by task. */
const outcomes = new Map<string, { kind: 'pending' | 'ok' | 'error'; text: string }>();
/**
 * The form that changes a namespace's floors: what is typed (kept across redraws), and the last
 * preview - a dry run of exactly these values - which "Apply" sends again for real. A change of
 * any value drops the preview: Apply needs a preview of what it sends.
 */
interface FloorsForm {
  namespace: string;
  values: Record<FloorName, string>;
  reason: string;
  preview: { namespace: string; revision: string; floors: Floors; reason: string; effects: Effect[] } | null;
  status: { kind: 'pending' | 'ok' | 'error'; text: string } | null;
}
const floorsForm: FloorsForm = {
  namespace: '',
  values: { reserved_unfinished_tasks: '', reserved_concurrency: '', reserved_rate_per_second: '' },
  reason: '',
  preview: null,
  status: null,
};
/** A later load of the list or of a task page wins over an earlier one still in flight. */
let listGeneration = 0;
let taskGeneration = 0;
let refreshing = false;
let refreshAgain = false;
let timer: number | undefined;

const token = () => sessionStorage.getItem(TOKEN_KEY);

function route(): Route {
  const match = /^#\/tasks\/([^/?#]+)\/?$/.exec(window.location.hash);
  if (!match?.[1]) return { page: 'overview' };
  // A malformed escape (`#/tasks/%`) is shown as it is: the task page then says it is no task id.
  let taskId = match[1];
  try {
    taskId = decodeURIComponent(taskId);
  } catch {}
  return { page: 'task', taskId };
}

async function api<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Authorization: `Bearer ${token() ?? ''}` };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    headers['Idempotency-Key'] = `console-${crypto.randomUUID()}`;
  }
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const envelope = (await response.json().catch(() => null)) as { data?: T; error?: ApiError } | null;
  if (!response.ok || !envelope || envelope.data === undefined) {
    throw new RequestFailed(response.status, envelope?.error ?? { code: 'UNAVAILABLE', message: `HTTP ${response.status}` });
  }
  return envelope.data;
}

const denied = (error: unknown) => error instanceof RequestFailed && error.status === 403;
const refused = (error: unknown) => error instanceof RequestFailed && error.status === 401;
const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));

async function allQueues(): Promise<Queue[]> {
  const queues: Queue[] = [];
  let cursor: string | undefined;
  do {
    const page = await api<{ queues: WireQueue[]; next_cursor?: string }>(
      'GET',
      `/v1/queues?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
    );
    queues.push(...page.queues.map(queueFrom));
    cursor = page.next_cursor;
  } while (cursor !== undefined && queues.length < 1_000);
  return queues;
}

/** The feed is read forwards from the last sequence seen; the newest EVENTS_SHOWN are kept. */
async function newEvents(): Promise<void> {
  for (let page = 0; page < 50; page++) {
    const data = await api<{ events: OrbitEvent[]; next_after: string }>('GET', `/v1/events?after=${eventsAfter}&limit=100`);
    view.events = [...view.events, ...data.events].slice(-EVENTS_SHOWN);
    eventsAfter = data.next_after;
    if (data.events.length < 100) return;
  }
}

async function loadReviews(): Promise<void> {
  try {
    const page = await api<{ tasks: Task[]; next_cursor?: string }>('GET', `/v1/tasks?state=NEEDS_REVIEW&limit=${REVIEWS_SHOWN}`);
    view.reviews = page.tasks;
    view.reviewsMore = page.next_cursor !== undefined;
    view.reviewNote = null;
  } catch (error) {
    if (!denied(error)) throw error;
    view.reviews = [];
    view.reviewsMore = false;
    view.reviewNote = 'This credential has no tasks:read: tasks waiting for review are not shown.';
  }
}

/** The list's current page, as its filters and cursor say. Its own errors stay in its section. */
async function loadList(): Promise<void> {
  const generation = ++listGeneration;
  const list = view.list;
  const query = new URLSearchParams({ limit: String(list.limit) });
  if (list.queue) query.set('queue', list.queue);
  if (list.state) query.set('state', list.state);
  const cursor = list.cursors.at(-1);
  if (cursor) query.set('cursor', cursor);
  try {
    const page = await api<{ tasks: Task[]; next_cursor?: string }>('GET', `/v1/tasks?${query}`);
    if (generation !== listGeneration) return;
    Object.assign(list, { tasks: page.tasks, next: page.next_cursor ?? null, loaded: true, note: null, error: null });
  } catch (error) {
    if (refused(error)) throw error;
    if (generation !== listGeneration) return;
    Object.assign(list, { tasks: [], next: null, loaded: true, note: null, error: null });
    if (denied(error)) list.note = 'This credential has no tasks:read: its tasks are not listed.';
    else list.error = messageOf(error);
  }
}

/** The task, its attempts, and its events after the last one already shown. */
async function loadTask(taskId: string): Promise<void> {
  const generation = ++taskGeneration;
  if (view.task?.taskId !== taskId) {
    view.task = { taskId, task: null, attempts: [], events: [], eventsAfter: '0', loaded: false, note: null };
  }
  const page = view.task;
  if (!TASK_ID.test(taskId)) {
    Object.assign(page, { loaded: true, note: `“${taskId}” is not a task id (32 lowercase hex characters).` });
    return;
  }
  try {
    const task = await api<Task>('GET', `/v1/tasks/${taskId}`);
    const [attempts, events] = await Promise.all([
      api<{ attempts: Attempt[] }>('GET', `/v1/tasks/${taskId}/attempts`),
      (async () => {
        const found: OrbitEvent[] = [];
        let after = page.eventsAfter;
        for (let n = 0; n < 50; n++) {
          const data = await api<{ events: OrbitEvent[]; next_after: string }>('GET', `/v1/tasks/${taskId}/events?after=${after}&limit=100`);
          found.push(...data.events);
          after = data.next_after;
          if (data.events.length < 100) break;
        }
        return { found, after };
      })(),
    ]);
    if (generation !== taskGeneration || view.task !== page) return;
    // Another load may have appended some of these already: keep each sequence once.
    const last = BigInt(page.eventsAfter);
    page.events.push(...events.found.filter((e) => BigInt(e.sequence) > last));
    if (BigInt(events.after) > last) page.eventsAfter = events.after;
    Object.assign(page, { task, attempts: attempts.attempts, loaded: true, note: null });
  } catch (error) {
    if (refused(error)) throw error;
    if (generation !== taskGeneration || view.task !== page) return;
    page.loaded = true;
    page.task = null;
    if (denied(error)) page.note = 'This credential has no tasks:read: the task is not shown.';
    else if (error instanceof RequestFailed && error.status === 404) {
      page.note = `No task ${taskId} in this credential’s scope (or it was pruned by retention).`;
    } else page.note = messageOf(error);
  }
}

async function loadOverview(): Promise<void> {
  const orDenied = (error: unknown): 'denied' => {
    if (denied(error)) return 'denied';
    throw error;
  };
  const [resources, namespaces, queues] = await Promise.all([
    api<WireApplication>('GET', '/v1/application/resources').then(applicationFrom, orDenied),
    api<{ namespaces: WireNamespace[] }>('GET', '/v1/application/namespaces').then((d) => d.namespaces.map(namespaceFrom), orDenied),
    allQueues(),
  ]);
  view.resources = resources;
  view.namespaces = namespaces;
  view.queues = queues;
  await Promise.all([loadReviews(), loadList()]);
  try {
    await newEvents();
    view.eventsNote = null;
  } catch (error) {
    if (!denied(error)) throw error;
    view.eventsNote = 'This credential has no events:read: the event feed is not shown.';
  }
}

/** Reads what the current page shows, then redraws it. A call during a refresh makes it run once more after. */
async function refresh(): Promise<void> {
  if (!token()) return;
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = true;
  try {
    do {
      refreshAgain = false;
      const current = route();
      try {
        if (current.page === 'task') await loadTask(current.taskId);
        else await loadOverview();
        view.refreshedAt = new Date();
        view.refreshes += 1;
        view.error = null;
      } catch (error) {
        if (refused(error)) {
          signOut(`The token was refused: ${(error as RequestFailed).error.message}`);
          return;
        }
        view.error = messageOf(error);
      }
      render();
    } while (refreshAgain && token());
  } finally {
    refreshing = false;
  }
}

/** Changes the list's filters or page, and shows the result at once. */
async function changeList(change: (list: TaskList) => void): Promise<void> {
  change(view.list);
  view.list.loaded = false;
  render();
  try {
    await loadList();
  } catch (error) {
    if (refused(error)) {
      signOut(`The token was refused: ${(error as RequestFailed).error.message}`);
      return;
    }
  }
  render();
}

type Action = { kind: 'cancel' } | { kind: 'retry' } | { kind: 'resolve'; outcome: 'succeeded' | 'failed' | 'retry' };

/** Runs an action on a task; its answer or error message is shown by the task until the next action. */
async function act(taskId: string, action: Action, reason: string): Promise<void> {
  if (!reason) {
    outcomes.set(taskId, { kind: 'error', text: 'Give a reason first: it is written to the audit record.' });
    render(true);
    return;
  }
  const verb = action.kind === 'resolve' ? `resolve (${action.outcome})` : action.kind;
  outcomes.set(taskId, { kind: 'pending', text: `Sending ${verb}…` });
  render(true);
  try {
    const body = action.kind === 'resolve' ? { outcome: action.outcome, reason } : { reason };
    const answer = await api<{ task: Task; deduplicated: boolean }>('POST', `/v1/tasks/${taskId}:${action.kind}`, body);
    const t = answer.task;
    const what =
      action.kind === 'cancel' && t.state === 'RUNNING'
        ? 'Cancel requested: the worker is told; the task stays RUNNING until it answers.'
        : action.kind === 'cancel'
          ? `Cancelled: the task is ${t.state}.`
          : action.kind === 'retry'
            ? `Retried: the task is ${t.state} again.`
            : `Resolved (${action.outcome}): the task is ${t.state}.`;
    outcomes.set(taskId, { kind: 'ok', text: answer.deduplicated ? `${what} (A replay of an earlier request.)` : what });
    reasons.delete(taskId);
  } catch (error) {
    if (refused(error)) {
      signOut(`The token was refused: ${(error as RequestFailed).error.message}`);
      return;
    }
    outcomes.set(taskId, { kind: 'error', text: messageOf(error) });
  }
  render(true);
  await refresh();
}

/** The floors typed in the form, or why they cannot be sent. */
function typedFloors(): Floors | string {
  const floors = {} as Floors;
  for (const name of FLOORS) {
    const text = floorsForm.values[name].trim();
    if (!/^\d+$/.test(text)) return `${name}: a whole number, 0 for none`;
    floors[name] = Number(text);
  }
  return floors;
}

/** Fills the form with a namespace's floors as listed (when another namespace is chosen, or first). */
function chooseNamespace(name: string): void {
  const n = Array.isArray(view.namespaces) ? view.namespaces.find((x) => x.namespace === name) : undefined;
  floorsForm.namespace = name;
  for (const floor of FLOORS) floorsForm.values[floor] = n ? String(n[floor]) : '';
  floorsForm.preview = null;
  floorsForm.status = null;
}

/**
 * "Preview": a dry run of the typed floors (nothing is written); its effects are shown and
 * "Apply" is enabled. "Apply": the same change for real, with the revision the preview was
 * made against (someone else's change meanwhile is a 409, shown).
 */
async function floorsAction(kind: 'preview' | 'apply'): Promise<void> {
  const floors = typedFloors();
  const reason = floorsForm.reason.trim();
  if (typeof floors === 'string' || !reason) {
    floorsForm.status = { kind: 'error', text: typeof floors === 'string' ? floors : 'Give a reason first: it is written to the audit record.' };
    render(true);
    return;
  }
  const preview = floorsForm.preview;
  const n = Array.isArray(view.namespaces) ? view.namespaces.find((x) => x.namespace === floorsForm.namespace) : undefined;
  if (kind === 'apply' && !preview) return;
  if (kind === 'preview' && !n) {
    floorsForm.status = { kind: 'error', text: 'Choose a namespace.' };
    render(true);
    return;
  }
  const revision = kind === 'apply' && preview ? preview.revision : (n as Namespace).revision;
  const namespace = floorsForm.namespace;
  floorsForm.status = { kind: 'pending', text: kind === 'preview' ? 'Previewing (a dry run: nothing is changed)…' : 'Applying…' };
  render(true);
  try {
    const body = { expected_revision: revision, reason, ...floors, ...(kind === 'preview' ? { dry_run: true } : {}) };
    const answer = await api<{ namespace_resources: WireNamespace; deduplicated: boolean; effects?: Effect[] }>(
      'POST',
      `/v1/application/namespaces/${encodeURIComponent(namespace)}:configure`,
      body,
    );
    if (kind === 'preview') {
      floorsForm.preview = { namespace, revision, floors, reason, effects: answer.effects ?? [] };
      floorsForm.status = { kind: 'ok', text: 'Preview: nothing has changed yet. Apply makes this change.' };
    } else {
      const r = answer.namespace_resources;
      floorsForm.preview = null;
      floorsForm.status = {
        kind: 'ok',
        text: `Applied: ${r.namespace} reserves ${FLOORS.map((f) => `${f} ${formatCount(r[f])}`).join(', ')} (revision ${r.revision}).`,
      };
    }
  } catch (error) {
    if (refused(error)) {
      signOut(`The token was refused: ${(error as RequestFailed).error.message}`);
      return;
    }
    floorsForm.preview = null;
    floorsForm.status = { kind: 'error', text: messageOf(error) };
  }
  render(true);
  if (kind === 'apply') await refresh();
}

// ---------------------------------------------------------------------------------------------
// Rendering: plain DOM; every value goes in as text, never as HTML.

type Child = Node | string | null | undefined | false;
/**
 * No `style` attribute: the page's Content-Security-Policy (`style-src 'self'`) refuses inline
 * style attributes, so one set here would be dropped (and reported). Set a run-time value through the
 * CSSOM (`node.style.width = ...`), which the policy allows, or use a class of console.css.
 */
type Attributes = Record<string, string> & { style?: never };
function el(tag: string, attrs: Attributes = {}, ...children: Child[]): HTMLElement {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

const merge = (base: Attributes, more: Attributes): Attributes => ({ ...base, ...more }) as Attributes;

/** A table in a container of its own that scrolls sideways when the table is wider than the page. */
function table(headings: string[], rows: HTMLElement[], attrs: Attributes = {}): HTMLElement {
  return el('div', { class: 'scroll' }, el('table', attrs, el('thead', {}, el('tr', {}, ...headings.map((h) => el('th', {}, h)))), el('tbody', {}, ...rows)));
}

/** JSON as indented text (never HTML); `—` for a value that is absent. */
function json(value: unknown, field: string): HTMLElement {
  if (value === undefined) return el('span', { class: 'muted', 'data-json': field }, '—');
  return el('pre', { class: 'json', 'data-json': field }, JSON.stringify(value, null, 2));
}

const shortId = (id: string) => `…${id.slice(-8)}`;
const taskHref = (id: string) => `#/tasks/${id}`;
const taskLink = (id: string) => el('a', { href: taskHref(id), title: id, 'data-field': 'task-id' }, el('code', {}, shortId(id)));
const stateBadge = (state: string) => el('span', { class: `state state-${state.toLowerCase()}`, 'data-field': 'state' }, state);
const when = (timestamp: string | undefined) => (timestamp ? el('time', { datetime: timestamp }, timestamp) : el('span', { class: 'muted' }, '—'));
const attemptsOf = (t: Task) => `${formatCount(t.attempts)} / ${formatCount(t.max_attempts)}`;

function limitCard(name: string, used: Count, limit: number | null, id: string): HTMLElement {
  const share = limit ? Math.min(1, Number(used) / limit) : 0;
  const fill = el('span');
  // Through the CSSOM, not a style attribute: see el().
  fill.style.width = `${(share * 100).toFixed(2)}%`;
  const bar = el('div', { class: share >= 1 ? 'bar full' : 'bar' }, fill);
  return el(
    'div',
    { class: 'limit', 'data-limit': id },
    el('div', { class: 'name' }, name),
    el(
      'div',
      { class: 'figure' },
      el('span', { 'data-used': '', 'data-value': String(used) }, formatCount(used)),
      limit === null ? '' : ' / ',
      limit === null ? '' : el('span', { 'data-max': '', 'data-value': String(limit) }, formatCount(limit)),
    ),
    limit === null ? '' : bar,
  );
}

function applicationSection(): HTMLElement {
  const r = view.resources;
  if (r === 'denied') {
    return el(
      'div',
      { class: 'note', id: 'resources-note' },
      "This credential has no application:resources:read: the application's shared limits are not shown, only the queues in its scope.",
    );
  }
  if (r === null) return el('section', { id: 'application' }, el('h2', {}, 'Application'), el('p', { class: 'muted' }, 'Loading…'));
  return el(
    'section',
    { id: 'application' },
    el('h2', {}, 'Application - shared by all its namespaces and queues'),
    el(
      'div',
      { class: 'limits' },
      limitCard('Unfinished tasks', r.unfinished_tasks, r.max_unfinished_tasks, 'unfinished'),
      limitCard('Active attempts', r.active_attempts, r.max_concurrency, 'active'),
      limitCard('Reserved, not started', r.pending_starts, null, 'pending-starts'),
      limitCard('Starts per second (limit)', r.rate_per_second, null, 'rate'),
    ),
    el(
      'p',
      { class: 'muted', id: 'floors-sums' },
      'Namespaces’ floors reserve: ',
      ...(
        [
          ['unfinished', 'unfinished tasks', r.reserved_unfinished_tasks, r.idle_reserved_unfinished_tasks],
          ['concurrency', 'active attempts', r.reserved_concurrency, r.idle_reserved_concurrency],
          ['rate', 'starts per second', r.reserved_rate_per_second, r.idle_reserved_rate_per_second],
        ] as const
      ).flatMap(([id, what, reserved, idle], i) => [
        i > 0 ? ' · ' : '',
        el('span', { 'data-floor-sum': id }, `${formatCount(reserved)} ${what} (${formatCount(idle)} unused)`),
      ]),
    ),
  );
}

/** "used / reserved" of a floor; just "used" without one. */
const usedOfFloor = (used: Count, reserved: number) => (reserved > 0 ? `${formatCount(used)} / ${formatCount(reserved)}` : formatCount(used));

function namespacesSection(): HTMLElement | null {
  const list = view.namespaces;
  // Without application:resources:read the application's note says so already.
  if (list === 'denied' || list === null) return null;
  if (!list.some((n) => n.namespace === floorsForm.namespace) && list[0]) chooseNamespace(list[0].namespace);
  const rows = list.map((n) =>
    el(
      'tr',
      { 'data-namespace': n.namespace },
      el('td', {}, el('code', {}, n.namespace)),
      el('td', {}, n.environment),
      el('td', { 'data-field': 'unfinished' }, usedOfFloor(n.unfinished_tasks, n.reserved_unfinished_tasks)),
      el('td', { 'data-field': 'active' }, usedOfFloor(n.active_attempts, n.reserved_concurrency)),
      el('td', { 'data-field': 'rate' }, usedOfFloor(n.starts_this_second, n.reserved_rate_per_second)),
      el('td', { 'data-field': 'pending' }, formatCount(n.pending_starts)),
      el('td', { 'data-field': 'revision' }, n.revision),
    ),
  );
  return el(
    'section',
    { id: 'namespaces' },
    el('h2', {}, 'Namespaces - floors and usage'),
    el(
      'p',
      { class: 'muted' },
      'A floor is the part of an application limit kept for one namespace: it may always use it, and what it does not use is off limits to the others. Shown as used / reserved.',
    ),
    table(['namespace', 'environment', 'unfinished / floor', 'active / floor', 'starts this second / floor', 'reserved, not started', 'revision'], rows),
    floorsFormElement(list),
  );
}

function floorsFormElement(list: Namespace[]): HTMLElement {
  const form = floorsForm;
  const pending = form.status?.kind === 'pending';
  const chooser = el('select', { id: 'floors-namespace' }, ...list.map((n) => el('option', { value: n.namespace }, n.namespace))) as HTMLSelectElement;
  chooser.value = form.namespace;
  chooser.addEventListener('change', () => {
    chooseNamespace(chooser.value);
    render(true);
  });
  const changed = () => {
    // Another value than the preview's: Apply needs a new preview. Changed in place (a redraw
    // would move the caret of the field being typed in).
    if (!form.preview) return;
    form.preview = null;
    form.status = null;
    (document.getElementById('floors-apply') as HTMLButtonElement | null)?.setAttribute('disabled', '');
    document.getElementById('floors-effects')?.remove();
    const status = document.getElementById('floors-status');
    if (status) {
      status.className = 'outcome';
      status.textContent = 'Changed since the preview: preview again before applying.';
    }
  };
  const number = (floor: FloorName, id: string, label: string) => {
    const input = el('input', { type: 'number', id, min: '0', step: '1', inputmode: 'numeric', 'data-floor': floor }) as HTMLInputElement;
    input.value = form.values[floor];
    input.addEventListener('input', () => {
      form.values[floor] = input.value;
      changed();
    });
    return el('label', { for: id }, label, ' ', input);
  };
  const reason = el('input', { type: 'text', id: 'floors-reason', placeholder: 'reason (audited)', maxlength: '1024' }) as HTMLInputElement;
  reason.value = form.reason;
  reason.addEventListener('input', () => {
    form.reason = reason.value;
    changed();
  });
  const preview = button('floors-preview', 'Preview', !pending, () => void floorsAction('preview'));
  const apply = button('floors-apply', 'Apply', !pending && form.preview !== null, () => void floorsAction('apply'), '');
  const effects = form.preview
    ? el('ul', { id: 'floors-effects' }, ...form.preview.effects.map((e) => el('li', { 'data-limit': e.limit }, el('code', {}, e.limit), ': ', e.effect)))
    : null;
  const element = el(
    'form',
    { id: 'floors-form', class: 'floors-form' },
    el('h3', {}, 'Change a namespace’s floors'),
    el(
      'div',
      { class: 'filters' },
      el('label', { for: 'floors-namespace' }, 'Namespace ', chooser),
      number('reserved_unfinished_tasks', 'floors-unfinished', 'Unfinished tasks'),
      number('reserved_concurrency', 'floors-concurrency', 'Active attempts'),
      number('reserved_rate_per_second', 'floors-rate', 'Starts per second'),
    ),
    el(
      'div',
      { class: 'action-row' },
      el('label', { for: 'floors-reason', class: 'visually-hidden' }, 'Reason'),
      reason,
      el('span', { class: 'buttons' }, preview, apply),
    ),
    el(
      'span',
      { class: form.status ? `outcome ${form.status.kind}` : 'outcome', id: 'floors-status', role: 'status' },
      form.status?.text ?? 'Preview first: a dry run shows what the floors would mean now, changing nothing.',
    ),
    effects,
  );
  element.addEventListener('submit', (event) => event.preventDefault());
  return element;
}

function queuesSection(): HTMLElement {
  const rows = view.queues.map((q) =>
    el(
      'tr',
      { 'data-queue': q.queue },
      el('td', {}, el('code', {}, q.queue)),
      el('td', { 'data-field': 'unfinished' }, `${formatCount(q.unfinished_tasks)} / ${formatCount(q.max_unfinished_tasks)}`),
      el('td', { 'data-field': 'active' }, `${formatCount(q.active_attempts)} / ${formatCount(q.max_concurrency)}`),
      el('td', { 'data-field': 'pending' }, formatCount(q.pending_starts)),
      el('td', { 'data-field': 'rate' }, formatCount(q.rate_per_second)),
      el('td', { 'data-field': 'paused' }, q.paused ? el('span', { class: 'paused' }, 'paused') : 'no'),
    ),
  );
  return el(
    'section',
    { id: 'queues' },
    el('h2', {}, 'Queues in scope'),
    table(['queue', 'unfinished / max', 'active / max', 'reserved, not started', 'starts/s limit', 'paused'], rows),
    view.queues.length === 0 ? el('p', { class: 'muted' }, 'No queue in this credential’s scope.') : null,
  );
}

/** The reason field of a task's actions: what was typed is kept across redraws. */
function reasonInput(taskId: string, attrs: Attributes, initial: string): HTMLInputElement {
  const input = el('input', merge({ type: 'text', placeholder: 'reason (audited)', 'data-field': 'reason', maxlength: '1024' }, attrs)) as HTMLInputElement;
  input.value = reasons.get(taskId) ?? initial;
  input.addEventListener('input', () => reasons.set(taskId, input.value));
  return input;
}

function outcomeOf(taskId: string, attrs: Attributes = {}): HTMLElement {
  const outcome = outcomes.get(taskId);
  return el('span', merge({ class: outcome ? `outcome ${outcome.kind}` : 'outcome', 'data-field': 'status', role: 'status' }, attrs), outcome?.text ?? '');
}

function reviewSection(): HTMLElement {
  const rows = view.reviews.map((task) => {
    const reason = reasonInput(task.task_id, {}, 'resolved from the console');
    const pending = outcomes.get(task.task_id)?.kind === 'pending';
    const button = (outcome: 'succeeded' | 'failed' | 'retry', label: string) => {
      const b = el('button', { type: 'button', 'data-outcome': outcome, class: outcome === 'retry' ? 'secondary' : '' }, label) as HTMLButtonElement;
      b.disabled = pending;
      b.addEventListener('click', () => void act(task.task_id, { kind: 'resolve', outcome }, reason.value.trim() || 'resolved from the console'));
      return b;
    };
    return el(
      'tr',
      { 'data-task-id': task.task_id },
      el('td', {}, taskLink(task.task_id)),
      el('td', {}, task.queue),
      el('td', { 'data-field': 'attempts' }, attemptsOf(task)),
      el('td', {}, when(task.created_at)),
      el('td', { class: 'json-cell' }, json(task.payload, 'payload')),
      el('td', { class: 'json-cell' }, json(task.error, 'error')),
      el(
        'td',
        { class: 'actions' },
        reason,
        el('span', { class: 'buttons' }, button('succeeded', 'Succeeded'), button('failed', 'Failed'), button('retry', 'Retry')),
        outcomeOf(task.task_id),
      ),
    );
  });
  return el(
    'section',
    { id: 'review' },
    el('h2', {}, 'Tasks waiting for review (NEEDS_REVIEW)'),
    view.reviewNote ? el('div', { class: 'note' }, view.reviewNote) : null,
    rows.length > 0 ? table(['task', 'queue', 'attempts', 'created', 'payload', 'error', 'resolve (tasks:review)'], rows) : null,
    view.reviewsMore ? el('p', { class: 'muted' }, `The newest ${REVIEWS_SHOWN} are shown; the task list, filtered by NEEDS_REVIEW, has them all.`) : null,
    rows.length === 0 && !view.reviewNote ? el('p', { class: 'muted' }, 'None.') : null,
  );
}

function select(id: string, label: string, options: Array<[value: string, text: string]>, current: string, onChange: (value: string) => void): HTMLElement {
  const s = el('select', { id }, ...options.map(([value, text]) => el('option', { value }, text))) as HTMLSelectElement;
  s.value = current;
  s.addEventListener('change', () => onChange(s.value));
  return el('label', { for: id }, label, ' ', s);
}

function button(id: string, label: string, enabled: boolean, onClick: () => void, cls = 'secondary'): HTMLButtonElement {
  const b = el('button', { type: 'button', id, class: cls }, label) as HTMLButtonElement;
  b.disabled = !enabled;
  b.addEventListener('click', onClick);
  return b;
}

/** Goes to a task's page by its id (pasted from a log, an API answer or a ticket). */
function openTaskForm(): HTMLElement {
  const input = el('input', {
    type: 'text',
    id: 'task-open-id',
    placeholder: 'task id (32 hex characters)',
    'aria-label': 'task id',
    autocomplete: 'off',
    spellcheck: 'false',
  }) as HTMLInputElement;
  const form = el('form', { id: 'task-open', class: 'task-open' }, input, el('button', { type: 'submit', class: 'secondary' }, 'Open task'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const id = input.value.trim().toLowerCase();
    if (id) location.hash = taskHref(id);
  });
  return form;
}

function tasksSection(): HTMLElement {
  const list = view.list;
  const queueNames = view.queues.map((q) => q.queue);
  if (list.queue && !queueNames.includes(list.queue)) queueNames.push(list.queue);
  const filters = el(
    'div',
    { class: 'filters' },
    select(
      'task-filter-queue',
      'Queue',
      [['', 'all queues'], ...queueNames.map((q): [string, string] => [q, q])],
      list.queue,
      (queue) => void changeList((l) => Object.assign(l, { queue, cursors: [''] })),
    ),
    select(
      'task-filter-state',
      'State',
      [['', 'any state'], ...TASK_STATES.map((s): [string, string] => [s, s])],
      list.state,
      (state) => void changeList((l) => Object.assign(l, { state, cursors: [''] })),
    ),
    select(
      'task-page-size',
      'Per page',
      PAGE_SIZES.map((n): [string, string] => [String(n), String(n)]),
      String(list.limit),
      (limit) => void changeList((l) => Object.assign(l, { limit: Number(limit), cursors: [''] })),
    ),
  );
  const rows = list.tasks.map((t) =>
    el(
      'tr',
      { 'data-task-id': t.task_id },
      el('td', {}, taskLink(t.task_id)),
      el('td', {}, stateBadge(t.state)),
      el('td', { 'data-field': 'queue' }, t.queue),
      el('td', { 'data-field': 'attempts' }, attemptsOf(t)),
      el('td', { 'data-field': 'created' }, when(t.created_at)),
    ),
  );
  const pageNumber = list.cursors.length;
  const pager = el(
    'div',
    { class: 'pager' },
    button('tasks-newest', '« Newest', pageNumber > 1, () => void changeList((l) => (l.cursors = ['']))),
    button('tasks-newer', '‹ Newer', pageNumber > 1, () => void changeList((l) => (l.cursors = l.cursors.length > 1 ? l.cursors.slice(0, -1) : ['']))),
    el('span', { id: 'tasks-page', class: 'muted' }, `Page ${pageNumber}${list.loaded ? '' : ' (loading…)'}`),
    button('tasks-older', 'Older ›', list.loaded && list.next !== null, () => {
      const next = list.next;
      if (next) void changeList((l) => l.cursors.push(next));
    }),
  );
  return el(
    'section',
    { id: 'tasks' },
    el('h2', {}, 'Tasks - newest first'),
    filters,
    openTaskForm(),
    list.note ? el('div', { class: 'note', id: 'tasks-note' }, list.note) : null,
    list.error ? el('div', { class: 'error', id: 'tasks-error' }, list.error) : null,
    rows.length > 0 ? table(['task', 'state', 'queue', 'attempts', 'created'], rows) : null,
    rows.length === 0 && list.loaded && !list.note && !list.error ? el('p', { class: 'muted', id: 'tasks-none' }, 'No tasks match.') : null,
    list.note ? null : pager,
  );
}

function eventsSection(): HTMLElement {
  const rows = [...view.events]
    .reverse()
    .map((e) =>
      el(
        'tr',
        { 'data-sequence': e.sequence },
        el('td', {}, e.sequence),
        el('td', {}, el('code', {}, e.type)),
        el('td', {}, TASK_ID.test(e.subject) && e.type.startsWith('task.') ? taskLink(e.subject) : e.subject),
        el('td', {}, when(e.occurred_at)),
      ),
    );
  return el(
    'section',
    { id: 'events' },
    el('h2', {}, 'Latest events'),
    view.eventsNote ? el('div', { class: 'note' }, view.eventsNote) : null,
    rows.length > 0 ? table(['sequence', 'type', 'subject', 'when'], rows) : null,
    rows.length === 0 && !view.eventsNote ? el('p', { class: 'muted' }, 'No events yet.') : null,
  );
}

/** The task's fields in this order; any other the API adds comes after them. */
const FIELD_ORDER = [
  'task_id',
  'queue',
  'namespace',
  'state',
  'priority',
  'resource_key',
  'attempts',
  'max_attempts',
  'on_unknown_outcome',
  'cancel_requested',
  'created_at',
  'available_at',
  'deadline_at',
  'finished_at',
  'schedule_id',
  'scheduled_for',
];
const SHOWN_AS_JSON = ['payload', 'result', 'error'];

function fieldValue(name: string, value: unknown): Child {
  if (value === undefined) return el('span', { class: 'muted' }, '—');
  if (name === 'state' && typeof value === 'string') return stateBadge(value);
  if (name.endsWith('_at') || name === 'scheduled_for') return when(String(value));
  if (typeof value === 'number') return formatCount(value);
  if (typeof value === 'string') return name.endsWith('_id') ? el('code', {}, value) : value;
  if (typeof value === 'boolean') return value ? 'yes' : 'no';
  return JSON.stringify(value);
}

function taskActions(t: Task): HTMLElement {
  const reason = reasonInput(t.task_id, { id: 'task-reason' }, '');
  const pending = outcomes.get(t.task_id)?.kind === 'pending';
  const go = (action: Action) => () => void act(t.task_id, action, reason.value.trim());
  const buttons: HTMLElement[] = [];
  const add = (label: string, action: Action, attrs: Attributes, cls = '') => {
    const b = el('button', merge({ type: 'button', class: cls }, attrs), label) as HTMLButtonElement;
    b.disabled = pending;
    b.addEventListener('click', go(action));
    buttons.push(b);
  };
  if (t.state === 'NEEDS_REVIEW') {
    add('Resolve: succeeded', { kind: 'resolve', outcome: 'succeeded' }, { 'data-action': 'resolve', 'data-outcome': 'succeeded' });
    add('Resolve: failed', { kind: 'resolve', outcome: 'failed' }, { 'data-action': 'resolve', 'data-outcome': 'failed' });
    add('Resolve: retry', { kind: 'resolve', outcome: 'retry' }, { 'data-action': 'resolve', 'data-outcome': 'retry' }, 'secondary');
  }
  if (RETRYABLE.includes(t.state)) add('Retry', { kind: 'retry' }, { 'data-action': 'retry' });
  if (CANCELLABLE.includes(t.state)) {
    add(t.cancel_requested ? 'Cancel (asked already)' : 'Cancel', { kind: 'cancel' }, { 'data-action': 'cancel' }, 'danger');
  }
  const hint =
    t.state === 'SUCCEEDED'
      ? 'SUCCEEDED is final: no action applies.'
      : t.state === 'NEEDS_REVIEW'
        ? 'The outcome of its last attempt is unknown: decide it (tasks:review), or cancel it (tasks:cancel).'
        : RETRYABLE.includes(t.state)
          ? 'Retry puts it back to WAITING with the same payload and one more attempt (tasks:submit); it needs room under the limits.'
          : t.state === 'RUNNING'
            ? 'Cancelling a RUNNING task records the intent and tells its worker; it ends when the worker answers.'
            : 'Cancel ends it at once (tasks:cancel).';
  return el(
    'section',
    { id: 'task-actions' },
    el('h2', {}, 'Actions'),
    el('p', { class: 'muted' }, hint),
    buttons.length > 0
      ? el(
          'div',
          { class: 'action-row' },
          el('label', { for: 'task-reason', class: 'visually-hidden' }, 'Reason'),
          reason,
          el('span', { class: 'buttons' }, ...buttons),
        )
      : null,
    outcomeOf(t.task_id, { id: 'task-action-status' }),
  );
}

function taskPage(page: TaskPage): HTMLElement[] {
  const back = el('p', { class: 'back' }, el('a', { href: '#/', id: 'back' }, '← Overview and task list'));
  const t = page.task;
  if (!t) {
    return [
      el(
        'section',
        { id: 'task', 'data-task-id': page.taskId },
        back,
        el('h2', {}, 'Task ', el('code', {}, page.taskId)),
        page.note ? el('div', { class: 'note', id: 'task-note' }, page.note) : el('p', { class: 'muted' }, 'Loading…'),
      ),
    ];
  }
  const names = [...FIELD_ORDER, ...Object.keys(t).filter((k) => !FIELD_ORDER.includes(k) && !SHOWN_AS_JSON.includes(k))];
  const fields = el('dl', { class: 'fields' }, ...names.flatMap((name) => [el('dt', {}, name), el('dd', { 'data-field': name }, fieldValue(name, t[name]))]));
  const attempts = page.attempts.map((a) =>
    el(
      'tr',
      { 'data-attempt-number': String(a.attempt_number) },
      el('td', {}, formatCount(a.attempt_number)),
      el('td', {}, stateBadge(a.state)),
      el('td', { 'data-field': 'node_id' }, a.node_id ?? '—'),
      el('td', {}, when(a.claimed_at)),
      el('td', {}, when(a.started_at)),
      el('td', {}, when(a.finished_at)),
      el('td', {}, when(a.lease_expires_at)),
      el('td', {}, el('code', { title: a.attempt_id }, shortId(a.attempt_id))),
      el('td', {}, el('code', { title: a.session_id }, shortId(a.session_id))),
    ),
  );
  const events = page.events.map((e) =>
    el(
      'tr',
      { 'data-sequence': e.sequence },
      el('td', {}, e.sequence),
      el('td', { 'data-field': 'type' }, el('code', {}, e.type)),
      el('td', {}, when(e.occurred_at)),
      el('td', { class: 'json-cell' }, json(e.data, 'data')),
    ),
  );
  return [
    el(
      'section',
      { id: 'task', 'data-task-id': t.task_id },
      back,
      el('h2', {}, 'Task ', el('code', { class: 'task-id' }, t.task_id), ' ', stateBadge(t.state)),
      fields,
    ),
    taskActions(t),
    el(
      'section',
      { id: 'task-data' },
      el('h2', {}, 'Payload'),
      json(t.payload, 'payload'),
      el('h2', {}, 'Result'),
      json(t.result, 'result'),
      el('h2', {}, 'Error'),
      json(t.error, 'error'),
    ),
    el(
      'section',
      { id: 'task-attempts' },
      el('h2', {}, 'Attempts'),
      attempts.length > 0
        ? table(['#', 'state', 'node', 'claimed', 'started', 'finished', 'lease expires', 'attempt', 'session'], attempts)
        : el('p', { class: 'muted' }, 'None yet.'),
    ),
    el(
      'section',
      { id: 'task-events' },
      el('h2', {}, 'Events'),
      events.length > 0 ? table(['sequence', 'type', 'when', 'data'], events) : el('p', { class: 'muted' }, 'None (or pruned by retention).'),
    ),
  ];
}

function loginForm(message: string | null): HTMLElement {
  const input = el('input', {
    type: 'password',
    id: 'token',
    autocomplete: 'off',
    placeholder: 'orbit_…',
    'aria-label': 'credential token',
  }) as HTMLInputElement;
  const form = el('form', { class: 'login', id: 'login' }, el('label', { for: 'token' }, 'Credential token'), input, el('button', { type: 'submit' }, 'Open'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    start();
  });
  return el(
    'section',
    {},
    el('h2', {}, 'Sign in'),
    message ? el('div', { class: 'error', id: 'login-error' }, message) : null,
    el('p', { class: 'muted' }, 'Paste a credential token. It stays in this browser tab (sessionStorage) and is sent only in the Authorization header.'),
    form,
  );
}

/**
 * Redraws the page. Someone typing a reason keeps their field (and focus) until they leave it:
 * a periodic redraw waits; `force` (after an action, which moved the focus anyway) does not.
 */
/**
 * A press and its release on one element make a click; a redraw between them (the page is drawn
 * afresh every REFRESH_MS) would put the release on a new element, and the click would be lost.
 * So a redraw that is not forced waits while a pointer is pressed, and comes right after the
 * release (after the click it makes has been handled).
 */
let pointerPressed = false;
let redrawAfterRelease = false;
document.addEventListener('pointerdown', () => void (pointerPressed = true), true);
for (const type of ['pointerup', 'pointercancel']) {
  document.addEventListener(
    type,
    () => {
      pointerPressed = false;
      if (!redrawAfterRelease) return;
      redrawAfterRelease = false;
      window.setTimeout(() => render(), 0);
    },
    true,
  );
}

function render(force = false, loginMessage: string | null = null): void {
  const app = document.getElementById('app');
  if (!app) return;
  if (!force && pointerPressed) {
    redrawAfterRelease = true;
    return;
  }
  if (!token()) {
    app.replaceChildren(loginForm(loginMessage));
    return;
  }
  const focused = document.activeElement;
  if (!force && focused instanceof HTMLInputElement && focused.closest('#review, #task-actions, #task-open, #floors-form')) return;
  const signOutButton = el('button', { type: 'button', class: 'secondary', id: 'sign-out' }, 'Sign out');
  signOutButton.addEventListener('click', () => signOut(null));
  const current = route();
  const page =
    current.page === 'task' && view.task?.taskId === current.taskId
      ? taskPage(view.task)
      : current.page === 'task'
        ? [el('section', { id: 'task', 'data-task-id': current.taskId }, el('p', { class: 'muted' }, 'Loading…'))]
        : [applicationSection(), namespacesSection(), queuesSection(), reviewSection(), tasksSection(), eventsSection()].filter(
            (x): x is HTMLElement => x !== null,
          );
  app.replaceChildren(
    el(
      'p',
      { class: 'muted status-line' },
      signOutButton,
      ' ',
      el(
        'span',
        { id: 'refreshed', 'data-refreshes': String(view.refreshes) },
        view.refreshedAt ? `Refreshed ${view.refreshedAt.toLocaleTimeString()}; every ${REFRESH_MS / 1000} s.` : 'Loading…',
      ),
    ),
    view.error ? el('div', { class: 'error', id: 'error' }, view.error) : '',
    ...page,
  );
  // A control that had the focus (a filter, a pager button) has it again in the new page.
  if (focused instanceof HTMLElement && focused.id && focused.id !== 'sign-out') document.getElementById(focused.id)?.focus();
}

function signOut(message: string | null): void {
  sessionStorage.removeItem(TOKEN_KEY);
  window.clearInterval(timer);
  Object.assign(view, emptyView());
  eventsAfter = '0';
  reasons.clear();
  outcomes.clear();
  Object.assign(floorsForm, { namespace: '', reason: '', preview: null, status: null });
  for (const floor of FLOORS) floorsForm.values[floor] = '';
  render(true, message);
}

function start(): void {
  render(true);
  void refresh();
  window.clearInterval(timer);
  timer = window.setInterval(() => void refresh(), REFRESH_MS);
}

// Another page (a task's link, the back button): drawn at once from what is known, then read afresh.
// A task page is read at once, not after a refresh of the overview that may still be in flight
// (on a busy machine that one can take long): loadTask's generation makes the newest load win.
window.addEventListener('hashchange', () => {
  if (!token()) return;
  const current = route();
  if (current.page === 'task') {
    window.scrollTo(0, 0);
    void loadTask(current.taskId).then(
      () => render(),
      (error: unknown) => {
        if (refused(error)) signOut(`The token was refused: ${(error as RequestFailed).error.message}`);
      },
    );
  }
  render(true);
  void refresh();
});

if (token()) start();
else render();
