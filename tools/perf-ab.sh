#!/usr/bin/env bash
# A/B benchmark: is commit B as fast as commit A? Builds sharc-perf at both commits in git
# worktrees outside this checkout, then runs both in ONE run, alternating, so that the load
# of a shared machine hits both sides alike (compare ratios from one run, never absolute
# figures across runs: docs/measurements.md).
#
# usage: bash tools/perf-ab.sh <baseline-commit> [<candidate-commit>=HEAD]
#
# Environment (defaults in brackets):
#   ROUNDS [5]  RANKS [4]  MIN_BYTES [1K]  MAX_BYTES [64M]  FACTOR [4]
#   COLLS ["all_gather reduce_scatter"]  PERF_ARGS [""] (extra sharc-perf flags, e.g. "-n 50")
#   NODES [""]: ranks per node, e.g. "2,2", to run each side on an emulated cluster of that
#   layout (tools/emulate-cluster.sh; root) instead of RANKS ranks on this host; RATE [""]
#   shapes its links (e.g. 2gbit)
#   SHARC_AB_DIR [$HOME/.cache/sharc-ab] (worktrees, builds, results)  SHARC_JOBS [2]
# Only committed states are measured: uncommitted edits in this checkout are not seen.
# Exit status: 0 when every run passed its check (#wrong 0), 1 otherwise, 2 on bad usage
# or an unknown commit.
set -euo pipefail

usage() { echo "usage: bash tools/perf-ab.sh <baseline-commit> [<candidate-commit>=HEAD]" >&2; exit 2; }
die() { echo "perf-ab: $*" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 && $1 != -* ]] || usage

repo=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
ab=${SHARC_AB_DIR:-$HOME/.cache/sharc-ab}
rounds=${ROUNDS:-5} ranks=${RANKS:-4} jobs=${SHARC_JOBS:-2}
min=${MIN_BYTES:-1K} max=${MAX_BYTES:-64M} factor=${FACTOR:-4}
read -r -a colls <<<"${COLLS:-all_gather reduce_scatter}"
read -r -a extra <<<"${PERF_ARGS:-}"
nodes=${NODES:-} rate=${RATE:-}
# Where NODES is set, every run goes through the emulated cluster (one process per rank).
launch=(); world=(-N "$ranks")
if [[ -n $nodes ]]; then
  launch=(bash "$(dirname "${BASH_SOURCE[0]}")/emulate-cluster.sh" --nodes "$nodes")
  [[ -n $rate ]] && launch+=(--rate "$rate")
  launch+=(--)
  world=()
fi

# Resolve both names to full hashes now: a moving HEAD or branch cannot change the run later.
resolve() { git -C "$repo" rev-parse --verify --quiet "$1^{commit}" || die "unknown commit: $1"; }
sha_a=$(resolve "$1")
sha_b=$(resolve "${2:-HEAD}")

# Ninja rebuilds faster than make; the presets name no generator, so pick it here.
if [[ -z ${CMAKE_GENERATOR:-} ]] && command -v ninja >/dev/null; then export CMAKE_GENERATOR=Ninja; fi

# One worktree and build per commit hash, so a later A/B of the same commit reuses it (an
# incremental build of an unchanged tree is a no-op).
build() {
  local sha=$1 dir=$ab/${1:0:12}
  if [[ ! -e $dir/src/.git ]]; then
    mkdir -p "$ab"
    git -C "$repo" worktree add --detach "$dir/src" "$sha" >&2
  fi
  [[ $(git -C "$dir/src" rev-parse HEAD) == "$sha" ]] || die "$dir/src is not at $sha"
  # The repo's default preset (RelWithDebInfo), CUDA off: sharc-perf runs on host memory and
  # the CUDA kernels only cost compile time. Tests and microbenchmarks are never built here.
  if [[ ! -f $dir/build/CMakeCache.txt ]]; then
    cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSHARC_WITH_CUDA=OFF -DSHARC_BUILD_TESTS=OFF -DSHARC_BUILD_BENCHMARKS=OFF >&2
  fi
  # Only sharc-perf and what it links (libsharc, the rank launcher).
  cmake --build "$dir/build" -j"$jobs" --target sharc-perf >&2
  echo "$dir/build/perf/sharc-perf"
}

t0=$(date +%s)
echo "== building A ${sha_a:0:12} and B ${sha_b:0:12} under $ab"
perf_a=$(build "$sha_a")
perf_b=$(build "$sha_b")
t_built=$(date +%s)

res=$ab/results/$(date +%Y%m%d-%H%M%S)-${sha_a:0:12}-${sha_b:0:12}
mkdir -p "$res"
{
  echo "A $sha_a $(git -C "$repo" log -1 --format=%s "$sha_a")"
  echo "B $sha_b $(git -C "$repo" log -1 --format=%s "$sha_b")"
  echo "rounds=$rounds ranks=${nodes:-$ranks} rate=${rate:-none} sizes=$min..$max x$factor colls=${colls[*]} extra=${extra[*]:-}"
  echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
} | tee "$res/info.txt"

