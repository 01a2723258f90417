/**
 * The live quota console (GET /console). It uses only Orbit's public HTTP API, with the token the
 * operator pastes, so it sees exactly what that credential may see. The token is kept in this
 * tab's sessionStorage (gone when the tab closes) and sent only as an Authorization header;
 * never in a URL. Figures refresh every two seconds.
 */

const TOKEN_KEY = 'orbit.console.token';
const REFRESH_MS = 2_000;
const EVENTS_SHOWN = 20;
const REVIEW_PER_QUEUE = 20;

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

interface Resources {
  max_unfinished_tasks: number;
  unfinished_tasks: string;
  max_concurrency: number;
  active_attempts: string;
  pending_starts: string;
  rate_per_second: number;
}
interface Queue extends Resources {
  queue: string;
  paused: boolean;
  key_concurrency: number;
}
interface Task {
  task_id: string;
  queue: string;
  attempts: number;
  max_attempts: number;
  created_at: string;
  error?: unknown;
}
interface OrbitEvent {
  sequence: string;
  type: string;
  subject: string;
  occurred_at: string;
}

interface View {
  resources: Resources | 'denied' | null;
  queues: Queue[];
  reviews: Task[];
  reviewNote: string | null;
  events: OrbitEvent[];
  eventsNote: string | null;
  refreshedAt: Date | null;
  error: string | null;
}

const view: View = { resources: null, queues: [], reviews: [], reviewNote: null, events: [], eventsNote: null, refreshedAt: null, error: null };
let eventsAfter = '0';
/** Reasons being typed, by task: the page is redrawn every refresh and must not lose them. */
const reasons = new Map<string, string>();
let refreshing = false;
let timer: number | undefined;

const token = () => sessionStorage.getItem(TOKEN_KEY);

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

