#!/usr/bin/env bash
# Emulates a cluster on this machine and runs one command per rank on it.
#
#   tools/emulate-cluster.sh [options] -- COMMAND [ARGS...]
#
#   --nodes LIST    ranks per node, comma separated (default "2,2": 2 nodes of 2 ranks)
#   --rate RATE     shape every node's link (tc netem rate, e.g. 2gbit); default unshaped.
#                   Every rank gets SHARC_NIC_MBITS (the rate in Mbit/s): a veth reports a
#                   fixed 10000 Mb/s in sysfs, so the tuner learns the emulated link's rate
#                   from there (the link "known from the emulation"). Without sch_netem
#                   the rate is shaped by --shaper, with a burst of --burst (default 32kb),
#                   and the veths hand the shaper segments of at most 16 KiB (gso_max_size):
#                   a NIC segments at line rate, but a shaper that sees 64 KiB super-packets
#                   lets them through in bursts of twice its bucket.
#   --shaper KIND   htb (default): a hierarchical token bucket whose small TCP packets (IPv4,
#                   under 512 bytes: ACKs and the transport's control messages, e.g. rxm's
#                   rendezvous requests) go in a class ahead of the data, as the flow queues
#                   of a host's default qdisc (fq_codel) would not hold them behind another
#                   connection's bulk data; tbf: one token bucket and one FIFO, the old
#                   emulation, where a node's ACKs and requests wait behind its own data (up
#                   to --queue) and the other side stalls (docs/planning.md, "On the
#                   emulated cluster")
#   --burst SIZE    the token bucket's burst (tc size, e.g. 32kb)
#   --queue TIME    tbf only: the most a packet waits in the bucket's queue (default 100ms)
#   --delay TIME    one-way delay added on every node's link (e.g. 100us)
#   --loss PCT      packet loss on every node's link (e.g. 0.1%)
#   --rails K       K links per node (eth0..ethK-1, each on its own bridge and subnet
#                   198.18.R.0/24, each shaped alike); ranks stripe over them (SHARC_NICS)
#   --timeout SEC   kill every rank after SEC seconds (default 300)
#   --port PORT     rendezvous port on node 0 (default 29517)
#   --names-file F  once the namespaces are up (before any rank starts), write F: one line
#                   per node, "node I NAMESPACE FIRST_RANK RANKS", and "switch NAMESPACE",
#                   so that a caller can act on a node (e.g. take its eth0 down)
#
# Each node is a network namespace with one veth link ("eth0"; eth0..ethK-1 with --rails K,
# and SHARC_NICS naming them instead of FI_TCP_IFACE) to a bridge that lives in a
# switch namespace of its own, so no packet can reach the host's networks. Nodes get
# addresses from 198.18.0.0/24 (RFC 2544's benchmarking range). Every rank starts inside its
# node's namespace with the environment bootstrap: SHARC_ROOT (node 0, first rank),
# SHARC_RANK, SHARC_WORLD_SIZE, SHARC_NODE_ID=nodeN and FI_TCP_IFACE=eth0. Ranks are
# numbered node by node. Rank 0's output goes to stdout; the others' to per-rank logs,
# which are printed if that rank fails. The namespaces are removed on exit, also when
# interrupted. Needs root and iproute2; exits 77 (skip) when namespaces cannot be made.
set -euo pipefail

nodes="2,2"
rate="" delay="" loss=""
timeout_s=300
port=29517
rails=1
burst=32kb
queue=100ms
shaper=htb
names_file=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --burst) burst=$2; shift 2 ;;
    --queue) queue=$2; shift 2 ;;
    --shaper) shaper=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --loss) loss=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --rails) rails=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --names-file) names_file=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "emulate-cluster: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "emulate-cluster: no command given (… -- COMMAND ARGS)" >&2; exit 2; }
IFS=, read -r -a perNode <<<"$nodes"
for m in "${perNode[@]}"; do
  [[ "$m" =~ ^[1-9][0-9]*$ ]] || { echo "emulate-cluster: bad --nodes '$nodes'" >&2; exit 2; }
