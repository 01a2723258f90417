/**
 * When to try a one-round-trip fast path that may miss. A miss costs a wasted round trip before
 * the careful path decides, so where misses are common (several server processes claiming the
 * same tasks read the same candidates) the fast path is slower than going careful at once.
 * After a miss, the next `backoff` attempts for the same key go careful; then one tries the
 * fast path again. Without misses nothing is skipped. Pure; one gate per process.
 */
export class FastPathGate {
  private readonly skip = new Map<string, number>();

  constructor(private readonly backoff = 8) {}

  /** Whether this attempt for `key` should try the fast path. */
  shouldTry(key: string): boolean {
    const left = this.skip.get(key) ?? 0;
    if (left === 0) return true;
    if (left === 1) this.skip.delete(key);
    else this.skip.set(key, left - 1);
    return false;
  }

  record(key: string, hit: boolean): void {
    if (hit) this.skip.delete(key);
    else this.skip.set(key, this.backoff);
  }
}
