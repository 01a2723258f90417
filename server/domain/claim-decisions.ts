/**
 * The decisions of a claim (docs/quotas-and-locking.md#how-the-checks-combine), without SQL:
 * server/store/attempts/claims.ts locks and reads the rows, asks these functions what to grant,
 * and writes the result. Pure: plain numbers, strings and arrays in, what to grant out.
 *
 *   room at one level   = max(0, min(max_concurrency - active_attempts,
 *                                    rate_per_second - starts in the current window - pending_starts))
 *   a queue's room      = the same, and 0 while the queue is paused
 *   the session's room  = max(0, capacity - attempts it holds)
 *   the claim's budget  = min(max asked, session room, application room), and when the
 *                         application's room is smaller than what the claim wants, at most
 *                         ceil(room / (other waiting nodes + 1)) - the node's fair share
 *   the pick            = candidates in claim order (priority, then oldest available_at, then
 *                         task id), while the budget lasts, each queue's room lasts, and the
 *                         candidate's (queue, resource_key) has fewer than key_concurrency holders,
 *                         and while their payloads stay within MAX_CLAIMED_PAYLOAD_BYTES (the
 *                         first attempt of a claim always goes, whatever its size)
 */
import { claimRoomUnderRate, idleReservedRate, startsInCurrentWindow, windowIsOpen, type WindowState } from './start-window.ts';
import { FloorLedger } from './floors.ts';
import type { PermitTally, PermitRef } from './permits.ts';

/** One quota level (the application's row or a queue's row), as read in the claim transaction. */
export interface QuotaLevel {
  maxConcurrency: number;
  /** Attempts reserved or running. */
  activeAttempts: number | bigint;
  /** Reserved attempts not yet started (a subset of activeAttempts); they hold start-window room. */
  pendingStarts: number | bigint;
  ratePerSecond: number;
  window: WindowState;
}

/**
 * How many more attempts a claim may reserve at one level: concurrency left and start-rate room
 * left, whichever is smaller. Never negative: usage above a lowered limit leaves 0.
 */
export function levelRoom(level: QuotaLevel, nowMs: number): number {
  const concurrency = level.maxConcurrency - Number(level.activeAttempts);
  const rate = claimRoomUnderRate(level.window, Number(level.pendingStarts), level.ratePerSecond, nowMs);
  return Math.max(0, Math.min(concurrency, rate));
}

/** A queue's room: its level's room, and nothing at all while it is paused. */
export function queueRoom(level: QuotaLevel & { paused: boolean }, nowMs: number): number {
  return level.paused ? 0 : levelRoom(level, nowMs);
}

/** What the session may still reserve: its capacity less the attempts it holds (reserved or running). */
export function sessionRoom(capacity: number, held: number | bigint): number {
  return Math.max(0, capacity - Number(held));
}

/**
 * A node's fair share of scarce room: the room divided among this node and the other nodes
 * waiting for room, rounded up (so some node always makes progress while there is room).
 */
export function fairShare(room: number, otherWaitingNodes: number): number {
  return Math.ceil(room / (otherWaitingNodes + 1));
}

export interface ClaimBudget {
  /** What the claim wants: what was asked for, within the session's room. A claim granted less is "waiting". */
  wanted: number;
  /** At most this many attempts may be reserved (queue room and keyed permits may leave fewer). */
  budget: number;
}

/**
 * The claim's budget at the application level: what it wants within the application's room,
 * and only its fair share when that room is smaller than what it wants.
 */
export function claimBudget(input: {
  max: number;
  sessionRoom: number;
  applicationRoom: number;
  otherWaitingNodes: number;
  /** The part of the room only this claim's namespace may take (its idle floor, domain/floors.ts): not shared out. */
  ownRoom?: number;
}): ClaimBudget {
  const wanted = Math.min(input.max, input.sessionRoom);
  const own = Math.min(input.ownRoom ?? 0, input.applicationRoom);
  let budget = Math.min(wanted, input.applicationRoom);
  if (input.applicationRoom < wanted) budget = Math.min(budget, own + fairShare(input.applicationRoom - own, input.otherWaitingNodes));
  return { wanted, budget };
}

/** What one claim of a group may do before its pick. */
export type ClaimPlan =
  | { kind: 'credential-no-longer-valid' }
  | { kind: 'session-closed' }
  /** Pick at most `budget` (0: nothing); granted fewer than `wanted`, the session is waiting. */
  | { kind: 'pick'; budget: number; wanted: number };

/**
 * One claim of a group, in the group's order: its credential must still be valid and its
 * session open; then its budget is what it wants within its session's room, at most its fair
 * share of the scarce room - the application's, or its own queues' when those have less (as
 * they were when the group began, so that every claim of the group sees the same) - and never
 * more than the application room the claims before it left.
 */
