/**
 * The kcm handback (manifests/kcm-handback.ts) and the new leader's wait (controller-manager/kcm-gate.ts):
 * the manifest edits on a kubeadm-shaped kcm manifest, the decision on a fake clock, and the agent's
 * file writes against a recording Lease reader. The real path (kubelet restarting kcm, kcm's
 * controllers taking over while the controller manager is gone, and back) is in kubeadm.int.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { parse } from 'yaml';
import { kcmManifest } from '../kubeadm-fixtures.ts';
import { KcmHandback, handedBack, takenBack, ulyssesControllersFlag } from '../../manifests/kcm-handback.ts';
import { HandbackDecider } from '../../manifests/lease-silence.ts';
import { KCM_HANDBACK_ANNOTATION } from '../../core/kcm.ts';
import { kcmHoldsControllers } from '../../controller-manager/kcm-gate.ts';
import { replacedControllersRunning } from '../../controller-manager/duplicate-controllers.ts';
import { KCM_CONTROLLERS_FLAG } from '../../manifests/install.ts';

const log = pino({ level: 'silent' });
const FLAG = ulyssesControllersFlag();
/** kube-controller-manager's static pod as kubeadm writes it, with the install's patch applied. */
const manifest = (extra = `    - ${FLAG}\n`) => kcmManifest(extra);
const commandOf = (text: string) => (parse(text) as { spec: { containers: Array<{ command: string[] }> } }).spec.containers[0]!.command;

describe('kcm manifest edits', () => {
  it('the flag is the one the install adds', () => {
    expect(FLAG).toBe(KCM_CONTROLLERS_FLAG);
    expect(replacedControllersRunning(commandOf(manifest()))).toEqual([]);
  });

  it('hand back: the appended --controllers becomes kubeadm\'s, the annotation comes, kcm runs the five again; take back restores the command exactly', () => {
    const out = handedBack(manifest(), FLAG, '2026-11-29T10:00:00.000Z')!;
    expect(commandOf(out)).not.toContain(FLAG);
    expect(commandOf(out).filter((a) => a.startsWith('--controllers='))).toEqual(['--controllers=*,bootstrapsigner,tokencleaner', '--controllers=*,bootstrapsigner,tokencleaner']);
    expect(replacedControllersRunning(commandOf(out))).toEqual(['replicaset-controller', 'deployment-controller', 'endpoints-controller', 'endpointslice-controller', 'taint-eviction-controller']);
    expect((parse(out) as { metadata: { annotations: Record<string, string> } }).metadata.annotations).toEqual({ [KCM_HANDBACK_ANNOTATION]: '2026-11-29T10:00:00.000Z' });
    const back = takenBack(out, FLAG)!;
    expect(commandOf(back)).toEqual(commandOf(manifest()));
    expect((parse(back) as { metadata: { annotations?: unknown } }).metadata.annotations).toBeUndefined();
    expect(replacedControllersRunning(commandOf(back))).toEqual([]);
  });

  it('the install\'s form (its --controllers in place of kubeadm\'s): handed back to kubeadm\'s `*,bootstrapsigner,tokencleaner`, taken back exactly', () => {
    const installed = manifest('').replace('--controllers=*,bootstrapsigner,tokencleaner', FLAG);
    const out = handedBack(installed, FLAG, 'x')!;
    expect(commandOf(out)).toEqual(commandOf(manifest('')));
    expect(replacedControllersRunning(commandOf(out))).toHaveLength(5);
    expect(commandOf(takenBack(out, FLAG)!)).toEqual(commandOf(installed));
  });

  it('never hands back a kcm the install did not patch, never takes back one it did not hand back', () => {
    expect(handedBack(manifest(''), FLAG, 'x')).toBeUndefined();
    expect(takenBack(manifest(), FLAG)).toBeUndefined();
  });
});

