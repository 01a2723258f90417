/**
 * The worker side of an attempt after its claim: Start, renew, the authoritative result,
 * release, and the settlement engine that recovery shares.
 *
 * Every transaction here locks in lock order - application row → queue rows → task rows →
 * attempt rows (each set ascending) → permits - in ONE round trip of locking reads, decides in
 * JavaScript from what it read, and writes in a second round trip. Counter changes are derived
 * from the state change of the locked rows (an attempt that leaves RESERVED gives back one active
 * and one pending; one that leaves RUNNING gives back one active; a task that becomes terminal
 * gives back one unfinished), so each counter is released exactly once: a second settlement of
 * the same attempt finds it no longer active and changes nothing.
 */
import { idToHex as hex, type IdBytes } from '../../ids.ts';
import { tryStart, windowOfRow, type WindowState } from '../../domain/start-window.ts';
import { isTerminal, type TaskState } from '../../domain/task-transitions.ts';
import { millisToSql, sqlToMillis } from '../../time.ts';
import { placeholders, type Database, type Queryable, type Row, type Transaction } from '../database/database.ts';
import { counterAdjustSql } from '../quotas/counters.ts';

export interface AttemptRef {
  attemptId: IdBytes;
  taskId: IdBytes;
  queueId: IdBytes;
}

export type AttemptState = 'RESERVED' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'RELEASED' | 'EXPIRED';

export interface LockedAttempt extends Row {
  attempt_id: Buffer;
  task_id: Buffer;
  queue_id: Buffer;
  session_id: Buffer;
  state: AttemptState;
  resource_key: string | null;
  lease_expires_at: string;
  deadline_at: string;
  claimed_at: string;
}

export interface LockedTask extends Row {
  task_id: Buffer;
  state: TaskState;
  attempts: number;
  max_attempts: number;
  on_unknown_outcome: 'retry' | 'review';
  cancel_requested: number;
  deadline_at: string;
  current_attempt_id: Buffer | null;
}

interface WindowRow extends Row {
  rate_per_second: number;
  window_started_at: string | null;
  window_starts: number;
}

interface Locked {
  nowSql: string;
  nowMs: number;
  app: WindowRow;
  queues: Map<string, WindowRow & { queue_id: Buffer }>;
  tasks: Map<string, LockedTask>;
  attempts: Map<string, LockedAttempt>;
}

const ascending = (ids: Buffer[]) => [...new Map(ids.map((id) => [hex(id), id])).values()].sort(Buffer.compare);

/**
 * The locking reads, in lock order, in one round trip. With `skipLockedApplication`, a busy
 * application row is passed over (recovery comes back later) and null is returned.
 */
async function lockForAttempts(tx: Queryable, applicationId: IdBytes, refs: AttemptRef[], options: { skipLockedApplication?: boolean } = {}): Promise<Locked | null> {
  const queueIds = ascending(refs.map((r) => r.queueId));
  const taskIds = ascending(refs.map((r) => r.taskId));
  const attemptIds = ascending(refs.map((r) => r.attemptId));
  const appSql = `SELECT NOW(6) AS now, rate_per_second, window_started_at, window_starts
       FROM orbit_application_resources WHERE application_id = ? FOR UPDATE`;
  const restSql = `SELECT queue_id, rate_per_second, window_started_at, window_starts
       FROM orbit_queues WHERE queue_id IN (${placeholders(queueIds.length)}) ORDER BY queue_id FOR UPDATE;
     SELECT task_id, state, attempts, max_attempts, on_unknown_outcome, cancel_requested, deadline_at, current_attempt_id
       FROM orbit_tasks WHERE task_id IN (${placeholders(taskIds.length)}) ORDER BY task_id FOR UPDATE;
     SELECT attempt_id, task_id, queue_id, session_id, state, resource_key, lease_expires_at, deadline_at, claimed_at
       FROM orbit_attempts WHERE attempt_id IN (${placeholders(attemptIds.length)}) ORDER BY attempt_id FOR UPDATE`;
  const restParams = [...queueIds, ...taskIds, ...attemptIds];
  let appRows: Array<WindowRow & { now: string }>;
  let queueRows: Array<WindowRow & { queue_id: Buffer }>;
  let taskRows: LockedTask[];
  let attemptRows: LockedAttempt[];
  if (options.skipLockedApplication) {
    // Alone first: when the application row is busy, nothing else gets locked (or waited for).
    appRows = await tx.rows(`${appSql} SKIP LOCKED`, [applicationId]);
    if (!appRows[0]) return null;
    [queueRows, taskRows, attemptRows] = (await tx.batch(restSql, restParams)) as [typeof queueRows, LockedTask[], LockedAttempt[]];
  } else {
    [appRows, queueRows, taskRows, attemptRows] = (await tx.batch(`${appSql};\n${restSql}`, [applicationId, ...restParams])) as [
      typeof appRows,
      typeof queueRows,
      LockedTask[],
      LockedAttempt[],
    ];
  }
  const app = appRows[0];
  if (!app) return null;
  return {
    nowSql: app.now,
    nowMs: sqlToMillis(app.now),
    app,
    queues: new Map(queueRows.map((q) => [hex(q.queue_id), q])),
    tasks: new Map(taskRows.map((t) => [hex(t.task_id), t])),
    attempts: new Map(attemptRows.map((a) => [hex(a.attempt_id), a])),
  };
}