done
(( ${#perNode[@]} <= 250 )) || { echo "emulate-cluster: at most 250 nodes" >&2; exit 2; }
[[ "$rails" =~ ^[1-8]$ ]] || { echo "emulate-cluster: --rails must be 1..8" >&2; exit 2; }
[[ "$shaper" == htb || "$shaper" == tbf ]] ||
  { echo "emulate-cluster: --shaper must be htb or tbf" >&2; exit 2; }

# tc's rate syntax (bit/kbit/mbit/gbit/tbit; bps/kbps/mbps/gbps are bytes) in Mbit/s.
rate_mbits() {
  local v=${1,,} num unit
  [[ "$v" =~ ^([0-9]+([.][0-9]+)?)([a-z]*)$ ]] || return 1
  num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]}
  case "$unit" in
    bit) awk -v n="$num" 'BEGIN{print n/1e6}' ;; kbit) awk -v n="$num" 'BEGIN{print n/1e3}' ;;
    mbit) echo "$num" ;; gbit) awk -v n="$num" 'BEGIN{print n*1e3}' ;;
    tbit) awk -v n="$num" 'BEGIN{print n*1e6}' ;; bps) awk -v n="$num" 'BEGIN{print n*8/1e6}' ;;
    kbps) awk -v n="$num" 'BEGIN{print n*8/1e3}' ;; mbps) awk -v n="$num" 'BEGIN{print n*8}' ;;
    gbps) awk -v n="$num" 'BEGIN{print n*8e3}' ;; *) return 1 ;;
  esac
}
nic_mbits=""
if [[ -n "$rate" ]]; then
  nic_mbits=$(rate_mbits "$rate") ||
    { echo "emulate-cluster: bad --rate '$rate' (tc rate, e.g. 200mbit or 1gbit)" >&2; exit 2; }
fi

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "emulate-cluster: SKIP: needs root and iproute2 to make network namespaces" >&2
  exit 77
fi

