/**
 * The install manifests (manifests/): every overlay renders with the real `kubectl kustomize` to
 * exactly the objects its components need, the generated files are current, and the pieces that
 * must agree across files (sockets, ports, ClusterIP, flags, component names) do. No cluster; the
 * apiserver-side checks are in test/integration/manifests.int.test.ts.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { binaryPath } from '../../experiments/testbed/binaries.ts';
import { staleManifests } from '../../manifests/render.ts';
import {
  COMPONENT_OBJECTS,
  OVERLAYS,
  ULYSSES_NAMESPACE,
  expectedObjects,
  kcmControllersFromPatch,
  manifestFile,
  objectId,
  parseObjects,
  renderOverlay,
  type K8sObject,
} from '../../manifests/overlays.ts';
import { ROUTE_PORTS } from '../../scheduler-plugins/extender/routing.ts';
import { LEADER_LABEL, RESERVATION_EPOCH_ANNOTATION } from '../../scheduler-plugins/extender/leadership.ts';
import { REQUEUE_ANNOTATION } from '../../scheduler-plugins/extender/requeue.ts';
import { RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { extenderEntries } from '../../scheduler-plugins/extender/kube-scheduler-config.ts';
import { SCHEDULER_EXTENDER_TLS_FILES } from '../../core/extender-pki.ts';
import { GRANT_LABELS, GRANTED } from '../../core/claims.ts';
import { CRITICALITY_LABEL } from '../../core/criticality.ts';
import { RESERVATION_RESOURCE, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';

const kubectl = binaryPath('kubectl');
const repoFile = (rel: string) => new URL(`../../${rel}`, import.meta.url);

/** Controllers Ulysses' controller manager replaces (thesis §5.3.1; spec §6). */
const REPLACED = ['replicaset-controller', 'deployment-controller', 'endpoints-controller', 'endpointslice-controller', 'taint-eviction-controller'];

type PodSpec = {
  serviceAccountName?: string;
  containers: { name: string; image: string; args?: string[]; ports?: { name?: string; containerPort: number }[]; livenessProbe?: { httpGet?: { port: string | number } } }[];
  volumes?: { name: string; hostPath?: { path: string } }[];
};
const podSpec = (o: K8sObject) => (o.spec as { template: { spec: PodSpec } }).template.spec;
const flag = (args: string[] | undefined, name: string) => args?.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

describe('generated files', () => {
  it('manifests/base/apf/flowschema-critical-namespaces.yaml equals the apf-configs generator output (npx tsx manifests/render.ts)', () => {
    expect(staleManifests()).toEqual([]);
  });

  it('the FlowSchema in the kustomize base is the one of apf-configs/critical-namespace.yaml', () => {
    const strip = (t: string) => parseObjects(t, 'x').map((o) => JSON.stringify(o));
    expect(strip(manifestFile('base/apf/flowschema-critical-namespaces.yaml'))).toEqual(strip(readFileSync(repoFile('apf-configs/critical-namespace.yaml'), 'utf8')));
  });
});