class ApplicationBusy extends Error {}

// ---------------------------------------------------------------------------------------------
// Settlement: an active attempt (RESERVED or RUNNING) ends, and its task moves on.

export interface Settlement {
  attemptState: Exclude<AttemptState, 'RESERVED' | 'RUNNING'>;
  taskState: TaskState;
  /** For WAITING: when it may be claimed again (default: unchanged). */
  availableAtMs?: number;
  result?: unknown;
  error?: unknown;
}

export interface SettleDecision<T> {
  answer: T;
  settlement?: Settlement;
}

export type Decide<R, T> = (ref: R, attempt: LockedAttempt | undefined, task: LockedTask | undefined, nowMs: number) => SettleDecision<T>;

/** Locks, decides item by item (later items see earlier decisions), writes. Null when the application row was busy and `skipLockedApplication` was asked. */
export async function settleAttempts<R extends AttemptRef, T>(
  db: Database,
  params: { applicationId: IdBytes; refs: R[]; decide: Decide<R, T>; skipLockedApplication?: boolean },
): Promise<{ answers: T[]; settled: Array<{ attempt: LockedAttempt; settlement: Settlement; nowMs: number }> } | null> {
  if (params.refs.length === 0) return { answers: [], settled: [] };
  try {
    return await db.transaction(async (tx) => {
      const locked = await lockForAttempts(tx, params.applicationId, params.refs, { skipLockedApplication: params.skipLockedApplication });
      if (!locked) throw new ApplicationBusy();
      const answers: T[] = [];
      const settled: Array<{ attempt: LockedAttempt; settlement: Settlement; nowMs: number }> = [];
      const writes = new SettlementWrites(params.applicationId, locked.nowSql);
      for (const ref of params.refs) {
        const attempt = locked.attempts.get(hex(ref.attemptId));
        const task = attempt ? locked.tasks.get(hex(attempt.task_id)) : undefined;
        const { answer, settlement } = params.decide(ref, attempt, task, locked.nowMs);
        answers.push(answer);
        if (settlement && attempt && task) {
          writes.add(attempt, task, settlement);
          settled.push({ attempt: { ...attempt }, settlement, nowMs: locked.nowMs });
          // Later items in this batch see the new states.
          attempt.state = settlement.attemptState;
          task.state = settlement.taskState;
        }
      }
      await writes.flush(tx);
      return { answers, settled };
    });
  } catch (error) {
    if (error instanceof ApplicationBusy) return null;
    throw error;
  }
}

const json = (value: unknown) => (value === undefined ? null : JSON.stringify(value));

class SettlementWrites {
  private statements: string[] = [];
  private args: unknown[] = [];
  private queues = new Map<string, { unfinished: number; active: number; pending: number }>();
  private permits = new Map<string, number>();

  constructor(
    private readonly applicationId: IdBytes,
    private readonly nowSql: string,
  ) {}

