/**
 * Admission (docs/quotas-and-locking.md#admission): the room for unfinished tasks at both
 * levels - an application's `max_unfinished_tasks` and each queue's - decided one task at a
 * time and in order from the usage read under the rows' locks, and the order of a submission's
 * decisions. One rule for every way a task becomes unfinished: a submission or bulk submit
 * (store/tasks/admission.ts), a schedule's trigger points (store/schedules/schedule-firing.ts)
 * and an operator's retry (store/tasks/operator-operations.ts). The one-round-trip path of
 * admission states the room as a guarded UPDATE (store/quotas/usage-writes.ts), held to this
 * one by test/store/usage-rules.test.ts. The application's room is its floors' (domain/floors.ts).
 */
import { FloorLedger } from './floors.ts';

/** A row's usage and limit, as the store reads them (counters are decimal strings). */
export interface UnfinishedUsage {
  unfinished_tasks: string | number;
  max_unfinished_tasks: string | number;
}

/** The application row: its usage and limit, and the idle part of its namespaces' floors. */
export interface ApplicationUnfinished extends UnfinishedUsage {
  idle_reserved_unfinished_tasks: string | number;
}

/** A namespace row: its floor and usage. */
export interface NamespaceUnfinished {
  reserved_unfinished_tasks: string | number;
  unfinished_tasks: string | number;
}

export type FullLevel = 'application' | 'queue';

const roomOf = (row: UnfinishedUsage) => BigInt(row.max_unfinished_tasks) - BigInt(row.unfinished_tasks);

/** The application's room for unfinished tasks and its floors (domain/floors.ts), as the locked rows leave it. */
export function unfinishedLedger(application: ApplicationUnfinished, namespaces: Iterable<readonly [string, NamespaceUnfinished]>): FloorLedger {
  return new FloorLedger(
    {
      limit: BigInt(application.max_unfinished_tasks),
      usage: BigInt(application.unfinished_tasks),
      idleReserved: BigInt(application.idle_reserved_unfinished_tasks),
    },
    [...namespaces].map(([key, row]) => [key, { reserved: BigInt(row.reserved_unfinished_tasks), usage: BigInt(row.unfinished_tasks) }] as const),
  );
}

export class UnfinishedRoom {
  private readonly application: FloorLedger;
  private readonly queues: Map<string, { room: bigint; namespace: string }>;

  /**
   * `namespaces`: the locked namespace rows by the caller's key for them; `queues`: the locked
   * queue rows by the caller's key for them (the queue id in hex, say), each with its namespace's key.
   */
  constructor(
    application: ApplicationUnfinished,
    namespaces: Iterable<readonly [string, NamespaceUnfinished]>,
    queues: Iterable<readonly [string, UnfinishedUsage, string]>,
  ) {
    this.application = unfinishedLedger(application, namespaces);
    this.queues = new Map([...queues].map(([key, row, namespace]) => [key, { room: roomOf(row), namespace }]));
  }

  /** The level with no room for one more task in `queue` - the application's first, when both are full - or null. */
  full(queue: string): FullLevel | null {
    const q = this.queueOf(queue);
    if (this.application.room(q.namespace) <= 0n) return 'application';
    return q.room <= 0n ? 'queue' : null;
  }

  /** Whether the application has room for `queue`'s task but other namespaces' floors keep it. */
  heldByOthersFloors(queue: string): boolean {
    return this.application.heldByOthersFloors(this.queueOf(queue).namespace);
  }

  /** One more task in `queue`, which `full` found room for. */
  take(queue: string): void {
    const q = this.queueOf(queue);
    this.application.take(q.namespace);
    q.room -= 1n;
  }

  private queueOf(queue: string): { room: bigint; namespace: string } {
    const q = this.queues.get(queue);
    if (q === undefined) throw new Error(`admission room: queue ${queue} was not read under its lock`);
    return q;
  }
}

/** One task asking to be admitted, as the decision needs it. */
export interface AdmissionRequest {
  /** The identity of its idempotency key (namespace and key): the same text for the same key. */
  key: string;
  /** Its queue, as the room knows it. */
  queue: string;
  /** Whether its credential may still act (read under the identity rows' locks). */
  credentialValid: boolean;
}

/** What admission decides for one task. */
export type Admission<R> =
  /** Its credential was revoked or its tenant disabled since the request was authenticated. */
  | { kind: 'credential-no-longer-valid' }
  /** Its key was used before: the stored receipt answers (its content is compared by the caller). */
  | { kind: 'replay'; receipt: R }
  /** Its key was accepted earlier in the same group: a replay of the item at `of`. */
  | { kind: 'twin'; of: number }
  /** No room: APPLICATION_FULL or QUEUE_FULL. */
  | { kind: 'full'; level: FullLevel; byOthersFloors: boolean }
  | { kind: 'accept' };

/**
 * Admission, item by item and in order: replay → twin in the group → APPLICATION_FULL →
 * QUEUE_FULL → accept; an accepted task takes its room. A replay, a twin and a refusal take
 * none, so a refused key can succeed later. Direct and bulk submission decide by it (the
 * careful path of store/tasks/admission.ts); the schedule loop and a retry, whose tasks have no
 * key of their own, by the room alone.
 */
export function decideAdmissions<R>(requests: readonly AdmissionRequest[], receiptOf: (key: string) => R | undefined, room: UnfinishedRoom): Admission<R>[] {
  const acceptedAt = new Map<string, number>();
  return requests.map((request, index): Admission<R> => {
    if (!request.credentialValid) return { kind: 'credential-no-longer-valid' };
    const receipt = receiptOf(request.key);
    if (receipt !== undefined) return { kind: 'replay', receipt };
    const twin = acceptedAt.get(request.key);
    if (twin !== undefined) return { kind: 'twin', of: twin };
    const full = room.full(request.queue);
    if (full !== null) return { kind: 'full', level: full, byOthersFloors: full === 'application' && room.heldByOthersFloors(request.queue) };
    room.take(request.queue);
    acceptedAt.set(request.key, index);
    return { kind: 'accept' };
  });
}