async function allQueues(): Promise<Queue[]> {
  const queues: Queue[] = [];
  let cursor: string | undefined;
  do {
    const page = await api<{ queues: Queue[]; next_cursor?: string }>('GET', `/v1/queues?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    queues.push(...page.queues);
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

const denied = (error: unknown) => error instanceof RequestFailed && error.status === 403;

async function refresh(): Promise<void> {
  if (refreshing || !token()) return;
  refreshing = true;
  try {
    const [resources, queues] = await Promise.all([
      api<Resources>('GET', '/v1/application/resources').catch((error: unknown) => {
        if (denied(error)) return 'denied' as const;
        throw error;
      }),
      allQueues(),
    ]);
    view.resources = resources;
    view.queues = queues;
    try {
      const pages = await Promise.all(
        queues.map((q) => api<{ tasks: Task[] }>('GET', `/v1/queues/${encodeURIComponent(q.queue)}/tasks?state=NEEDS_REVIEW&limit=${REVIEW_PER_QUEUE}`)),
      );
      view.reviews = pages.flatMap((p) => p.tasks);
      view.reviewNote = null;
    } catch (error) {
      if (!denied(error)) throw error;
      view.reviews = [];
      view.reviewNote = 'This credential has no tasks:read: tasks waiting for review are not shown.';
    }
    try {
      await newEvents();
      view.eventsNote = null;
    } catch (error) {
      if (!denied(error)) throw error;
      view.eventsNote = 'This credential has no events:read: the event feed is not shown.';
    }
    view.refreshedAt = new Date();
    view.error = null;
  } catch (error) {
    if (error instanceof RequestFailed && error.status === 401) {
      signOut(`The token was refused: ${error.error.message}`);
      return;
    }
    view.error = error instanceof Error ? error.message : String(error);
  } finally {
    refreshing = false;
  }
  render();
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

function limitCard(name: string, used: string, limit: number | null, id: string): HTMLElement {
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
      el('span', { 'data-used': '' }, used),
      limit === null ? '' : ' / ',
      limit === null ? '' : el('span', { 'data-max': '' }, String(limit)),
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
      limitCard('Starts per second (limit)', String(r.rate_per_second), null, 'rate'),
    ),
  );
}

function queuesSection(): HTMLElement {
  const rows = view.queues.map((q) =>
    el(
      'tr',
      { 'data-queue': q.queue },
      el('td', {}, el('code', {}, q.queue)),
      el('td', { 'data-field': 'unfinished' }, `${q.unfinished_tasks} / ${q.max_unfinished_tasks}`),
      el('td', { 'data-field': 'active' }, `${q.active_attempts} / ${q.max_concurrency}`),
      el('td', { 'data-field': 'pending' }, q.pending_starts),
      el('td', { 'data-field': 'rate' }, String(q.rate_per_second)),
      el('td', { 'data-field': 'paused' }, q.paused ? el('span', { class: 'paused' }, 'paused') : 'no'),
    ),
  );
  return el(
    'section',
    { id: 'queues' },
    el('h2', {}, 'Queues in scope'),
    el(
      'table',
      {},
      el(
        'thead',
        {},
        el('tr', {}, ...['queue', 'unfinished / max', 'active / max', 'reserved, not started', 'starts/s limit', 'paused'].map((h) => el('th', {}, h))),
      ),
      el('tbody', {}, ...rows),
    ),
    view.queues.length === 0 ? el('p', { class: 'muted' }, 'No queue in this credential’s scope.') : null,
  );
}

async function resolve(taskId: string, outcome: 'succeeded' | 'failed' | 'retry', reason: string, status: HTMLElement): Promise<void> {
  status.textContent = 'Resolving…';
  try {
    await api('POST', `/v1/tasks/${taskId}:resolve`, { outcome, reason });
    status.textContent = `Resolved: ${outcome}`;
    await refresh();
  } catch (error) {
    status.textContent = error instanceof Error ? error.message : String(error);
  }
}

function reviewSection(): HTMLElement {
  const rows = view.reviews.map((task) => {
    const reason = el('input', {
      type: 'text',
      placeholder: 'reason (audited)',
      'data-field': 'reason',
      value: reasons.get(task.task_id) ?? 'resolved from the console',
    }) as HTMLInputElement;
    reason.addEventListener('input', () => reasons.set(task.task_id, reason.value));
    const status = el('span', { class: 'muted', 'data-field': 'status' });
    const button = (outcome: 'succeeded' | 'failed' | 'retry', label: string) => {
      const b = el('button', { type: 'button', 'data-outcome': outcome, class: outcome === 'retry' ? 'secondary' : '' }, label);
      b.addEventListener('click', () => void resolve(task.task_id, outcome, reason.value.trim() || 'resolved from the console', status));
      return b;
    };
    return el(
      'tr',
      { 'data-task-id': task.task_id },
      el('td', {}, el('code', {}, task.task_id)),
      el('td', {}, task.queue),
      el('td', {}, `${task.attempts} / ${task.max_attempts}`),
      el('td', {}, task.created_at),
      el('td', {}, reason, ' ', button('succeeded', 'Succeeded'), ' ', button('failed', 'Failed'), ' ', button('retry', 'Retry'), ' ', status),
    );
  });
  return el(
    'section',
    { id: 'review' },
    el('h2', {}, 'Tasks waiting for review (NEEDS_REVIEW)'),
    view.reviewNote ? el('div', { class: 'note' }, view.reviewNote) : null,
    rows.length > 0
      ? el(
          'table',
          {},
          el('thead', {}, el('tr', {}, ...['task', 'queue', 'attempts', 'created', 'resolve (tasks:review)'].map((h) => el('th', {}, h)))),
          el('tbody', {}, ...rows),
        )
      : view.reviewNote
        ? null
        : el('p', { class: 'muted' }, 'None.'),
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
        el('td', {}, e.subject),
        el('td', {}, e.occurred_at),
      ),
    );
  return el(
    'section',
    { id: 'events' },
    el('h2', {}, 'Latest events'),
    view.eventsNote ? el('div', { class: 'note' }, view.eventsNote) : null,
    rows.length > 0
      ? el('table', {}, el('thead', {}, el('tr', {}, ...['sequence', 'type', 'subject', 'when'].map((h) => el('th', {}, h)))), el('tbody', {}, ...rows))
      : view.eventsNote
        ? null
        : el('p', { class: 'muted' }, 'No events yet.'),
  );
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

function render(loginMessage: string | null = null): void {
  const app = document.getElementById('app');
  if (!app) return;
  if (!token()) {
    app.replaceChildren(loginForm(loginMessage));
    return;
  }
  // Someone typing a reason keeps their field (and focus) until they leave it.
  if (document.activeElement instanceof HTMLInputElement && document.activeElement.closest('#review')) return;
  const signOutButton = el('button', { type: 'button', class: 'secondary', id: 'sign-out' }, 'Sign out');
  signOutButton.addEventListener('click', () => signOut(null));
  app.replaceChildren(
    el(
      'p',
      { class: 'muted' },
      signOutButton,
      ' ',
      el('span', { id: 'refreshed' }, view.refreshedAt ? `Refreshed ${view.refreshedAt.toLocaleTimeString()}; every ${REFRESH_MS / 1000} s.` : 'Loading…'),
    ),
    view.error ? el('div', { class: 'error', id: 'error' }, view.error) : '',
    applicationSection(),
    queuesSection(),
    reviewSection(),
    eventsSection(),
  );
}

function signOut(message: string | null): void {
  sessionStorage.removeItem(TOKEN_KEY);
  window.clearInterval(timer);
  Object.assign(view, { resources: null, queues: [], reviews: [], events: [], refreshedAt: null, error: null });
  eventsAfter = '0';
  render(message);
}

function start(): void {
  render();
  void refresh();
  window.clearInterval(timer);
  timer = window.setInterval(() => void refresh(), REFRESH_MS);
}

if (token()) start();
else render();
