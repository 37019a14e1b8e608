/**
 * Adversarial inputs of the scheduler extender's RT analyses (issue 26 item 1 and generated worst
 * cases within what the annotations allow: 256 tasks per pod, times up to 3.6e9 µs, 1024 cores per
 * node), shared by the unit and integration adversarial tests and the adversarial benchmark.
 *
 * A case is a node role (the `ulysses.io/rt-scheduler` label and `ulysses.io/rt-capacity`
 * annotation), the pods already holding capacity there (each with its `ulysses.io/rt` and pinned
 * `ulysses.io/rt-cores`), and the pod to place (its `ulysses.io/rt`). `refusal` is what the
 * extender answers for the pod on that node (a regular expression on the node's message).
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { RtKind } from '../../scheduler-plugins/realtime/annotations.ts';
import { MAX_TIME_US } from '../../scheduler-plugins/realtime/task.ts';
import { reservationRequest } from '../../scheduler-plugins/schedulability.ts';

export interface AdversarialTask {
  readonly wcetUs: number;
  readonly periodUs: number;
  readonly deadlineUs?: number;
}

export interface AdversarialCase {
  /** Short kebab-case name (used in pod and node names). */
  readonly name: string;
  readonly what: string;
  readonly node: { readonly kind: RtKind; readonly cores: number };
  /** Pods already bound to the node, each pinned to `cores`. */
  readonly holders: ReadonlyArray<{ readonly rt: string; readonly cores: readonly number[] }>;
  /** The pod's `ulysses.io/rt`. */
  readonly rt: string;
  /** The node's refusal of the pod (with the default analysisBudget of 1,000,000 units). */
  readonly refusal: RegExp;
}

export const MAX_TASKS = 256;
export const MAX_CORES = 1024;

const tasks = (n: number, t: (i: number) => AdversarialTask): AdversarialTask[] => Array.from({ length: n }, (_, i) => t(i));

/** The review's pod: a 1000/1000 server, one task 9999/10000 and 255 tasks of 1000 µs every 3.6e9 µs (13.5 KB). */
export const ISSUE_ITEM_1_RT = JSON.stringify({
  server: { budgetUs: 1000, periodUs: 1000 },
  tasks: [{ wcetUs: 9999, periodUs: 10000 }, ...tasks(255, () => ({ wcetUs: 1000, periodUs: MAX_TIME_US }))],
});

const BUDGET = /analysis budget exceeded: \d+ tasks x \d+ (servers|pods)/;

