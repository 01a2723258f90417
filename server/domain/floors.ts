/**
 * Namespace floors (docs/quotas-and-locking.md#floors): a namespace's reservation of one of its
 * application's limits. A namespace may always use its own reservation; the part of every other
 * namespace's reservation that namespace is not using is off limits to everyone else; beyond
 * that the application's room is shared. For namespace n at the application level:
 *
 *   idle(m)  = max(0, reserved(m) - usage(m))
 *   room(n)  = limit - usage - (Σ idle(m) over every namespace m) + idle(n)
 *
 * The application row carries Σ idle(m) (kept exact in SQL by store/quotas/usage-writes.ts),
 * so the decision reads only the application row and n's own. While the reservations fit in
 * the limit (configure refuses them otherwise, `reservationsFit`) and usage stayed within it,
 * usage + Σ idle <= limit, so a namespace below its floor always has room: it is never refused
 * because of the others. Pure: the store reads the rows, these functions decide.
 */

/** One limit at the application level: its value, usage and the idle part of all floors. */
export interface FloorLevel {
  limit: bigint;
  usage: bigint;
  idleReserved: bigint;
}

/** One namespace's reservation of that limit, and its usage. */
export interface NamespaceFloor {
  reserved: bigint;
  usage: bigint;
}

const max0 = (n: bigint) => (n > 0n ? n : 0n);

/** The part of a namespace's reservation it is not using. */
export function idleOf(floor: NamespaceFloor): bigint {
  return max0(floor.reserved - floor.usage);
}

/** room(n): what namespace n may still take at the application level (may be negative). */
export function roomFor(level: FloorLevel, own: NamespaceFloor): bigint {
  return level.limit - level.usage - level.idleReserved + idleOf(own);
}

/**
 * The guarded fast paths' test, without reading the namespace's row: `n` more fit beside every
 * floor's idle part (its SQL form: usage-writes.ts `unfinishedGuardedStatements`, held to this by
 * test/store/floors-rules.test.ts). Whenever it holds, roomFor(level, any namespace) >= n, so it never admits
 * what the exact rule would refuse; when it does not, the careful path decides by roomFor.
 */
export function fitsBesideAllFloors(level: FloorLevel, n: bigint): boolean {
  return level.usage + n + level.idleReserved <= level.limit;
}

/** How the idle sum changes when a namespace's usage changes by `delta`. */
export function idleChange(floor: NamespaceFloor, delta: bigint): bigint {
  return idleOf({ reserved: floor.reserved, usage: floor.usage + delta }) - idleOf(floor);
}

/**
 * Whether reservations fit in the application's limit: their sum never exceeds it. Configure of
 * a namespace (its new reservation beside the others' sum) and of the application (its new
 * limit against the sum) both ask.
 */
export function reservationsFit(limit: bigint, reservedSum: bigint): boolean {
  return reservedSum <= limit;
}

/**
 * One application level's room as a group of decisions goes on: each grant in a namespace
 * takes from the application's usage and from that namespace's idle part.
 */
export class FloorLedger {
  private usage: bigint;
  private idleReserved: bigint;
  private readonly namespaces: Map<string, NamespaceFloor>;

  constructor(
    private readonly level: FloorLevel,
    namespaces: Iterable<readonly [string, NamespaceFloor]>,
  ) {
    this.usage = level.usage;
    this.idleReserved = level.idleReserved;
    this.namespaces = new Map([...namespaces].map(([k, f]) => [k, { ...f }]));
  }

  private floorOf(namespace: string): NamespaceFloor {
    const floor = this.namespaces.get(namespace);
    if (floor === undefined) throw new Error(`floors: namespace ${namespace} was not read under its lock`);
    return floor;
  }

  /** What of `namespace`'s reservation it does not use now. */
  idle(namespace: string): bigint {
    return idleOf(this.floorOf(namespace));
  }

  /** room(n) now. */
  room(namespace: string): bigint {
    return roomFor({ limit: this.level.limit, usage: this.usage, idleReserved: this.idleReserved }, this.floorOf(namespace));
  }

  /** Whether the room left is there only because of the namespace's own floor: the others' floors refused it otherwise. */
  heldByOthersFloors(namespace: string): boolean {
    return this.room(namespace) <= 0n && this.level.limit - this.usage > 0n;
  }

  /** `n` more of the application's usage that uses no namespace's floor (reservations waiting to start, for the rate). */
  takeShared(n: bigint): void {
    this.usage += n;
  }

  /** `n` more taken in `namespace`. */
  take(namespace: string, n = 1n): void {
    const floor = this.floorOf(namespace);
    this.idleReserved += idleChange(floor, n);
    floor.usage += n;
    this.usage += n;
  }
}
