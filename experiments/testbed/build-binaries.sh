#!/usr/bin/env bash
# Builds the pinned, real Kubernetes binaries (and etcd, kwok, containerd 2, CoreDNS) from Go modules into a
# per-version cache outside the repo (ulysses-spec.md §6: wrapper module requiring k8s.io/kubernetes
# with every staging module replaced by the matching v0.x release). A binary already in the cache is
# never rebuilt. Prints one progress line per binary.
#
#   build-binaries.sh [CACHE_DIR]          (default: ${ULYSSES_CACHE:-$HOME/.cache/ulysses})
#
# K8S_VERSION picks the release (a row of k8s-versions.txt; default: the row marked default).
# ULYSSES_BUILD_ONLY="kubeadm kubelet ..." builds only the binaries it names (e.g. what the kubeadm
# testbed needs, for a second release in CI); default: all of them.
set -euo pipefail

# etcd and CoreDNS follow the Kubernetes release: k8s-versions.txt (one row per release) says which
# ones its kubeadm deploys. ETCD_VERSION / COREDNS_VERSION override the row (both are needed for a
# release without a row).
VERSIONS_FILE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/k8s-versions.txt"
rows() { awk '!/^[[:space:]]*#/ && NF >= 5' "$VERSIONS_FILE"; }
K8S_VERSION="${K8S_VERSION:-$(rows | awk '$5 == "default" { print $1; exit }')}"
row="$(rows | awk -v v="$K8S_VERSION" '$1 == v')"
if [ -z "$row" ] && { [ -z "${ETCD_VERSION:-}" ] || [ -z "${COREDNS_VERSION:-}" ]; }; then
  echo "build-binaries.sh: K8S_VERSION=$K8S_VERSION has no row in $VERSIONS_FILE (known: $(rows | awk '{ print $1 }' | paste -sd' ')):" >&2
  echo "  add one with the etcd, CoreDNS and pause versions its kubeadm deploys (cmd/kubeadm/app/constants), or set ETCD_VERSION and COREDNS_VERSION" >&2
  exit 2
fi
ETCD_VERSION="${ETCD_VERSION:-$(echo "$row" | awk '{ print $2 }')}"
COREDNS_VERSION="${COREDNS_VERSION:-$(echo "$row" | awk '{ print $3 }')}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"

CACHE="${1:-${ULYSSES_CACHE:-$HOME/.cache/ulysses}}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
BIN="$CACHE/bin/k8s-$K8S_VERSION"
WORK="$CACHE/build"
mkdir -p "$BIN" "$WORK"
export GOFLAGS="-mod=mod" CGO_ENABLED="${CGO_ENABLED:-0}" GOTOOLCHAIN=local

STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client
cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils
pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming"

step() { printf '[ulysses build] %s\n' "$*" >&2; }
ONLY="${ULYSSES_BUILD_ONLY:-}"
# present, or not asked for (ULYSSES_BUILD_ONLY)
have() { [ -x "$BIN/$1" ] || { [ -n "$ONLY" ] && ! wanted "$1"; }; }
wanted() { [ -z "$ONLY" ] || [[ " $(echo $ONLY) " == *" $1 "* ]]; }
# a cached etcd or CoreDNS of another version than the release's (e.g. built before its row changed)
# is rebuilt: `etcd --version` prints "etcd Version: 3.6.8", `coredns -version` "CoreDNS-1.14.2"
have_version() {
  wanted "$1" || return 0
  have "$1" || return 1
  local got
  case "$1" in
    etcd) got="$("$BIN/etcd" --version 2>/dev/null | sed -n 's/^etcd Version: //p')" ;;
    coredns) got="$("$BIN/coredns" -version 2>/dev/null | sed -n 's/^CoreDNS-//p')" ;;
  esac
  [ "v$got" = "$2" ] && return 0
  step "$1 in $BIN is ${got:-of unknown version}, $K8S_VERSION needs $2: rebuilding it"
  return 1
}
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

