/**
 * Queue priority: three ordered levels, 0 the lowest (thesis §5.3.1: "3 priority levels";
 * operations that specify no level get the lowest one, for compatibility with vanilla code).
 *
 * This is the one `Priority` type of the repository. It knows nothing of what a level means: the
 * generic work queue (controller-manager/queue/) orders by it, and core/criticality.ts maps a
 * resource's criticality onto it (`criticalityRank`: none 0, low 1, high 2), the one place that
 * mapping is made (its agreement with these names is unit-tested).
 */

/** The levels' names, lowest first: the `priority` label of the queue's metrics and logs. */
export const PRIORITY_NAMES = ['none', 'low', 'high'] as const;
export type PriorityName = (typeof PRIORITY_NAMES)[number];

/** 0 = none (also: unknown), 1 = low, 2 = high. */
export type Priority = 0 | 1 | 2;

export const PRIORITY_NONE: Priority = 0;
export const PRIORITY_LOW: Priority = 1;
export const PRIORITY_HIGH: Priority = 2;

/** Every level, lowest first (a level's index in PRIORITY_NAMES is its value). */
export const PRIORITIES: readonly Priority[] = Object.freeze([PRIORITY_NONE, PRIORITY_LOW, PRIORITY_HIGH]);
export const PRIORITY_LEVELS = PRIORITIES.length;

/** What callers may pass: a level or its name. */
export type PriorityLike = number | PriorityName;

/**
 * Normalizes a requested priority. Missing, unknown or out-of-range values map to the nearest level
 * (undefined, NaN, unknown names and anything below 1 to `none`, i.e. "unknown = lowest"; above 2 to `high`).
 */
export function toPriority(p: PriorityLike | undefined): Priority {
  if (p === undefined) return PRIORITY_NONE;
  if (typeof p === 'string') return toPriority(PRIORITY_NAMES.indexOf(p));
  if (!(p >= 1)) return PRIORITY_NONE; // also NaN
  return p >= 2 ? PRIORITY_HIGH : PRIORITY_LOW;
}

/** The name of a level. */
export function priorityName(p: Priority): PriorityName {
  return PRIORITY_NAMES[p];
}
