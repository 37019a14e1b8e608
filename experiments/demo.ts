export async function runDemo(_o: { runDir: string; lowPods: number; keep: boolean }): Promise<void> {
  throw new Error('demo: not yet');
}
