/** A one-line progress bar with repetitions done and ETA, redrawn on stderr. */
export function formatDuration(s: number): string {
  if (!Number.isFinite(s)) return '?';
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  return h ? `${h}h${String(m).padStart(2, '0')}m` : m ? `${m}m${String(sec).padStart(2, '0')}s` : `${sec}s`;
}

/** `[#####-----] 5/10 reps (2 skipped)  ETA 4m10s  <what>` */
export function progressLine(o: { done: number; total: number; skipped: number; meanRepS?: number; what?: string; width?: number }): string {
  const width = o.width ?? 30;
  const frac = o.total ? o.done / o.total : 1;
  const filled = Math.round(frac * width);
  const eta = o.meanRepS === undefined ? '?' : formatDuration((o.total - o.done) * o.meanRepS);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${o.done}/${o.total} reps${o.skipped ? ` (${o.skipped} already done)` : ''}  ETA ${eta}${o.what ? `  ${o.what}` : ''}`;
}

export class ProgressBar {
  private readonly tty: boolean;
  constructor(private readonly stream: NodeJS.WriteStream = process.stderr) {
    this.tty = Boolean(stream.isTTY);
  }
  update(line: string): void {
    if (this.tty) this.stream.write(`\r\x1b[2K${line}`);
    else this.stream.write(`${line}\n`);
  }
  /** a log line that must not be overwritten by the bar */
  log(line: string): void {
    this.stream.write(this.tty ? `\r\x1b[2K${line}\n` : `${line}\n`);
  }
  done(): void {
    if (this.tty) this.stream.write('\n');
  }
}
