/**
 * Queue priorities are the criticality ranks of core/criticality.ts (thesis §5.3.1: "3 priority
 * levels"; operations that specify no level get the lowest one, for compatibility with vanilla code).
 */
import { CRITICALITY_LEVELS, criticalityRank, isCriticality, type Criticality } from '../../core/criticality.ts';

/** 0 = none (also: unknown), 1 = low, 2 = high. */
export type Priority = 0 | 1 | 2;

export const PRIORITY_NONE: Priority = criticalityRank('none');
export const PRIORITY_LOW: Priority = criticalityRank('low');
export const PRIORITY_HIGH: Priority = criticalityRank('high');
export const PRIORITY_LEVELS = 3;

/** What callers may pass: a rank or a criticality name. */
export type PriorityLike = number | Criticality;

/**
 * Normalizes a requested priority. Missing, unknown or out-of-range values map to the nearest level
 * (undefined, NaN and anything below 1 to `none`, i.e. "unknown = lowest"; above 2 to `high`).
 */
export function toPriority(p: PriorityLike | undefined): Priority {
  if (p === undefined) return PRIORITY_NONE;
  if (isCriticality(p)) return criticalityRank(p);
  if (!(p >= 1)) return PRIORITY_NONE; // also NaN
  return p >= 2 ? PRIORITY_HIGH : PRIORITY_LOW;
}

/** The criticality name of a priority, used as the `priority` metric label. */
export function priorityName(p: Priority): Criticality {
  return CRITICALITY_LEVELS[p] ?? 'none';
}
