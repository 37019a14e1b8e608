import { describe, expect, it } from 'vitest';
import type { V1Node, V1Pod, V1Service } from '@kubernetes/client-node';
import { projectNode, projectPod, StringPool } from '../../controller-manager/cache-projection.ts';
import { desiredSubsets } from '../../controller-manager/controllers/endpoints.ts';
import { desiredEndpoints, resolvePort } from '../../controller-manager/controllers/endpointslice.ts';
import { deletionRank } from '../../controller-manager/controllers/replicaset.ts';
import { evictionDecision } from '../../controller-manager/controllers/taint-eviction.ts';
import { CriticalityIndex, podCriticality } from '../../core/criticality.ts';
import { isPodActive, isPodAvailable, isPodReady, objectKey } from '../../core/objects.ts';

const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;

/** A pod as the apiserver returns it for a Deployment replica (real field set, shortened values). */
function fullPod(i: number, over: { ready?: boolean; phase?: string; restarts?: number; deleting?: boolean; node?: string; readySince?: string } = {}): V1Pod {
  const ready = over.ready ?? true;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: `web-7d9f8c-${i}`,
      generateName: 'web-7d9f8c-',
      namespace: 'prod',
      uid: `uid-${i}`,
      resourceVersion: String(1000 + i),
      creationTimestamp: new Date(Date.UTC(2026, 10, 22, 3, 0, i)),
      ...(over.deleting ? { deletionTimestamp: new Date(Date.UTC(2026, 10, 22, 4)), deletionGracePeriodSeconds: 30 } : {}),
      labels: { app: 'web', 'pod-template-hash': '7d9f8c', 'ulysses.io/criticality': i % 2 ? 'high' : 'low' },
      annotations: { 'controller.kubernetes.io/pod-deletion-cost': String(i) },
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'web-7d9f8c', uid: 'rs-uid', controller: true, blockOwnerDeletion: true }],
      managedFields: [{ manager: 'kube-controller-manager', operation: 'Update', apiVersion: 'v1', fieldsType: 'FieldsV1', fieldsV1: { 'f:metadata': { 'f:labels': {} } } }],
    },
    spec: {
      nodeName: over.node ?? `node-${i % 3}`,
      hostname: `web-${i}`,
      subdomain: 'web',
      priority: 0,
      priorityClassName: 'default',
      schedulerName: 'default-scheduler',
      serviceAccountName: 'default',
      restartPolicy: 'Always',
      dnsPolicy: 'ClusterFirst',
      terminationGracePeriodSeconds: 30,
      readinessGates: [{ conditionType: 'example.com/gate' }],
      tolerations: [
        { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
        { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
      ],
      initContainers: [{ name: 'sidecar', image: 'proxy:1', restartPolicy: 'Always', ports: [{ name: 'admin', containerPort: 9901 }], env: [{ name: 'X', value: 'y' }] }],
      containers: [
        {
          name: 'app',
          image: 'registry.example.com/web:1.2.3',
          imagePullPolicy: 'IfNotPresent',
          args: ['--listen', ':8080'],
          env: Array.from({ length: 20 }, (_, k) => ({ name: `ENV_${k}`, value: `value-${k}` })),
          ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }, { name: 'dns', containerPort: 53, protocol: 'UDP' }],
          readinessProbe: { httpGet: { path: '/ready', port: 8080 as never }, periodSeconds: 1 },
          resources: { requests: { cpu: '100m', memory: '64Mi' }, limits: { memory: '128Mi' } },
          volumeMounts: [{ name: 'kube-api-access-abcde', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true }],
          terminationMessagePath: '/dev/termination-log',
          terminationMessagePolicy: 'File',
        },
      ],
      volumes: [
        {
          name: 'kube-api-access-abcde',
          projected: {
            defaultMode: 420,
            sources: [
              { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
              { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
              { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
            ],
          },
        },
      ],
    },
    status: {
      phase: over.phase ?? 'Running',
      qosClass: 'Burstable',
      podIP: `10.244.0.${i}`,
      podIPs: [{ ip: `10.244.0.${i}` }],
      hostIP: '10.0.0.1',
      hostIPs: [{ ip: '10.0.0.1' }],
      startTime: new Date(Date.UTC(2026, 10, 22, 3, 0, i)),
      conditions: [
        { type: 'PodScheduled', status: 'True', lastTransitionTime: new Date(Date.UTC(2026, 10, 22, 3)) },
        { type: 'Ready', status: ready ? 'True' : 'False', lastTransitionTime: new Date(over.readySince ?? Date.UTC(2026, 10, 22, 3, 1, i)) },
      ],
      containerStatuses: [
        {
          name: 'app',
          ready,
          started: true,
          restartCount: over.restarts ?? 0,
          image: 'registry.example.com/web:1.2.3',
          imageID: 'registry.example.com/web@sha256:0123456789abcdef',
          containerID: 'containerd://0123456789abcdef',
          state: { running: { startedAt: new Date(Date.UTC(2026, 10, 22, 3)) } },
          lastState: {},
        },
      ],
    },
  };
}

function fullNode(name: string, zone: string, taints: V1Node['spec'] extends infer S ? (S extends { taints?: infer T } ? T : never) : never = []): V1Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, uid: `uid-${name}`, resourceVersion: '5', labels: { 'kubernetes.io/hostname': name, 'topology.kubernetes.io/zone': zone }, annotations: { 'node.alpha.kubernetes.io/ttl': '0' } },
    spec: { podCIDR: '10.244.0.0/24', taints },
    status: {
      capacity: { cpu: '2', memory: '4Gi', pods: '110' },
      conditions: [{ type: 'Ready', status: 'True' }],
      images: [{ names: ['registry.example.com/web:1.2.3'], sizeBytes: 1 }],
      nodeInfo: { architecture: 'amd64', bootID: 'b', containerRuntimeVersion: 'containerd://2', kernelVersion: '6', kubeProxyVersion: '', kubeletVersion: 'v1.36.3', machineID: 'm', operatingSystem: 'linux', osImage: 'x', systemUUID: 's' },
    },
  };
}

