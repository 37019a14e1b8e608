/**
 * experiments/results (issue 38; the rule in docs/results/README.md, "The results directory"):
 * every Markdown link into it resolves, it holds only studies the docs cite, its figures are SVG
 * only, and it stays within 8 MB. Reads file names, sizes and Markdown text only (no rendering).
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { writeOutputs } from '../../experiments/harness/outputs.ts';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const RESULTS = 'experiments/results';
/** 8 MB as a sum of file sizes (du shows more: it counts 4 KiB blocks) */
const RESULTS_MAX_BYTES = 8_000_000;
/** the one figure format kept: what the report writes and report.md and the docs embed */
const FIGURE_FORMAT = 'svg';
const FIGURE_EXTENSIONS = ['svg', 'png', 'jpg', 'jpeg', 'gif', 'webp', 'pdf', 'eps'];

/** Every file under `dir` (repository-relative, posix), recursively. */
function walk(dir: string, skip: (rel: string) => boolean = () => false): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(REPO, dir), { withFileTypes: true })) {
    const rel = dir ? `${dir}/${e.name}` : e.name;
    if (skip(rel)) continue;
    if (e.isDirectory()) out.push(...walk(rel, skip));
    else if (e.isFile()) out.push(rel);
  }
  return out;
}

/** The repository's Markdown files: tracked, and new ones not ignored (git); without git, a walk. */
function markdownFiles(): string[] {
  try {
    return execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z', '--', '*.md'], { cwd: REPO, encoding: 'utf8' })
      .split('\0')
      .filter((f) => f && existsSync(join(REPO, f)));
  } catch {
    return walk('', (rel) => /^(node_modules|dist|out|\.git|\.testbed)$|\/node_modules$/.test(rel)).filter((f) => f.endsWith('.md'));
  }
}

/** Link targets of a Markdown text: inline links and images, reference definitions, HTML src/href. */
function markdownLinks(text: string): string[] {
  const code = text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, ''); // fenced code is not a link
  const out: string[] = [];
  for (const m of code.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g)) out.push(m[1]!);
  for (const m of code.matchAll(/^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?/gm)) out.push(m[1]!);
  for (const m of code.matchAll(/\b(?:src|href)\s*=\s*["']([^"']+)["']/g)) out.push(m[1]!);
  return out;
}

/** A link target as a repository-relative path, or undefined for a URL or an anchor in the same page. */
function resolveLink(fromFile: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('#') || target.startsWith('//')) return undefined;
  const path = target.replace(/[?#].*$/, '');
  if (!path) return undefined;
  let decoded = path;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    /* keep it as written */
  }
  return posix.normalize(decoded.startsWith('/') ? decoded.slice(1) : posix.join(posix.dirname(fromFile), decoded)).replace(/\/$/, '');
}

interface Link {
  from: string;
  target: string;
  path: string;
}

/** Every link from a Markdown file into experiments/results. */
function linksIntoResults(): Link[] {
  const links: Link[] = [];
  for (const from of markdownFiles()) {
    for (const target of markdownLinks(readFileSync(join(REPO, from), 'utf8'))) {
      const path = resolveLink(from, target);
      if (path && (path === RESULTS || path.startsWith(`${RESULTS}/`))) links.push({ from, target, path });
    }
  }
  return links;
}

