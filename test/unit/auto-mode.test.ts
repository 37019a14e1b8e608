import { afterEach, describe, expect, it } from 'vitest';
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { AutoModeSwitch } from '../../controller-manager/auto-mode.ts';
import { ControllerManager } from '../../controller-manager/manager.ts';
import { FakeClock } from '../../controller-manager/queue/index.ts';

describe('AutoModeSwitch', () => {
  it('switches on with the first high pod, off only after the hold with none', async () => {
    const clock = new FakeClock();
    const changes: boolean[] = [];
    const sw = new AutoModeSwitch({ holdMs: 1000, clock, onChange: (c) => changes.push(c) });
    sw.podChanged('ns/low', false);
    expect(sw.active).toBe(false);
    sw.podChanged('ns/a', true);
    sw.podChanged('ns/b', true);
    expect(changes).toEqual([true]);
    sw.podDeleted('ns/a');
    sw.podChanged('ns/b', false); // b no longer high (label changed / terminal)
    expect(sw.active).toBe(true);
    await clock.advance(999);
    expect(changes).toEqual([true]);
    // the failover case: the replacement appears within the hold -> no flap
    sw.podChanged('ns/a-replacement', true);
    await clock.advance(5000);
    expect(changes).toEqual([true]);
    sw.podDeleted('ns/a-replacement');
    await clock.advance(1000);
    expect(changes).toEqual([true, false]);
    expect(sw.active).toBe(false);
    expect(sw.highPods).toBe(0);
    // deleting an unknown pod or a low pod changes nothing
    sw.podDeleted('ns/unknown');
    await clock.advance(5000);
    expect(changes).toEqual([true, false]);
  });
});

describe('ControllerManager auto mode (pods fed through the pod informer)', () => {
  let cm: ControllerManager | undefined;
  afterEach(async () => {
    await cm?.stop();
  });
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  const pod = (name: string, level: string, phase = 'Running'): V1Pod => ({ metadata: { name, namespace: 'ns', labels: { 'ulysses.io/criticality': level } }, status: { phase } });

  it('setMode(auto) follows the criticality index: vanilla -> periodic -> vanilla, other controllers untouched', async () => {
    cm = new ControllerManager({ kubeconfig: kc, controllers: ['replicaset', 'endpointslice'], autoHoldMs: 20 });
    cm.setMode('replicaset', 'auto', { periodMs: 250 });
    expect(cm.modeOf('replicaset')).toBe('auto');
    expect(cm.pool('replicaset').mode).toBe('vanilla');
    cm.informers.pods.emit('add', pod('low', 'low'));
    expect(cm.pool('replicaset').mode).toBe('vanilla');
    cm.informers.pods.emit('add', pod('crit', 'high'));
    expect(cm.pool('replicaset').mode).toBe('multi-priority-periodic');
    expect(cm.pool('replicaset').config.periodMs).toBe(250);
    expect(cm.pool('endpointslice').mode).toBe('vanilla');
    // the critical pod completes: a terminal pod does not count
    cm.informers.pods.emit('update', pod('crit', 'high', 'Succeeded'), pod('crit', 'high'));
    expect(cm.pool('replicaset').mode).toBe('multi-priority-periodic');
    const deadline = Date.now() + 2000;
    while (cm.pool('replicaset').mode !== 'vanilla' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    expect(cm.pool('replicaset').mode).toBe('vanilla');
    // an explicit mode leaves auto
    cm.setMode('replicaset', 'multi-priority-async');
    cm.informers.pods.emit('add', pod('crit2', 'high'));
    expect(cm.modeOf('replicaset')).toBe('multi-priority-async');
    expect(cm.pool('replicaset').mode).toBe('multi-priority-async');
  });

  it('the auto option starts a controller in auto, already periodic when a high pod is known', () => {
    cm = new ControllerManager({ kubeconfig: kc, controllers: ['deployment'], auto: ['deployment'] });
    expect(cm.modeOf('deployment')).toBe('auto');
    cm.informers.pods.emit('add', pod('crit', 'high'));
    expect(cm.pool('deployment').mode).toBe('multi-priority-periodic');
    expect(cm.pool('deployment').config.periodMs).toBe(100);
  });
});
