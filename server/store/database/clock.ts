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

export class DatabaseClock implements Clock {
  private offsetMs = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly db: Queryable) {}

  /** Measures the offset once (midpoint of the round trip) and then every `everyMs`. */
  async start(everyMs = 60_000): Promise<void> {
    await this.sample();
    this.timer = setInterval(() => void this.sample().catch(() => {}), everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  async sample(): Promise<void> {
    const before = Date.now();
    const [row] = await this.db.rows<{ now: string }>(sql`SELECT NOW(6) AS now`);
    const after = Date.now();
    if (row) this.offsetMs = sqlToMillis(row.now) - (before + after) / 2;
  }

  now(): number {
    return Math.round(Date.now() + this.offsetMs);
  }
}