# Rounds alternate the order (AB, BA, AB, ...): a slow drift of the machine's load then
# hits A and B alike, and neither side always runs right after the other.
fail=0
for ((r = 1; r <= rounds; r++)); do
  order=(A B); ((r % 2)) || order=(B A)
  for side in "${order[@]}"; do
    perf=$perf_a; [[ $side == B ]] && perf=$perf_b
    for coll in "${colls[@]}"; do
      out=$res/$side-$coll-r$r
      echo "-- round $r/$rounds $side $coll"
      rc=0
      "${launch[@]}" "$perf" "$coll" "${world[@]}" -b "$min" -e "$max" -f "$factor" -c 1 \
        --json "$out.json" "${extra[@]}" >"$out.txt" 2>&1 || rc=$?
      if ((rc)); then echo "   FAILED (exit status $rc): $out.txt"; fail=1; fi
    done
  done
done
t_ran=$(date +%s)

# Per collective and size: medians over the rounds of each side's out-of-place time and
# busbw, B/A of the busbw medians, how many rounds B beat A in (same round, so same load),
# the range of those per-round B/A (a range spanning 1 means noise, not a difference),
# in-place B/A, and the geometric mean of the B/A over all rows.
python3 - "$res" <<'EOF' | tee "$res/summary.txt"
import glob, json, math, os, statistics as st, sys
res = sys.argv[1]
data, bad = {}, []  # (coll, size) -> side -> place -> {round: (time_us, busbw)}
for path in sorted(glob.glob(os.path.join(res, "*.json"))):
    side, coll, rnd = os.path.basename(path)[:-5].split("-")
    doc = json.load(open(path))
    if not doc.get("ok", False): bad.append(os.path.basename(path))
    for row in doc["rows"]:
        for place in ("out_of_place", "in_place"):
            d = data.setdefault((coll, row["size"]), {}).setdefault(side, {})
            d.setdefault(place, {})[rnd] = (row[place]["time_us"], row[place]["busbw_gbps"])
def med(d, side, place, i): return st.median(v[i] for v in d[side][place].values())
def ratio(d, place):
    a, b = med(d, "A", place, 1), med(d, "B", place, 1)
    return b / a if a > 0 else float("nan")
def size(n):
    for unit in ("", "K", "M", "G"):
        if n < 1024 or unit == "G": return f"{n}{unit}"
        n //= 1024
print(f"{'collective':<15}{'size':>5}{'A us':>9}{'B us':>9}{'A GB/s':>8}{'B GB/s':>8}"
      f"{'B/A':>7}{'B won':>6}{'round B/A':>11}{'in-pl B/A':>10}")
logs = {"out_of_place": [], "in_place": []}
for (coll, n), d in sorted(data.items()):
    if "A" not in d or "B" not in d: continue
    a, b = d["A"]["out_of_place"], d["B"]["out_of_place"]
    per = [b[r][1] / a[r][1] for r in a if r in b and a[r][1] > 0]
    q, qi = ratio(d, "out_of_place"), ratio(d, "in_place")
    for place, v in (("out_of_place", q), ("in_place", qi)):
        if v > 0: logs[place].append(math.log(v))
    won = f"{sum(p > 1 for p in per)}/{len(per)}"
    span = f"{min(per):.2f}-{max(per):.2f}" if per else "-"
    print(f"{coll:<15}{size(n):>5}{med(d, 'A', 'out_of_place', 0):>9.1f}"
          f"{med(d, 'B', 'out_of_place', 0):>9.1f}{med(d, 'A', 'out_of_place', 1):>8.3f}"
          f"{med(d, 'B', 'out_of_place', 1):>8.3f}{q:>7.3f}{won:>6}{span:>11}{qi:>10.3f}")
gm = {p: math.exp(st.mean(v)) if v else float("nan") for p, v in logs.items()}
print("out-of-place time and busbw, medians over rounds; B/A = busbw B/A, > 1: B faster")
print(f"geomean B/A: out-of-place {gm['out_of_place']:.3f}, in-place {gm['in_place']:.3f}"
      f" ({len(logs['out_of_place'])} rows)")
if bad: print("runs with wrong results: " + ", ".join(bad))
try:  # optional plot: only where matplotlib is already installed
    import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    for coll in sorted({c for c, _ in data}):
        rows = sorted((n, ratio(d, "out_of_place")) for (c, n), d in data.items() if c == coll)
        plt.semilogx([n for n, _ in rows], [q for _, q in rows], "o-", base=2, label=coll)
    plt.axhline(1, color="gray"); plt.xlabel("bytes"); plt.ylabel("busbw B/A"); plt.legend()
    plt.savefig(os.path.join(res, "ratio.png"), dpi=100)
except ImportError:
    pass
EOF

echo "build $((t_built - t0)) s, runs $((t_ran - t_built)) s; raw outputs in $res"
if ((fail)) || grep -q '^runs with wrong results' "$res/summary.txt"; then exit 1; fi
