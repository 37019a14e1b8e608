/**
 * ControllerExpectations, as in kube-controller-manager's controller_utils.go: before a controller
 * creates or deletes pods it records how many creations/deletions it expects to observe through
 * its informer; until they are observed (or the expectation expires) the controller does not act on
 * the same owner again, so watch lag never makes it create duplicate pods or delete twice.
 */
export const EXPECTATIONS_TTL_MS = 5 * 60_000;

interface Expectation {
  add: number;
  del: number;
  /** keys of pods whose deletion we expect (so a delete event is only counted once) */
  deleting: Set<string>;
  timestamp: number;
}

export class ControllerExpectations {
  private readonly items = new Map<string, Expectation>();

  constructor(private readonly now: () => number = Date.now) {}

  /** True when the owner may sync: nothing pending, or the expectation is older than the TTL. */
  satisfied(owner: string): boolean {
    const e = this.items.get(owner);
    if (!e) return true;
    if (e.add <= 0 && e.del <= 0) return true;
    return this.now() - e.timestamp > EXPECTATIONS_TTL_MS;
  }

  expectCreations(owner: string, n: number): void {
    this.items.set(owner, { add: n, del: 0, deleting: new Set(), timestamp: this.now() });
  }

  expectDeletions(owner: string, podKeys: string[]): void {
    this.items.set(owner, { add: 0, del: podKeys.length, deleting: new Set(podKeys), timestamp: this.now() });
  }

  creationObserved(owner: string): void {
    const e = this.items.get(owner);
    if (e && e.add > 0) e.add--;
  }

  deletionObserved(owner: string, podKey: string): void {
    const e = this.items.get(owner);
    if (e && e.deleting.delete(podKey)) e.del--;
  }

  delete(owner: string): void {
    this.items.delete(owner);
  }

  pending(owner: string): { add: number; del: number } | undefined {
    const e = this.items.get(owner);
    return e && { add: e.add, del: e.del };
  }
}
