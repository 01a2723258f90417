/**
 * Authentication results of this process, kept for a short time (ORBIT_AUTH_CACHE_MS, default
 * 1000 ms) so a busy client does not cost a database read per request. Only successes are kept.
 * It is safe for writes because every write re-checks its credential, namespace and
 * application inside its own transaction; a read may see a revoke or disable up to the TTL late.
 */
import type { Principal } from '../domain/principal.ts';

const MAX_ENTRIES = 10_000;

export class PrincipalCache {
  private readonly entries = new Map<string, { principal: Principal; until: number }>();

  constructor(private readonly ttlMs: number) {}

  get(token: string, now = Date.now()): Principal | undefined {
    const entry = this.entries.get(token);
    if (!entry) return undefined;
    if (entry.until > now) return entry.principal;
    this.entries.delete(token);
    return undefined;
  }

  set(token: string, principal: Principal, now = Date.now()): void {
    if (this.ttlMs <= 0) return;
    // Evict the oldest entry: a Map iterates in insertion order.
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value as string);
    this.entries.set(token, { principal, until: now + this.ttlMs });
  }
}
