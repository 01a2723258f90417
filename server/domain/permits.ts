/**
 * Keyed permits (docs/quotas-and-locking.md#keyed-permits): a permit is named by its queue and
 * its `resource_key`, and counted by reference - never by a joined string a reader must split
 * again. `PermitTally` is the one place that turns a reference into a map key.
 */

/** One keyed permit: the queue (its id in hex) and the resource key. */
export interface PermitRef {
  readonly queue: string;
  readonly resourceKey: string;
}

/** The permit level's lock order: ascending (queue_id, resource_key). */
export function permitOrder(a: PermitRef, b: PermitRef): number {
  if (a.queue !== b.queue) return a.queue < b.queue ? -1 : 1;
  return a.resourceKey < b.resourceKey ? -1 : a.resourceKey > b.resourceKey ? 1 : 0;
}

/** A number per permit: holders, or changes of holders. Unknown permits count 0. */
export class PermitTally {
  private readonly counts = new Map<string, { ref: PermitRef; n: number }>();

  constructor(entries: Iterable<readonly [PermitRef, number]> = []) {
    for (const [ref, n] of entries) this.set(ref, n);
  }

  /** A queue id holds only hex digits, so the NUL cannot occur in it: one key per reference. */
  private static keyOf(ref: PermitRef): string {
    return `${ref.queue}\u0000${ref.resourceKey}`;
  }

  get size(): number {
    return this.counts.size;
  }

  has(ref: PermitRef): boolean {
    return this.counts.has(PermitTally.keyOf(ref));
  }

  get(ref: PermitRef): number {
    return this.counts.get(PermitTally.keyOf(ref))?.n ?? 0;
  }

  set(ref: PermitRef, n: number): void {
    this.counts.set(PermitTally.keyOf(ref), { ref: { queue: ref.queue, resourceKey: ref.resourceKey }, n });
  }

  add(ref: PermitRef, n: number): void {
    this.set(ref, this.get(ref) + n);
  }

  copy(): PermitTally {
    return new PermitTally(this.entries());
  }

  /** Every permit with its number, in the permit level's lock order. */
  entries(): Array<[PermitRef, number]> {
    return [...this.counts.values()].map(({ ref, n }): [PermitRef, number] => [ref, n]).sort(([a], [b]) => permitOrder(a, b));
  }

  /** The same permits, each number negated (holders taken → holders given back). */
  negated(): PermitTally {
    return new PermitTally(this.entries().map(([ref, n]) => [ref, -n] as const));
  }

  /** One per item whose permit `refOf` names (items without a key are not counted). */
  static countOf<T>(items: Iterable<T>, refOf: (item: T) => PermitRef | null): PermitTally {
    const tally = new PermitTally();
    for (const item of items) {
      const ref = refOf(item);
      if (ref !== null) tally.add(ref, 1);
    }
    return tally;
  }
}
