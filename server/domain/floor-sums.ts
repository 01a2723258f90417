/**
 * The rule both configures of floors obey (docs/quotas-and-locking.md#floors): the namespaces'
 * reservations of each of the application's three limits never total more than the limit
 * (`reservationsFit` of floors.ts). A namespace's configure asks with the sums its new floors
 * would make; the application's configure with its new limits against the sums as they are.
 * Pure: the store reads the application row under its lock and asks.
 */
import { reservationsFit } from './floors.ts';

/** Each floor and the application's limit it is a part of, in the API's order. */
export const FLOOR_OF_LIMIT = [
  { reserved: 'reserved_unfinished_tasks', limit: 'max_unfinished_tasks' },
  { reserved: 'reserved_concurrency', limit: 'max_concurrency' },
  { reserved: 'reserved_rate_per_second', limit: 'rate_per_second' },
] as const;

export type FloorName = (typeof FLOOR_OF_LIMIT)[number]['reserved'];
export type FloorLimitName = (typeof FLOOR_OF_LIMIT)[number]['limit'];

/** One namespace's three floors, or the sums of all namespaces' (the API's names). */
export type Floors = Record<FloorName, number>;
/** The application's three limits (the API's names). */
export type FloorLimits = Record<FloorLimitName, number>;

/** A floor's sum that would not fit in its limit. */
export interface FloorAboveLimit {
  reserved: FloorName;
  limit: FloorLimitName;
  /** What the namespaces' floors of it (would) total. */
  reservedSum: number;
  /** The application's limit. */
  applicationLimit: number;
}

/** The sums after one namespace's floors go from `before` to `after`. */
export function floorSumsAfter(sums: Floors, before: Floors, after: Floors): Floors {
  const out = {} as Floors;
  for (const { reserved } of FLOOR_OF_LIMIT) out[reserved] = sums[reserved] - before[reserved] + after[reserved];
  return out;
}

/** The first limit (in the API's order) whose floors' sum would exceed it, or null when all fit. */
export function firstFloorAboveLimit(limits: FloorLimits, sums: Floors): FloorAboveLimit | null {
  for (const { reserved, limit } of FLOOR_OF_LIMIT) {
    if (!reservationsFit(BigInt(limits[limit]), BigInt(sums[reserved]))) {
      return { reserved, limit, reservedSum: sums[reserved], applicationLimit: limits[limit] };
    }
  }
  return null;
}
