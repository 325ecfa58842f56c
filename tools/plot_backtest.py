#!/usr/bin/env python3
"""Plot the planner's backtest against published NCCL AllReduce busbw on p5.48xlarge.

Reads the JSON that `test_backtest --json` prints (a file, or - for stdin) and writes a PNG
(AllReduce left; the out-of-sample AllGather curve right, when the JSON has it):
busbw against message size, one colour per node count: the model (sharc's model of NCCL) as
lines over the whole published curve, the backtest's published points filled, the curve's
other published sizes hollow, points outside their bound (15 % at >= 128 MiB, 30 % below)
crossed in red, the physical ceiling dotted.

    build/tests/plan/test_backtest --json > backtest.json
    /usr/bin/python3 tools/plot_backtest.py backtest.json backtest-p5.png
    python3 tools/plot_backtest.py --tables backtest.json   # docs/planning.md's tables

Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import sys


def draw(plt, ax, name, points, backtest, eff):
    """One panel: the model's line per node count, published points, ceilings, misses."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    allrows = {(r["nodes"], r["bytes"]): r for r in points}
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
    ax.set_xlabel(f"{name} size (MiB)")
    ax.set_ylabel("busbw (GB/s)")
    title = f"NCCL {name} on p5.48xlarge (EFA): published vs sharc's model"
    if eff is not None:
        title += f" (efficiency {eff:.3f})"
    ax.set_title(title, fontsize=10)
    if backtest:
        ax.plot([], [], "o", color="grey", label="published, backtest point")
    ax.plot([], [], "o", color="grey", markerfacecolor="none",
            label="published, out of sample" if not backtest else "published, rest of curve")
    ax.plot([], [], "x", color="red", label="outside its bound")
    ax.plot([], [], ":", color="grey", label="physical ceiling (dotted)")
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)


def size_name(b):
    return f"{b >> 30} GiB" if b >= 2**30 else f"{b >> 20} MiB"


def grid(title, rows, cell):
    """A markdown table under its title: one line per node count, one column per size, each
    cell cell(row) of the row at that (nodes, bytes)."""
    sizes = sorted({r["bytes"] for r in rows})
    out = ["", title, "", "| nodes | " + " | ".join(size_name(b) for b in sizes) + " |",
           "|---|" + "---|" * len(sizes)]
    for n in sorted({r["nodes"] for r in rows}):
        cells = {r["bytes"]: r for r in rows if r["nodes"] == n}
        out.append(f"| {n} | " + " | ".join(cell(cells[b]) for b in sizes) + " |")
    return out


def curve_cell(c):
    bad = " ✗" if abs(c["error"]) > c["bound"] else ""
    return (f"{c['published_gbps']:.0f} / {c['predicted_gbps']:.0f} "
            f"({100 * c['error']:+.0f} %{bad})")


def hierarchical_cell(c):
    return (f"{c['nccl_us'] / c['hierarchical_us']:.2f}× ({c['nccl']}: "
            f"{c['nccl_busbw']:.0f} vs {c['hierarchical_busbw']:.0f})")


def tables(doc):
    """The markdown tables of docs/planning.md's backtest section, from the same JSON."""
    out = ["| instance | nodes | size | NCCL runs | latency us (NCCL's formula) | cap GB/s "
           "| published GB/s | predicted GB/s | error | bound |", "|" + "---|" * 10]
    for r in doc["rows"]:
        bad = " ✗" if abs(r["error"]) > r["bound"] else ""
        cap = f"{r['cap_gbps']:.0f}" if r["cap_gbps"] > 0 else "—"
        out.append(f"| {r['instance']} | {r['nodes']} | {size_name(r['bytes'])} | "
                   f"{r['nccl_algorithm']} | {r['nccl_latency_us']:.0f} ({r['formula_us']:.0f}) "
                   f"| {cap} | {r['published_gbps']:.1f} | {r['predicted_gbps']:.1f} | "
                   f"{100 * r['error']:+.1f} %{bad} | {100 * r['bound']:.0f} % |")
    for key, name in (("curve", "AllReduce"), ("allgather_curve", "AllGather")):
        rows = doc.get(key, [])
        if rows:
            out += grid(f"{name}: published / predicted GB/s (error)", rows, curve_cell)
            within = sum(abs(r["error"]) <= r["bound"] for r in rows)
            out.append(f"\n{within} of {len(rows)} within their bound.")
    hv = doc.get("hierarchical_vs_nccl", [])
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):
        rows = [r for r in hv if r["collective"] == coll]
        if rows:
            out += grid(f"{coll}: NCCL time / hierarchical time (NCCL's algorithm: model busbw vs "
                        "hierarchical busbw, GB/s)", rows, hierarchical_cell)
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) == 3 and argv[1] == "--tables":
        with (sys.stdin if argv[2] == "-" else open(argv[2], encoding="utf-8")) as f:
            sys.stdout.write(tables(json.load(f)))
        return 0
    if len(argv) != 3:
        sys.stderr.write("usage: plot_backtest.py BACKTEST.json|- OUT.png\n"
                         "       plot_backtest.py --tables BACKTEST.json|-\n")
        return 2
    src = sys.stdin if argv[1] == "-" else open(argv[1], encoding="utf-8")
    try:
        doc = json.load(src)
    except json.JSONDecodeError as e:
        sys.stderr.write(f"plot_backtest.py: {argv[1]} is not the JSON of test_backtest --json: {e}\n")
        return 2

    def p5(key):  # the p5.48xlarge rows of one of the JSON's lists
        return [r for r in doc.get(key, []) if r.get("instance") == "p5.48xlarge"]

    rows = p5("rows")
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
    gather = p5("allgather_curve")
    panels = [("AllReduce", p5("curve") + rows, {(r["nodes"], r["bytes"]) for r in rows})]
    if gather:
        panels.append(("AllGather", gather, set()))
    fig, axes = plt.subplots(1, len(panels), figsize=(9 * len(panels), 5.5), squeeze=False)
    for ax, (name, pts, backtest) in zip(axes[0], panels):
        draw(plt, ax, name, pts, backtest, eff)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    print(f"wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
