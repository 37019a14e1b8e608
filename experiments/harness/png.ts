/**
 * PNG rendering of the SVG plots with @resvg/resvg-js when it is installed (optional: the module is
 * loaded at run time, and its absence only skips the PNGs with a message saying how to get them).
 */
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