  add(attempt: LockedAttempt, task: LockedTask, s: Settlement): void {
    if (attempt.state !== 'RESERVED' && attempt.state !== 'RUNNING') throw new Error('only an active attempt can be settled');
    const terminal = isTerminal(s.taskState);
    this.statements.push('UPDATE orbit_attempts SET state = ?, finished_at = ? WHERE attempt_id = ?');
    this.args.push(s.attemptState, this.nowSql, attempt.attempt_id);
    this.statements.push(
      `UPDATE orbit_tasks
          SET state = ?, current_attempt_id = NULL, available_at = COALESCE(?, available_at), finished_at = ?,
              result = COALESCE(?, result), error = COALESCE(?, error), updated_at = ?
        WHERE task_id = ?`,
    );
    this.args.push(
      s.taskState,
      s.availableAtMs === undefined ? null : millisToSql(s.availableAtMs),
      terminal ? this.nowSql : null,
      json(s.result),
      json(s.error),
      this.nowSql,
      task.task_id,
    );
    const q = this.queues.get(hex(attempt.queue_id)) ?? { unfinished: 0, active: 0, pending: 0 };
    q.active -= 1;
    if (attempt.state === 'RESERVED') q.pending -= 1;
    if (terminal) q.unfinished -= 1;
    this.queues.set(hex(attempt.queue_id), q);
    if (attempt.resource_key !== null) {
      const key = `${hex(attempt.queue_id)}/${attempt.resource_key}`;
      this.permits.set(key, (this.permits.get(key) ?? 0) + 1);
    }
  }

  /** The writes and the COMMIT, in one round trip. */
  async flush(tx: Transaction): Promise<void> {
    if (this.statements.length === 0) return;
    const s = this.statements;
    const a = this.args;
    const counters = counterAdjustSql(
      this.applicationId,
      [...this.queues].map(([queueHex, delta]) => ({ queueId: Buffer.from(queueHex, 'hex'), delta })),
    );
    s.push(...counters.sql);
    a.push(...counters.params);
    for (const [key, n] of [...this.permits].sort(([x], [y]) => x.localeCompare(y))) {
      const slash = key.indexOf('/');
      s.push('UPDATE orbit_key_permits SET holders = holders - ?, updated_at = ? WHERE queue_id = ? AND resource_key = ?');
      a.push(n, this.nowSql, Buffer.from(key.slice(0, slash), 'hex'), key.slice(slash + 1));
    }
    await tx.finish(s.join(';\n'), a);
  }
}

/** The attempt is this session's and its lease has not run out. */
export function heldBySession(attempt: LockedAttempt | undefined, sessionId: IdBytes, nowMs: number): attempt is LockedAttempt {
  return attempt !== undefined && attempt.session_id.equals(sessionId) && sqlToMillis(attempt.lease_expires_at) > nowMs;
}

// ---------------------------------------------------------------------------------------------
// Start: RESERVED → RUNNING under both one-second start windows.

export type StartAnswer =
  | { kind: 'started'; leaseExpiresAtMs: number; duplicate: boolean }
  | { kind: 'rate_limited'; retryAfterMs: number }
  | { kind: 'lease_lost' };

export interface StartItem extends AttemptRef {
  sessionId: IdBytes;
}


/**
 * Grants Starts in order while both windows have room. A Start of an attempt already running
 * in this session answers `started` again and is not counted; a refused Start leaves the
 * reservation as it is (the worker retries within its lease).
 */
