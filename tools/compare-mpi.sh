#!/usr/bin/env bash
# sharc against Open MPI, side by side in the same runs: for each collective and rank count,
# runs `mpirun -np N sharc-perf COLL --baseline mpi` REPS times over 1 MiB..64 MiB and prints
# the median of sharc's out-of-place busbw, Open MPI's busbw and their ratio per size.
#   usage: tools/compare-mpi.sh [REPS] [RANKS...]      (defaults: 5 reps, 2 and 4 ranks)
#   COLLS="all_gather reduce_scatter all_reduce" picks the collectives (default: the first two).
# Open MPI uses its shared-memory path (pml ob1, btl self,vader); sharc picks its provider.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
perf=${SHARC_PERF:-$root/build/perf/sharc-perf}
reps=${1:-5}
shift || true
if [[ $# -gt 0 ]]; then ranks=("$@"); else ranks=(2 4); fi
read -r -a colls <<<"${COLLS:-all_gather reduce_scatter}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-15s %5s %10s %12s %12s %8s\n' collective ranks bytes "sharc busbw" "mpi busbw" ratio
for coll in "${colls[@]}"; do
  for n in "${ranks[@]}"; do
    out=$(mktemp)
    for ((i = 0; i < reps; ++i)); do
      mpirun -np "$n" --oversubscribe --mca pml ob1 --mca btl self,vader \
        "$perf" "$coll" -b 1M -e 64M -f 4 -c 1 -n 10 -w 3 --baseline mpi |
        awk '/^ +[0-9]/ {print $1, $8, $14, $9}' >>"$out"
    done
    if awk '$4 != 0 {bad=1} END {exit !bad}' "$out"; then echo "$coll: wrong results" >&2; exit 1; fi
    for size in $(awk '{print $1}' "$out" | sort -n -u); do
      s=$(awk -v z="$size" '$1 == z {print $2}' "$out" | median)
      m=$(awk -v z="$size" '$1 == z {print $3}' "$out" | median)
      r=$(awk -v z="$size" '$1 == z && $3 > 0 {print $2 / $3}' "$out" | median)
      printf '%-15s %5s %10s %12s %12s %8.2f\n' "$coll" "$n" "$size" "$s" "$m" "$r"
    done
    rm -f "$out"
  done
done