export function adversarialCases(): AdversarialCase[] {
  return [
    {
      name: 'issue-item-1',
      what: "issue 26 item 1: 1000/1000 server, task 9999/10000, 255 tasks 1000 µs / 3.6e9 µs, single-core deferrable-server node",
      node: { kind: 'deferrable-server', cores: 1 },
      holders: [],
      rt: ISSUE_ITEM_1_RT,
      refusal: BUDGET,
    },
    {
      name: 'ds-max-tasks',
      what: 'max tasks: 256 tasks of one full-bandwidth server (1/1 µs), the first near 1 (9,999,999/10,000,000), the other 255 1 µs every 3.6e9 µs, on 4 cores',
      node: { kind: 'deferrable-server', cores: 4 },
      holders: [],
      rt: JSON.stringify({
        server: { budgetUs: 1, periodUs: 1 },
        tasks: [{ wcetUs: 9_999_999, periodUs: 10_000_000 }, ...tasks(255, () => ({ wcetUs: 1, periodUs: MAX_TIME_US }))],
      }),
      refusal: BUDGET,
    },
    {
      name: 'ds-extreme-periods',
      what: 'extreme periods: server 3.6e9/3.6e9 µs, 256 tasks with periods spread over 1e3..3.6e9 µs (log-spaced), utilization 0.99',
      node: { kind: 'deferrable-server', cores: 1 },
      holders: [],
      rt: JSON.stringify({ server: { budgetUs: MAX_TIME_US, periodUs: MAX_TIME_US }, tasks: logSpacedTasks(MAX_TASKS, 1000, MAX_TIME_US, 0.99) }),
      // ~830,000 units: within the default budget a late task misses its deadline; with less, the budget runs out
      refusal: /task \d+: response time >= \d+ us > deadline|analysis budget exceeded/,
    },
    {
      name: 'ds-max-servers',
      what: 'max servers: a single-core node holding 64 servers (1/1000+k µs) of 256 tasks each (16,384 tasks), the new pod a 1/997 µs server with the issue\'s task set',
      node: { kind: 'deferrable-server', cores: 1 },
      holders: tasks(64, (k) => ({ wcetUs: 1, periodUs: 1000 + k })).map((s) => ({
        rt: JSON.stringify({ server: { budgetUs: s.wcetUs, periodUs: s.periodUs }, tasks: tasks(MAX_TASKS, () => ({ wcetUs: 1, periodUs: MAX_TIME_US })) }),
        cores: [0],
      })),
      rt: JSON.stringify({ server: { budgetUs: 1, periodUs: 997 }, tasks: [{ wcetUs: 9999, periodUs: 10_000_000 }, ...tasks(255, () => ({ wcetUs: 1, periodUs: MAX_TIME_US }))] }),
      refusal: BUDGET,
    },
    {
      name: 'bp-max-cpus',
      what: 'budget/period: a 1024-cpu reservation of 1 µs every 3.6e9 µs with 256 tasks (periodic-resource bound) on a 1024-core node',
      node: { kind: 'budget-period', cores: MAX_CORES },
      holders: [],
      rt: JSON.stringify({ reservation: { runtimeUs: 1, periodUs: MAX_TIME_US, cpus: MAX_CORES }, tasks: tasks(MAX_TASKS, (i) => ({ wcetUs: 1, periodUs: MAX_TIME_US - i })) }),
      refusal: /./,
    },
    {
      name: 'edf-max-tasks',
      what: 'EDF: 256 tasks at density 1 (wcet = deadline near 3.6e9 µs, the last one just above 1) on a 1024-core node whose 768 other cores hold 3 pods of 256 such tasks',
      node: { kind: 'edf', cores: MAX_CORES },
      holders: tasks(3, () => ({ wcetUs: 0, periodUs: 0 })).map((_, h) => ({
        rt: JSON.stringify({ tasks: tasks(MAX_TASKS, () => ({ wcetUs: MAX_TIME_US, periodUs: MAX_TIME_US })) }),
        cores: Array.from({ length: MAX_TASKS }, (_, i) => h * MAX_TASKS + i),
      })),
      // the last task's deadline one µs short of its WCET: no core takes it, every core is tried
      rt: JSON.stringify({ tasks: tasks(MAX_TASKS, (i) => ({ wcetUs: MAX_TIME_US - i, periodUs: MAX_TIME_US, deadlineUs: MAX_TIME_US - i - (i === MAX_TASKS - 1 ? 1 : 0) })) }),
      refusal: /./,
    },
  ];
}

/** n tasks with periods log-spaced over [minUs, maxUs] and equal utilization, Σ C/T ≈ u (wcet ≥ 1, floored). */
function logSpacedTasks(n: number, minUs: number, maxUs: number, u: number): AdversarialTask[] {
  return Array.from({ length: n }, (_, i) => {
    const periodUs = Math.round(minUs * Math.pow(maxUs / minUs, i / (n - 1)));
    return { wcetUs: Math.max(1, Math.floor((periodUs * u) / n)), periodUs };
  });
}

/**
 * The case as API objects: its node `nodeName` (labels and annotations as the extender reads them),
 * the holder pods bound there (pinned), and the pod to place (`podName`, UID `<podName>-uid`).
 */
export function adversarialObjects(c: AdversarialCase, nodeName: string, podName = `adv-${c.name}`, namespace = 'adv'): { node: V1Node; holders: V1Pod[]; pod: V1Pod } {
  const node: V1Node = {
    metadata: {
      name: nodeName,
      uid: `${nodeName}-uid`,
      resourceVersion: '1',
      labels: { 'ulysses.io/rt-scheduler': c.node.kind },
      annotations: { 'ulysses.io/rt-capacity': JSON.stringify({ cores: c.node.cores }) },
    },
  };
  const holders = c.holders.map(
    (h, i): V1Pod => ({
      metadata: {
        name: `${nodeName}-holder-${i}`,
        namespace,
        uid: `${nodeName}-holder-${i}-uid`,
        resourceVersion: '1',
        annotations: { 'ulysses.io/rt': h.rt, 'ulysses.io/rt-cores': JSON.stringify(h.cores) },
      },
      spec: { nodeName, containers: [{ name: 'c' }] },
    }),
  );
  const pod: V1Pod = {
    metadata: { name: podName, namespace, uid: `${podName}-uid`, resourceVersion: '1', annotations: { 'ulysses.io/rt': c.rt } },
    // an RT pod requests ulysses.io/reservation (the extender binds it, recording its reservation)
    spec: { containers: [{ name: 'c', resources: reservationRequest() }] },
  };
  return { node, holders, pod };
}
