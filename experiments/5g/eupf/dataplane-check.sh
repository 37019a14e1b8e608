#!/usr/bin/env bash
# The real 5G user plane end to end in network namespaces, and a UPF failover (issue 41; no
# Kubernetes). A UE's packets go gNB stand-in -> GTP-U (N3) -> eUPF (XDP) -> N6 -> data-network echo
# -> back through eUPF -> GTP-U -> gNB stand-in, with the PFCP sessions set up by the SMF stand-in.
# Then eUPF 1 is killed (SIGKILL, its namespace deleted: the pod is gone) and eUPF 2 starts on a NEW
# IP; the SMF re-establishes the same sessions (same UE IP, TEIDs, SEID) on it, points the data
# network at it and tells the gNB the new N3 address; the first downlink reply through eUPF 2 is
# "connection restored". Asserts on the stand-ins' JSON events and prints the times from eUPF 2's
# start. Exit 0 = all assertions held. Cleans up on exit, also on failure.
#
#   dataplane-check.sh [EUPF_BINARY]        root; builds what is missing (eUPF, the stand-ins)
#
# Environment: RUNS (default 1), SESSIONS (PDU sessions the SMF sets up, default 1; the gNB's UE uses
# the first), GAP (s between killing eUPF 1 and starting eUPF 2, default 2),
# INTERVAL (uplink period, default 20ms), HB_INTERVAL/HB_TIMEOUT/HB_RETRIES (SMF heartbeats,
# default 500ms/500ms/2), UPF_FORWARDING (net.ipv4.ip_forward in the UPF namespaces, default 1; 0 shows
# that eUPF then forwards nothing), LOGDIR (default /tmp/u5g-dataplane), NICE (prefix for eUPF and the
# builds, default "nice -n 19 ionice -c3"; set NICE= on an idle host), STANDIN_NICE (prefix for the
# stand-ins, default none: they are light).
#
# Topology (one L2 segment, like the pods on a node's bridge; everything prefixed u5g-):
#   u5g-br    bridge br0 (stands for the node bridge)
#   u5g-gnb   eth0 10.203.0.1   gNB stand-in (N3 :2152, control :9999) + SMF stand-in (PFCP :8805)
#   u5g-dn    eth0 10.203.0.100 data-network echo :7777; route 10.204.0.0/16 via the current UPF
#   u5g-upf1  eth0 10.203.0.2   eUPF 1, N3 and N6 on eth0 ("on a stick", like a pod's one eth0)
#   u5g-upf2  eth0 10.203.0.3   eUPF 2 (created at failover)
#   UE 10.204.0.10 (pool 10.204.0.0/16), uplink TEID 0x100, downlink TEID 0x200
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${ULYSSES_CACHE:-$HOME/.cache/ulysses}"
NICE="${NICE-nice -n 19 ionice -c3}"     # eUPF and the builds
STANDIN_NICE="${STANDIN_NICE-}"          # the stand-ins: light (one packet per INTERVAL), normal priority
EUPF="${1:-$($NICE "$HERE/build-eupf.sh")}"
SMF="$($NICE "$HERE/build-standin.sh" smf-standin "$CACHE")"
GNB="$($NICE "$HERE/build-standin.sh" gnb-standin "$CACHE")"
RUNS="${RUNS:-1}" SESSIONS="${SESSIONS:-1}" GAP="${GAP:-2}" INTERVAL="${INTERVAL:-20ms}"
HB_INTERVAL="${HB_INTERVAL:-500ms}" HB_TIMEOUT="${HB_TIMEOUT:-500ms}" HB_RETRIES="${HB_RETRIES:-2}"
LOGDIR="${LOGDIR:-/tmp/u5g-dataplane}"
GNB_IP=10.203.0.1 DN_IP=10.203.0.100 UPF1_IP=10.203.0.2 UPF2_IP=10.203.0.3
UE_IP=10.204.0.10 UE_POOL=10.204.0.0/16 UL_TEID=256 DL_TEID=512
NSES=(u5g-br u5g-gnb u5g-dn u5g-upf1 u5g-upf2)
pids=()

for r in 10.203.0.0/16 10.204.0.0/16; do
  if ip route show | grep -q "^${r%%.0.0/16}\."; then echo "address range $r is in use on the host: $(ip route | grep "^${r%%.0.0/16}\.")"; exit 2; fi
