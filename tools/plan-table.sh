#!/usr/bin/env bash
# The scale table of docs/planning.md ("At scale: p5 and p4d, 2 to 1,024 nodes"): sharc-plan
# collective for p5.48xlarge and p4d.24xlarge, AllGather and ReduceScatter, 2 to 1,024 nodes,
# as one Markdown table (busbw, share of the physical bound, ratio to NCCL), and one plot per
# cluster and collective when an output folder is given (Debian's python3-matplotlib).
#
#   tools/plan-table.sh BUILD_DIR [PLOT_DIR]
set -euo pipefail
build=${1:?usage: tools/plan-table.sh BUILD_DIR [PLOT_DIR]}
plots=${2:-}
plan="$build/tools/sharc-plan"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nodes=2,4,8,16,32,64,128,256,512,1024
for cluster in p5.48xlarge p4d.24xlarge; do
  for coll in all_gather reduce_scatter; do
    "$plan" collective --cluster "$cluster" --collective "$coll" --nodes "$nodes" -b 32M -e 2G \
      -f 8 --path direct --json >"$tmp/$cluster.$coll.json"
    if [[ -n $plots ]]; then
      "$plan" collective --cluster "$cluster" --collective "$coll" --nodes "$nodes" -b 1M -e 2G \
        --path direct --plot "$plots/plan-${cluster%%.*}-$coll.png" >/dev/null
    fi
  done
done
/usr/bin/python3 - "$tmp" <<'PY'
import glob, json, os, sys

def size(b):
    for unit, shift in (("G", 30), ("M", 20)):
        if b >= 1 << shift:
            return f"{b >> shift}{unit}"
    return str(b)

print("| cluster | collective | nodes | " + " | ".join(
    f"{s}: busbw (%bound, ×NCCL)" for s in ("32M", "256M", "2G")) + " | algorithm at 2G |")
print("|---|---|---|---|---|---|---|")
for cluster in ("p5.48xlarge", "p4d.24xlarge"):
    for coll in ("all_gather", "reduce_scatter"):
        d = json.load(open(os.path.join(sys.argv[1], f"{cluster}.{coll}.json")))
        by = {}
        for r in d["rows"]:
            by.setdefault(r["nodes"], {})[size(r["bytes"])] = r
        for n in sorted(by):
            cells = []
            for s in ("32M", "256M", "2G"):
                r = by[n][s]
                x = r.get("x_nccl")
                mark = "" if r.get("nccl_published") else "*"
                ratio = f"{x:.2f}{mark}" if x else "–"
                cells.append(f"{r['busbw_gbps']:.0f} ({r['pct_of_bound']:.0f} %, {ratio})")
            print(f"| {cluster} | {coll} | {n} | " + " | ".join(cells) +
                  f" | {by[n]['2G']['algorithm']} |")
PY
