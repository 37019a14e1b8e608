#!/usr/bin/env bash
# Builds eUPF (github.com/edgecomllc/eupf, a Go + eBPF/XDP 5G user plane function; issue 41) from its
# pinned Go module into the binary cache, with our one patch (rlimit.patch beside this script: no
# RLIMIT_MEMLOCK raise on kernels >= 5.11, so it starts without CAP_SYS_RESOURCE). Prints the
# binary's path on stdout, progress on stderr. A binary already built from this version and this
# patch is never rebuilt.
#
#   build-eupf.sh [CACHE_DIR]          (default: ${ULYSSES_CACHE:-$HOME/.cache/ulysses})
#
# Steps: prerequisites (clang, libbpf-dev, gcc-multilib: the eupf part of
# experiments/testbed/prerequisites.ts, installed with apt-get as root unless ULYSSES_NO_APT=1),
# `go mod download` of the module, a writable copy under CACHE/build/, the patch, `go generate
# ./cmd/ebpf/` (bpf2go: clang compiles the XDP programs, embedded in the binary), swag (the REST API's
# swagger docs package, imported by the API), `CGO_ENABLED=0 go build ./cmd/`.
# EUPF_VERSION / SWAG_VERSION override the pins.
set -euo pipefail

EUPF_VERSION="${EUPF_VERSION:-v0.7.1}"
SWAG_VERSION="${SWAG_VERSION:-v1.16.2}"   # eUPF's go.mod pins github.com/swaggo/swag v1.16.2
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PATCH="$HERE/rlimit.patch"
CACHE="${1:-${ULYSSES_CACHE:-$HOME/.cache/ulysses}}"
BIN="$CACHE/bin/eupf-$EUPF_VERSION"
WORK="$CACHE/build/eupf-$EUPF_VERSION"
STAMP="$BIN/eupf.patch.sha256"

step() { printf '[ulysses build] %s\n' "$*" >&2; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

patch_sum="$(sha256sum "$PATCH" | cut -d' ' -f1)"
if [ -x "$BIN/eupf" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$patch_sum" ]; then
  echo "$BIN/eupf"
  exit 0
fi
t0=$(date +%s)

# --- prerequisites: the one list (experiments/testbed/prerequisites.ts, part "eupf") --------------
command -v go >/dev/null || { echo "build-eupf.sh: go >= 1.26 is not on PATH (https://go.dev/doc/install)" >&2; exit 2; }
if [ -e "$REPO/node_modules/tsx" ]; then
  (cd "$REPO" && node --import tsx -e '
    const m = await import("./experiments/testbed/prerequisites.ts");
    try { m.ensurePrerequisites(m.PREREQUISITES.eupf, { log: (l) => console.error("[ulysses build] " + l) }); }
    catch (e) { console.error(e.message); process.exit(2); }')
else
  for f in /usr/include/bpf/bpf_helpers.h /usr/include/x86_64-linux-gnu/gnu/stubs-32.h; do
    [ -e "$f" ] || { echo "build-eupf.sh: $f missing: apt-get install -y clang libbpf-dev gcc-multilib (or npm ci first)" >&2; exit 2; }
  done
  command -v clang >/dev/null || { echo "build-eupf.sh: clang missing: apt-get install -y clang" >&2; exit 2; }
fi

export GOFLAGS="-mod=mod" CGO_ENABLED=0 GOTOOLCHAIN=local

# --- source: the pinned module, copied out of the read-only module cache ---------------------------
t=$(date +%s); step "fetching github.com/edgecomllc/eupf@$EUPF_VERSION"
src="$(go mod download -json "github.com/edgecomllc/eupf@$EUPF_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -n "$src" ] && [ -d "$src" ] || { echo "build-eupf.sh: go mod download github.com/edgecomllc/eupf@$EUPF_VERSION gave no directory" >&2; exit 1; }
rm -rf "$WORK"; mkdir -p "$(dirname "$WORK")" "$BIN"
cp -r "$src" "$WORK"; chmod -R u+w "$WORK"
(cd "$WORK" && git apply --verbose "$PATCH" 2>&1 | sed 's/^/[ulysses build]   /' >&2)
step "source in $WORK, patched with $(basename "$PATCH") ($(elapsed "$t"))"

# --- BPF objects (bpf2go with clang) ---------------------------------------------------------------
t=$(date +%s); step "go generate ./cmd/ebpf/ (bpf2go, clang: eUPF's XDP programs)"
(cd "$WORK" && BPF_CFLAGS="" go generate ./cmd/ebpf/ | sed 's/^/[ulysses build]   /' >&2)
step "BPF objects built ($(elapsed "$t")): $(cd "$WORK/cmd/ebpf" && ls *_bpf.o | paste -sd' ')"

# --- swagger docs package (cmd/docs, imported by the REST API) ------------------------------------
t=$(date +%s); step "swag $SWAG_VERSION init (cmd/docs)"
GOBIN="$WORK/.gobin" go install "github.com/swaggo/swag/cmd/swag@$SWAG_VERSION"
# without -mod=mod: swag lists packages through go, and the docs package it is about to write would
# otherwise be looked up on the module proxy ("finding module for package .../cmd/docs")
(cd "$WORK/cmd" && GOFLAGS= "$WORK/.gobin/swag" init --parseDependency --parseInternal --parseDepth 1 -g api/rest/handler.go >/dev/null)
step "swagger docs generated ($(elapsed "$t"))"

# --- the static binary -----------------------------------------------------------------------------
t=$(date +%s); step "building eupf $EUPF_VERSION (CGO_ENABLED=0)"
(cd "$WORK" && go build -trimpath -ldflags "-s -w" -o "$BIN/eupf.tmp" ./cmd/)
mv "$BIN/eupf.tmp" "$BIN/eupf"
echo "$patch_sum" > "$STAMP"
step "built $BIN/eupf ($(du -h "$BIN/eupf" | cut -f1)) in $(elapsed "$t"); whole build $(elapsed "$t0")"
echo "$BIN/eupf"