# --- Kubernetes ----------------------------------------------------------------------------------
K8S_CMDS="kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl kubeadm kube-proxy"
missing=""
for c in $K8S_CMDS; do have "$c" || missing="$missing $c"; done
if [ -n "$missing" ]; then
  mod="$WORK/k8s-$K8S_VERSION"
  mkdir -p "$mod"
  {
    echo "module ulysses.local/k8sbin"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for s in $STAGING; do echo "	k8s.io/$s => k8s.io/$s $STAGING_VERSION"; done
    echo ")"
  } > "$mod/go.mod"
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$mod" && [ -f go.sum ] || { step "resolving k8s.io/kubernetes $K8S_VERSION modules"; cd "$mod" && go get "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" >/dev/null; })
  for c in $missing; do
    t=$(date +%s); step "building $c $K8S_VERSION (cold builds take minutes on 2 cores)"
    (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c")
    mv "$BIN/$c.tmp" "$BIN/$c"; step "built $c in $(elapsed "$t")"
  done
fi

# --- etcd (Debian's etcd-server is 3.4.23, below the >= 3.5.13 Kubernetes requires) -------------
if ! have_version etcd "$ETCD_VERSION"; then
  mod="$WORK/etcd-$ETCD_VERSION"; mkdir -p "$mod"
  printf 'module ulysses.local/etcdbin\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > "$mod/go.mod"
  t=$(date +%s); step "building etcd $ETCD_VERSION"
  (cd "$mod" && { [ -f go.sum ] || go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null; } \
     && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN/etcd.tmp" "$BIN/etcd"; step "built etcd in $(elapsed "$t")"
fi

# --- kwok ----------------------------------------------------------------------------------------
if ! have kwok; then
  t=$(date +%s); step "building kwok $KWOK_VERSION"
  GOBIN="$WORK/gobin-kwok" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$WORK/gobin-kwok/kwok" "$BIN/kwok"; step "built kwok in $(elapsed "$t")"
fi
# kwok >= 0.8 needs Stage configs: keep its own general-purpose stages beside the binary
# (experiments/testbed/kwok.ts sets their delays)
if wanted kwok && [ ! -f "$BIN/kwok-stages/pod-ready.yaml" ]; then
  src="$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  mkdir -p "$BIN/kwok-stages"
  cp "$src"/kustomize/stage/node/fast/node-initialize.yaml \
     "$src"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
     "$src"/kustomize/stage/pod/general/*.yaml "$BIN/kwok-stages/"
  rm -f "$BIN/kwok-stages/kustomization.yaml"
  chmod 644 "$BIN"/kwok-stages/*.yaml
  step "kwok stages copied to $BIN/kwok-stages"
fi

# --- containerd 2 + runc shim (Debian's containerd 1.6 lacks the CRI RuntimeConfig RPC) ----------
for c in containerd containerd-shim-runc-v2 ctr; do
  if ! have "$c"; then
    t=$(date +%s); step "building $c $CONTAINERD_VERSION"
    GOBIN="$WORK/gobin-containerd" go install -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "-s -w" \
      "github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION"
    mv "$WORK/gobin-containerd/$c" "$BIN/$c"; step "built $c in $(elapsed "$t")"
  fi
done

# --- CoreDNS for the kubeadm testbed: only the plugins of kubeadm's default Corefile --------------
if ! have_version coredns "$COREDNS_VERSION"; then
  mod="$WORK/coredns-$COREDNS_VERSION"; mkdir -p "$mod"
  printf 'module ulysses.local/corednsbin\n\ngo 1.26\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" > "$mod/go.mod"
  {
    echo "package main"
    echo
    echo "import ("
    for p in cache errors forward health kubernetes loadbalance log loop metrics ready reload; do
      echo "	_ \"github.com/coredns/coredns/plugin/$p\""
    done
    echo "	\"github.com/coredns/coredns/coremain\""
    echo ")"
    echo
    echo "func main() { coremain.Run() }"
  } > "$mod/main.go"
  t=$(date +%s); step "building coredns $COREDNS_VERSION (plugins of kubeadm's default Corefile)"
  (cd "$mod" && { [ -f go.sum ] || go get "github.com/coredns/coredns/coremain@$COREDNS_VERSION" >/dev/null; } \
     && go build -trimpath -ldflags "-s -w" -o "$BIN/coredns.tmp" .)
  mv "$BIN/coredns.tmp" "$BIN/coredns"; step "built coredns in $(elapsed "$t")"
fi

step "binaries ready in $BIN"
echo "$BIN"
