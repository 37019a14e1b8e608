/**
 * The kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1, types.go). The Go
 * structs carry no json tags, so the JSON field names are the Go field names:
 *   ExtenderArgs            {Pod, Nodes (*v1.NodeList, when !nodeCacheCapable), NodeNames (*[]string, when nodeCacheCapable)}
 *   ExtenderFilterResult    {Nodes, NodeNames, FailedNodes map[node]msg, FailedAndUnresolvableNodes map[node]msg, Error}
 *   HostPriorityList        [{Host, Score}]   Score in 0..MaxExtenderPriority (10)
 *   ExtenderBindingArgs     {PodName, PodNamespace, PodUID, Node}
 *   ExtenderBindingResult   {Error}
 * Request bodies are validated here (zod): anything that is not a well-formed request is a 400 with
 * the offending field named, never a 500.
 */
import { z } from 'zod';
import type { V1Node, V1Pod } from '@kubernetes/client-node';

export const MAX_EXTENDER_PRIORITY = 10;

const stringMap = z.record(z.string(), z.string());

const metaSchema = z.looseObject({
  name: z.string().min(1).max(253),
  namespace: z.string().max(253).optional(),
  uid: z.string().max(128).optional(),
  resourceVersion: z.string().max(64).optional(),
  labels: stringMap.nullish(),
  annotations: stringMap.nullish(),
});

/** A pod as the scheduler sends it: only metadata is required; the rest is passed through. */
export const wirePodSchema = z.looseObject({ metadata: metaSchema, spec: z.looseObject({}).optional() });
export const wireNodeSchema = z.looseObject({ metadata: metaSchema });

export const extenderArgsSchema = z
  .looseObject({
    Pod: wirePodSchema,
    Nodes: z.looseObject({ items: z.array(wireNodeSchema).nullish() }).nullish(),
    // hand-checked (a 1000-name array through per-element zod schemas costs ~0.15 ms per request)
    NodeNames: z
      .unknown()
      .superRefine((v, ctx) => {
        if (v === null || v === undefined) return;
        if (!Array.isArray(v)) return void ctx.addIssue({ code: 'custom', message: 'must be an array of node names' });
        for (let i = 0; i < v.length; i++) {
          const n: unknown = v[i];
          if (typeof n !== 'string' || n.length === 0 || n.length > 253) return void ctx.addIssue({ code: 'custom', path: [i], message: 'must be a node name (1..253 characters)' });
        }
      })
      .transform((v) => v as string[] | null | undefined)
      .optional(),
  })
  .superRefine((a, ctx) => {
    if (!a.NodeNames && !a.Nodes) ctx.addIssue({ code: 'custom', path: ['NodeNames'], message: 'one of NodeNames or Nodes is required' });
  });

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const optString = (v: unknown, min: number, max: number) => v === undefined || (typeof v === 'string' && v.length >= min && v.length <= max);
const stringMapOk = (v: unknown) => {
  if (v === undefined || v === null) return true;
  if (!isPlainObject(v)) return false;
  for (const k in v) if (typeof v[k] !== 'string') return false;
  return true;
};

/**
 * The request as the nodeCacheCapable scheduler sends it, checked without copying (the hot path:
 * zod's parse copies the whole pod). Accepts only what {@link extenderArgsSchema} accepts, with
 * `NodeNames` set and `Nodes` absent; anything else (including every malformed body) goes through
 * the schema, which names the offending field.
 */
export function fastExtenderArgs(body: unknown): ExtenderArgs | undefined {
  if (!isPlainObject(body)) return undefined;
  const pod = body.Pod;
  const names = body.NodeNames;
  if (!isPlainObject(pod) || !Array.isArray(names) || (body.Nodes !== undefined && body.Nodes !== null)) return undefined;
  const meta = pod.metadata;
  if (!isPlainObject(meta) || typeof meta.name !== 'string' || meta.name.length < 1 || meta.name.length > 253) return undefined;
  if (!optString(meta.namespace, 0, 253) || !optString(meta.uid, 0, 128) || !optString(meta.resourceVersion, 0, 64)) return undefined;
  if (!stringMapOk(meta.labels) || !stringMapOk(meta.annotations)) return undefined;
  if (pod.spec !== undefined && !isPlainObject(pod.spec)) return undefined;
  for (let i = 0; i < names.length; i++) {
    const n: unknown = names[i];
    if (typeof n !== 'string' || n.length === 0 || n.length > 253) return undefined;
  }
  return body as unknown as ExtenderArgs;
}

export const bindingArgsSchema = z.looseObject({
  PodName: z.string().min(1).max(253),
  PodNamespace: z.string().min(1).max(253),
  PodUID: z.string().max(128),
  Node: z.string().min(1).max(253),
});

export interface ExtenderArgs {
  Pod: V1Pod;
  Nodes?: { items?: V1Node[] | null } | null;
  NodeNames?: string[] | null;
}

export type FailedNodesMap = Record<string, string>;

export interface ExtenderFilterResult {
  Nodes?: { items: V1Node[] } | null;
  NodeNames?: string[] | null;
  FailedNodes: FailedNodesMap;
  FailedAndUnresolvableNodes: FailedNodesMap;
  Error: string;
}

export interface HostPriority {
  Host: string;
  Score: number;
}

export interface ExtenderBindingArgs {
  PodName: string;
  PodNamespace: string;
  PodUID: string;
  Node: string;
}

export interface ExtenderBindingResult {
  Error: string;
}

/** `"<field>: <problem>"` lines of a zod error, for 400 bodies. */
export function describeIssues(error: z.ZodError, what: string): string {
  return error.issues.map((i) => `${what}: ${i.path.length ? i.path.map(String).join('.') : '(root)'}: ${i.message}`).join('; ');
}
