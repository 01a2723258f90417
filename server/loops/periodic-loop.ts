/**
 * A background loop of a server process: one round at a time, the next one an interval (with
 * jitter) after the last ended, stopped cleanly by waiting for the round in flight. Subclasses
 * say what a round does; a round must not throw (it logs and tries again next time).
 */
import { withoutDeadline } from '../deadline.ts';
import { withOperation } from '../operation.ts';
export abstract class PeriodicLoop {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> | null = null;
  private stopped = false;

  /** `name`: what the loop's statements are counted as (operation.ts). */
  constructor(
    private readonly intervalMs: number,
    private readonly name = 'loop',
  ) {}

  abstract round(): Promise<unknown>;

  start(): void {
    this.next();
  }

  private next(): void {
    if (this.stopped) return;
    // Jitter keeps processes started together from hitting the same rows in lockstep.
    const delay = this.intervalMs * (0.75 + Math.random() * 0.5);
    // A loop's rounds are background work: never inside the deadline of whatever started it
    // (deadline.ts; a timer carries the context it was made in).
    this.timer = withoutDeadline(() =>
      setTimeout(() => {
        this.running = withOperation(this.name, () => this.round()).finally(() => {
          this.running = null;
          this.next();
        });
      }, delay),
    );
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}
