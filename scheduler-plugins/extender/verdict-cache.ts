/**
 * The verdicts of one demand (server.ts verdictsFor: the pods of one demand get the same verdict
 * on a node, evaluate.ts SharedVerdict), by node slot (state.ts NodeSlots). A verdict is valid while
 * its node's stamp and the demand's TDMA network version are what they were when it was computed.
 *
 * Each verdict also has a code that is the verdict itself for the filter's answer: fits (with its
 * score), or the index of its refusal, whose message is kept as JSON text once per demand (a
 * message naming the pod as pieces around its UID, evaluate.ts POD_MARK). The verdicts at tie
 * rank 0 (every verdict except some of a deferrable-server pod's on a deferrable-server node, see
 * server.ts tieRank) are kept in typed arrays indexed by slot: stamp, code, score. So the filter
 * answers a node from a few contiguous arrays, where an object graph per node (verdict, shared
 * verdict, cache entry) is several cache misses per node: at 1000 nodes, after the idle gap a
 * binding leaves between two scheduling cycles, the CPU caches are cold (bench:extender).
 */
import { POD_MARK, type RejectionReason, type SharedVerdict } from './evaluate.ts';
import { grown } from './state.ts';

/** {@link DemandVerdicts.code}: the node fits (its score: {@link DemandVerdicts.score}). */
export const FITS = -1;
/** {@link DemandVerdicts.code}: no valid verdict (none, stale, or a refusal past REFUSALS_KEPT): see {@link DemandVerdicts.get}. */
export const MISS = -2;

/** A refusal of the demand: its message as JSON text and the reason it is counted under. */
export interface Refusal {
  /** the message as JSON text; for a message naming the pod, the JSON texts (without quotes) of the pieces around the pod's UID */
  readonly json: string | readonly string[];
  readonly reason: RejectionReason;
}

/** The message of `r` for the pod with this UID as JSON text (evaluate.ts verdictFor, as JSON). */
export function refusalJson(r: Refusal, uid: string): string {
  return typeof r.json === 'string' ? r.json : `"${r.json.join(JSON.stringify(uid).slice(1, -1))}"`;
}

/** Refusal messages kept per demand (one per kind of failure, more where a message names a node); past it a refusal is read from its verdict. */
const REFUSALS_KEPT = 4096;

interface RankedVerdict {
  readonly stamp: number;
  readonly shared: SharedVerdict;
  readonly code: number;
}

export class DemandVerdicts {
  /** The version of the demand's TDMA network the verdicts are of (0: no network). */
  private network = 0;
  private stamps = new Float64Array(0);
  private codes = new Int32Array(0);
  private scores = new Float64Array(0);
  private shared: Array<SharedVerdict | undefined> = [];
  private readonly refusals: Refusal[] = [];
  private readonly refusalIndex = new Map<string, number>();
  /** Tie ranks above 0: slot -> rank -> verdict. */
  private readonly ranked = new Map<number, Array<RankedVerdict | undefined>>();

  /** Drops every verdict unless they are of this version of the demand's TDMA network. */
  syncNetwork(version: number): void {
    if (version === this.network) return;
    this.network = version;
    this.stamps.fill(-1);
    this.ranked.clear();
  }

  /** Is `version` the network version the verdicts are of? */
  ofNetwork(version: number): boolean {
    return version === this.network;
  }

  /** The slot's verdict at `rank` as a code, if it is of `stamp`: {@link FITS}, a refusal's index ({@link refusal}), or {@link MISS}. */
  code(slot: number, stamp: number, rank = 0): number {
    if (rank === 0) return slot < this.stamps.length && this.stamps[slot] === stamp ? this.codes[slot]! : MISS;
    const v = this.ranked.get(slot)?.[rank];
    return v?.stamp === stamp ? v.code : MISS;
  }

  /** The score of a verdict whose {@link code} is {@link FITS}. */
  score(slot: number, rank = 0): number {
    if (rank === 0) return this.scores[slot]!;
    const v = this.ranked.get(slot)![rank]!.shared.verdict;
    return v.fits ? v.score : 0;
  }

  refusal(index: number): Refusal {
    return this.refusals[index]!;
  }

  /** The slot's verdict at `rank` if it is of `stamp`. */
  get(slot: number, rank: number, stamp: number): SharedVerdict | undefined {
    if (rank === 0) return slot < this.stamps.length && this.stamps[slot] === stamp ? this.shared[slot] : undefined;
    const v = this.ranked.get(slot)?.[rank];
    return v?.stamp === stamp ? v.shared : undefined;
  }

  /** The slot's verdict at `rank`, computed at `stamp`; undefined: none to keep (the slot's old one dropped). */
  set(slot: number, rank: number, stamp: number, shared: SharedVerdict | undefined): void {
    if (rank !== 0) {
      let byRank = this.ranked.get(slot);
      if (!byRank) this.ranked.set(slot, (byRank = []));
      byRank[rank] = shared && { stamp, shared, code: this.codeOf(shared) };
      return;
    }
    if (slot >= this.stamps.length) {
      this.stamps = grown(this.stamps, slot + 1, -1);
      this.codes = grown(this.codes, slot + 1);
      this.scores = grown(this.scores, slot + 1);
    }
    this.shared[slot] = shared;
    if (!shared) {
      this.stamps[slot] = -1;
      return;
    }
    this.stamps[slot] = stamp;
    this.codes[slot] = this.codeOf(shared);
    if (shared.verdict.fits) this.scores[slot] = shared.verdict.score;
  }

  private codeOf(shared: SharedVerdict): number {
    const v = shared.verdict;
    if (v.fits) return FITS;
    const key = `${v.reason}\u0000${shared.namesPod ? 'pod' : ''}\u0000${v.message}`;
    let k = this.refusalIndex.get(key);
    if (k === undefined) {
      if (this.refusals.length >= REFUSALS_KEPT) return MISS;
      k = this.refusals.length;
      const json = shared.namesPod ? v.message.split(POD_MARK).map((part) => JSON.stringify(part).slice(1, -1)) : JSON.stringify(v.message);
      this.refusals.push({ json, reason: v.reason });
      this.refusalIndex.set(key, k);
    }
    return k;
  }
}
