#!/usr/bin/env bash
# The newcomer's path on a fresh machine: a minimal Debian 12 (debootstrap --variant=minbase) with only
# what a machine of this kind starts with (Go, Node.js with npm, git, the CA bundle), a clone of this
# repository, then `npm ci && npm run demo` in it as root. Every Debian package the testbed needs
# beyond that has to come from the testbed's own prerequisite check.
#
#   experiments/fresh-machine.sh DIR [--seed-binaries] [-- COMMAND]
#
# DIR is created once and reused (delete it for a new tree). --seed-binaries copies this host's
# built Kubernetes binaries of the default release into the tree's cache, skipping the ~18 minute
# build. COMMAND defaults to `npm ci && npm run demo`. Runs under /tmp/ulysses-testbed.lock (or
# $ULYSSES_TESTBED_LOCK): the
# tree shares this host's network namespace, so its testbed takes the same bridges and ports.
set -euo pipefail
dir="${1:?usage: experiments/fresh-machine.sh DIR [--seed-binaries] [-- COMMAND]}"; shift
seed=0
cmd='npm ci && npm run demo'
while [ $# -gt 0 ]; do
  case "$1" in
    --seed-binaries) seed=1; shift ;;
    --) shift; cmd="$*"; break ;;
    *) echo "fresh-machine: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "fresh-machine: run as root (debootstrap, chroot, mounts)" >&2; exit 2; }
repo="$(cd "$(dirname "$0")/.." && pwd)"
root="$dir/root"
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

if [ ! -x "$root/bin/bash" ]; then
  mkdir -p "$dir"
  echo "== debootstrap (minbase) into $root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > "$dir/debootstrap.log" 2>&1 \
    || { tail -n 20 "$dir/debootstrap.log" >&2; exit 1; }
  # what the machine starts with: Go, Node.js and npm, git, the CA bundle the registries are reached through
  cp -a /usr/local/go "$root/usr/local/"
  cp -a "$(command -v node)" "$root/usr/bin/node"
  mkdir -p "$root/usr/lib/node_modules" && cp -a "$(dirname "$(readlink -f "$(command -v npm)")")/.." "$root/usr/lib/node_modules/npm"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/bin/npx"
  [ -d /usr/include/node ] && mkdir -p "$root/usr/include" && cp -a /usr/include/node "$root/usr/include/"
  [ -f /root/.npmrc ] && cp /root/.npmrc "$root/root/"
  [ -f "$(go env GOENV)" ] && mkdir -p "$root/root/.config/go" && cp "$(go env GOENV)" "$root/root/.config/go/env"
  cp /etc/resolv.conf /etc/hosts "$root/etc/"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
fi

# runs $1 inside the tree, in a mount namespace of its own (the tree's root a mount point, so the
# kubelet finds the mount of its root directory)
in_tree() {
  unshare -m --propagation private bash -c '
    r="$1"; shift
    mount --bind "$r" "$r"
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys"
    mount --rbind /dev "$r/dev"
    mount -t tmpfs tmpfs "$r/run"
    exec chroot "$r" /usr/bin/env -i HOME=/root TERM=dumb \
      PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
      GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt bash -c "$1"
  ' in-tree "$root" "$1"
}

if [ ! -d "$root/root/ulysses/.git" ]; then
  in_tree 'apt-get update -qq && apt-get install -y -qq --no-install-recommends git ca-certificates >/dev/null && update-ca-certificates >/dev/null'
  git clone -q "$repo" "$root/root/ulysses"
  [ -d "$repo/../shared" ] && cp -a "$repo/../shared" "$root/root/shared"
fi
git -C "$root/root/ulysses" pull -q "$repo" "$(git -C "$repo" rev-parse --abbrev-ref HEAD)"

if [ "$seed" = 1 ]; then
  v="$(awk '!/^[[:space:]]*#/ && NF >= 5 && $5 == "default" { print $1 }' "$repo/experiments/testbed/k8s-versions.txt")"
  mkdir -p "$root/root/.cache/ulysses/bin"
  cp -a "${ULYSSES_CACHE:-$HOME/.cache/ulysses}/bin/k8s-$v" "$root/root/.cache/ulysses/bin/"
fi

echo "== in the fresh tree at $(git -C "$root/root/ulysses" log --oneline -1): $cmd"
exec 9>"${ULYSSES_TESTBED_LOCK:-/tmp/ulysses-testbed.lock}"
flock 9
in_tree "cd /root/ulysses && $cmd"
