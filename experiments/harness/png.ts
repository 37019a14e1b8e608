/**
 * Figure files: the SVG of each figure, the one format experiments/results keeps
 * (docs/results/README.md, "The results directory"), and on request a PNG copy rendered with
 * @resvg/resvg-js when it is installed (optional: the module is loaded at run time, and its absence
 * only skips the PNGs with a message saying how to get them).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const RESVG_MODULE = '@resvg/resvg-js';

interface ResvgModule {
  Resvg: new (svg: string, opts?: unknown) => { render(): { asPng(): Uint8Array } };
}

let cached: Promise<ResvgModule | Error> | undefined;

export function loadResvg(): Promise<ResvgModule | Error> {
  const name = RESVG_MODULE; // a variable: optional dependency, not resolved at type-check time
  cached ??= import(name).then(
    (m: ResvgModule & { default?: ResvgModule }) => (m.Resvg ? m : m.default!),
    (err: Error) => new Error(`PNG plots skipped: ${RESVG_MODULE} is not installed (${err.message.split('\n')[0]}); install it with \`npm install ${RESVG_MODULE}@2.6.2\` to get PNGs next to the SVGs`),
  );
  return cached;
}

/** PNG bytes of an SVG document, or an Error explaining why none can be produced. */
export async function svgToPng(svg: string, zoom = 2): Promise<Uint8Array | Error> {
  const mod = await loadResvg();
  if (mod instanceof Error) return mod;
  try {
    return new mod.Resvg(svg, { fitTo: { mode: 'zoom', value: zoom }, font: { loadSystemFonts: true }, background: 'white' }).render().asPng();
  } catch (err) {
    return new Error(`PNG rendering failed: ${(err as Error).message}`);
  }
}

export interface FigureFiles {
  svgs: string[];
  /** empty unless asked for (`png`) */
  pngs: string[];
  /** why PNGs asked for were not written */
  pngMessage?: string;
}

/**
 * Writes DIR/<file>.svg of each figure and, with `png` (`--png` of the commands), a PNG copy next
 * to it — for a slide or a viewer without SVG; not for experiments/results, which keeps one format.
 */
export async function writeFigureFiles(dir: string, figures: ReadonlyArray<{ file: string; svg: string }>, png = false): Promise<FigureFiles> {
  const out: FigureFiles = { svgs: [], pngs: [] };
  for (const f of figures) {
    const svgFile = join(dir, `${f.file}.svg`);
    writeFileSync(svgFile, f.svg);
    out.svgs.push(svgFile);
    if (!png) continue;
    const bytes = await svgToPng(f.svg);
    if (bytes instanceof Error) out.pngMessage = bytes.message;
    else {
      const pngFile = join(dir, `${f.file}.png`);
      writeFileSync(pngFile, bytes);
      out.pngs.push(pngFile);
    }
  }
  return out;
}
