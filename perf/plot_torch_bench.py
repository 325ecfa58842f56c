#!/usr/bin/env python3
"""Plots and tabulates perf/torch_bench.py's collective numbers (its --json files).

    python perf/plot_torch_bench.py RUN.json [RUN2.json ...] [-o docs/torch-bench-2.15.png]
                                    [--markdown]

One panel per collective: bus bandwidth (nccl-tests busbw, GB/s) against size, sharc solid
and gloo dashed, one colour per world size. Given several runs (repeated invocations on the
same machine), each point is the median over the runs and the shaded band spans the slowest
to the fastest run, which shows how noisy the machine was. --markdown prints the table of
docs/measurements.md "Through PyTorch" (per world size and collective, one column per size: sharc / gloo busbw and their ratio,
from the medians over the runs) and each cell's run-to-run spread. Needs matplotlib for the
plot only (`pip install matplotlib`); --markdown alone does not.
"""
import argparse
import json
import statistics
import sys

MIB = 1 << 20
NAMES = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor",
         "all_reduce": "all_reduce"}


def load(paths):
    """{(world, coll, bytes): {"sharc": [busbw per run], "gloo": [...]}} and the runs' torch
    versions."""
    cells, versions = {}, set()
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        if not report.get("collectives"):
            sys.exit(f"plot_torch_bench: {path} has no collective results "
                     f"(run perf/torch_bench.py with --world-sizes)")
        versions.add(report["torch"])
        for row in report["collectives"]:
            key = (row["world_size"], row["collective"], row["bytes"])
            cell = cells.setdefault(key, {"sharc": [], "gloo": []})
            for b in cell:
                if not row[b]["correct"]:
                    sys.exit(f"plot_torch_bench: {path}: {b} gave a wrong result for {key}")
                cell[b].append(row[b]["busbw_GBps"])
    return cells, sorted(versions)


def fmt_size(b):
    return f"{b // MIB} MiB" if b >= MIB and b % MIB == 0 else f"{b / 1024:g} KiB"


def markdown(cells, nruns):
    worlds = sorted({k[0] for k in cells})
    colls = [c for c in NAMES if any(k[1] == c for k in cells)]
    sizes = sorted({k[2] for k in cells})
    lines = ["| ranks | collective | " + " | ".join(fmt_size(s) for s in sizes) + " |",
             "| ---: | --- | " + " | ".join("---:" for _ in sizes) + " |"]
    spread = []
    for n in worlds:
        for c in colls:
            row = []
            for s in sizes:
                cell = cells.get((n, c, s))
                if cell is None:
                    row.append("–")
                    continue
                sh, gl = statistics.median(cell["sharc"]), statistics.median(cell["gloo"])
                r = sh / gl
                row.append(f"{sh:.2f} / {gl:.2f} ({r:.1f}×)" if r < 10 else
                           f"{sh:.2f} / {gl:.2f} ({r:.0f}×)")
                for b in ("sharc", "gloo"):
                    v = cell[b]
                    spread.append(max(v) / min(v) - 1)
            label = NAMES[c] + (", sharc / gloo GB/s" if (n, c) == (worlds[0], colls[0]) else "")
            lines.append(f"| {n} | {label} | " + " | ".join(row) + " |")
    if nruns > 1:
        lines.append("")
        lines.append(f"Medians over {nruns} runs. Run-to-run spread of a cell's busbw "
                     f"(fastest / slowest - 1): median {statistics.median(spread) * 100:.0f} %, "
                     f"largest {max(spread) * 100:.0f} %.")
    return "\n".join(lines)


def plot(cells, versions, nruns, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)

    colls = [c for c in NAMES if any(k[1] == c for k in cells)]
    worlds = sorted({k[0] for k in cells})
    fig, axes = plt.subplots(1, len(colls), figsize=(5 * len(colls), 4.2), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, c in zip(axes[0], colls):
        for i, n in enumerate(worlds):
            sizes = sorted(k[2] for k in cells if k[0] == n and k[1] == c)
            for b, style in (("sharc", "-"), ("gloo", "--")):
                vals = [cells[(n, c, s)][b] for s in sizes]
                x = [s / MIB for s in sizes]
                ax.plot(x, [statistics.median(v) for v in vals], style, marker="o",
                        color=colours[i % len(colours)], label=f"{b}, {n} ranks")
                if nruns > 1:
                    ax.fill_between(x, [min(v) for v in vals], [max(v) for v in vals],
                                    color=colours[i % len(colours)], alpha=0.15, linewidth=0)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # Plain numbers on the axes (the sizes measured; GB/s as decimals), not powers.
        all_sizes = sorted({k[2] / MIB for k in cells if k[1] == c})
        ax.set_xticks(all_sizes, [f"{x:g}" for x in all_sizes])
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("size (MiB, nccl-tests convention)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(NAMES[c])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    runs = f"median of {nruns} runs, band: min–max" if nruns > 1 else "one run"
    fig.suptitle(f"sharc vs gloo through torch.distributed, CPU float32 "
                 f"(torch {', '.join(versions)}; {runs})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="perf/torch_bench.py --json files")
    ap.add_argument("-o", "--output", help="PNG to write")
    ap.add_argument("--markdown", action="store_true", help="print the table of docs/measurements.md")
    args = ap.parse_args(argv)
    if not args.output and not args.markdown:
        ap.error("nothing to do: give -o PNG and/or --markdown")
    cells, versions = load(args.runs)
    if args.markdown:
        print(markdown(cells, len(args.runs)))
    if args.output:
        plot(cells, versions, len(args.runs), args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
