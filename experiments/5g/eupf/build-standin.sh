#!/usr/bin/env bash
# Builds one of the Go stand-ins of issue 41 (experiments/5g/smf-standin, experiments/5g/gnb-standin)
# into the binary cache, named after a hash of its sources, and prints the binary's path. A binary
# built from the same sources is never rebuilt. Run it under `nice -n 19 ionice -c3` on a busy host.
#
#   build-standin.sh smf-standin|gnb-standin [CACHE_DIR]     (default: ${ULYSSES_CACHE:-$HOME/.cache/ulysses})
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="${1:?usage: build-standin.sh smf-standin|gnb-standin [CACHE_DIR]}"
src="$HERE/../$name"
[ -f "$src/go.mod" ] || { echo "build-standin.sh: no Go module at $src" >&2; exit 2; }
CACHE="${2:-${ULYSSES_CACHE:-$HOME/.cache/ulysses}}"
# the shared event package (../standin-events, a replace in go.mod) is part of the sources
hash="$(cd "$src" && cat go.mod go.sum $(ls *.go | sort) ../standin-events/go.mod $(ls ../standin-events/*.go | sort) | sha256sum | cut -c1-12)"
bin="$CACHE/bin/$name-$hash"
if [ ! -x "$bin" ]; then
  echo "[ulysses build] building $bin from $src" >&2
  mkdir -p "$CACHE/bin"
  (cd "$src" && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" .) && mv "$bin.tmp" "$bin"
fi
echo "$bin"