describe.skipIf(!existsSync(kubectl))('kubectl kustomize of every overlay', () => {
  const rendered = new Map<string, K8sObject[]>();
  const objectsOf = async (overlay: string) => {
    if (!rendered.has(overlay)) rendered.set(overlay, (await renderOverlay(overlay, kubectl)).objects);
    return rendered.get(overlay)!;
  };

  for (const overlay of Object.keys(OVERLAYS)) {
    it(`${overlay}: renders exactly the objects of its components, once each, namespaced ones in ${ULYSSES_NAMESPACE}`, async () => {
      const objs = await objectsOf(overlay);
      expect(objs.map(objectId).sort()).toEqual(expectedObjects(overlay));
      for (const o of objs) {
        expect(o.metadata.labels?.['app.kubernetes.io/part-of'], objectId(o)).toBe('ulysses');
        const clusterScoped = ['Namespace', 'CustomResourceDefinition', 'UlyssesConfig', 'ClusterRole', 'ClusterRoleBinding', 'FlowSchema', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'].includes(o.kind);
        // the one exception: the shim's Events about the cluster-scoped UlyssesConfig live in `default`
        const inDefault = ['Role/ulysses:kubelet-shim:events', 'RoleBinding/ulysses:kubelet-shim:events'].includes(objectId(o));
        expect(o.metadata.namespace, objectId(o)).toBe(clusterScoped ? undefined : inDefault ? 'default' : ULYSSES_NAMESPACE);
      }
    });

    it(`${overlay}: workloads use an existing ServiceAccount, the ulysses image and a component of the entrypoint; bindings name existing SAs (or the kubelets)`, async () => {
      const objs = await objectsOf(overlay);
      const sas = new Set(objs.filter((o) => o.kind === 'ServiceAccount').map((o) => o.metadata.name));
      const entrypoint = manifestFile('entrypoint.sh');
      for (const w of objs.filter((o) => ['Deployment', 'DaemonSet'].includes(o.kind))) {
        const spec = podSpec(w);
        expect(sas.has(spec.serviceAccountName ?? 'default'), `${objectId(w)} serviceAccountName`).toBe(true);
        for (const c of spec.containers) {
          expect(c.image, objectId(w)).toBe('ulysses:0.1.0');
          const component = c.args?.[0] ?? '';
          expect(entrypoint, `${objectId(w)}: entrypoint.sh handles "${component}"`).toContain(`\n  ${component})`);
          const probePort = c.livenessProbe?.httpGet?.port;
          if (probePort !== undefined) expect(c.ports?.map((p) => p.name), `${objectId(w)} liveness port`).toContain(probePort);
        }
      }
      for (const b of objs.filter((o) => o.kind.endsWith('RoleBinding'))) {
        for (const s of (b as unknown as { subjects: { kind: string; name: string; namespace: string }[] }).subjects) {
          // the kubelet-shim's node service runs with its node's kubelet identity (group system:nodes)
          if (s.kind === 'Group' && objectId(b) === 'ClusterRoleBinding/ulysses:kubelet-shim') {
            expect(s.name).toBe('system:nodes');
            continue;
          }
          // the kcm handback's static pod runs with kube-controller-manager's own kubeconfig
          if (s.kind === 'User' && objectId(b) === 'RoleBinding/ulysses:kcm-handback') {
            expect(s.name).toBe('system:kube-controller-manager');
            continue;
          }
          expect(s.kind).toBe('ServiceAccount');
          expect(s.namespace).toBe(ULYSSES_NAMESPACE);
          expect(sas.has(s.name), `${objectId(b)} -> ServiceAccount ${s.name}`).toBe(true);
        }
      }
    });
  }

  it('the UlyssesConfig is all vanilla, except apf.enabled exactly in the overlays that install the FlowSchema', async () => {
    for (const overlay of Object.keys(OVERLAYS)) {
      const objs = await objectsOf(overlay);
      const cfg = objs.find((o) => o.kind === 'UlyssesConfig')! as unknown as {
        spec: { controllerManager: { controllers: Record<string, { mode: string }> }; kubeletShim: { default: { policy: string } }; schedulerExtender: { plugins: Record<string, boolean> }; apf: { enabled: boolean; exemptNamespaces: string[] } };
      };
      expect(Object.values(cfg.spec.controllerManager.controllers).map((c) => c.mode)).toEqual(Array(5).fill('vanilla'));
      expect(cfg.spec.kubeletShim.default.policy).toBe('vanilla');
      expect(cfg.spec.schedulerExtender.plugins).toEqual({ assurance: false, realtime: false, tdma: false });
      const fs = objs.find((o) => o.kind === 'FlowSchema') as unknown as { spec: { rules: { resourceRules: { namespaces: string[] }[] }[] } } | undefined;
      expect(cfg.spec.apf.enabled, overlay).toBe(fs !== undefined);
      if (fs) expect(cfg.spec.apf.exemptNamespaces).toEqual(fs.spec.rules[0]!.resourceRules[0]!.namespaces);
    }
  });

  it('controller-manager: 2 replicas with leader election on the Lease the manifests create and its Role names, metrics port probed', async () => {
    const objs = await objectsOf('controller-manager');
    const d = objs.find((o) => objectId(o) === 'Deployment/ulysses-controller-manager')!;
    expect((d.spec as { replicas: number }).replicas).toBe(2);
    const args = podSpec(d).containers[0]!.args;
    expect(flag(args, 'leader-elect')).toBe('true');
    expect(flag(args, 'leader-elect-resource-namespace')).toBe(ULYSSES_NAMESPACE);
    expect(podSpec(d).containers[0]!.ports?.find((p) => p.name === 'metrics')?.containerPort).toBe(Number(flag(args, 'metrics-port')));
    const role = objs.find((o) => objectId(o) === 'Role/ulysses:controller-manager:leader-election') as unknown as { rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] };
    const leaseName = flag(args, 'leader-elect-resource-name')!;
    expect(role.rules).toEqual([{ apiGroups: ['coordination.k8s.io'], resources: ['leases'], resourceNames: [leaseName], verbs: ['get', 'update', 'create'] }]);
    expect(objs.find((o) => objectId(o) === `Lease/${leaseName}`)?.metadata.namespace).toBe(ULYSSES_NAMESPACE);
  });

  it('kubelet-shim: listens where the kubelet patch and the systemd config point, next to containerd, via hostPaths', async () => {
    const objs = await objectsOf('kubelet-shim');
    const ds = objs.find((o) => objectId(o) === 'DaemonSet/ulysses-kubelet-shim')!;
    const c = podSpec(ds).containers[0]!;
    const listen = flag(c.args, 'listen')!;
    const backend = flag(c.args, 'backend')!;
    const kubelet = parseYaml(manifestFile('kubeadm/patches/kubelet/kubeletconfiguration+merge.yaml')) as Record<string, string>;
    expect(kubelet).toEqual({ containerRuntimeEndpoint: `unix://${listen}`, imageServiceEndpoint: `unix://${listen}` });
    const sys = parseYaml(manifestFile('systemd/kubelet-shim.yaml')) as { listen: string; backend: string };
    expect([sys.listen, sys.backend]).toEqual([listen, backend]);
    const hostPaths = (podSpec(ds).volumes ?? []).flatMap((v) => (v.hostPath ? [v.hostPath.path] : []));
    expect(hostPaths.sort()).toEqual(['/run/containerd', '/run/ulysses']);
    expect(listen.startsWith('/run/ulysses/') && backend.startsWith('/run/containerd/')).toBe(true);
    expect((ds.spec as { updateStrategy: { type: string } }).updateStrategy.type).toBe('OnDelete');
  });

  it('scheduler-extender: kube-scheduler-config.yaml reaches the Service ClusterIP and port: filter/prioritize for every pod, bind only for pods requesting ulysses.io/reservation, as the renderer', async () => {
    const objs = await objectsOf('scheduler-extender');
    const svc = objs.find((o) => objectId(o) === 'Service/ulysses-scheduler-extender')! as unknown as { spec: { clusterIP: string; ports: { name: string; port: number }[] } };
    const cfg = parseYaml(manifestFile('kubeadm/kube-scheduler-config.yaml')) as { clientConnection: { kubeconfig: string }; extenders: Record<string, unknown>[] };
    const url = `https://${svc.spec.clusterIP}:${svc.spec.ports.find((p) => p.name === 'http')!.port}`;
    // the same two entries kube-scheduler-config.ts renders (weight 1 here, HTTPS with the install's
    // client certificate), and the resource the extender checks
    expect(cfg.extenders).toEqual(extenderEntries({ extenderUrl: url, weight: 1, tls: SCHEDULER_EXTENDER_TLS_FILES }));
    expect(cfg.extenders[1]!.managedResources).toEqual([{ name: RESERVATION_RESOURCE, ignoredByScheduler: true }]);
    expect(cfg.extenders.filter((e) => e.bindVerb).length).toBe(1);
    expect(cfg.clientConnection.kubeconfig).toBe('/etc/kubernetes/scheduler.conf');
    const d = objs.find((o) => objectId(o) === 'Deployment/ulysses-scheduler-extender')!;
    expect(Number(flag(podSpec(d).containers[0]!.args, 'port'))).toBe(svc.spec.ports.find((p) => p.name === 'http')!.port);
  });

  it('scheduler-extender HA: 2 replicas on a Lease the Role allows, the Service routed by the leader itself (no selector), rolling updates never wait for a standby', async () => {
    const objs = await objectsOf('scheduler-extender');
    const d = objs.find((o) => objectId(o) === 'Deployment/ulysses-scheduler-extender')! as unknown as {
      spec: { replicas: number; strategy: { type: string; rollingUpdate: { maxSurge: number; maxUnavailable: number } } };
    };
    expect(d.spec.replicas).toBe(2);
    expect(d.spec.strategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxSurge: 0, maxUnavailable: 1 } });
    const spec = podSpec(d as unknown as K8sObject) as PodSpec & {
      affinity?: { podAntiAffinity?: { preferredDuringSchedulingIgnoredDuringExecution?: { podAffinityTerm: { topologyKey: string } }[] } };
    };
    const c = spec.containers[0]! as PodSpec['containers'][number] & {
      env?: { name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
      readinessProbe?: { httpGet?: { path: string } };
      livenessProbe?: { httpGet?: { path: string } };
    };
    expect(flag(c.args, 'leader-elect')).toBe('true');
    const leaseNs = flag(c.args, 'leader-elect-resource-namespace')!;
    const leaseName = flag(c.args, 'leader-elect-resource-name')!;
    expect(spec.affinity?.podAntiAffinity?.preferredDuringSchedulingIgnoredDuringExecution?.[0]?.podAffinityTerm.topologyKey).toBe('kubernetes.io/hostname');
    expect((c.env ?? []).map((e) => [e.name, e.valueFrom?.fieldRef?.fieldPath])).toEqual(expect.arrayContaining([['POD_NAME', 'metadata.name'], ['POD_NAMESPACE', 'metadata.namespace']]));
    // Ready is not leadership (a standby never Ready would stall the rollout): liveness and readiness are /healthz
    expect(c.readinessProbe?.httpGet?.path).toBe('/healthz');
    expect(c.livenessProbe?.httpGet?.path).toBe('/healthz');
    // no selector: the leader writes the Service's EndpointSlice (routing.ts), not Ulysses' EndpointSlice controller
    const svc = objs.find((o) => objectId(o) === 'Service/ulysses-scheduler-extender')! as unknown as { spec: { selector?: Record<string, string>; ports: { name: string; port: number }[] } };
    expect(svc.spec.selector).toBeUndefined();
    expect(svc.spec.ports.map((p) => [p.name, p.port])).toEqual(ROUTE_PORTS.map((p) => [p.name, p.port]));
    const routing = objs.find((o) => objectId(o) === 'Role/ulysses:scheduler-extender:routing') as unknown as { rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] };
    expect(routing.rules).toEqual([{ apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'create', 'update', 'delete'] }]);
    // the Role grants exactly the Lease verbs the elector uses (and patch: the new leader's dry run of its
    // reservation epoch; create: a PUT to its name re-creates it) on this Lease only, to the extender's ServiceAccount
    const role = objs.find((o) => objectId(o) === 'Role/ulysses:scheduler-extender:leader-election')! as unknown as K8sObject & { rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] };
    expect(role.metadata.namespace).toBe(leaseNs);
    expect(role.rules).toEqual([{ apiGroups: ['coordination.k8s.io'], resources: ['leases'], resourceNames: [leaseName], verbs: ['get', 'update', 'patch', 'create'] }]);
    expect(objs.find((o) => objectId(o) === `Lease/${leaseName}`)?.metadata.namespace).toBe(leaseNs);
    // the epoch policy's parameter is this very Lease
    const epochBinding = objs.find((o) => objectId(o) === 'ValidatingAdmissionPolicyBinding/ulysses-reservation-epoch')! as unknown as { spec: { paramRef: { namespace: string; name: string } } };
    expect(epochBinding.spec.paramRef).toMatchObject({ namespace: leaseNs, name: leaseName });
    const rb = objs.find((o) => objectId(o) === 'RoleBinding/ulysses:scheduler-extender:leader-election')! as unknown as K8sObject & { subjects: { name: string; namespace: string }[] };
    expect(rb.metadata.namespace).toBe(leaseNs);
    expect(rb.subjects).toEqual([{ kind: 'ServiceAccount', name: spec.serviceAccountName, namespace: (d as unknown as K8sObject).metadata.namespace }]);
    expect(leaseName).toBe('ulysses-scheduler-extender');
  });

  it('every object kind of a component appears in exactly the overlays that install it', async () => {
    for (const [component, ids] of Object.entries(COMPONENT_OBJECTS)) {
      for (const overlay of Object.keys(OVERLAYS)) {
        const have = new Set((await objectsOf(overlay)).map(objectId));
        const installs = OVERLAYS[overlay]!.includes(component as keyof typeof COMPONENT_OBJECTS);
        for (const id of ids) expect(have.has(id), `${overlay} ${installs ? 'lacks' : 'has'} ${id}`).toBe(installs);
      }
    }
  });
});

