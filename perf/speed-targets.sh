#!/usr/bin/env bash
# sharc's speed targets, measured side by side with their baselines in the same runs (float32),
# printed as one table: target, measured sharc, baseline, ratio, required, pass/fail.
#
#   perf/speed-targets.sh [REPS]        (or REPS=5 perf/speed-targets.sh; default 3)
#
#   1  one host, 2 ranks, 64 MiB all_gather: busbw >= 0.6 x memcpy bandwidth (--baseline
#      memcpy: one core copying the (n-1)/n x size bytes a rank receives) and >= 4 x Open MPI
#   2  one host, 2 ranks, 64 MiB reduce_scatter: busbw >= 4 x Open MPI
#   3  one host, 4 ranks (more than cores), 16 and 64 MiB all_gather and reduce_scatter:
#      busbw >= 2 x Open MPI
#   4  4 ranks, 1 KiB..64 KiB all_gather (total size): time <= Open MPI's
#   5  emulated 2 nodes x 2 ranks, links shaped to 2 Gbit/s (tools/emulate-cluster.sh, root):
#      64 MiB all_gather and reduce_scatter within 1.25 x the inter-node lower bound (each node
#      must receive total/2 bytes over its one link: total/2 / 250 MB/s), and the default
#      (tuner's, hierarchical) algorithm >= 1.3 x faster than SHARC_ALGO=ring in the same run
#
# Targets 1-3 are also measured with buffers from sharc::allocShared (rows marked [shared]).
# Figures are out-of-place unless a target says in-place (target 1 shows both); every value is
# the median over REPS runs, ratios the median of the per-run ratios. Open MPI runs on its
# shared-memory path (mpirun --mca pml ob1 --mca btl self,vader) in the same mpirun as sharc
# (--baseline mpi). Exits 1 when a target fails, 0 when all pass or are skipped.
# TARGETS="1 4" runs only those targets. SHARC_PERF names the binary; RUN_TIMEOUT bounds each run (s, default 900) (default build/perf/sharc-perf); needs python3 to read --json.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
perf=${SHARC_PERF:-$root/build/perf/sharc-perf}
reps=${1:-${REPS:-3}}
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "speed-targets: REPS must be a positive integer" >&2; exit 2; }
[[ -x "$perf" ]] || { echo "speed-targets: no $perf (build first or set SHARC_PERF)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "speed-targets: needs python3" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "speed-targets: needs mpirun (Open MPI)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
mpi=(mpirun --oversubscribe --mca pml ob1 --mca btl self,vader)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME COMMAND...: runs COMMAND REPS times, appending --json $tmp/NAME.<i>.json.
run() {
  local name=$1
  shift
  for ((i = 0; i < reps; ++i)); do
    if ! timeout -s KILL "${RUN_TIMEOUT:-900}" "$@" --json "$tmp/$name.$i.json" >"$tmp/$name.$i.log" 2>&1; then
      echo "speed-targets: run '$name' failed:" >&2
      tail -20 "$tmp/$name.$i.log" >&2
    fi
  done
}

# med NAME SIZE EXPR: median over the runs of NAME of a Python expression over the row of
# that size (r), e.g. 'r["out_of_place"]["busbw_gbps"]'; "nan" when no run has it.
med() {
  python3 - "$tmp" "$1" "$2" "$3" "$reps" <<'EOF'
import json, statistics, sys
tmp, name, size, expr, reps = sys.argv[1:]
vals = []
for i in range(int(reps)):
    try:
        rows = json.load(open(f"{tmp}/{name}.{i}.json"))["rows"]
        r = next(x for x in rows if x["size"] == int(size))
        v = eval(expr, {}, {"r": r})
        if isinstance(v, str):
            print(v); sys.exit(0)
        vals.append(float(v))
    except Exception:
        pass
print(statistics.median(vals) if vals else "nan")
EOF
}

rows=()
fails=0
# add TARGET MEASURED BASELINE RATIO OP REQUIRED: one table row; OP is >= or <=.
add() {
  local verdict
  verdict=$(python3 -c "import math,sys; r=float(sys.argv[1] or 'nan'); q=float(sys.argv[3])
print('FAIL' if math.isnan(r) else ('PASS' if (r >= q if sys.argv[2] == '>=' else r <= q) else 'FAIL'))" "$4" "$5" "$6")
  [[ $verdict == FAIL ]] && fails=$((fails + 1))
  rows+=("$(printf '%-46s %14s %14s %7.2f %8s %5s' "$1" "$2" "$3" "${4:-nan}" "$5 $6" "$verdict")")
}
# div A B: A / B, or nan when either is not a number.
div() { python3 -c "import sys; a, b = (float(x) for x in sys.argv[1:]); print(a / b if b else float('nan'))" "$1" "$2" 2>/dev/null || echo nan; }
# want N: target N is in TARGETS (default all: "1 2 3 4 5").
want() { [[ " ${TARGETS:-1 2 3 4 5} " == *" $1 "* ]]; }
fmt() { python3 -c "import sys; v=float(sys.argv[1]); print('nan' if v != v else f'{v:.2f} {sys.argv[2]}')" "$1" "$2"; }

M64=$((64 << 20)) M16=$((16 << 20))
oop='r["out_of_place"]["busbw_gbps"]'
ip='r["in_place"]["busbw_gbps"]'
mpibw='r["mpi"]["busbw_gbps"]'

echo "# speed targets: $reps runs each, medians; float32; out-of-place unless marked (in-place)" >&2
# 1, 2: two ranks on one host.
if want 1 || want 2; then
run ag2 "${mpi[@]}" -np 2 "$perf" all_gather -b 64M -e 64M -n 10 -w 3 -c 1 --baseline mpi,memcpy
run rs2 "${mpi[@]}" -np 2 "$perf" reduce_scatter -b 64M -e 64M -n 10 -w 3 -c 1 --baseline mpi
# The same with buffers from sharc::allocShared ("[shared]": copies through mappings).
run ag2s "${mpi[@]}" -np 2 "$perf" all_gather -b 64M -e 64M -n 10 -w 3 -c 1 --baseline mpi,memcpy \
  --shared-buffers
run rs2s "${mpi[@]}" -np 2 "$perf" reduce_scatter -b 64M -e 64M -n 10 -w 3 -c 1 --baseline mpi \
  --shared-buffers
for run_ in ag2 ag2s; do
  shared=$([[ $run_ == ag2s ]] && echo " [shared]" || echo "")
  for v in oop ip; do
    expr=${!v}
    tag=$([[ $v == ip ]] && echo " (in-place)" || echo "")$shared
    s=$(med $run_ $M64 "$expr") m=$(med $run_ $M64 'r["memcpy"]["gbps"]')
    add "1 AG 2r 64M busbw vs memcpy$tag" "$(fmt "$s" GB/s)" "$(fmt "$m" GB/s)" \
      "$(med $run_ $M64 "$expr / r['memcpy']['gbps']")" ">=" 0.6
    add "1 AG 2r 64M busbw vs Open MPI$tag" "$(fmt "$s" GB/s)" \
      "$(fmt "$(med $run_ $M64 "$mpibw")" GB/s)" "$(med $run_ $M64 "$expr / $mpibw")" ">=" 4
  done
done
for run_ in rs2 rs2s; do
  add "2 RS 2r 64M busbw vs Open MPI$([[ $run_ == rs2s ]] && echo " [shared]")" \
    "$(fmt "$(med $run_ $M64 "$oop")" GB/s)" "$(fmt "$(med $run_ $M64 "$mpibw")" GB/s)" \
    "$(med $run_ $M64 "$oop / $mpibw")" ">=" 4
done
fi

# 3: four ranks on one host (oversubscribed on small machines).
if want 3; then
run ag4 "${mpi[@]}" -np 4 "$perf" all_gather -b 16M -e 64M -f 4 -n 10 -w 3 -c 1 --baseline mpi
run rs4 "${mpi[@]}" -np 4 "$perf" reduce_scatter -b 16M -e 64M -f 4 -n 10 -w 3 -c 1 --baseline mpi
run ag4s "${mpi[@]}" -np 4 "$perf" all_gather -b 16M -e 64M -f 4 -n 10 -w 3 -c 1 --baseline mpi \
  --shared-buffers
run rs4s "${mpi[@]}" -np 4 "$perf" reduce_scatter -b 16M -e 64M -f 4 -n 10 -w 3 -c 1 \
  --baseline mpi --shared-buffers
for c in ag4 rs4 ag4s rs4s; do
  for z in $M16 $M64; do
    name="3 $([[ $c == ag4* ]] && echo AG || echo RS) 4r $((z >> 20))M busbw vs Open MPI"
    [[ $c == *s ]] && name+=" [shared]"
    add "$name" "$(fmt "$(med $c $z "$oop")" GB/s)" \
      "$(fmt "$(med $c $z "$mpibw")" GB/s)" "$(med $c $z "$oop / $mpibw")" ">=" 2
  done
done
fi

# 4: small all_gather on four ranks, time against Open MPI's (ratio = MPI time / sharc time).
if want 4; then
run small "${mpi[@]}" -np 4 "$perf" all_gather -b 1K -e 64K -f 2 -n 200 -w 20 -c 1 --baseline mpi
for ((z = 1024; z <= 65536; z *= 2)); do
  add "4 AG 4r $((z >> 10))K time vs Open MPI" "$(fmt "$(med small $z 'r["out_of_place"]["time_us"]')" us)" \
    "$(fmt "$(med small $z 'r["mpi"]["time_us"]')" us)" \
    "$(med small $z 'r["mpi"]["time_us"] / r["out_of_place"]["time_us"]')" ">=" 1
done
fi

# 5: emulated 2 x 2 cluster with 2 Gbit/s links.
emu=(bash "$root/tools/emulate-cluster.sh" --nodes 2,2 --rate 2gbit --timeout 600 --)
note=""
if ! want 5; then
  :
elif [[ $(id -u) -ne 0 ]] || ! ip netns add "shcprobe$$" 2>/dev/null; then
  note="5 skipped: the emulated cluster needs root and network namespaces"
else
  ip netns del "shcprobe$$"
  note=""
  lower=$(python3 -c "print($M64 / 2 / (2e9 / 8) * 1e6)")  # us: total/2 bytes over 2 Gbit/s
  for c in all_gather reduce_scatter; do
    short=$([[ $c == all_gather ]] && echo AG || echo RS)
    run "hier_$c" "${emu[@]}" "$perf" "$c" -b 64M -e 64M -n 3 -w 1 -c 1 --explain
    run "ring_$c" "${emu[@]}" env SHARC_ALGO=ring "$perf" "$c" -b 64M -e 64M -n 3 -w 1 -c 1
    t=$(med "hier_$c" $M64 'r["out_of_place"]["time_us"]')
    algo=$(med "hier_$c" $M64 'r["plan"]["algorithm"]')
    add "5 $short 2x2 2Gbit 64M ($algo) vs bound" "$(fmt "$t" us)" "$(fmt "$lower" us)" \
      "$(div "$t" "$lower")" "<=" 1.25
    rt=$(med "ring_$c" $M64 'r["out_of_place"]["time_us"]')
    add "5 $short 2x2 2Gbit 64M default vs ring" "$(fmt "$t" us)" "$(fmt "$rt" us)" \
      "$(div "$rt" "$t")" ">=" 1.3
  done
fi

printf '%-46s %14s %14s %7s %8s %5s\n' target "measured sharc" baseline ratio required ""
printf '%s\n' "${rows[@]}"
[[ -n "$note" ]] && echo "$note"
echo "# [shared]: send and receive buffers from sharc::allocShared (sharc-perf --shared-buffers)"
echo "# $reps runs per figure (medians); ratio: sharc/baseline for bandwidths, baseline/sharc" \
  "for time vs Open MPI, sharc/bound for target 5's bound, ring/default for target 5's speedup"
if ((fails)); then echo "speed-targets: $fails target(s) FAILED"; exit 1; fi
echo "speed-targets: all targets met"
