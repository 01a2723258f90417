/**
 * Group commit. Requests for the same key (an application) that arrive while that key's transaction
 * is in flight wait and then go together in the next transaction. One application's quota row
 * serialises its transactions anyway; sending many requests in one transaction is what lifts the
 * ceiling (docs/quotas-and-locking.md#fast-paths-and-careful-paths). An idle key runs a request at
 * once, alone: batching adds no latency when there is no contention.
 *
 * Outcomes are per item. The batch function answers each item on its own - a refusal (a full
 * quota, a lost lease, an idempotency conflict) is one item's output, not an error - so the other
 * requests of its group are not affected. A batch function that THROWS has no per-item answer,
 * though, and one item that makes it throw (a value the database refuses, a bug its data trips)
 * would take every request of the group down with it. So a batch that throws is isolated: it is
 * run again in halves, down to single items, and only the requests whose own (sub)batch still
 * throws get the error. One bad item costs at most 2·log2(batch size) extra runs (6 for 8
 * items, 14 for 128), not a failed group; a batch whose every item is bad, 2·(size - 1).
 * Running items again is safe: every batch function here is a transaction that writes nothing
 * when it throws, over idempotent operations - a submission replays by its Idempotency-Key, a
 * repeated Start or result of an attempt answers as a duplicate - so even after a throw that
 * came once the transaction had committed, a rerun only answers what had happened.
 *
 * Not isolated - every request of the group gets the error at once, as before - are errors that
 * say the database as a whole failed (see `mayBeOneItemsFault`): unreachable, timed out, busy
 * (deadlocks that outlasted their retries). Each item alone would fail the same way, and running
 * the halves would only multiply the wait of requests that must answer 503 promptly.
 *
 * A group is bounded by bytes as well as by items (`weight`, `maxWeight`): items carry tenant
 * data (a payload, a result), and a group whose data would not fit in one database packet is not
 * formed - the items past the bound wait for the next group (an item alone always goes).
 *
 * Every wait is bounded by the deadline of the request the item belongs to (deadline.ts): an
 * item still waiting for its group when its request's time is up is answered UNAVAILABLE at
 * once - it is then left out of any group not yet started, and a group already running goes on
 * without it (its outcome is unknown to the caller, who retries with the same identity, which
 * every batch function here makes safe). A group runs with the latest deadline of its items.
 */
import { OrbitError } from './errors.ts';
import { currentDeadline, withFreshDeadline, withoutDeadline } from './deadline.ts';

interface Pending<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
  /** The request's deadline (epoch ms), or undefined for background work. */
  deadlineMs: number | undefined;
  /** Answered already (at its deadline): the group's answer is dropped. */
  settled: boolean;
  timer: NodeJS.Timeout | undefined;
}

interface KeyState<I, O> {
  queue: Pending<I, O>[];
  inFlight: number;
  /** A first item of an idle key waits lingerMs for company; the timer while it waits. */
  lingering: NodeJS.Timeout | null;
  /** The wait is over: the next group starts now. */
  lingered: boolean;
}

export interface BatcherOptions<I = unknown> {
  /** Most items in one transaction. */
  maxBatch: number;
  /** Transactions of one key running at once (2 lets one batch's inserts overlap the other's commit). */
  maxInFlight: number;
  /**
   * Whether a batch that threw `error` may have thrown because of one of its items, so that it is
   * worth running again in halves (default: `mayBeOneItemsFault`).
   */
  isolate?: (error: unknown) => boolean;
  /** How much of `maxWeight` an item takes (e.g. an upper bound of its encoded bytes); 0 when not given. */
  weight?: (item: I) => number;
  /** The most weight in one group (asked each time a group is formed); an item heavier than it goes alone. */
  maxWeight?: () => number;
  /**
   * How long the first item of an idle key waits for others to join its group (default 0: it
   * runs at once), or a function of the key (asked each time). Groups that form behind one in
   * flight never wait: they start as it ends.
   */
  lingerMs?: number | ((key: string) => number);
}

/** What an item still waiting at its request's deadline is answered. */
export function deadlineExceeded(): OrbitError {
  return new OrbitError(
    'UNAVAILABLE',
    'the database did not answer in time; the outcome is unknown - retry with the same identity (Idempotency-Key, attempt_id)',
  );
}

/**
 * SQLSTATE classes of errors about the values a statement carries - so possibly one item's:
 * 21 cardinality (a subquery of one item's row), 22 data exception (too long, out of range, bad
 * date, bad JSON), 23 integrity constraint (duplicate key, NULL in a NOT NULL column). Not 42
 * (syntax, a missing table or column, access denied): that is the statement or the schema, and
 * every batch fails alike.
 */
const ITEM_SQLSTATE_CLASSES = new Set(['21', '22', '23']);
/** ER_NET_PACKET_TOO_LARGE: the server refused a packet larger than its max_allowed_packet. */
const PACKET_TOO_LARGE_ERRNO = 1153;

/**
 * The default of `BatcherOptions.isolate`. True for errors that may come from one item: an
 * OrbitError other than UNAVAILABLE, an error the database server raised for the values a
 * statement carries (SQLSTATE class 21, 22 or 23), or an exception of the code itself (no error code:
 * a TypeError, a RangeError). False for everything else that carries an error code - network and
 * driver errors, timeouts, a closed pool, a server going away, deadlocks and lock-wait timeouts -
 * which fail every item alike.
 */