describe.skipIf(!existsSync(kubectl))('static-pod variants (manifests/kubeadm/static-pods)', () => {
  const staticPod = (f: string) => parseYaml(manifestFile(`kubeadm/static-pods/${f}`)) as K8sObject & { spec: PodSpec & { hostNetwork: boolean } };

  it('run the same image and flags as the Deployments (the extender bound to 127.0.0.1, plain HTTP), in kube-system on the host network', async () => {
    const objs = (await renderOverlay('kubeadm', kubectl)).objects;
    // the static extender serves its own kube-scheduler on loopback: no leader election, no TLS of its own
    const noLeaderElection = (args: readonly string[]) => args.filter((a) => !a.startsWith('--leader-elect') && !/^--(tls-|client-ca-file)/.test(a));
    for (const [file, deployment, drop, extra] of [
      ['ulysses-controller-manager.yaml', 'Deployment/ulysses-controller-manager', (a: readonly string[]) => a, []],
      ['ulysses-scheduler-extender.yaml', 'Deployment/ulysses-scheduler-extender', noLeaderElection, ['--bind-address=127.0.0.1', '--leader-elect=false']],
    ] as const) {
      const pod = staticPod(file);
      const dep = podSpec(objs.find((o) => objectId(o) === deployment)!).containers[0]!;
      expect(pod.metadata.namespace).toBe('kube-system');
      expect(pod.spec.hostNetwork).toBe(true);
      expect(pod.spec.containers[0]!.image).toBe(dep.image);
      // the Deployment's extender listens on the pod's address (its Service), the static one on 127.0.0.1
      const bind = (a: string) => a.startsWith('--bind-address=');
      expect([...pod.spec.containers[0]!.args!].sort()).toEqual([...drop(dep.args!).filter((a) => !bind(a)), ...extra].sort());
    }
    const depExt = podSpec(objs.find((o) => objectId(o) === 'Deployment/ulysses-scheduler-extender')!).containers[0]!;
    expect(depExt.args).toContain('--bind-address=0.0.0.0');
  });

  it('kube-scheduler-config-static.yaml differs from kube-scheduler-config.yaml only in urlPrefix and HTTPS: the static extender on 127.0.0.1, plain HTTP on loopback', () => {
    type Entry = { urlPrefix: string; enableHTTPS: boolean; tlsConfig?: unknown };
    const cfg = parseYaml(manifestFile('kubeadm/kube-scheduler-config.yaml')) as { extenders: Entry[] };
    const stat = parseYaml(manifestFile('kubeadm/kube-scheduler-config-static.yaml')) as { extenders: Entry[] };
    const args = staticPod('ulysses-scheduler-extender.yaml').spec.containers[0]!.args;
    const port = flag(args, 'port');
    expect(flag(args, 'bind-address')).toBe('127.0.0.1');
    expect(stat.extenders.map((e) => [e.urlPrefix, e.enableHTTPS, e.tlsConfig])).toEqual([[`http://127.0.0.1:${port}`, false, undefined], [`http://127.0.0.1:${port}`, false, undefined]]);
    for (const [i, e] of stat.extenders.entries()) Object.assign(e, { urlPrefix: cfg.extenders[i]!.urlPrefix, enableHTTPS: true, tlsConfig: cfg.extenders[i]!.tlsConfig });
    expect(stat).toEqual(cfg);
  });

  it('rbac-static.yaml binds existing Ulysses roles to the users of kubeadm\'s kubeconfigs', async () => {
    const ids = new Set((await renderOverlay('kubeadm', kubectl)).objects.map(objectId));
    const bindings = parseObjects(manifestFile('kubeadm/static-pods/rbac-static.yaml'), 'rbac-static.yaml') as unknown as {
      kind: string;
      roleRef: { kind: string; name: string };
      subjects: { kind: string; name: string }[];
    }[];
    expect(bindings).toHaveLength(4);
    for (const b of bindings) {
      expect(ids.has(`${b.roleRef.kind}/${b.roleRef.name}`), `${b.kind} -> ${b.roleRef.kind}/${b.roleRef.name}`).toBe(true);
      for (const s of b.subjects) expect(['system:kube-controller-manager', 'system:kube-scheduler']).toContain(s.name);
    }
  });
});