tag="shc$$"
switch="${tag}-sw"
logdir=$(mktemp -d)
pids=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for ((i = 0; i < ${#perNode[@]}; ++i)); do ip netns del "${tag}-n$i" 2>/dev/null || true; done
  ip netns del "$switch" 2>/dev/null || true
  rm -rf "$logdir"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

# Shapes DEV (in namespace NS) to --rate with the --shaper of the header.
shape() {
  local ns=$1 dev=$2 tc=(ip netns exec "$1" tc)
  ip -n "$ns" link set dev "$dev" gso_max_size 16384
  if [[ "$shaper" == tbf ]]; then
    "${tc[@]}" qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency "$queue"
    return
  fi
  # 1:10 small packets (a tenth of the rate guaranteed, all of it when idle), 1:20 the rest;
  # r2q keeps HTB's quantum near one bucket at these rates.
  local acks
  acks=$(awk -v m="$nic_mbits" 'BEGIN{printf "%dkbit", m * 100 + 1}')
  "${tc[@]}" qdisc add dev "$dev" root handle 1: htb default 20 r2q 1000
  "${tc[@]}" class add dev "$dev" parent 1: classid 1:1 htb rate "$rate" burst "$burst" \
    cburst "$burst"
  "${tc[@]}" class add dev "$dev" parent 1:1 classid 1:10 htb rate "$acks" ceil "$rate" \
    burst "$burst" cburst "$burst" prio 0
  "${tc[@]}" class add dev "$dev" parent 1:1 classid 1:20 htb rate "$rate" ceil "$rate" \
    burst "$burst" cburst "$burst" prio 1
  # TCP (protocol 6), a 20-byte IP header, total length below 512 bytes.
  "${tc[@]}" filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff \
    match u8 0x05 0x0f at 0 match u16 0x0000 0xfe00 at 2 flowid 1:10
}

if ! ip netns add "$switch" 2>/dev/null; then
  echo "emulate-cluster: SKIP: cannot create network namespaces here" >&2
  exit 77
fi
ip -n "$switch" link set lo up
for ((r = 0; r < rails; ++r)); do
  ip -n "$switch" link add "br$r" type bridge
  ip -n "$switch" link set "br$r" up
done
for ((i = 0; i < ${#perNode[@]}; ++i)); do
  ns="${tag}-n$i"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  for ((r = 0; r < rails; ++r)); do
    # Create the pair inside the node, then move one end into the switch.
    dev="eth$r" port_end="p${i}r$r"
    ip -n "$ns" link add "$dev" type veth peer name "$port_end"
    ip -n "$ns" link set "$port_end" netns "$switch"
    ip -n "$switch" link set "$port_end" master "br$r" up
    ip -n "$ns" addr add "198.18.$r.$((i + 1))/24" dev "$dev"
    ip -n "$ns" link set "$dev" up
    if [[ -n "$rate$delay$loss" ]]; then
      netem=()
      [[ -n "$delay" ]] && netem+=(delay "$delay")
      [[ -n "$rate" ]] && netem+=(rate "$rate")
      [[ -n "$loss" ]] && netem+=(loss "$loss")
      if ! ip netns exec "$ns" tc qdisc add dev "$dev" root netem "${netem[@]}" limit 100000 \
        2>/dev/null; then
        # Kernels without sch_netem: a token bucket can still shape the rate (not delay/loss).
        if [[ -n "$rate" && -z "$delay$loss" ]]; then
          shape "$ns" "$dev"
          # And the switch's port towards the node: a NIC's rate holds in both directions
          # (without it a node could receive from several others at once faster than --rate).
          shape "$switch" "$port_end"
        else
          echo "emulate-cluster: tc netem is not available (kernel module sch_netem)" >&2
          exit 1
        fi
      fi
    fi
  done
done

# Wait until every node's link is up (carrier), else libfabric may not list eth0 yet.
for ((i = 0; i < ${#perNode[@]}; ++i)); do
  for ((try = 0; try < 100; ++try)); do
    state=up
    for ((r = 0; r < rails; ++r)); do
      [[ $(ip netns exec "${tag}-n$i" cat "/sys/class/net/eth$r/operstate" 2>/dev/null) == up ]] ||
        state=down
    done
    [[ "$state" == up ]] && break
    sleep 0.05
  done
  [[ "$state" == up ]] || { echo "emulate-cluster: node $i's link did not come up" >&2; exit 1; }
done

world=0
for m in "${perNode[@]}"; do world=$((world + m)); done
if [[ -n "$names_file" ]]; then
  first=0
  {
    for ((i = 0; i < ${#perNode[@]}; ++i)); do
      echo "node $i ${tag}-n$i $first ${perNode[i]}"
      first=$((first + perNode[i]))
    done
    echo "switch $switch"
  } >"$names_file.tmp"
  mv "$names_file.tmp" "$names_file"  # whole or absent for a reader polling it
fi
rank=0
for ((i = 0; i < ${#perNode[@]}; ++i)); do
  for ((j = 0; j < perNode[i]; ++j)); do
    envs=(SHARC_ROOT="198.18.0.1:$port" SHARC_RANK=$rank SHARC_WORLD_SIZE=$world
          SHARC_NODE_ID="node$i" SHARC_SOCKET_IFNAME=eth0)
    [[ -n "$nic_mbits" ]] && envs+=(SHARC_NIC_MBITS="$nic_mbits")
    if ((rails > 1)); then
      nics=eth0
      for ((r = 1; r < rails; ++r)); do nics+=",eth$r"; done
      envs+=(SHARC_NICS="$nics")
    else
      envs+=(FI_TCP_IFACE=eth0)
    fi
    if [[ $rank -eq 0 ]]; then
      ip netns exec "${tag}-n$i" env "${envs[@]}" timeout -s KILL "$timeout_s" "$@" &
    else
      ip netns exec "${tag}-n$i" env "${envs[@]}" timeout -s KILL "$timeout_s" "$@" \
        >"$logdir/rank$rank.log" 2>&1 &
    fi
    pids+=($!)
    rank=$((rank + 1))
  done
done

status=0
for ((r = 0; r < world; ++r)); do
  if ! wait "${pids[r]}"; then
    status=1
    echo "emulate-cluster: rank $r failed" >&2
    [[ -f "$logdir/rank$r.log" ]] && sed "s/^/[rank $r] /" "$logdir/rank$r.log" >&2
  fi
done
pids=()
echo "emulate-cluster: ${#perNode[@]} nodes ($nodes), $world ranks: $([[ $status -eq 0 ]] && echo PASSED || echo FAILED)"
exit "$status"