const services: V1Service[] = [
  { metadata: { name: 'web', namespace: 'prod' }, spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http' as never }, { name: 'dns', port: 53, protocol: 'UDP', targetPort: 'dns' as never }] } },
  { metadata: { name: 'admin', namespace: 'prod' }, spec: { selector: { app: 'web' }, publishNotReadyAddresses: true, ports: [{ port: 9000, targetPort: 'admin' as never }] } },
];

describe('cache projections: every controller decides the same on the projected objects', () => {
  // JSON-normalised, as the informer gets them (dates are strings)
  const pods = [
    fullPod(1),
    fullPod(2, { ready: false }),
    fullPod(3, { phase: 'Pending' }),
    fullPod(4, { restarts: 3 }),
    fullPod(5, { deleting: true }),
    fullPod(6, { phase: 'Succeeded', ready: false }),
    fullPod(7, { readySince: '2026-11-22T03:59:00Z' }),
  ].map(clone);
  const projected = pods.map((p) => projectPod(clone(p)));
  const nodes = new Map([0, 1, 2].map((k) => [`node-${k}`, fullNode(`node-${k}`, `zone-${k}`, k === 1 ? [{ key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' }] : [])]));
  const projectedNodes = new Map([...nodes].map(([k, n]) => [k, projectNode(clone(n))]));

  it('endpoints and endpoint slices (named ports by protocol, hostname, readiness, zones, terminating)', () => {
    for (const svc of services) {
      expect(desiredSubsets(svc, projected)).toEqual(desiredSubsets(svc, pods));
      expect(desiredEndpoints(svc, projected, (n) => projectedNodes.get(n))).toEqual(desiredEndpoints(svc, pods, (n) => nodes.get(n)));
      for (let i = 0; i < pods.length; i++) for (const sp of svc.spec!.ports!) expect(resolvePort(projected[i]!, sp)).toBe(resolvePort(pods[i]!, sp));
    }
    // the fixture exercises what it should: some ports resolve by name, zones are set
    expect(resolvePort(projected[0]!, services[0]!.spec!.ports![0]!)).toBe(8080);
    expect(resolvePort(projected[0]!, services[0]!.spec!.ports![1]!)).toBe(53);
    expect(JSON.stringify([...desiredEndpoints(services[0]!, projected, (n) => projectedNodes.get(n)).values()].flatMap((g) => [...g.endpoints.values()]))).toContain('zone-2');
  });

  it('ReplicaSet deletion ranking, readiness, availability, activity', () => {
    const order = (list: V1Pod[]) => [...list].sort(deletionRank).map((p) => p.metadata!.name);
    expect(order(projected)).toEqual(order(pods));
    const now = Date.UTC(2026, 10, 22, 4);
    for (let i = 0; i < pods.length; i++) {
      expect(isPodReady(projected[i]!)).toBe(isPodReady(pods[i]!));
      expect(isPodActive(projected[i]!)).toBe(isPodActive(pods[i]!));
      for (const minReady of [0, 30, 3600]) expect(isPodAvailable(projected[i]!, minReady, now)).toBe(isPodAvailable(pods[i]!, minReady, now));
    }
  });

  it('taint eviction and criticality', () => {
    for (let i = 0; i < pods.length; i++) {
      const node = pods[i]!.spec!.nodeName!;
      expect(evictionDecision(projected[i]!.spec!.tolerations, projectedNodes.get(node)!.spec!.taints)).toEqual(evictionDecision(pods[i]!.spec!.tolerations, nodes.get(node)!.spec!.taints));
      expect(podCriticality(projected[i]!, { priorityClassThreshold: 0 })).toEqual(podCriticality(pods[i]!, { priorityClassThreshold: 0 }));
    }
    const a = new CriticalityIndex();
    const b = new CriticalityIndex();
    for (let i = 0; i < pods.length; i++) expect(a.upsertPod(projected[i]!).after).toEqual(b.upsertPod(pods[i]!).after);
  });

  it('keeps identity and drops the bulk', () => {
    for (let i = 0; i < pods.length; i++) {
      expect(objectKey(projected[i]!)).toBe(objectKey(pods[i]!));
      expect({ ...projected[i]!.metadata, managedFields: 'x' }).toEqual({ ...pods[i]!.metadata, managedFields: 'x' });
      expect(projected[i]!.metadata!.managedFields).toBeUndefined();
    }
    const size = (x: unknown) => JSON.stringify(x).length;
    expect(size(projected[0]) / size(pods[0])).toBeLessThan(0.5);
    expect(size(projectedNodes.get('node-0')) / size(nodes.get('node-0'))).toBeLessThan(0.5);
    expect(projectedNodes.get('node-1')!.spec!.taints).toEqual(nodes.get('node-1')!.spec!.taints);
    expect(projectedNodes.get('node-1')!.metadata!.labels).toEqual(nodes.get('node-1')!.metadata!.labels);
  });

  it('objects without spec or status stay without', () => {
    expect(projectPod({ metadata: { name: 'x', namespace: 'n' } })).toEqual({ apiVersion: undefined, kind: undefined, metadata: { name: 'x', namespace: 'n' }, spec: undefined, status: undefined });
  });
});

describe('StringPool', () => {
  it('is bounded: when full it starts over instead of keeping old strings alive', () => {
    const pool = new StringPool(3, 8);
    for (const s of ['a', 'b', 'a', 'c']) expect(pool.intern(s)).toBe(s);
    expect(pool.size).toBe(3);
    expect(pool.intern('d')).toBe('d');
    expect(pool.size).toBe(1);
    expect(pool.intern('longer than eight')).toBe('longer than eight');
    expect(pool.intern(undefined)).toBeUndefined();
    expect(pool.size).toBe(1);
  });
});