describe('kubeadm control-plane changes', () => {
  it('the kube-controller-manager patch and the ClusterConfiguration disable exactly the replaced controllers and keep kubeadm\'s bootstrapsigner/tokencleaner', () => {
    const fromPatch = kcmControllersFromPatch();
    const cc = parseYaml(manifestFile('kubeadm/clusterconfiguration.yaml')) as {
      apiVersion: string;
      controllerManager: { extraArgs: { name: string; value: string }[] };
      scheduler: { extraArgs: { name: string; value: string }[]; extraVolumes: { hostPath: string; mountPath: string }[] };
    };
    expect(cc.apiVersion).toBe('kubeadm.k8s.io/v1beta4');
    expect(cc.controllerManager.extraArgs).toEqual([{ name: 'controllers', value: fromPatch }]);
    const entries = fromPatch.split(',');
    expect(entries.slice(0, 3)).toEqual(['*', 'bootstrapsigner', 'tokencleaner']);
    expect(entries.filter((e) => e.startsWith('-')).map((e) => e.slice(1)).sort()).toEqual([...REPLACED].sort());
    expect(entries).toHaveLength(3 + REPLACED.length);
  });

  it('the kube-scheduler patch and the ClusterConfiguration mount the directory of the --config file', () => {
    const ops = parseYaml(manifestFile('kubeadm/patches/control-plane/kube-scheduler+json.yaml')) as { op: string; path: string; value: unknown }[];
    const config = (ops.find((o) => o.path === '/spec/containers/0/command/-')!.value as string).replace('--config=', '');
    const mount = ops.find((o) => o.path === '/spec/containers/0/volumeMounts/-')!.value as { mountPath: string; name: string };
    const vol = ops.find((o) => o.path === '/spec/volumes/-')!.value as { name: string; hostPath: { path: string } };
    expect(config).toBe(`${mount.mountPath}/kube-scheduler-config.yaml`);
    expect(vol.name).toBe(mount.name);
    expect(vol.hostPath.path).toBe(mount.mountPath);
    const cc = parseYaml(manifestFile('kubeadm/clusterconfiguration.yaml')) as { scheduler: { extraArgs: { name: string; value: string }[]; extraVolumes: { hostPath: string; mountPath: string }[] } };
    expect(cc.scheduler.extraArgs).toEqual([{ name: 'config', value: config }]);
    expect(cc.scheduler.extraVolumes[0]).toMatchObject({ hostPath: mount.mountPath, mountPath: mount.mountPath, readOnly: true });
  });
});

