/**
 * What a configure of the three limits would mean right now: the `effects` of a dry run
 * (`dry_run: true` on POST /v1/application/resources:configure and /v1/queues/{queue}:configure),
 * and of a namespace's floors (POST /v1/application/namespaces/{namespace}:configure, `floorEffects`).
 * Pure: the store reads the row's limits, usage and start window with the database's NOW(6),
 * and asks this function; nothing here decides an admission or a claim, it only describes, with
 * the same arithmetic as the rules that do (admission.ts: room = limit - unfinished; the claim
 * plan: room = limit - active, and under the rate claimRoomUnderRate of start-window.ts).
 *
 * Counts are exact: usage counters are uint64 (decimal strings in the API), so they are
 * compared as bigints; the limits are bounded far below 2^53.
 */
import type { components } from '../generated/openapi.ts';
import { FLOOR_OF_LIMIT, type FloorLimits, type Floors } from './floor-sums.ts';

export type ConfigureEffect = components['schemas']['ConfigureEffect'];

/** The three limits of an application's or a queue's row (the API's names). */
export interface EffectLimits {
  max_unfinished_tasks: number;
  max_concurrency: number;
  rate_per_second: number;
}

/** The row's usage now. */
export interface EffectUsage {
  unfinishedTasks: bigint;
  activeAttempts: bigint;
  /** Starts granted in the one-second window that is current now (0 when it has ended): startsInCurrentWindow. */
  startsInWindow: bigint;
  /** Reservations not yet started (`pending_starts`); they hold window room already. */
  pendingStarts: bigint;
}

/** Whose limits: the refusal code of a full `max_unfinished_tasks` differs. */
export type EffectLevel = 'application' | 'queue';

/**
 * The application's limits as the namespaces' floors hold them (docs/quotas-and-locking.md#floors):
 * per limit, what the floors reserve of it (their sum) and the part of that their namespaces do
 * not use now (off limits to the others).
 */
export type EffectFloors = Record<keyof EffectLimits, { reserved: bigint; idle: bigint }>;

const plural = (n: bigint, one: string, many: string) => (n === 1n ? one : many);

/**
 * One entry per limit, in the order of the API's objects: max_unfinished_tasks,
 * max_concurrency, rate_per_second. `usage` is what each limit is held against:
 * unfinished tasks; active attempts; starts in the current window plus reservations not yet
 * started (what a claim counts against the rate). `effect` is one line for a human:
 * "unchanged", "room for N more …", or what would be refused now and until when.
 */
export function configureEffects(
  level: EffectLevel,
  current: EffectLimits,
  proposed: EffectLimits,
  usage: EffectUsage,
  floors?: EffectFloors,
): ConfigureEffect[] {
  const effects = limitEffects(level, current, proposed, usage);
  if (floors === undefined) return effects;
  // A changed limit that floors reserve part of says how much of it they hold.
  return effects.map((e) => {
    const limit = e.limit as keyof EffectLimits;
    const held = floors[limit];
    if (e.current === e.proposed || held.reserved === 0n) return e;
    return { ...e, effect: `${e.effect}; the namespaces' floors reserve ${held.reserved} of it, ${held.idle} of them unused (kept for their namespaces)` };
  });
}

function limitEffects(level: EffectLevel, current: EffectLimits, proposed: EffectLimits, usage: EffectUsage): ConfigureEffect[] {
  const rateUsage = usage.startsInWindow + usage.pendingStarts;
  return [
    entry('max_unfinished_tasks', current, proposed, usage.unfinishedTasks, (limit, need) => {
      const code = level === 'application' ? 'APPLICATION_FULL' : 'QUEUE_FULL';
      return `unfinished tasks ${usage.unfinishedTasks} ${compare(usage.unfinishedTasks, limit)} new max_unfinished_tasks ${limit}: submissions refused (${code}) until ${need} ${plural(need, 'finishes', 'finish')}`;
    }),
    entry('max_concurrency', current, proposed, usage.activeAttempts, (limit, need) => {
      return `active attempts ${usage.activeAttempts} ${compare(usage.activeAttempts, limit)} new max_concurrency ${limit}: no new claims until ${need} ${plural(need, 'finishes', 'finish')}`;
    }),
    entry('rate_per_second', current, proposed, rateUsage, (limit) => {
      const pending = usage.pendingStarts;
      if (pending < limit) {
        // Only this window's starts are in the way: the next window has room again.
        return `starts this second ${usage.startsInWindow} + reservations not yet started ${pending} ${compare(rateUsage, limit)} new rate_per_second ${limit}: no new claims until this second's window ends`;
      }
      // The reservations alone fill the rate: they start at most `limit` a second (the rest are
      // RATE_LIMITED and wait), and each window holds room for those still waiting.
      const need = pending - limit + 1n;
      return `reservations not yet started ${pending} ${compare(pending, limit)} new rate_per_second ${limit}: no new claims until ${need} of them ${plural(need, 'has', 'have')} started or been released; starts beyond ${limit} a second answer RATE_LIMITED`;
    }),
  ];
}