describe('the handback decision (fake clock)', () => {
  const lease = (holder: string, renew: string) => ({ key: `${holder}@${renew}`, holder });

  it('a renewing leader is never handed back; silence for afterMs is, once', () => {
    const d = new HandbackDecider(60_000, 0, false);
    for (let t = 0; t <= 300_000; t += 2000) expect(d.observe(lease('cm-a', String(t)), t)).toBeUndefined();
    // the leader stops renewing at 300 s
    expect(d.observe(lease('cm-a', '300000'), 359_999)).toBeUndefined();
    expect(d.observe(lease('cm-a', '300000'), 360_001)).toBe('handBack');
    d.handedBack(360_001);
    expect(d.observe(lease('cm-a', '300000'), 400_000)).toBeUndefined();
  });

  it('an apiserver that does not answer decides nothing and restarts the silence', () => {
    const d = new HandbackDecider(60_000, 0, false);
    d.observe(lease('cm-a', '1'), 0);
    expect(d.observe({ key: undefined, holder: '' }, 59_000)).toBeUndefined();
    expect(d.observe({ key: undefined, holder: '' }, 200_000)).toBeUndefined();
    expect(d.observe(lease('cm-a', '1'), 201_000)).toBeUndefined();
    expect(d.observe(lease('cm-a', '1'), 260_999)).toBeUndefined();
    expect(d.observe(lease('cm-a', '1'), 261_001)).toBe('handBack');
  });

  it('takes back once the Lease changes with a holder after the handback, not for a released (empty) Lease', () => {
    const d = new HandbackDecider(60_000, 0, false);
    d.observe(lease('cm-a', '1'), 0);
    expect(d.observe(lease('cm-a', '1'), 60_000)).toBe('handBack');
    d.handedBack(60_000);
    expect(d.observe(lease('', '2'), 62_000)).toBeUndefined();
    expect(d.observe(lease('cm-b', '3'), 64_000)).toBe('takeBack');
    d.takenBack(64_000);
    expect(d.observe(lease('cm-b', '5'), 66_000)).toBeUndefined();
  });

  it('restarted during a handback, it waits for a leader to take back', () => {
    const d = new HandbackDecider(60_000, 0, true);
    expect(d.observe(lease('cm-a', '1'), 0)).toBeUndefined();
    expect(d.observe(lease('cm-a', '1'), 100_000)).toBeUndefined();
    expect(d.observe(lease('cm-a', '2'), 102_000)).toBe('takeBack');
  });
});

describe('the agent on a manifest file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uly-handback-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('edits kube-controller-manager.yaml in place through a dot file, and back', async () => {
    const file = join(dir, 'kube-controller-manager.yaml');
    writeFileSync(file, manifest());
    let t = 0;
    let renew = '1';
    let holder = 'cm-a';
    const client = { request: async <T>() => ({ spec: { holderIdentity: holder, renewTime: renew } }) as T };
    const agent = new KcmHandback({ client, manifest: file, lease: { namespace: 'ulysses-system', name: 'ulysses-controller-manager' }, afterMs: 60_000, log, node: 'cp', now: () => t });
    expect(await agent.tick()).toBeUndefined();
    t = 60_000;
    expect(await agent.tick()).toBe('handBack');
    expect(readFileSync(file, 'utf8')).toContain(KCM_HANDBACK_ANNOTATION);
    expect(readdirSync(dir)).toEqual(['kube-controller-manager.yaml']);
    t = 62_000;
    holder = 'cm-b';
    renew = '2';
    expect(await agent.tick()).toBe('takeBack');
    expect(readFileSync(file, 'utf8')).toBe(manifest());
  });
});

describe("a new leader's wait for kcm (kcm-gate.ts)", () => {
  const pod = (o: { annotation?: string; ready?: boolean; deleting?: boolean }) => ({
    metadata: { name: 'kube-controller-manager-cp', annotations: o.annotation ? { [KCM_HANDBACK_ANNOTATION]: o.annotation } : undefined, deletionTimestamp: o.deleting ? new Date() : undefined },
    status: { conditions: [{ type: 'Ready', status: o.ready === false ? 'False' : 'True' }] },
  });
  it('waits while a kcm pod is handed back or restarting, not otherwise, nor without kcm pods', () => {
    expect(kcmHoldsControllers([pod({ annotation: '2026-11-29T10:00:00Z' })])).toMatch(/runs the replaced controllers \(handed back at 2026-11-29T10:00:00Z\)/);
    expect(kcmHoldsControllers([pod({ ready: false })])).toMatch(/restarting/);
    expect(kcmHoldsControllers([pod({ deleting: true })])).toMatch(/restarting/);
    expect(kcmHoldsControllers([pod({})])).toBeUndefined();
    expect(kcmHoldsControllers([])).toBeUndefined();
  });
});
