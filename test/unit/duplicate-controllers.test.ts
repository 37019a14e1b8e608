/**
 * Which of the controllers Ulysses replaces a kube-controller-manager command runs
 * (controller-manager/duplicate-controllers.ts), against kcm's rule: first entry naming a controller
 * decides, `*` turns on the default ones, no flag is `*`, repeated flags append; aliases as the v1.37.2
 * binary accepts them (`replicaset`, `deployment`, `endpoint`, `endpointslice`; no alias for the
 * taint-eviction controller). And the install's own patch turns all five off.
 */
import { describe, expect, it } from 'vitest';
import { controllersFlag, REPLACED_KCM_CONTROLLERS, replacedControllersRunning } from '../../controller-manager/duplicate-controllers.ts';
import { kcmControllersFromPatch } from '../../manifests/overlays.ts';

const ALL = Object.keys(REPLACED_KCM_CONTROLLERS);
const KUBEADM = ['kube-controller-manager', '--bind-address=127.0.0.1', '--controllers=*,bootstrapsigner,tokencleaner', '--leader-elect=true'];

describe('duplicate controllers: what kcm runs of the replaced five', () => {
  it("kcm without --controllers, and kubeadm's default, run all five", () => {
    expect(replacedControllersRunning(['kube-controller-manager'])).toEqual(ALL);
    expect(replacedControllersRunning(KUBEADM)).toEqual(ALL);
  });
  it("kubeadm's command with the install's patch appended runs none (what a kubeadm upgrade without it undoes)", () => {
    expect(replacedControllersRunning([...KUBEADM, `--controllers=${kcmControllersFromPatch()}`])).toEqual([]);
  });
  it('reads aliases, explicit names without *, the first entry deciding, and the space-separated form', () => {
    expect(replacedControllersRunning(['--controllers=*,-replicaset,-endpoint'])).toEqual(['deployment-controller', 'endpointslice-controller', 'taint-eviction-controller']);
    expect(replacedControllersRunning(['--controllers=replicaset-controller,garbage-collector-controller'])).toEqual(['replicaset-controller']);
    expect(replacedControllersRunning(['--controllers=-deployment-controller,deployment-controller,*'])).toEqual(ALL.filter((c) => c !== 'deployment-controller'));
    expect(replacedControllersRunning(['--controllers', '*,-taint-eviction-controller'])).toEqual(ALL.filter((c) => c !== 'taint-eviction-controller'));
    // not an alias kcm knows: the taint-eviction controller still runs
    expect(replacedControllersRunning(['--controllers=*,-taint-eviction'])).toContain('taint-eviction-controller');
  });
  it('collects every occurrence of the flag, in order', () => {
    expect(controllersFlag(['--controllers=*,a', '--x=1', '--controllers', 'b, -c'])).toEqual(['*', 'a', 'b', '-c']);
    expect(controllersFlag(['--x'])).toBeUndefined();
  });
});
