/**
 * One watcher per server process for everything that waits for events: long-polls of a
 * subscription and `GET /v1/tasks/{id}?wait_seconds=`. A waiting request holds no database
 * connection; while anything waits, the watcher reads the headers of new events every
 * `intervalMs` (one plain read for the whole process) and wakes the waiters they match, which
 * then read what they answer with. Nothing is read while nobody waits.
 *
 * Sequence numbers are taken at insert time (AUTO_INCREMENT), and transactions of two
 * applications commit in either order, so a number below the newest one seen may still appear.
 * The numbers the watcher passed over are asked for again for `gapMs` (a rolled-back insert
 * leaves one that never appears). A waiter registers before it reads its state, so an event is
 * either visible to that read or seen by the watcher afterwards.
 */
import { withoutDeadline } from '../deadline.ts';
import { idToHex } from '../ids.ts';
import type { Logger } from '../log.ts';
import type { Database } from '../store/database/database.ts';
import { eventHead, eventHeadersSince, type EventHeader } from '../store/records/events.ts';

export interface EventMatch {
  /** The namespace (hex id) whose events wake this waiter. */
  namespaceId: string;
  /** Only events about this subject (a task id). */
  subject?: string;
  /** Only events of these types. */
  types?: ReadonlySet<string>;
}

/** How far behind the newest sequence number a watcher starts (see register). */
const START_BEHIND = 200n;
/** Passed-over numbers remembered at most (the newest ones; the newest 1,000 are asked for each tick). */
const MAX_GAPS = 10_000;

interface Waiter {
  match: EventMatch;
  wake: () => void;
}

export class EventWatcher {
  private readonly waiters = new Set<Waiter>();
  private head: string | null = null;
  /** Sequence numbers passed over, and since when. */
  private readonly gaps = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private polling = false;
  private stopped = false;
  private lastWarning = 0;

  constructor(
    private readonly db: Database,
    private readonly log: Logger,
    private readonly options: { intervalMs?: number; gapMs?: number; batch?: number } = {},
  ) {}

  private headRead: Promise<void> | null = null;

  /**
   * Registers a waiter; call `wait` to sleep until it is woken (or the time is up), `cancel` to
   * drop it. Resolves once the watcher knows where the feed is, so anything committed after
   * this resolves reaches the waiter: read the state you wait on only then.
   */
  async register(match: EventMatch): Promise<{ wait(timeoutMs: number, signal?: AbortSignal): Promise<boolean>; cancel(): void }> {
    let resolveWake: (woken: boolean) => void = () => {};
    let woken = false;
    const waiter: Waiter = {
      match,
      wake: () => {
        woken = true;
        resolveWake(true);
      },
    };
    // In the set before the head is read: the watcher does not forget its place while this registers.
    this.waiters.add(waiter);
    if (this.head === null) {
      this.headRead ??= eventHead(this.db)
        .then((head) => {
          // A little behind the newest number: below it, another application's event may not
          // have committed yet (its number was taken first). Looking again at the last
          // START_BEHIND numbers costs a spurious wake at most; the waiters read again anyway.
          this.head ??= (BigInt(head) > START_BEHIND ? BigInt(head) - START_BEHIND : 0n).toString();
        })
        .finally(() => {
          this.headRead = null;
        });
      await this.headRead.catch((error: unknown) => {
        this.waiters.delete(waiter);
        throw error;
      });
    }
    this.schedule();
    const cancel = () => this.waiters.delete(waiter);
    return {
      cancel,
      wait: (timeoutMs, signal) =>
        new Promise<boolean>((resolve) => {
          if (woken || this.stopped) {
            cancel();
            resolve(woken);
            return;
          }
          const timer = setTimeout(() => finish(false), timeoutMs);
          const onAbort = () => finish(false);
          signal?.addEventListener('abort', onAbort, { once: true });
          function finish(value: boolean) {
            clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
            cancel();
            resolve(value);
          }
          resolveWake = (value) => finish(value);
        }),
    };
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    for (const waiter of this.waiters) waiter.wake();
    this.waiters.clear();
  }

  private schedule(): void {
    if (this.stopped || this.timer !== null || this.polling) return;
    // The watcher's own work, for every waiter: outside the deadline of the request that happened
    // to register first (a timer carries the context it was made in, and so would each tick
    // after it - the reads would then all fail once that request's time is up).
    this.timer = withoutDeadline(() =>
      setTimeout(() => {
        this.timer = null;
        void this.tick();
      }, this.options.intervalMs ?? 50),
    );
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    if (this.waiters.size === 0) {
      // Nobody waits: forget where we were; the next waiter starts from the newest event.
      this.head = null;
      this.gaps.clear();
      return;
    }
    this.polling = true;
    try {
      if (this.head === null) this.head = await eventHead(this.db);
      const now = Date.now();
      for (const [sequence, since] of this.gaps) if (now - since > (this.options.gapMs ?? 10_000)) this.gaps.delete(sequence);
      const rows = await eventHeadersSince(this.db, this.head, [...this.gaps.keys()].slice(-1000), this.options.batch ?? 2000);
      let next = BigInt(this.head);
      for (const row of rows) {
        this.gaps.delete(row.sequence);
        const sequence = BigInt(row.sequence);
        if (sequence > next) {
          const from = sequence - next > BigInt(MAX_GAPS) ? sequence - BigInt(MAX_GAPS) : next + 1n;
          for (let missing = from; missing < sequence; missing++) this.gaps.set(missing.toString(), now);
          next = sequence;
        }
        this.dispatch(row);
      }
      this.head = next.toString();
      // Numbers that never commit (a rolled-back insert; an INSERT … SELECT reserves numbers in
      // blocks) pile up here: keep the newest, where an event committing late would be.
      for (const sequence of this.gaps.keys()) {
        if (this.gaps.size <= MAX_GAPS) break;
        this.gaps.delete(sequence);
      }
    } catch (error) {
      // While the database is away this would repeat every tick: once every 10 s is enough.
      if (Date.now() - this.lastWarning > 10_000) {
        this.lastWarning = Date.now();
        this.log.warn({ err: error }, 'event watcher: reading new events failed; trying again');
      }
    } finally {
      this.polling = false;
      if (this.waiters.size > 0) this.schedule();
      else {
        // The last waiter was woken: start afresh next time rather than from an old place.
        this.head = null;
        this.gaps.clear();
      }
    }
  }

  private dispatch(row: EventHeader): void {
    const namespace = idToHex(row.namespace_id);
    for (const waiter of this.waiters) {
      const m = waiter.match;
      if (m.namespaceId !== namespace) continue;
      if (m.subject !== undefined && m.subject !== row.subject) continue;
      if (m.types !== undefined && !m.types.has(row.type)) continue;
      this.waiters.delete(waiter);
      waiter.wake();
    }
  }
}
