/**
 * The kubelet-shim's socket path as the shim and its fallback guard (fallback.ts) share it: the
 * shim's socket, or the guard's symlink to containerd's socket while the shim stays down.
 */
import { lstatSync, readlinkSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { dirname, resolve as resolvePath } from 'node:path';

/** What is at the shim's socket path. */
export type SocketPathState = 'shim' | 'fallback' | 'missing' | 'other';

/** The socket file's identity (device and inode), to notice that it was replaced. */
export function socketIdentity(path: string): string | undefined {
  try {
    const st = lstatSync(path);
    return st.isSocket() ? `${st.dev}:${st.ino}` : undefined;
  } catch {
    return undefined;
  }
}

export function socketPathState(listen: string, backend: string): SocketPathState {
  let st;
  try {
    st = lstatSync(listen);
  } catch {
    return 'missing';
  }
  if (st.isSocket()) return 'shim';
  if (st.isSymbolicLink() && resolvePath(dirname(listen), readlinkSync(listen)) === resolvePath(backend)) return 'fallback';
  return 'other';
}

/** Replaces whatever is at `listen` by a symlink to `backend`, atomically (rename over it). */
export function pointAtBackend(listen: string, backend: string): void {
  const tmp = `${listen}.fallback-tmp`;
  rmSync(tmp, { force: true });
  symlinkSync(backend, tmp);
  renameSync(tmp, listen);
}

/** The marker saying the kubelet may still be connected to containerd (set at the fallback, cleared by the return's kubelet restart). */
export const markerPath = (listen: string) => `${listen}.fallback`;
