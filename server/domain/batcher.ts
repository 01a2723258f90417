/**
 * Group commit. Requests for the same key (an application) that arrive while that key's transaction
 * is in flight wait and then go together in the next transaction. One application's quota row
 * serialises its transactions anyway; sending many requests in one transaction is what lifts the
 * ceiling (docs/quotas-and-locking.md#fast-paths-and-careful-paths). An idle key runs a request at
 * once, alone: batching adds no latency when there is no contention.
 */
interface Pending<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
}

interface KeyState<I, O> {
  queue: Pending<I, O>[];
  inFlight: number;
}

export interface BatcherOptions {
  /** Most items in one transaction. */
  maxBatch: number;
  /** Transactions of one key running at once (2 lets one batch's inserts overlap the other's commit). */
  maxInFlight: number;
}

export class KeyedBatcher<I, O> {
  private readonly keys = new Map<string, KeyState<I, O>>();

  constructor(
    /** Must return one output per input, in order. */
    private readonly run: (key: string, items: I[]) => Promise<O[]>,
    private readonly options: BatcherOptions,
  ) {}

  submit(key: string, item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      let state = this.keys.get(key);
      if (!state) {
        state = { queue: [], inFlight: 0 };
        this.keys.set(key, state);
      }
      state.queue.push({ item, resolve, reject });
      this.pump(key, state);
    });
  }

  private pump(key: string, state: KeyState<I, O>): void {
    while (state.inFlight < this.options.maxInFlight && state.queue.length > 0) {
      const batch = state.queue.splice(0, this.options.maxBatch);
      state.inFlight += 1;
      this.run(
        key,
        batch.map((p) => p.item),
      )
        .then(
          (outputs) => batch.forEach((p, i) => p.resolve(outputs[i] as O)),
          (error: unknown) => batch.forEach((p) => p.reject(error)),
        )
        .finally(() => {
          state.inFlight -= 1;
          if (state.inFlight === 0 && state.queue.length === 0) this.keys.delete(key);
          else this.pump(key, state);
        });
    }
  }
}