const studies = () => readdirSync(join(REPO, RESULTS), { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name).sort();
const resultFiles = () => walk(RESULTS);
const ext = (f: string) => (/\.([^./]+)$/.exec(f)?.[1] ?? '').toLowerCase();
const mb = (bytes: number) => `${(bytes / 1e6).toFixed(2)} MB`;

describe('markdown links', () => {
  it('resolves relative, root-relative and encoded targets; skips URLs and anchors', () => {
    expect(markdownLinks('see [a](../x/report.md#t), ![f](fig.svg "cap")\n[r]: ./y.md\n<img src="z.svg">\n```\n[no](code.md)\n```\n')).toEqual(['../x/report.md#t', 'fig.svg', './y.md', 'z.svg']);
    expect(resolveLink('docs/results/a.md', '../../experiments/results/s/report.md#targets')).toBe('experiments/results/s/report.md');
    expect(resolveLink('docs/results/a.md', '/experiments/results/s/')).toBe('experiments/results/s');
    expect(resolveLink('experiments/results/s/report.md', 'fig%206.svg')).toBe('experiments/results/s/fig 6.svg');
    expect(resolveLink('README.md', 'https://example.com/x.md')).toBeUndefined();
    expect(resolveLink('README.md', '#section')).toBeUndefined();
  });
});

describe(`${RESULTS} (docs/results/README.md, "The results directory")`, () => {
  const links = linksIntoResults();

  it('every Markdown link into it points to an existing file', () => {
    expect(links.length).toBeGreaterThan(0);
    const broken = links.filter((l) => !existsSync(join(REPO, l.path))).map((l) => `${l.from}: ${l.target}`);
    expect(broken, 'regenerate the missing figures (`npx tsx cli/ulysses.ts experiment report --out DIR`) or fix the link').toEqual([]);
  });

  it('holds only studies the docs cite (a link from a Markdown file outside the study)', () => {
    const cited = new Set(links.filter((l) => !l.from.startsWith(`${RESULTS}/`)).map((l) => l.path.split('/')[2]).filter(Boolean));
    const uncited = studies().filter((s) => !cited.has(s));
    expect(uncited, 'cite each study from its docs/results page, or delete it').toEqual([]);
  });

  it(`keeps figures in one format (${FIGURE_FORMAT})`, () => {
    const other = resultFiles().filter((f) => FIGURE_EXTENSIONS.includes(ext(f)) && ext(f) !== FIGURE_FORMAT);
    expect(other.length, `figures other than .${FIGURE_FORMAT}, e.g. ${other.slice(0, 5).join(', ')}`).toBe(0);
  });

  it(`stays within ${mb(RESULTS_MAX_BYTES)} (sum of file sizes)`, () => {
    const perStudy = new Map<string, number>();
    let total = 0;
    for (const f of resultFiles()) {
      const size = statSync(join(REPO, f)).size;
      total += size;
      const study = f.split('/')[2]!;
      perStudy.set(study, (perStudy.get(study) ?? 0) + size);
    }
    const largest = [...perStudy].sort((a, b) => b[1] - a[1]).slice(0, 5).map(([s, b]) => `${s} ${mb(b)}`).join(', ');
    expect(total, `${RESULTS} is ${mb(total)}; largest studies: ${largest}`).toBeLessThanOrEqual(RESULTS_MAX_BYTES);
  });
});

describe('ulysses experiment report', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'ulysses-results-dir-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it(`writes the figures as .${FIGURE_FORMAT} only, each one report.md embeds among them`, async () => {
    // the smallest cited study with figures: regenerated from its results.jsonl and meta.json
    const withFigures = studies().filter((s) => existsSync(join(REPO, RESULTS, s, 'report.md')) && readdirSync(join(REPO, RESULTS, s)).some((f) => ext(f) === FIGURE_FORMAT));
    const [study] = withFigures.map((s) => [s, statSync(join(REPO, RESULTS, s, 'results.jsonl')).size] as const).sort((a, b) => a[1] - b[1])[0]!;
    const dir = join(tmp, study);
    for (const f of ['results.jsonl', 'meta.json']) if (existsSync(join(REPO, RESULTS, study, f))) cpSync(join(REPO, RESULTS, study, f), join(dir, f));
    const r = await writeOutputs(dir);
    expect(r.pngs).toEqual([]);
    expect(r.svgs.length).toBeGreaterThan(0);
    const written = readdirSync(dir).filter((f) => FIGURE_EXTENSIONS.includes(ext(f)));
    expect(written.every((f) => ext(f) === FIGURE_FORMAT)).toBe(true);
    const embedded = markdownLinks(readFileSync(r.report, 'utf8')).map((t) => resolveLink('report.md', t)!);
    expect(embedded.length).toBeGreaterThan(0);
    for (const f of embedded) expect(written).toContain(f);
    // the committed study has the same figure files the command writes
    expect(readdirSync(join(REPO, RESULTS, study)).filter((f) => FIGURE_EXTENSIONS.includes(ext(f))).sort()).toEqual(written.sort());
  });
});
