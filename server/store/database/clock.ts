/**
 * The database's clock as seen from this process. Timestamps that Orbit writes from the
 * application (a task's created_at, available_at and deadline_at) are taken from it, so all
 * server processes agree with MySQL's NOW(6), which decides claims, windows and leases.
 * Tests inject a fixed or stepping clock instead (River's injectable `now`).
 */
import { sql } from './sql.ts';
import type { Queryable } from './database.ts';
import { sqlToMillis } from '../../time.ts';

export interface Clock {
  /** Epoch milliseconds in database time. */
  now(): number;
}

/**
 * The offset of the database's clock from this process's, measured by round trips of
 * `SELECT NOW(6)`. NOW(6) is taken somewhere within the round trip, so the true offset lies
 * between (database time - the round trip's end) and (database time - its start); the clock
 * takes the LOW end - the database time as if it were read at the very end - so that it never
 * runs ahead of the database: a task submitted now is never available only in the future of
 * NOW(6) (a worker claiming right after would find nothing, for as long as the offset held).
 * It can only lag, by at most the round trip, so of several samples the shortest round trip is
 * kept (a busy machine makes some round trips long).
 */
export class DatabaseClock implements Clock {
  private offsetMs = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly db: Queryable,
    /** This process's clock (tests give their own). */
    private readonly wallClock: () => number = Date.now,
  ) {}

  /** Measures the offset once (the best of `SAMPLES` round trips) and then every `everyMs`. */
  async start(everyMs = 60_000): Promise<void> {
    await this.sample();
    this.timer = setInterval(() => void this.sample().catch(() => {}), everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** The offset from the shortest of `SAMPLES` round trips, at its low end (see the class). */
  async sample(): Promise<void> {
    let best: { roundTripMs: number; offsetMs: number } | null = null;
    for (let i = 0; i < SAMPLES; i++) {
      const before = this.wallClock();
      const [row] = await this.db.rows<{ now: string }>(sql`SELECT NOW(6) AS now`);
      const after = this.wallClock();
      if (!row) continue;
      const measured = { roundTripMs: after - before, offsetMs: sqlToMillis(row.now) - after };
      if (best === null || measured.roundTripMs < best.roundTripMs) best = measured;
    }
    if (best !== null) this.offsetMs = best.offsetMs;
  }

  now(): number {
    return Math.floor(this.wallClock() + this.offsetMs);
  }
}

/** Round trips per measurement: enough that one of them is short on a busy machine. */
const SAMPLES = 3;
