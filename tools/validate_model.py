#!/usr/bin/env python3
"""Validates the tuner's cost model on an emulated cluster: predicted against measured.

For every case (a layout of ranks per node, a number of rails, a shaped link rate, a
collective) it runs `sharc-perf --explain` under tools/emulate-cluster.sh several times and
compares the tuner's prediction for each size with the measured time: the median of the
out-of-place and in-place samples of every repeat, each sample the slowest rank's median call
(sharc-perf --median), so that one stalled call (10-20 ms on a loaded 2-core host) does not
move a 64 KiB row by milliseconds. Sizes below --small-below get their own sharc-perf run with
--small-iters calls (they are cheap). With --calibrate it first runs `sharc-perf
--calibrate` on the same emulated cluster and repeats the case with SHARC_TUNER_FILE set.

  tools/validate_model.py --perf build/perf/sharc-perf --cases 2,2 3,1 --rates 1gbit \\
      --out /tmp/validate [--calibrate] [--bounds 0.15,0.30 --check] [--plot validate.png]
  tools/validate_model.py --from /tmp/validate [--plot validate.png]   (table of saved runs)

Bounds: |predicted/measured - 1| within the first bound for sizes >= 256 KiB, within the
second below. --check exits 1 when a row misses its bound, 77 when the emulation cannot run
(no root or namespaces). --recheck N measures a case with a row outside its bound again, up
to N more times, and pools the samples: one stalled run is outvoted, a model error repeats. Stdlib only; --plot needs matplotlib (Debian's /usr/bin/python3).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIG = 256 << 10  # the size from which the tighter bound applies


def parse_case(text):
    """'2,1,1' or '2,2@2' (ranks per node, @rails) -> (layout, rails)."""
    layout, _, rails = text.partition("@")
    nodes = layout.split(",")
    if not nodes or not all(n.isdigit() and int(n) > 0 for n in nodes):
        raise SystemExit(f"validate_model: bad case '{text}' (expected e.g. 2,2 or 3,1@2)")
    if rails and not (rails.isdigit() and 1 <= int(rails) <= 8):
        raise SystemExit(f"validate_model: bad rails in '{text}' (expected @1..@8)")
    return layout, int(rails or 1)


def parse_size(text):
    """'64K' -> 65536 (K, M, G binary, as sharc-perf reads them)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    try:
        return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        raise SystemExit(f"validate_model: bad size '{text}' (expected e.g. 64K, 16M)")


def size_runs(args):
    """The sharc-perf runs of one repeat: [(first, last, iters, warmup)], sizes below
    --small-below in their own run with --small-iters calls."""
    sizes, s = [], parse_size(args.min)
    while s <= parse_size(args.max):
        sizes.append(s)
        s *= args.factor
    small = [s for s in sizes if s < parse_size(args.small_below)]
    big = [s for s in sizes if s not in small]
    runs = [(small[0], small[-1], args.small_iters, args.small_warmup)] if small else []
    return runs + ([(big[0], big[-1], args.iters, args.warmup)] if big else [])


