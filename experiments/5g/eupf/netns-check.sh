#!/usr/bin/env bash
# Shows that the eUPF built by build-eupf.sh runs on this host (issue 41): two network namespaces
# joined by a veth pair, eUPF in one with XDP in generic mode on its end, and from the other: PFCP on
# 8805/udp and the REST API's health endpoint. Optionally (SMF_STANDIN=path to the smf-standin binary)
# a PFCP Association Setup from the peer side. Removes the namespaces at the end, also on failure.
# Root only; touches nothing outside its two namespaces (the bpffs is mounted in eUPF's own mount
# namespace, which `ip netns exec` creates).
#
#   netns-check.sh [EUPF_BINARY]      (default: what build-eupf.sh prints)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
EUPF="${1:-$("$HERE/build-eupf.sh")}"
CACHE="${ULYSSES_CACHE:-$HOME/.cache/ulysses}"
NICE="${NICE-nice -n 19 ionice -c3}"   # eUPF at low priority on a busy host; NICE= on an idle one
SMF_STANDIN="${SMF_STANDIN:-}"
[ -n "$SMF_STANDIN" ] || SMF_STANDIN="$("$HERE/build-standin.sh" smf-standin "$CACHE")"
UPF_NS=u5g-eupf-upf PEER_NS=u5g-eupf-peer
UPF_IP=10.203.0.2 PEER_IP=10.203.0.1
LOG="${EUPF_LOG:-/tmp/u5g-eupf-netns.log}"
pid=""

cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  ip netns del "$UPF_NS" 2>/dev/null || true
  ip netns del "$PEER_NS" 2>/dev/null || true
}
trap cleanup EXIT
say() { printf '\n$ %s\n' "$*"; }

cleanup
ip netns add "$UPF_NS"; ip netns add "$PEER_NS"
ip link add n3 netns "$UPF_NS" type veth peer name gnb netns "$PEER_NS"
ip -n "$UPF_NS" addr add "$UPF_IP/24" dev n3;  ip -n "$UPF_NS" link set n3 up;  ip -n "$UPF_NS" link set lo up
ip -n "$PEER_NS" addr add "$PEER_IP/24" dev gnb; ip -n "$PEER_NS" link set gnb up; ip -n "$PEER_NS" link set lo up

echo "kernel $(uname -r); memlock limit (soft:hard) $(ulimit -S -l):$(ulimit -H -l) KiB; eupf $EUPF"
say "ip netns exec $UPF_NS sh -c 'mount -t bpf bpf /sys/fs/bpf && exec eupf --iface n3 --attach generic --paddr $UPF_IP:8805 --nodeid $UPF_IP --n3addr $UPF_IP --aaddr $UPF_IP:8080 --maddr $UPF_IP:9090 --config /nonexistent' &"
t0=$(date +%s%N)
ip netns exec "$UPF_NS" sh -c "mount -t bpf bpf /sys/fs/bpf && exec $NICE '$EUPF' --iface n3 --attach generic \
  --paddr $UPF_IP:8805 --nodeid $UPF_IP --n3addr $UPF_IP --aaddr $UPF_IP:8080 --maddr $UPF_IP:9090 --config /nonexistent" >"$LOG" 2>&1 &
pid=$!

# ready = the health endpoint answers (what a readinessProbe would use)
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || { echo "eupf exited:"; cat "$LOG"; exit 1; }
  ip netns exec "$PEER_NS" curl -sf -m 1 "http://$UPF_IP:8080/api/v1/health" >/dev/null 2>&1 && break
  sleep 0.1
done
echo "health endpoint answered $(( ($(date +%s%N) - t0) / 1000000 )) ms after start"

say "eupf log"; grep -v "^$" "$LOG" | cut -c1-300
! grep -q "Can't increase resource limits" "$LOG" || { echo "eupf hit the RLIMIT_MEMLOCK raise: is rlimit.patch applied?"; exit 1; }
say "ip -n $UPF_NS -d link show n3 | grep -o 'xdpgeneric.*'"; ip -n "$UPF_NS" -d link show n3 | grep -o 'xdpgeneric.*' || { echo "no XDP program on n3"; exit 1; }
say "ip netns exec $UPF_NS ss -lunp"; ip netns exec "$UPF_NS" ss -lunp
say "ip netns exec $UPF_NS ss -ltnp"; ip netns exec "$UPF_NS" ss -ltnp
say "ip netns exec $PEER_NS curl -s http://$UPF_IP:8080/api/v1/health"; ip netns exec "$PEER_NS" curl -s "http://$UPF_IP:8080/api/v1/health"; echo
say "ip netns exec $PEER_NS curl -s http://$UPF_IP:8080/api/v1/config"; ip netns exec "$PEER_NS" curl -s "http://$UPF_IP:8080/api/v1/config"; echo
say "ip netns exec $PEER_NS curl -s http://$UPF_IP:9090/metrics | grep -c '^upf_'"; ip netns exec "$PEER_NS" curl -s "http://$UPF_IP:9090/metrics" | grep -c '^upf_' || true

if [ "$SMF_STANDIN" != none ]; then
  say "ip netns exec $PEER_NS smf-standin --associate-only --upf $UPF_IP:8805 --local $PEER_IP:8805"
  ip netns exec "$PEER_NS" "$SMF_STANDIN" --associate-only --upf "$UPF_IP:8805" --local "$PEER_IP:8805"
  say "ip netns exec $PEER_NS curl -s http://$UPF_IP:8080/api/v1/pfcp_associations"; ip netns exec "$PEER_NS" curl -s "http://$UPF_IP:8080/api/v1/pfcp_associations"; echo
  sleep 0.3; say "eupf log after the association"; tail -n 5 "$LOG" | cut -c1-300
fi

say "kill -TERM eupf"; kill -TERM "$pid"; wait "$pid" || true; pid=""
tail -n 2 "$LOG" | cut -c1-300