export function mayBeOneItemsFault(error: unknown): boolean {
  if (error instanceof OrbitError) return error.code !== 'UNAVAILABLE';
  if (typeof error !== 'object' || error === null) return true;
  const e = error as { sqlState?: unknown; code?: unknown; errno?: unknown; fatal?: unknown };
  // A statement too large for the database's packet: some item's data made it so.
  if (e.code === 'ORBIT_PACKET_TOO_LARGE' || e.errno === PACKET_TOO_LARGE_ERRNO) return true;
  if (e.fatal === true) return false;
  if (typeof e.sqlState === 'string') return ITEM_SQLSTATE_CLASSES.has(e.sqlState.slice(0, 2));
  return e.code === undefined && e.errno === undefined;
}

export class KeyedBatcher<I = unknown, O = unknown> {
  private readonly keys = new Map<string, KeyState<I, O>>();
  private readonly isolate: (error: unknown) => boolean;

  constructor(
    /** Must return one output per input, in order. */
    private readonly run: (key: string, items: I[]) => Promise<O[]>,
    private readonly options: BatcherOptions<I>,
  ) {
    this.isolate = options.isolate ?? mayBeOneItemsFault;
  }

  submit(key: string, item: I): Promise<O> {
    const deadlineMs = currentDeadline();
    return new Promise<O>((resolve, reject) => {
      let state = this.keys.get(key);
      if (!state) {
        state = { queue: [], inFlight: 0, lingering: null, lingered: false };
        this.keys.set(key, state);
      }
      const pending: Pending<I, O> = {
        item,
        settled: false,
        deadlineMs,
        timer: undefined,
        resolve: (value) => {
          if (pending.settled) return;
          pending.settled = true;
          clearTimeout(pending.timer);
          resolve(value);
        },
        reject: (error) => {
          if (pending.settled) return;
          pending.settled = true;
          clearTimeout(pending.timer);
          reject(error);
        },
      };
      if (deadlineMs !== undefined) {
        pending.timer = setTimeout(() => pending.reject(deadlineExceeded()), Math.max(0, deadlineMs - Date.now()));
        pending.timer.unref?.();
      }
      state.queue.push(pending);
      this.pump(key, state);
    });
  }

  /** The next group: items whose request is still waiting, up to maxBatch items and maxWeight. */
  private nextBatch(state: KeyState<I, O>): Pending<I, O>[] {
    const batch: Pending<I, O>[] = [];
    const maxWeight = this.options.maxWeight?.() ?? Number.POSITIVE_INFINITY;
    let weight = 0;
    while (state.queue.length > 0 && batch.length < this.options.maxBatch) {
      const next = state.queue[0] as Pending<I, O>;
      if (next.settled) {
        state.queue.shift();
        continue;
      }
      const w = this.options.weight?.(next.item) ?? 0;
      if (batch.length > 0 && weight + w > maxWeight) break;
      weight += w;
      batch.push(state.queue.shift() as Pending<I, O>);
    }
    return batch;
  }

  private pump(key: string, state: KeyState<I, O>, afterGroup = false): void {
    const lingerOption = this.options.lingerMs ?? 0;
    const linger = typeof lingerOption === 'function' ? lingerOption(key) : lingerOption;
    while (state.inFlight < this.options.maxInFlight && state.queue.length > 0) {
      if (linger > 0 && !afterGroup && state.inFlight === 0 && !state.lingered && state.queue.length < this.options.maxBatch) {
        state.lingering ??= setTimeout(() => {
          state.lingering = null;
          state.lingered = true;
          this.pump(key, state);
        }, linger);
        return;
      }
      state.lingered = false;
      if (state.lingering) {
        clearTimeout(state.lingering);
        state.lingering = null;
      }
      const batch = this.nextBatch(state);
      if (batch.length === 0) {
        if (state.inFlight === 0) this.keys.delete(key);
        return;
      }
      state.inFlight += 1;
      // The isolation runs of a batch that threw stay in its slot, one after another: they
      // count against maxInFlight like the batch itself.
      void this.settle(key, batch).finally(() => {
        state.inFlight -= 1;
        if (state.inFlight === 0 && state.queue.length === 0) this.keys.delete(key);
        else this.pump(key, state, true);
      });
    }
  }

  /**
   * Runs the group with the latest deadline of its items (none when one of them has none): not
   * in the context of whichever request happened to start it, whose deadline may be long past.
   */
  private runGroup(key: string, batch: Pending<I, O>[]): Promise<O[]> {
    const items = batch.map((p) => p.item);
    const deadlines = batch.map((p) => p.deadlineMs);
    const run = () => this.run(key, items);
    if (deadlines.some((d) => d === undefined)) return withoutDeadline(run);
    const latest = Math.max(...(deadlines as number[]));
    return withFreshDeadline(latest - Date.now(), run);
  }

  /** Runs `batch` and settles each request with its own output; isolates a batch that throws. */
  private async settle(key: string, group: Pending<I, O>[]): Promise<void> {
    // Items answered at their deadline meanwhile (an isolation run comes later) are left out.
    const batch = group.filter((p) => !p.settled);
    if (batch.length === 0) return;
    let outputs: O[];
    try {
      // Awaited inside this async function, a batch function that throws synchronously is
      // caught too (before, it left the key's slot taken for good).
      outputs = await this.runGroup(key, batch);
    } catch (error) {
      let split = false;
      try {
        split = batch.length > 1 && this.isolate(error);
      } catch {
        // A predicate that throws decides nothing: the group shares the error, as before.
      }
      if (split) {
        // In submission order: the first half's effects come before the second's.
        const half = Math.ceil(batch.length / 2);
        await this.settle(key, batch.slice(0, half));
        await this.settle(key, batch.slice(half));
      } else {
        for (const p of batch) p.reject(error);
      }
      return;
    }
    for (const [i, p] of batch.entries()) p.resolve(outputs[i] as O);
  }
}