def run_emulated(args, layout, rails, rate, perf_args, env_extra, tag):
    """Runs sharc-perf PERF_ARGS on the emulated cluster; returns the exit status."""
    cmd = [args.emulate, "--nodes", layout, "--rails", str(rails), "--timeout",
           str(args.timeout), "--port", str(args.port)]
    if rate != "none":
        cmd += ["--rate", rate]
    cmd += ["--", args.perf] + perf_args
    env = dict(os.environ, **env_extra)
    log = os.path.join(args.out, tag + ".log")
    with open(log, "w") as f:
        f.write("# " + " ".join(f"{k}={v}" for k, v in env_extra.items()) + " "
                + " ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                timeout=args.timeout + 30).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    if rc not in (0, 77):
        sys.stderr.write(f"validate_model: {tag} failed (rc {rc}), see {log}\n")
    return rc


def measure_case(args, layout, rails, rate, coll, calibrated, bounds):
    """Repeats one case, and with --recheck measures it again while a row misses its bound
    (samples pooled: a stalled run is outvoted, a model error repeats); returns its result
    dict or None (skipped: 77)."""
    samples, plans = {}, {}
    for attempt in range(1 + args.recheck):
        r = measure_once(args, layout, rails, rate, coll, calibrated, attempt, samples, plans)
        if r is None:
            return None
        if "error" in r or not table([r], bounds)[1]:
            return r
        if attempt < args.recheck:
            missed = ", ".join(fmt_size(row["size"]) for row in r["rows"]
                               if not within(row, bounds))
            print(f"validate_model: {r['name']}: {missed} outside the bound, measuring again "
                  f"({attempt + 2} of {1 + args.recheck})", flush=True)
    return r


def measure_once(args, layout, rails, rate, coll, calibrated, attempt, samples, plans):
    """One round of --repeats runs of a case, its samples added to SAMPLES (size -> list)."""
    name = f"{layout.replace(',', '-')}_r{rails}_{rate}_{coll}_{'cal' if calibrated else 'uncal'}"
    # The model's choice is what is validated: no learning tuner trying others.
    env = {"SHARC_TUNER_LEARN": "0"}
    if calibrated:
        tfile = os.path.join(args.out, f"tuner_{layout.replace(',', '-')}_r{rails}_{rate}.txt")
        if not os.path.exists(tfile):
            rc = run_emulated(args, layout, rails, rate, ["--calibrate", tfile], {},
                              os.path.basename(tfile)[:-4])
            if rc == 77:
                return None
            if rc != 0 or not os.path.exists(tfile):
                return {"name": name, "error": "calibration failed"}
        env["SHARC_TUNER_FILE"] = tfile
    for rep in range(args.repeats):
        for part, (first, last, iters, warmup) in enumerate(size_runs(args)):
            tag = (f"{name}.{rep}" + (f".{part}" if part else "")
                   + (f".again{attempt}" if attempt else ""))
            jpath = os.path.join(args.out, f"{tag}.json")
            perf = [coll, "-b", str(first), "-e", str(last), "-f", str(args.factor), "-n",
                    str(iters), "-w", str(warmup), "-c", "0", "--median", "--explain", "--json",
                    jpath]
            rc = run_emulated(args, layout, rails, rate, perf, env, tag)
            if rc == 77:
                return None
            if rc != 0 or not os.path.exists(jpath):
                continue
            with open(jpath) as f:
                doc = json.load(f)
            for row in doc["rows"]:
                size = row["size"]
                samples.setdefault(size, []).extend(
                    [row["out_of_place"]["time_us"], row["in_place"]["time_us"]])
                plans[size] = row["plan"]
    if not samples:
        return {"name": name, "error": f"no run succeeded (logs in {args.out})"}
    rows = []
    for size in sorted(samples):
        meas = statistics.median(samples[size])
        pred = plans[size]["predicted_us"]
        rows.append({"size": size, "measured_us": meas, "predicted_us": pred,
                     "samples_us": samples[size], "algorithm": plans[size]["algorithm"],
                     "breakdown": plans[size]["breakdown"]})
    return {"name": name, "layout": layout, "rails": rails, "rate": rate, "collective": coll,
            "calibrated": calibrated, "rows": rows,
            "loadavg": open("/proc/loadavg").read().split()[:3]}


def bound(size, bounds):
    return bounds[0] if size >= BIG else bounds[1]


def within(row, bounds):
    return abs(row["predicted_us"] / row["measured_us"] - 1) <= bound(row["size"], bounds)


def fmt_size(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def table(results, bounds):
    """Markdown table of every row; returns (text, misses)."""
    out = ["| layout | rails | rate | collective | tuner | size | algorithm | predicted (us) "
           "| measured (us) | meas/pred | within |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    misses = 0
    for r in results:
        if "error" in r:
            out.append(f"| {r['name']} | | | | | | {r['error']} | | | | no |")
            misses += 1
            continue
        for row in r["rows"]:
            ratio = row["measured_us"] / row["predicted_us"] if row["predicted_us"] > 0 else 0
            ok = within(row, bounds)
            misses += 0 if ok else 1
            out.append(f"| {r['layout']} | {r['rails']} | {r['rate']} | {r['collective']} | "
                       f"{'cal' if r['calibrated'] else 'uncal'} | {fmt_size(row['size'])} | "
                       f"{row['algorithm']} | {row['predicted_us']:.0f} | "
                       f"{row['measured_us']:.0f} | {ratio:.2f} | {'yes' if ok else 'NO'} |")
    return "\n".join(out), misses


def matrix(results, bounds, calibrated):
    """One line per case, measured/predicted per size (docs/measurements.md's form); ✗ outside the bound."""
    rs = [r for r in results if "rows" in r and r["calibrated"] == calibrated]
    sizes = sorted({row["size"] for r in rs for row in r["rows"]})
    out = ["| nodes (ranks each) | rails | link | collective | algorithm | "
           + " | ".join(fmt_size(s) for s in sizes) + " |",
           "|---|---|---|---|---|" + "---|" * len(sizes)]
    for r in sorted(rs, key=lambda r: (r["rate"] != "200mbit", r["rails"], r["layout"],
                                       r["collective"])):
        by = {row["size"]: row for row in r["rows"]}
        algos = list(dict.fromkeys(row["algorithm"] for row in r["rows"]))
        cells = []
        for s in sizes:
            row = by.get(s)
            if not row:
                cells.append("")
                continue
            ok = within(row, bounds)
            cells.append(f"{row['measured_us'] / row['predicted_us']:.2f}" + ("" if ok else " ✗"))
        out.append(f"| {r['layout']} | {r['rails']} | {r['rate']} | {r['collective']} | "
                   f"{' / '.join(algos)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 6))
    markers = {"all_gather": "o", "reduce_scatter": "s", "all_reduce": "^"}
    for cal, color in ((False, "tab:blue"), (True, "tab:orange")):
        for coll, mk in markers.items():
            xs = [row["measured_us"] / 1e3 for r in results if "rows" in r
                  and r["calibrated"] == cal and r["collective"] == coll for row in r["rows"]]
            ys = [row["predicted_us"] / 1e3 for r in results if "rows" in r
                  and r["calibrated"] == cal and r["collective"] == coll for row in r["rows"]]
            if xs:
                ax.scatter(xs, ys, marker=mk, color=color, s=18, alpha=0.7,
                           label=f"{coll} ({'calibrated' if cal else 'uncalibrated'})")
    lo, hi = 0.01, 1e5
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="predicted = measured")
    ax.plot([lo, hi], [lo * 1.15, hi * 1.15], "k:", lw=0.6, label="±15 %")
    ax.plot([lo, hi], [lo * 0.85, hi * 0.85], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    allx = [row["measured_us"] / 1e3 for r in results if "rows" in r for row in r["rows"]]
    if allx:
        ax.set_xlim(min(allx) / 2, max(allx) * 2)
        ax.set_ylim(min(allx) / 2, max(allx) * 2)
    ax.set_xlabel("measured (ms)")
    ax.set_ylabel("predicted by the tuner (ms)")
    ax.set_title("sharc tuner on the emulated cluster (tcp over shaped veth)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--perf", default=os.path.join(HERE, "..", "build", "perf", "sharc-perf"))
    ap.add_argument("--emulate", default=os.path.join(HERE, "emulate-cluster.sh"))
    ap.add_argument("--cases", nargs="+", default=["2,2"], help="ranks per node[@rails]")
    ap.add_argument("--rates", nargs="+", default=["1gbit"], help="tc rates, or 'none'")
    ap.add_argument("--collectives", nargs="+",
                    default=["all_gather", "reduce_scatter", "all_reduce"])
    ap.add_argument("--min", default="64K")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--small-below", default="1M", help="sizes below get their own run")
    ap.add_argument("--small-iters", type=int, default=15)
    ap.add_argument("--small-warmup", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--calibrate", action="store_true", help="also calibrated runs")
    ap.add_argument("--no-uncalibrated", action="store_true")
    ap.add_argument("--out", default="/tmp/sharc-validate")
    ap.add_argument("--from", dest="from_dir", help="tabulate saved results instead")
    ap.add_argument("--bounds", default="0.15,0.30")
    ap.add_argument("--check", action="store_true", help="exit 1 when a row misses --bounds")
    ap.add_argument("--recheck", type=int, default=0,
                    help="measure a case up to N more times while a row misses --bounds")
    ap.add_argument("--plot")
    ap.add_argument("--matrix", action="store_true",
                    help="also measured/predicted per case and size (docs/measurements.md's table)")
    args = ap.parse_args()
    try:
        bounds = [float(x) for x in args.bounds.split(",")]
        assert len(bounds) == 2
    except (ValueError, AssertionError):
        raise SystemExit(f"validate_model: --bounds '{args.bounds}': expected BIG,SMALL fractions")

    results = []
    if args.from_dir:
        for fn in sorted(os.listdir(args.from_dir)):
            if fn.startswith("result_") and fn.endswith(".json"):
                with open(os.path.join(args.from_dir, fn)) as f:
                    results.append(json.load(f))
    else:
        if not os.access(args.perf, os.X_OK):
            raise SystemExit(f"validate_model: no sharc-perf at {args.perf} (--perf)")
        os.makedirs(args.out, exist_ok=True)
        modes = ([] if args.no_uncalibrated else [False]) + ([True] if args.calibrate else [])
        for case in args.cases:
            layout, rails = parse_case(case)
            for rate in args.rates:
                for cal in modes:
                    for coll in args.collectives:
                        r = measure_case(args, layout, rails, rate, coll, cal, bounds)
                        if r is None:
                            print("validate_model: SKIP: the emulated cluster cannot run here")
                            return 77
                        results.append(r)
                        with open(os.path.join(args.out, f"result_{r['name']}.json"), "w") as f:
                            json.dump(r, f, indent=1)
                        text, _ = table([r], bounds)
                        print("\n".join(text.split("\n")[2:]), flush=True)
    text, misses = table(results, bounds)
    print(text)
    if args.matrix:
        for cal in (False, True):
            print(f"\n{'Calibrated' if cal else 'Uncalibrated'}, measured/predicted:\n")
            print(matrix(results, bounds, cal))
    rows = sum(len(r.get("rows", [])) for r in results)
    print(f"\n{rows} rows, {misses} outside the bounds {bounds[0]:.0%} (>= 256 KiB) / "
          f"{bounds[1]:.0%} (below); load average {os.getloadavg()[0]:.2f}")
    for r in results:
        for row in r.get("rows", []):
            if not within(row, bounds):
                print(f"outside: {r['name']} {fmt_size(row['size'])} {row['algorithm']}: "
                      f"predicted {row['predicted_us']:.0f} us, measured {row['measured_us']:.0f}"
                      f" (samples {', '.join(f'{x:.0f}' for x in row['samples_us'])})")
    if args.plot:
        plot(results, args.plot)
        print(f"wrote {args.plot}")
    return 1 if args.check and misses else 0


if __name__ == "__main__":
    sys.exit(main())