export async function attemptStartBatch(db: Database, params: { applicationId: IdBytes; items: StartItem[]; leaseSeconds: number }): Promise<StartAnswer[]> {
  return db.transaction(async (tx) => {
    const locked = (await lockForAttempts(tx, params.applicationId, params.items)) as Locked;
    const { nowMs, nowSql } = locked;
    let appWindow = windowOfRow(locked.app);
    const queueWindows = new Map([...locked.queues].map(([k, q]) => [k, windowOfRow(q)]));
    const granted: Array<{ attempt: LockedAttempt; leaseExpiresAtMs: number }> = [];
    const answers: StartAnswer[] = params.items.map((item) => {
      const attempt = locked.attempts.get(hex(item.attemptId));
      if (!heldBySession(attempt, item.sessionId, nowMs)) return { kind: 'lease_lost' };
      if (attempt.state === 'RUNNING') return { kind: 'started', leaseExpiresAtMs: sqlToMillis(attempt.lease_expires_at), duplicate: true };
      if (attempt.state !== 'RESERVED') return { kind: 'lease_lost' };
      const queueKey = hex(attempt.queue_id);
      const queueRow = locked.queues.get(queueKey);
      if (!queueRow) return { kind: 'lease_lost' };
      const app = tryStart(appWindow, locked.app.rate_per_second, nowMs);
      const queue = tryStart(queueWindows.get(queueKey) as WindowState, queueRow.rate_per_second, nowMs);
      if (!app.granted || !queue.granted) {
        const retryAfterMs = Math.max(app.granted ? 0 : app.retryAfterMs, queue.granted ? 0 : queue.retryAfterMs);
        return { kind: 'rate_limited', retryAfterMs };
      }
      appWindow = app.window;
      queueWindows.set(queueKey, queue.window);
      const leaseExpiresAtMs = Math.min(nowMs + params.leaseSeconds * 1000, sqlToMillis(attempt.deadline_at));
      attempt.state = 'RUNNING';
      attempt.lease_expires_at = millisToSql(leaseExpiresAtMs);
      granted.push({ attempt, leaseExpiresAtMs });
      return { kind: 'started', leaseExpiresAtMs, duplicate: false };
    });
    if (granted.length === 0) return answers;
    const statements: string[] = [];
    const args: unknown[] = [];
    const started = (w: WindowState) => (w.startedAt === null ? null : millisToSql(w.startedAt));
    statements.push('UPDATE orbit_application_resources SET window_started_at = ?, window_starts = ?, pending_starts = pending_starts - ? WHERE application_id = ?');
    args.push(started(appWindow), appWindow.starts, granted.length, params.applicationId);
    const perQueue = new Map<string, number>();
    for (const g of granted) perQueue.set(hex(g.attempt.queue_id), (perQueue.get(hex(g.attempt.queue_id)) ?? 0) + 1);
    for (const [queueKey, n] of perQueue) {
      const w = queueWindows.get(queueKey) as WindowState;
      statements.push('UPDATE orbit_queues SET window_started_at = ?, window_starts = ?, pending_starts = pending_starts - ? WHERE queue_id = ?');
      args.push(started(w), w.starts, n, Buffer.from(queueKey, 'hex'));
    }
    statements.push(`UPDATE orbit_tasks SET state = 'RUNNING', attempts = attempts + 1, updated_at = ? WHERE task_id IN (${placeholders(granted.length)})`);
    args.push(nowSql, ...granted.map((g) => g.attempt.task_id));
    for (const g of granted) {
      statements.push("UPDATE orbit_attempts SET state = 'RUNNING', started_at = ?, lease_expires_at = ? WHERE attempt_id = ?");
      args.push(nowSql, millisToSql(g.leaseExpiresAtMs), g.attempt.attempt_id);
    }
    await tx.finish(statements.join(';\n'), args);
    return answers;
  });
}

// ---------------------------------------------------------------------------------------------
// Renew: extend a lease, never past the task's deadline. Touches only the attempt row.

export async function attemptRenew(db: Queryable, params: { sessionId: IdBytes; attemptId: IdBytes; leaseSeconds: number }): Promise<number | null> {
  const [result, rows] = (await db.batch(
    `UPDATE orbit_attempts SET lease_expires_at = LEAST(NOW(6) + INTERVAL ? SECOND, deadline_at)
      WHERE attempt_id = ? AND session_id = ? AND state IN ('RESERVED', 'RUNNING') AND lease_expires_at > NOW(6);
     SELECT lease_expires_at FROM orbit_attempts WHERE attempt_id = ?`,
    [params.leaseSeconds, params.attemptId, params.sessionId, params.attemptId],
  )) as [{ affectedRows: number }, Array<{ lease_expires_at: string }>];
  if (result.affectedRows !== 1 || !rows[0]) return null;
  return sqlToMillis(rows[0].lease_expires_at);
}
