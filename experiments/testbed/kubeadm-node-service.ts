/**
 * `systemctl` on a node of the kubeadm testbed (node-bin/systemctl, kubeadmNodeShell): the verbs the
 * installer (manifests/node-shell.ts) and the failover harness send, done to the node's tracked
 * processes as kubeadmNodeAccess does —
 *   daemon-reload                                  nothing to reload
 *   restart kubelet                                the kubelet stopped and started with its flags
 *   enable --now ulysses-kubelet-shim              the shim started as the unit would run it (unit-supervisor.ts)
 *   disable --now ulysses-kubelet-shim             the shim stopped
 *   enable|disable --now ulysses-kubelet-shim-fallback   the fallback guard started or stopped
 *   kill --signal=SIG|-s SIG kubelet|containerd    the signal sent to the tracked process
 *   kill --signal=SIG ulysses-kubelet-shim         the signal sent to the unit's main process
 *   is-active UNIT                                 "active" when its process runs
 * Anything else exits 1 naming what is not emulated.
 * Usage: kubeadm-node-service.ts <run dir> <node> <systemctl args...>
 */
import { isAlive } from './processes.ts';
import { kubeadmNodeAccess, readKubeadmState, shimMainPid } from './kubeadm.ts';

const UNITS: Record<string, string> = { kubelet: 'kubelet', 'kubelet.service': 'kubelet', containerd: 'containerd', 'containerd.service': 'containerd', 'ulysses-kubelet-shim': 'kubelet-shim', 'ulysses-kubelet-shim.service': 'kubelet-shim', 'ulysses-kubelet-shim-fallback': 'kubelet-shim-fallback', 'ulysses-kubelet-shim-fallback.service': 'kubelet-shim-fallback' };

async function main(argv: string[]): Promise<void> {
  const [runDir, node, ...args] = argv;
  if (!runDir || !node) throw new Error('usage: kubeadm-node-service.ts <run dir> <node> <systemctl args...>');
  const state = readKubeadmState(runDir);
  if (!state) throw new Error(`no kubeadm testbed in ${runDir}`);
  const access = kubeadmNodeAccess(state);
  const words = args.filter((a) => a !== '--now' && a !== '--no-block' && a !== '-q' && a !== '--quiet');
  const verb = words[0];
  const unitOf = (w: string | undefined) => {
    const u = w === undefined ? undefined : UNITS[w];
    if (!u) throw new Error(`systemctl ${args.join(' ')}: unit ${w ?? '(none)'} is not one the kubeadm testbed runs (${Object.keys(UNITS).join(', ')})`);
    return u;
  };
  const tracked = (unit: string) => state.processes.find((p) => p.name === `${unit}/${node}`);
  switch (verb) {
    case 'daemon-reload':
      return;
    case 'restart':
      if (unitOf(words[1]) !== 'kubelet') break;
      return access.restartKubelet(node);
    case 'enable':
    case 'start':
      if (unitOf(words[1]) === 'kubelet-shim-fallback') return access.startFallbackGuard(node);
      if (unitOf(words[1]) !== 'kubelet-shim') break;
      return access.startKubeletShim(node);
    case 'disable':
    case 'stop':
      if (unitOf(words[1]) === 'kubelet-shim-fallback') return access.stopFallbackGuard(node);
      if (unitOf(words[1]) !== 'kubelet-shim') break;
      return access.stopKubeletShim(node);
    case 'is-active': {
      const p = tracked(unitOf(words[1]));
      const active = p !== undefined && isAlive(p.pid);
      process.stdout.write(active ? 'active\n' : 'inactive\n');
      if (!active) process.exitCode = 3;
      return;
    }
    case 'kill': {
      let signal: string | undefined;
      const rest: string[] = [];
      for (let i = 1; i < words.length; i++) {
        const w = words[i]!;
        if (w.startsWith('--signal=')) signal = w.slice('--signal='.length);
        else if (w === '-s' || w === '--signal') signal = words[++i];
        else rest.push(w);
      }
      if (!signal) throw new Error(`systemctl ${args.join(' ')}: no --signal`);
      const unit = unitOf(rest[0]);
      const p = tracked(unit);
      if (!p) throw new Error(`systemctl kill: ${rest[0]} does not run on ${node}`);
      // the shim's tracked process is its unit's supervisor: the signal is for the main process
      const pid = unit === 'kubelet-shim' ? shimMainPid(state, node) : p.pid;
      process.kill(pid, (signal.startsWith('SIG') ? signal : `SIG${signal}`) as NodeJS.Signals);
      return;
    }
  }
  throw new Error(`systemctl ${args.join(' ')}: not emulated on the kubeadm testbed`);
}

main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`systemctl (kubeadm testbed, node ${process.argv[3] ?? '?'}): ${err.message}\n`);
  process.exit(1);
});
