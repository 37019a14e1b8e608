#!/bin/sh
# Entry point of the Ulysses image (manifests/Containerfile) and of the systemd unit: the first
# argument selects the component, the rest are its flags.
#
#   entrypoint.sh controller-manager  [--leader-elect=true ...]   controller-manager/main.ts
#   entrypoint.sh scheduler-extender  [--port=8888 ...]           scheduler-plugins/extender/main.ts
#   entrypoint.sh kubelet-shim        [--listen=... --backend=...] kubelet-shim/main.ts
#   entrypoint.sh kubelet-shim-fallback --config FILE             kubelet-shim/fallback.ts
#   entrypoint.sh kcm-handback        [--after=60s ...]            manifests/kcm-handback.ts
#   entrypoint.sh ulysses             [status|set|...]             cli/ulysses.ts
#
# ULYSSES_SUPERVISE=1 restarts the component when it exits (used by the kubelet-shim DaemonSet: once
# the kubelet's runtime endpoint is the shim, the kubelet cannot restart the shim's container).
set -eu

APP=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
# tsx as a loader of a single node process (the `tsx` CLI would add a second, supervising process);
# the path is the export "." of the tsx package.
TSX_LOADER="$APP/node_modules/tsx/dist/loader.mjs"

usage() {
  echo "usage: $0 controller-manager|scheduler-extender|kubelet-shim|kubelet-shim-fallback|kcm-handback|ulysses [flags...]" >&2
  exit 2
}

[ $# -ge 1 ] || usage
component=$1
shift
case "$component" in
  controller-manager) main="$APP/controller-manager/main.ts" ;;
  scheduler-extender) main="$APP/scheduler-plugins/extender/main.ts" ;;
  kubelet-shim) main="$APP/kubelet-shim/main.ts" ;;
  kubelet-shim-fallback) main="$APP/kubelet-shim/fallback.ts" ;;
  kcm-handback) main="$APP/manifests/kcm-handback.ts" ;;
  ulysses | cli) main="$APP/cli/ulysses.ts" ;;
  *) echo "unknown component \"$component\"" >&2; usage ;;
esac
[ -f "$main" ] || { echo "$component: $main not found in this build" >&2; exit 2; }

# Compiled JavaScript from `npm run build` (dist/, the controller manager only) when present and not
# older than any source it is built from: no TypeScript loader in the process (~30 MiB less RSS).
# ULYSSES_DIST=0 forces the tsx loader.
# The controller manager runs with V8's --optimize-for-size and 2 glibc malloc arenas: 100-120 MiB
# RSS instead of ~220 MiB with 1000 nodes and 10k pods (controller-manager/README.md, Memory).
v8flags=
if [ "$component" = controller-manager ]; then
  v8flags=--optimize-for-size
  export MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}"
fi
dist="$APP/dist/${main#"$APP"/}"
dist="${dist%.ts}.js"
if [ "${ULYSSES_DIST:-1}" != 0 ] && [ -f "$dist" ] &&
  [ -z "$(find "$APP/core" "$APP/controller-manager" "$APP/apf-configs" -name '*.ts' -newer "$dist" 2>/dev/null | head -n 1)" ]; then
  set -- node $v8flags --enable-source-maps "$dist" "$@"
elif [ -f "$TSX_LOADER" ]; then
  set -- node $v8flags --import "$TSX_LOADER" "$main" "$@"
else
  set -- "$APP/node_modules/.bin/tsx" "$main" "$@"
fi

[ "${ULYSSES_SUPERVISE:-0}" = 1 ] || exec "$@"

# Supervised: forward SIGTERM/SIGINT to the component and stop; restart it after any other exit.
child=
stopping=0
trap 'stopping=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true' TERM INT
while :; do
  "$@" &
  child=$!
  rc=0
  wait "$child" || rc=$?
  if [ "$stopping" = 1 ]; then
    # `wait` returns early when a trapped signal arrives: wait for the component to finish its stop
    wait "$child" 2>/dev/null || true
    exit 0
  fi
  echo "$component exited with status $rc; restarting in 1 s" >&2
  sleep 1
done