done

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  for n in "${NSES[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -f "$LOGDIR/upf-address"
}
trap cleanup EXIT
now_ns() { date +%s%N; }
die() { echo "FAIL: $*"; echo "--- logs in $LOGDIR"; for f in "$LOGDIR"/*.log; do echo "--- $f (last 15 lines)"; tail -n 15 "$f" | cut -c1-400; done; exit 1; }

# first JSON event of a file matching a jq filter, waiting up to $3 seconds; prints the line
wait_event() {
  local file="$1" filter="$2" timeout="$3" deadline line
  deadline=$(( $(now_ns) + timeout * 1000000000 ))
  while [ "$(now_ns)" -lt "$deadline" ]; do
    line="$(jq -c "select($filter)" "$file" 2>/dev/null | head -n 1)"
    [ -n "$line" ] && { echo "$line"; return 0; }
    sleep 0.02
  done
  return 1
}

add_ns() { # name ip
  local ns="u5g-$1"
  ip netns add "$ns"
  ip link add eth0 netns "$ns" type veth peer name "$1" netns u5g-br
  ip -n u5g-br link set "$1" master br0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$2/24" dev eth0
  ip -n "$ns" link set eth0 up
}

start_upf() { # n ip -> sets upf_pid
  local ns="u5g-upf$1" ip="$2"
  # eUPF forwards with bpf_fib_lookup, which answers "forwarding disabled" unless the interface forwards
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward="${UPF_FORWARDING:-1}" net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.eth0.send_redirects=0
  GIN_MODE=release ip netns exec "$ns" sh -c "mount -t bpf bpf /sys/fs/bpf && exec $NICE '$EUPF' --iface eth0 --attach generic \
    --paddr $ip:8805 --nodeid $ip --n3addr $ip --aaddr $ip:8080 --maddr $ip:9090 --hbinterval 1 --hbtimeout 1 --hbretries 3 \
    --config /nonexistent" >"$LOGDIR/eupf$1.log" 2>&1 &
  upf_pid=$!; pids+=("$upf_pid")
}

wait_ready() { # n ip -> prints ms; readiness = /api/v1/health answers (the readinessProbe to come)
  local t0="$3"
  for _ in $(seq 1 1500); do
    kill -0 "$upf_pid" 2>/dev/null || die "eupf $1 exited: $(tail -n 3 "$LOGDIR/eupf$1.log")"
    ip netns exec u5g-gnb curl -sf -m 0.5 "http://$2:8080/api/v1/health" >/dev/null 2>&1 && { echo $(( ($(now_ns) - t0) / 1000000 )); return 0; }
    sleep 0.02
  done
  die "eupf $1 not ready after 30 s"
}

set_upf_address() { echo "$1:8805" > "$LOGDIR/upf-address.tmp"; mv "$LOGDIR/upf-address.tmp" "$LOGDIR/upf-address"; }

ms_between() { echo $(( ($2 - $1) / 1000000 )); }
tns() { jq -r .t_ns <<<"$1"; }

one_run() {
  local run="$1"
  mkdir -p "$LOGDIR"; rm -f "$LOGDIR"/*.log "$LOGDIR/upf-address"
  ip netns add u5g-br; ip -n u5g-br link add br0 type bridge; ip -n u5g-br link set br0 up; ip -n u5g-br link set lo up
  add_ns gnb "$GNB_IP"; add_ns dn "$DN_IP"; add_ns upf1 "$UPF1_IP"

  # data network and radio side
  ip netns exec u5g-dn $STANDIN_NICE "$GNB" echo --listen "$DN_IP:7777" >"$LOGDIR/dn.log" 2>&1 & pids+=($!)
  ip netns exec u5g-gnb $STANDIN_NICE "$GNB" --n3 "$GNB_IP:2152" --control "$GNB_IP:9999" --ue-ip "$UE_IP" \
    --dn "$DN_IP:7777" --ul-teid "$UL_TEID" --dl-teid "$DL_TEID" --interval "$INTERVAL" >"$LOGDIR/gnb.log" 2>&1 & pids+=($!)
  ip netns exec u5g-gnb $STANDIN_NICE "$SMF" --upf-file "$LOGDIR/upf-address" --local "$GNB_IP:8805" --ue-ip "$UE_IP" \
    --ul-teid "$UL_TEID" --dl-teid "$DL_TEID" --sessions "$SESSIONS" --gnb-n3 "$GNB_IP" --gnb-control "$GNB_IP:9999" \
    --n6-route-cmd "ip -n u5g-dn route replace $UE_POOL via {upf}" \
    --hb-interval "$HB_INTERVAL" --hb-timeout "$HB_TIMEOUT" --hb-retries "$HB_RETRIES" >"$LOGDIR/smf.log" 2>&1 & pids+=($!)

  # --- UPF 1 ---------------------------------------------------------------------------------------
  local t1 r1; t1=$(now_ns); start_upf 1 "$UPF1_IP"; local pid1=$upf_pid
  r1=$(wait_ready 1 "$UPF1_IP" "$t1")
  ip -n u5g-upf1 -d link show eth0 | grep -q xdpgeneric || die "no XDP program on u5g-upf1 eth0"
  set_upf_address "$UPF1_IP"
  local e
  e=$(wait_event "$LOGDIR/smf.log" ".event==\"association\" and .upf==\"$UPF1_IP:8805\"" 30) || die "no association with UPF 1"
  local a1; a1=$(tns "$e")
  e=$(wait_event "$LOGDIR/smf.log" ".event==\"session-established\" and .session==$((SESSIONS-1)) and .upf==\"$UPF1_IP:8805\"" 30) || die "no session on UPF 1"
  local s1; s1=$(tns "$e")
  wait_event "$LOGDIR/smf.log" ".event==\"gnb-updated\" and .upf_n3==\"$UPF1_IP\"" 30 >/dev/null || die "gNB not told UPF 1's N3 address"
  e=$(wait_event "$LOGDIR/gnb.log" ".event==\"first-reply\" and .via==\"$UPF1_IP\"" 30) || die "no GTP-U reply through UPF 1"
  local f1; f1=$(tns "$e")
  jq -e ".teid==$DL_TEID and .ue_ip==\"$UE_IP\"" <<<"$e" >/dev/null || die "reply through UPF 1 with unexpected TEID/UE IP: $e"
  echo "run $run: UPF 1 ready $r1 ms after start; association +$(ms_between "$t1" "$a1") ms, session +$(ms_between "$t1" "$s1") ms, first reply +$(ms_between "$t1" "$f1") ms (rtt $(jq -r .rtt_ms <<<"$e") ms)"
  sleep 1

  # --- failover: UPF 1 dies, UPF 2 on a new IP -------------------------------------------------------
  local tk; tk=$(now_ns)
  kill -KILL "$pid1"; wait "$pid1" 2>/dev/null || true
  ip netns del u5g-upf1   # the pod and its address are gone
  sleep "$GAP"
  add_ns upf2 "$UPF2_IP"
  local t0 r2; t0=$(now_ns); start_upf 2 "$UPF2_IP"
  r2=$(wait_ready 2 "$UPF2_IP" "$t0")
  set_upf_address "$UPF2_IP"
  local ta=$(( $(now_ns) ))
  e=$(wait_event "$LOGDIR/smf.log" ".event==\"association\" and .upf==\"$UPF2_IP:8805\"" 30) || die "no association with UPF 2"
  local a2; a2=$(tns "$e")
  e=$(wait_event "$LOGDIR/smf.log" ".event==\"session-established\" and .session==$((SESSIONS-1)) and .upf==\"$UPF2_IP:8805\"" 30) || die "no session re-established on UPF 2"
  local s2; s2=$(tns "$e")
  e=$(jq -c "select(.event==\"session-established\" and .session==0 and .upf==\"$UPF2_IP:8805\")" "$LOGDIR/smf.log" | head -n 1)
  jq -e ".ue_ip==\"$UE_IP\" and .ul_teid==$UL_TEID and .dl_teid==$DL_TEID" <<<"$e" >/dev/null || die "session 0 on UPF 2 differs: $e"
  # every session: the same UE IP, TEIDs and SEID on UPF 2 as on UPF 1
  local old; old=$(jq -c "select(.event==\"session-established\" and .upf==\"$UPF1_IP:8805\") | [.session,.ue_ip,.ul_teid,.dl_teid,.cp_seid]" "$LOGDIR/smf.log" | sort | paste -sd' ')
  local new; new=$(jq -c "select(.event==\"session-established\" and .upf==\"$UPF2_IP:8805\") | [.session,.ue_ip,.ul_teid,.dl_teid,.cp_seid]" "$LOGDIR/smf.log" | sort | paste -sd' ')
  [ "$(wc -w <<<"$new")" -eq "$SESSIONS" ] || die "UPF 2 has $(wc -w <<<"$new") sessions, not $SESSIONS: $new"
  [ "$old" = "$new" ] || die "sessions on UPF 2 $new are not the ones on UPF 1 $old"
  wait_event "$LOGDIR/smf.log" ".event==\"gnb-updated\" and .upf_n3==\"$UPF2_IP\"" 30 >/dev/null || die "the SMF got no ack from the gNB for UPF 2's N3 address"
  # gNB updated = when the gNB switched (its n3-changed event; the SMF's gnb-updated follows on the ack)
  e=$(wait_event "$LOGDIR/gnb.log" ".event==\"n3-changed\" and .upf_n3==\"$UPF2_IP:2152\"" 30) || die "the gNB did not switch to UPF 2's N3 address"
  local g2; g2=$(tns "$e")
  e=$(wait_event "$LOGDIR/gnb.log" ".event==\"connection-restored\" and .via==\"$UPF2_IP\"" 30) || die "no connection restored through UPF 2"
  local c2; c2=$(tns "$e")
  jq -e ".teid==$DL_TEID and .ue_ip==\"$UE_IP\"" <<<"$e" >/dev/null || die "restored reply with unexpected TEID/UE IP: $e"
  local hl; hl=$(jq -c "select(.event==\"heartbeat-lost\" and .upf==\"$UPF1_IP:8805\")" "$LOGDIR/smf.log" | head -n 1)
  [ -n "$hl" ] || die "the SMF did not report heartbeat-lost for UPF 1 (GAP=$GAP s, heartbeats $HB_INTERVAL/$HB_TIMEOUT x$HB_RETRIES)"
  sleep 0.5
  # eUPF's own view: the SMF's association and one session
  local sess xdp pkts; sess=$(ip netns exec u5g-gnb curl -s "http://$UPF2_IP:8080/api/v1/pfcp_sessions" | jq -c 'length' 2>/dev/null || echo "?")
  # eUPF's own counters: GTP-U PDUs seen by the XDP program, and XDP_TX (forwarded by XDP, not the kernel)
  xdp=$(ip netns exec u5g-gnb curl -s "http://$UPF2_IP:8080/api/v1/xdp_stats" | jq -c . 2>/dev/null || echo "?")
  pkts=$(ip netns exec u5g-gnb curl -s "http://$UPF2_IP:8080/api/v1/packet_stats" | jq -c '{rx_gtp_pdu,rx_udp,rx_arp}' 2>/dev/null || echo "?")
  jq -e '.tx > 0' <<<"$xdp" >/dev/null 2>&1 || die "eUPF 2 forwarded nothing with XDP_TX: xdp_stats $xdp"
  echo "run $run: eUPF 2 xdp_stats $xdp packet_stats $pkts" 
  printf 'run %s: kill -> heartbeat-lost %d ms; UPF 2 (new IP %s), from its start: ready %d ms, association %d ms, session %d ms, gNB updated %d ms, connection restored %d ms (address published %d ms); eUPF 2 sessions: %s\n' \
    "$run" "$(ms_between "$tk" "$(tns "$hl")")" "$UPF2_IP" "$r2" "$(ms_between "$t0" "$a2")" "$(ms_between "$t0" "$s2")" \
    "$(ms_between "$t0" "$g2")" "$(ms_between "$t0" "$c2")" "$(ms_between "$t0" "$ta")" "$sess"
  echo "$run $r2 $(ms_between "$t0" "$a2") $(ms_between "$t0" "$s2") $(ms_between "$t0" "$g2") $(ms_between "$t0" "$c2") $(ms_between "$ta" "$c2")" >> "$LOGDIR/times"
  cleanup
  # keep this run's logs
  mkdir -p "$LOGDIR/run$run"; cp "$LOGDIR"/*.log "$LOGDIR/run$run/"
}

mkdir -p "$LOGDIR"; rm -f "$LOGDIR/times"
cleanup
echo "kernel $(uname -r); eupf $EUPF; smf $SMF; gnb $GNB; GAP=${GAP}s interval $INTERVAL; heartbeats $HB_INTERVAL/$HB_TIMEOUT x$HB_RETRIES; eUPF prefix '$NICE', stand-ins '$STANDIN_NICE'"
for run in $(seq 1 "$RUNS"); do one_run "$run"; done
if [ "$RUNS" -gt 1 ]; then
  echo "medians over $RUNS runs (ms from UPF 2's start):"
  for col in 2:ready 3:association 4:session 5:gnb-updated 6:connection-restored 7:restored-after-address-published; do
    i=${col%%:*}; n=${col#*:}
    printf '  %-34s %s   (all: %s)\n' "$n" "$(cut -d' ' -f"$i" "$LOGDIR/times" | sort -n | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')" \
      "$(cut -d' ' -f"$i" "$LOGDIR/times" | paste -sd' ')"
  done
fi
echo "PASS"
