/**
 * The 5G scenario's manifests (thesis §6.1.2) as objects, in kustomization order: Open5GS UPF
 * (critical), UERANSIM gNB + UE, a multi-service low-priority app. For users who have the images;
 * the testbed runs the same scenario with the UDP echo stand-in (`experiment failover --scenario 5g`).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseAllDocuments } from 'yaml';

export const FIVE_G_DIR = fileURLToPath(new URL('./', import.meta.url));

export interface ManifestObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [k: string]: unknown;
}

export function fiveGResources(): string[] {
  return (parse(readFileSync(join(FIVE_G_DIR, 'kustomization.yaml'), 'utf8')) as { resources: string[] }).resources;
}

export function fiveGManifests(): ManifestObject[] {
  return fiveGResources().flatMap((f) =>
    parseAllDocuments(readFileSync(join(FIVE_G_DIR, f), 'utf8')).flatMap((d, i) => {
      if (d.errors.length) throw new Error(`experiments/5g/${f}: document ${i + 1}: ${d.errors[0]!.message}`);
      const o = d.toJS() as ManifestObject | null;
      return o ? [o] : [];
    }),
  );
}