export function planClaim(input: {
  credentialValid: boolean;
  sessionOpen: boolean;
  capacity: number;
  held: number;
  max: number;
  applicationRoom: number;
  grantedInGroup: number;
  ownQueueRoom: number;
  otherWaitingNodes: number;
  /** The part of applicationRoom that is the namespace's own floor (not shared with the waiting nodes). */
  ownRoom?: number;
}): ClaimPlan {
  if (!input.credentialValid) return { kind: 'credential-no-longer-valid' };
  if (!input.sessionOpen) return { kind: 'session-closed' };
  const fair = claimBudget({
    max: input.max,
    sessionRoom: sessionRoom(input.capacity, input.held),
    applicationRoom: Math.min(input.applicationRoom, input.ownQueueRoom),
    otherWaitingNodes: input.otherWaitingNodes,
    ownRoom: input.ownRoom ?? 0,
  });
  return { kind: 'pick', budget: Math.max(0, Math.min(fair.budget, input.applicationRoom - input.grantedInGroup)), wanted: fair.wanted };
}

/**
 * The most payload one `claimed` frame carries (bytes of the payloads' JSON): tasks are a
 * tenant's data, up to 256 KiB each, and a claim of 1000 of them would be a frame of 256 MiB
 * that no worker should have to take. A claim that reaches it gets fewer attempts than it
 * asked for - in claim order, the next claim goes on from there - and at least one.
 */
export const MAX_CLAIMED_PAYLOAD_BYTES = 8 * 1024 * 1024;

/** A claimable task, as the pick needs it. */
export interface ClaimCandidate {
  /** The size of its payload's JSON in bytes. */
  payloadBytes: number;
  /** The queue's id (any stable text, e.g. hex); keys the queue allowances. */
  queue: string;
  /** The task's id in hex: the last tie-break of the claim order. */
  taskId: string;
  priority: number;
  /** DATETIME(6) text in database time. */
  availableAt: string;
  resourceKey: string | null;
}

/** What one queue still allows in this claim. */
export interface QueueAllowance {
  /** Attempts this claim may still reserve in the queue (0 while paused). */
  room: number;
  /** Reserved or running attempts allowed per (queue, resource_key). */
  keyConcurrency: number;
}

/** Claim order: higher priority first, then the oldest available_at, then task id. */
export function claimOrder(a: ClaimCandidate, b: ClaimCandidate): number {
  return b.priority - a.priority || a.availableAt.localeCompare(b.availableAt) || (a.taskId < b.taskId ? -1 : a.taskId > b.taskId ? 1 : 0);
}

export interface Pick<C> {
  /** The candidates granted, in claim order. */
  picked: C[];
  /** Each queue's allowance after the grants. */
  queues: Map<string, QueueAllowance>;
  /** Each permit's holders after the grants (the holders given, plus this pick's). */
  holders: PermitTally;
  /**
   * Permit keys of candidates passed over because the key was full (a repeat per candidate).
   * Non-empty: another look without those keys may find more work.
   */
  fullKeys: PermitRef[];
  /** The payload bound stopped the pick: the claim is full, another look would not add to it. */
  stoppedBySize: boolean;
}

/**
 * One round of picking: goes through the candidates in claim order and grants each one while
 * `left` lasts, its queue has room, and - for a keyed task - its permit has fewer holders than
 * the queue's key_concurrency. `holders` must know every key among the candidates (a key it does
 * not know counts as having no holders). Tasks without a key need no permit. The pick stops at
 * the first candidate whose payload would pass `payloadBytesLeft` (when given) - unless nothing
 * of the claim is granted yet (`firstOfClaim`): then it goes, so a claim is never empty for size.
 */
export function pickCandidates<C extends ClaimCandidate>(
  candidates: readonly C[],
  input: {
    left: number;
    queues: ReadonlyMap<string, QueueAllowance>;
    holders: PermitTally;
    payloadBytesLeft?: number;
    firstOfClaim?: boolean;
  },
): Pick<C> {
  const queues = new Map([...input.queues].map(([id, q]) => [id, { ...q }]));
  const holders = input.holders.copy();
  const picked: C[] = [];
  const fullKeys: PermitRef[] = [];
  let bytesLeft = input.payloadBytesLeft ?? Number.POSITIVE_INFINITY;
  let stoppedBySize = false;
  for (const c of [...candidates].sort(claimOrder)) {
    const queue = queues.get(c.queue);
    if (picked.length >= input.left || !queue || queue.room <= 0) continue;
    const alwaysGoes = input.firstOfClaim === true && picked.length === 0;
    if (c.payloadBytes > bytesLeft && !alwaysGoes) {
      stoppedBySize = true;
      break;
    }
    if (c.resourceKey !== null) {
      const permit: PermitRef = { queue: c.queue, resourceKey: c.resourceKey };
      if (holders.get(permit) >= queue.keyConcurrency) {
        fullKeys.push(permit);
        continue;
      }
      holders.add(permit, 1);
    }
    queue.room -= 1;
    bytesLeft -= c.payloadBytes;
    picked.push(c);
  }
  return { picked, queues, holders, fullKeys, stoppedBySize };
}

