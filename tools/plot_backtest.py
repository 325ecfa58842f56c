#!/usr/bin/env python3
"""Plot the planner's backtest against published NCCL AllReduce busbw on p5.48xlarge.

Reads the JSON that `test_backtest --json` prints (a file, or - for stdin) and writes a PNG:
busbw against message size, one colour per node count: the model (sharc's model of NCCL) as
lines over the whole published curve, the backtest's published points filled, the curve's
other published sizes hollow, points outside their bound (15 % at >= 128 MiB, 30 % below)
crossed in red, the physical ceiling dotted.

    build/tests/plan/test_backtest --json > backtest.json
    /usr/bin/python3 tools/plot_backtest.py backtest.json backtest-p5.png

Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import sys


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: plot_backtest.py BACKTEST.json|- OUT.png\n")
        return 2
    src = sys.stdin if argv[1] == "-" else open(argv[1], encoding="utf-8")
    try:
        doc = json.load(src)
    except json.JSONDecodeError as e:
        sys.stderr.write(f"plot_backtest.py: {argv[1]} is not the JSON of test_backtest --json: {e}\n")
        return 2
    rows = [r for r in doc.get("rows", []) if r.get("instance") == "p5.48xlarge"]
    if not rows:
        sys.stderr.write("plot_backtest.py: no p5.48xlarge rows in the input (expected "
                         "{\"rows\": [{\"instance\": \"p5.48xlarge\", ...}]})\n")
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("plot_backtest.py: needs matplotlib (apt-get install python3-matplotlib; "
                         "run with /usr/bin/python3)\n")
        return 77

    eff = doc.get("efficiency", {}).get("p5.48xlarge")
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    curve = [r for r in doc.get("curve", []) if r.get("instance") == "p5.48xlarge"]
    backtest = {(r["nodes"], r["bytes"]) for r in rows}
    # The model's line through every size of the curve and of the backtest.
    allrows = {(r["nodes"], r["bytes"]): r for r in curve + rows}
    for i, nodes in enumerate(sorted({n for n, _ in allrows})):
        pts = sorted((r for (n, _), r in allrows.items() if n == nodes), key=lambda r: r["bytes"])
        c = colours[i % len(colours)]
        x = [r["bytes"] / 2**20 for r in pts]
        ax.plot(x, [r["predicted_gbps"] for r in pts], "-", color=c, label=f"{nodes} nodes: model")
        ax.plot(x, [r["ceiling_gbps"] for r in pts], ":", color=c, linewidth=1)
        for r in pts:
            filled = (r["nodes"], r["bytes"]) in backtest
            ax.plot(r["bytes"] / 2**20, r["published_gbps"], "o", color=c,
                    markerfacecolor=c if filled else "none")
            if abs(r["error"]) > r["bound"]:
                ax.plot(r["bytes"] / 2**20, r["published_gbps"], "x", color="red", markersize=9)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("AllReduce size (MiB)")
    ax.set_ylabel("busbw (GB/s)")
    title = "NCCL AllReduce on p5.48xlarge (EFA): published vs sharc's model"
    if eff is not None:
        title += f" (efficiency {eff:.3f})"
    ax.set_title(title, fontsize=10)
    ax.plot([], [], "o", color="grey", label="published, backtest point")
    ax.plot([], [], "o", color="grey", markerfacecolor="none", label="published, rest of curve")
    ax.plot([], [], "x", color="red", label="outside its bound")
    ax.plot([], [], ":", color="grey", label="physical ceiling (dotted)")
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    print(f"wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