describe('image recipe and systemd unit', () => {
  it('the Containerfile is based on node:20-slim and enters through manifests/entrypoint.sh, which is executable', () => {
    const cf = manifestFile('Containerfile');
    expect(cf).toMatch(/^FROM docker\.io\/library\/node:20-slim\b/m);
    expect(cf).toContain('ENTRYPOINT ["/app/manifests/entrypoint.sh"]');
    expect(statSync(repoFile('manifests/entrypoint.sh')).mode & 0o111).toBe(0o111);
  });

  it('.containerignore and .dockerignore list the same patterns and keep manifests/ in the context', () => {
    const patterns = (f: string) => readFileSync(repoFile(f), 'utf8').split('\n').filter((l) => l.trim() && !l.startsWith('#'));
    expect(patterns('.dockerignore')).toEqual(patterns('.containerignore'));
    expect(patterns('.dockerignore').filter((x) => x.startsWith('manifests') || x.startsWith('!manifests'))).toEqual([]);
    expect(patterns('.dockerignore')).toContain('node_modules');
  });

  it('the systemd unit runs the shim through the entrypoint with the config file it documents, before the kubelet', () => {
    const unit = manifestFile('systemd/ulysses-kubelet-shim.service');
    expect(unit).toMatch(/^ExecStart=\/opt\/ulysses\/manifests\/entrypoint\.sh kubelet-shim --config \/etc\/ulysses\/kubelet-shim\.yaml$/m);
    expect(unit).toMatch(/^Before=kubelet\.service$/m);
    expect(unit).toMatch(/^After=containerd\.service$/m);
    expect(unit).toMatch(/^ExecReload=\/bin\/kill -HUP \$MAINPID$/m);
    expect(manifestFile('systemd/10-ulysses-kubelet-shim.conf')).toMatch(/^After=ulysses-kubelet-shim\.service$/m);
  });
});

