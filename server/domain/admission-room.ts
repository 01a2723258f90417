/**
 * The room for unfinished tasks at both levels - an application's `max_unfinished_tasks` and
 * each queue's - as admission decides it, one task at a time and in order, from the usage read
 * under the rows' locks. One rule for every way a task becomes unfinished: the careful path of
 * a submission or bulk submit (store/tasks/admission.ts), a schedule's trigger points
 * (store/schedules/schedule-firing.ts) and an operator's retry (store/tasks/task-decisions.ts).
 * (The one-round-trip path of admission states the same rule as a guarded UPDATE.)
 */

/** A row's usage and limit, as the store reads them (counters are decimal strings). */
export interface UnfinishedUsage {
  unfinished_tasks: string | number;
  max_unfinished_tasks: string | number;
}

export type FullLevel = 'application' | 'queue';

const roomOf = (row: UnfinishedUsage) => BigInt(row.max_unfinished_tasks) - BigInt(row.unfinished_tasks);

export class UnfinishedRoom {
  private application: bigint;
  private readonly queues: Map<string, bigint>;

  /** `queues`: the locked queue rows by the caller's key for them (the queue id in hex, say). */
  constructor(application: UnfinishedUsage, queues: Iterable<readonly [string, UnfinishedUsage]>) {
    this.application = roomOf(application);
    this.queues = new Map([...queues].map(([key, row]) => [key, roomOf(row)]));
  }

  /** The level with no room for one more task in `queue` - the application's first, when both are full - or null. */
  full(queue: string): FullLevel | null {
    if (this.application <= 0n) return 'application';
    return this.queueRoom(queue) <= 0n ? 'queue' : null;
  }

  /** One more task in `queue`, which `full` found room for. */
  take(queue: string): void {
    this.application -= 1n;
    this.queues.set(queue, this.queueRoom(queue) - 1n);
  }

  private queueRoom(queue: string): bigint {
    const room = this.queues.get(queue);
    if (room === undefined) throw new Error(`admission room: queue ${queue} was not read under its lock`);
    return room;
  }
}
