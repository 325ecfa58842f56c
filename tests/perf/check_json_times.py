#!/usr/bin/env python3
"""sharc-perf's two times per row (tests/CMakeLists.txt, perf.json_times): the mean over -n
(nccl-tests' time, the table's by default) and the median call (--median), in the JSON.

  check_json_times.py SHARC_PERF

Runs 2 self-launched ranks of this host three times and checks, for every row and both
variants: time_us is mean_us without --median and median_us with it; with -n 1 the two are
the same call; with an odd -n the median is at most the mean x n / ((n + 1) / 2) (the calls
from the median up take at least that share of the whole).
"""

import json
import os
import subprocess
import sys
import tempfile


def run(perf, out, *extra):
    path = os.path.join(out, f"run{len(os.listdir(out))}.json")
    cmd = [perf, "all_reduce", "-N", "2", "-T", "120", "-b", "4K", "-e", "256K", "-f", "8",
           "-w", "1", "--json", path, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    with open(path) as f:
        rows = json.load(f)["rows"]
    if not rows:
        sys.exit(f"{' '.join(cmd)}: no rows")
    return [(row["size"], name, row[name]) for row in rows for name in ("out_of_place", "in_place")]


def main():
    perf = sys.argv[1]
    bad = []
    with tempfile.TemporaryDirectory() as out:
        for size, name, t in run(perf, out, "-n", "5"):
            if t["time_us"] != t["mean_us"]:
                bad.append(f"-n 5, {size} B {name}: time_us {t['time_us']} != mean_us {t['mean_us']}")
            if not 0 < t["median_us"] <= t["mean_us"] * 5 / 3 * 1.0001:
                bad.append(f"-n 5, {size} B {name}: median_us {t['median_us']} outside "
                           f"(0, mean_us {t['mean_us']} x 5/3]")
        for size, name, t in run(perf, out, "-n", "1", "--median"):
            if not t["time_us"] == t["median_us"] == t["mean_us"] > 0:
                bad.append(f"-n 1 --median, {size} B {name}: time_us {t['time_us']}, median_us "
                           f"{t['median_us']}, mean_us {t['mean_us']} (one call: all equal)")
        for size, name, t in run(perf, out, "-n", "4", "--median"):
            if t["time_us"] != t["median_us"]:
                bad.append(f"-n 4 --median, {size} B {name}: time_us {t['time_us']} != "
                           f"median_us {t['median_us']}")
    for line in bad:
        print("check_json_times:", line)
    print("check_json_times:", "FAILED" if bad else "PASSED")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