describe("the ValidatingAdmissionPolicy narrowing the extender's patch pods", () => {
  const docs = parseAllDocuments(readFileSync(repoFile('manifests/base/scheduler-extender/pod-writes-policy.yaml'), 'utf8')).map((d) => d.toJS() as Record<string, any>);
  it("names the code's annotations, routing label and ServiceAccount, matches pod updates, and is bound with Deny", () => {
    const policy = docs.find((d) => d.kind === 'ValidatingAdmissionPolicy')!;
    const binding = docs.find((d) => d.kind === 'ValidatingAdmissionPolicyBinding')!;
    const variable = (name: string) => policy.spec.variables.find((v: { name: string }) => v.name === name).expression as string;
    const keys = [RESERVED_NODE_ANNOTATION, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION, RESERVATION_EPOCH_ANNOTATION, REQUEUE_ANNOTATION];
    expect(variable('annotationKeys')).toBe(`[${keys.map((k) => `'${k}'`).join(', ')}]`);
    expect(variable('leaderLabel')).toBe(`'${LEADER_LABEL}'`);
    const sa = parseAllDocuments(readFileSync(repoFile('manifests/base/scheduler-extender/rbac.yaml'), 'utf8')).map((d) => d.toJS()).find((d) => d.kind === 'ServiceAccount');
    expect(policy.spec.matchConditions[0].expression).toBe(`request.userInfo.username == 'system:serviceaccount:${sa.metadata.namespace}:${sa.metadata.name}'`);
    expect(policy.spec.matchConstraints.resourceRules[0]).toMatchObject({ operations: ['UPDATE'], resources: ['pods', 'pods/status'] });
    expect(binding.spec).toEqual({ policyName: policy.metadata.name, validationActions: ['Deny'] });
    expect(parseYaml(readFileSync(repoFile('manifests/base/scheduler-extender/kustomization.yaml'), 'utf8')).resources).toContain('pod-writes-policy.yaml');
  });
});

describe.skipIf(!existsSync(kubectl))("Ulysses' own workloads", () => {
  it('are critical, in a namespace whose grant admits the claim (so its queues and pacing serve them first)', async () => {
    const objs = (await renderOverlay('kubeadm', kubectl)).objects;
    const ns = objs.find((o) => o.kind === 'Namespace' && o.metadata.name === 'ulysses-system')!;
    expect(ns.metadata.labels?.[GRANT_LABELS.criticality]).toBe(GRANTED);
    for (const id of ['Deployment/ulysses-controller-manager', 'Deployment/ulysses-scheduler-extender']) {
      const d = objs.find((o) => objectId(o) === id)! as K8sObject & { spec: { template: { metadata: { labels: Record<string, string> } } } };
      expect(d.spec.template.metadata.labels[CRITICALITY_LABEL], id).toBe('high');
    }
  });
});