const compare = (usage: bigint, limit: bigint) => (usage > limit ? '>' : '=');

function entry(
  limit: keyof EffectLimits,
  current: EffectLimits,
  proposed: EffectLimits,
  usage: bigint,
  full: (limit: bigint, need: bigint) => string,
): ConfigureEffect {
  const next = BigInt(proposed[limit]);
  const room = next - usage;
  let effect: string;
  if (proposed[limit] === current[limit]) effect = 'unchanged';
  else if (room > 0n) effect = `room for ${room} more ${ROOM_OF[limit][room === 1n ? 0 : 1]}`;
  // Nothing more fits until usage is one below the limit (admission and claims need room for one).
  else effect = full(next, 1n - room);
  return { limit, current: current[limit], proposed: proposed[limit], usage: usage.toString(), effect };
}

/** What there is room for: one, several. */
const ROOM_OF: Record<keyof EffectLimits, readonly [string, string]> = {
  max_unfinished_tasks: ['unfinished task', 'unfinished tasks'],
  max_concurrency: ['active attempt', 'active attempts'],
  rate_per_second: ['start in this second', 'starts in this second'],
};

/** A namespace's usage now, as its floors are held against it. */
export interface FloorUsage {
  unfinishedTasks: bigint;
  activeAttempts: bigint;
  /** Its Starts in the application's current one-second window (0 when none is open). */
  startsThisSecond: bigint;
}

/**
 * What a namespace's new floors would mean right now: the `effects` of a dry run of
 * configureNamespaceResources, one entry per floor in the API's order (reserved_unfinished_tasks,
 * reserved_concurrency, reserved_rate_per_second). `usage` is the namespace's own: its
 * unfinished tasks, its active attempts, its starts this second. What it does not use of its
 * floor is kept for it and off limits to every other namespace (domain/floors.ts: idle); `sums`
 * are what the namespaces' floors would total with the change, beside the application's limits.
 */
export function floorEffects(current: Floors, proposed: Floors, usage: FloorUsage, sums: Floors, limits: FloorLimits): ConfigureEffect[] {
  const usageOf: Record<keyof Floors, bigint> = {
    reserved_unfinished_tasks: usage.unfinishedTasks,
    reserved_concurrency: usage.activeAttempts,
    reserved_rate_per_second: usage.startsThisSecond,
  };
  return FLOOR_OF_LIMIT.map(({ reserved, limit }) => {
    const used = usageOf[reserved];
    const next = BigInt(proposed[reserved]);
    const idleNow = max0(BigInt(current[reserved]) - used);
    let effect: string;
    if (proposed[reserved] === current[reserved]) effect = 'unchanged';
    else {
      if (next === 0n) {
        effect = `no ${reserved}: the namespace shares what the other namespaces' floors leave`;
        if (idleNow > 0n) effect += `; the ${idleNow} kept for it until now go back to the shared room`;
      } else if (used < next) effect = `namespace uses ${used} of a new ${reserved} ${next}: ${next - used} kept for it, off limits to other namespaces`;
      else effect = `namespace uses ${used} of a new ${reserved} ${next}: all of it in use, none kept idle`;
      effect += `; the namespaces' ${reserved} would total ${sums[reserved]} of the application's ${limit} ${limits[limit]}`;
    }
    return { limit: reserved, current: current[reserved], proposed: proposed[reserved], usage: used.toString(), effect };
  });
}

const max0 = (n: bigint) => (n > 0n ? n : 0n);
