#!/usr/bin/python3
"""Plots `sharc-plan collective --json` output: bus bandwidth against size (log x), one line
per node count, the physical bound of each dashed in the same colour.

usage: sharc_plan_plot.py PLAN.json OUT.png
`sharc-plan collective ... --plot OUT.png` runs it under /usr/bin/python3 (Debian's
python3-matplotlib). Exits 77 when matplotlib is missing, 2 on bad input.
"""
import json
import sys


def size_label(b):
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= scale:
            v = b / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return str(b)


def main(argv):
    if len(argv) != 3:
        print("usage: sharc_plan_plot.py PLAN.json OUT.png", file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            plan = json.load(f)
        rows = plan["rows"]
        cluster = plan["cluster"]["name"]
        collective = plan["collective"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"sharc_plan_plot.py: {argv[1]}: expected sharc-plan collective --json output "
              f"({e})", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sharc_plan_plot.py: matplotlib is not available to this python "
              "(apt-get install python3-matplotlib)", file=sys.stderr)
        return 77

    by_nodes = {}
    for r in rows:
        by_nodes.setdefault(r["nodes"], []).append(r)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    cmap = plt.get_cmap("viridis")
    counts = sorted(by_nodes)
    for i, n in enumerate(counts):
        pts = sorted(by_nodes[n], key=lambda r: r["bytes"])
        colour = cmap(i / max(1, len(counts) - 1))
        x = [r["bytes"] for r in pts]
        ax.plot(x, [r["busbw_gbps"] for r in pts], color=colour, marker=".",
                label=f"{n} node{'s' if n > 1 else ''} ({pts[0]['ranks']} ranks)")
        ax.plot(x, [r["bound_busbw_gbps"] for r in pts], color=colour, linestyle="--",
                linewidth=0.9)
    ax.set_xscale("log", base=2)
    sizes = sorted({r["bytes"] for r in rows})
    step = max(1, len(sizes) // 8)
    ax.set_xticks(sizes[::step])
    ax.set_xticklabels([size_label(s) for s in sizes[::step]])
    ax.set_xlabel("size (bytes; AllGather output, ReduceScatter input, AllReduce vector)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"sharc-plan: predicted {collective} on {cluster} "
                 f"(dashed: physical bound)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="upper left")
    fig.tight_layout()
    try:
        fig.savefig(argv[2], dpi=110)
    except OSError as e:
        print(f"sharc_plan_plot.py: cannot write {argv[2]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