/** The application row as a claim reads it, with the idle part of its namespaces' floors. */
export interface ApplicationQuota extends QuotaLevel {
  idleReservedConcurrency: bigint;
  /** The sum of the namespaces' rate reservations. */
  reservedRate: bigint;
  /** The used part of them in the application's window (0 once it has ended). */
  windowReservedStarts: bigint;
}

/** A namespace row as a claim reads it. */
export interface NamespaceQuota {
  reservedConcurrency: bigint;
  activeAttempts: bigint;
  reservedRate: bigint;
  /** Its starts in the application's current window (0 when that window has ended or is not its). */
  windowStarts: bigint;
  /** Its reservations not yet started. */
  pendingStarts: bigint;
}

/**
 * The application level's room for claims, namespace by namespace, under the floors
 * (domain/floors.ts): concurrency - a namespace's idle reservation is its own, every other
 * namespace's is off limits - and the rate, where what is idle of each namespace's rate
 * reservation in the current window is kept the same way (reservations not yet started count
 * as the rate's usage, as they do without floors). The application row knows the idle part of
 * the rate floors from the window's starts only, not which namespace's reservations are
 * waiting to start, so that rule alone would count another namespace's waiting reservations
 * twice - as usage and as its idle floor; a namespace may therefore always claim what is left
 * of its own rate floor (reserved - its starts in the window - its reservations waiting), which
 * is within what the others' rooms left it. The Start decides the rate exactly
 * (start-window.ts `startFloorLedger`). Without floors it is `levelRoom`.
 */
export class ApplicationClaimRoom {
  private readonly concurrency: FloorLedger;
  private readonly rate: FloorLedger;
  /** What is left of each namespace's own rate floor in this window. */
  private readonly ownRate: Map<string, bigint>;

  constructor(app: ApplicationQuota, namespaces: Iterable<readonly [string, NamespaceQuota]>, nowMs: number) {
    const list = [...namespaces];
    const windowOpen = windowIsOpen(app.window, nowMs);
    this.concurrency = new FloorLedger(
      { limit: BigInt(app.maxConcurrency), usage: BigInt(app.activeAttempts), idleReserved: app.idleReservedConcurrency },
      list.map(([k, n]) => [k, { reserved: n.reservedConcurrency, usage: n.activeAttempts }] as const),
    );
    this.rate = new FloorLedger(
      {
        limit: BigInt(app.ratePerSecond),
        usage: BigInt(startsInCurrentWindow(app.window, nowMs)) + BigInt(app.pendingStarts),
        idleReserved: idleReservedRate(app, nowMs),
      },
      list.map(([k, n]) => [k, { reserved: n.reservedRate, usage: windowOpen ? n.windowStarts : 0n }] as const),
    );
    this.ownRate = new Map(list.map(([k, n]) => [k, n.reservedRate - (windowOpen ? n.windowStarts : 0n) - n.pendingStarts]));
  }

  private rateRoom(namespace: string): bigint {
    const own = this.ownRate.get(namespace) ?? 0n;
    const shared = this.rate.room(namespace);
    return own > shared ? own : shared;
  }

  /** What a claim in `namespace` may still reserve at the application level (never negative). */
  room(namespace: string): number {
    const room = Math.min(Number(this.concurrency.room(namespace)), Number(this.rateRoom(namespace)));
    return Math.max(0, room);
  }

  /**
   * The part of `room(namespace)` that is the namespace's own idle floor of the limit that binds
   * (the smaller room): no other namespace could take it, so fairness does not share it out.
   */
  ownRoom(namespace: string): number {
    const concurrency = this.concurrency.room(namespace);
    const rate = this.rateRoom(namespace);
    const own = concurrency <= rate ? this.concurrency.idle(namespace) : (this.ownRate.get(namespace) ?? 0n);
    return Math.max(0, Math.min(this.room(namespace), Number(own)));
  }

  /** `n` attempts reserved in `namespace`: active at once; the rate's floor is used only when they start. */
  take(namespace: string, n: number): void {
    if (n === 0) return;
    this.concurrency.take(namespace, BigInt(n));
    this.rate.takeShared(BigInt(n));
    this.ownRate.set(namespace, (this.ownRate.get(namespace) ?? 0n) - BigInt(n));
  }
}
