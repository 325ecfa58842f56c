#!/usr/bin/env python3
"""Runs PyTorch's own distributed test suite (torch.testing._internal.distributed.
distributed_test, the one behind torch's test/distributed/test_distributed_spawn.py) against a
torch.distributed backend, by default sharc through the suite's plugin route.

    bash tools/torch-env.sh -- python3 tools/torch-distributed-suite.py \\
        [--backend sharc|gloo] [--world-size 2] [-k REGEX ...] [--timeout 180] \\
        [--start-method spawn|fork] [--json /tmp/suite.json] [--list] [--smoke]
    .venv/bin/python tools/torch-distributed-suite.py ...     # any Python with torch and sharc

e.g. (in the background, the log in /tmp):

    bash tools/torch-env.sh -- python3 tools/torch-distributed-suite.py --backend sharc \\
        -k 'test_(all_gather|all_reduce|broadcast)' --json /tmp/sharc.json > /tmp/sharc.log 2>&1 &

On Debian 12, torch is in the Debian trixie root that tools/torch-env.sh enters (checkout at
/src); any other Python with torch works as well (e.g. a venv with torch from PyPI). The backend
comes from the sharc package installed into that Python (pip install --no-build-isolation
./plugin/torch; in the root, tools/torch-test.sh installs it, and so does tools/test.sh), never
from the checkout's plugin/torch/sharc, which has no built extension: the script says so, with
the install command, when the package is missing.

--smoke runs SMOKE, 20 fast tests across the backend (collectives, point to point, groups, DDP)
with fork unless --start-method says otherwise, in well under a minute; it also fails when one
of them is missing from this torch's suite or skipped, so that it cannot pass without testing.
For CI, after tools/test.sh (which installs sharc into the root):

    bash tools/torch-env.sh -- python3 tools/torch-distributed-suite.py --smoke

What it does, as test_distributed_spawn.py does for gloo/nccl/ucc: sets BACKEND, WORLD_SIZE,
TEMP_DIR and INIT_METHOD, defines TestDistBackendWithSpawn(TestDistBackend,
DistributedTest._DistTestBase) whose setUp spawns WORLD_SIZE processes per test, and runs it with
unittest. A backend that is not gloo/nccl/ucc/mpi is only accepted by the suite if it is in
DistTestCases.backend_feature["plugin"]; this script adds it there (and, by default, to the
"ddp" and "subgroup" feature sets too, so the DDP and sub-group tests run rather than skip; see
--features) before the suite module is imported, because the suite evaluates its skip
decorators at import time.

The test processes are spawned (multiprocessing "spawn"): each re-imports this file as
__mp_main__, so the module-level code below (env, `import sharc.torch` for the registration,
the feature sets, the test class) runs in every rank, while argument parsing and the runner run
only in the parent (`__name__ == "__main__"`); the parent hands its settings to the ranks through
the environment. --start-method fork forks the ranks from the parent instead (what torch's old
test_distributed_fork.py did): same tests, a second per test instead of ~10 on a small machine.

-k REGEX (repeatable) keeps the tests whose name matches any of them (re.search); --list only
prints the selected names. --timeout sets DISTRIBUTED_TESTS_DEFAULT_TIMEOUT, the seconds the
parent waits for a test's ranks before killing them (torch's default is 300). --json writes one
record per test (status, seconds, the error text); paths are inside the root, so /tmp there is
/var/cache/sharc/trixie-root/tmp on the host (a path under /src lands in the checkout).
The exit status is 0 when nothing failed.
"""
import os
import sys

_BUILTIN = {"gloo", "nccl", "ucc", "mpi"}

if __name__ == "__main__":
    import argparse
    import tempfile

    _p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _p.add_argument("--backend", default="sharc")
    _p.add_argument("--world-size", type=int, default=2)
    _p.add_argument("-k", dest="patterns", action="append", default=[],
                    help="regex on the test name (re.search); repeatable, OR-ed")
    _p.add_argument("--timeout", type=int, default=180,
                    help="seconds a test's ranks may take before they are killed")
    _p.add_argument("--features", default="plugin,ddp,subgroup",
                    help="DistTestCases.backend_feature sets to add a non-builtin backend to")
    _p.add_argument("--plugin-module", default=None,
                    help="module that registers the backend (default sharc.torch for sharc)")
    _p.add_argument("--start-method", choices=("spawn", "fork"), default=None,
                    help="how the ranks are started: spawn (as test_distributed_spawn.py) or fork "
                    "(much faster per test: no re-import of torch and the suite in each rank); "
                    "default spawn, fork with --smoke")
    _p.add_argument("--json", default=None, help="write per-test results here")
    _p.add_argument("--list", action="store_true", help="list the selected tests and exit")
    _p.add_argument("--smoke", action="store_true",
                    help="only the SMOKE tests (fast, for CI); fails if one is missing or skipped")
    _p.add_argument("-v", "--verbosity", type=int, default=2)
    ARGS = _p.parse_args()
    if ARGS.start_method is None:
        ARGS.start_method = "fork" if ARGS.smoke else "spawn"

    _temp = tempfile.mkdtemp(prefix="dist-suite-")
    os.environ.update({
        "BACKEND": ARGS.backend,
        "WORLD_SIZE": str(ARGS.world_size),
        "TEMP_DIR": _temp,  # TestDistBackend.setUp makes a fresh one per test
        "INIT_METHOD": "file://" + os.path.join(_temp, "init_file"),
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(ARGS.timeout),
        "DIST_SUITE_FEATURES": ARGS.features,
        "DIST_SUITE_START_METHOD": ARGS.start_method,
        "DIST_SUITE_PLUGIN_MODULE": ARGS.plugin_module
        or ("sharc.torch" if ARGS.backend == "sharc" else ""),
    })

# ---- from here on: runs in the parent and in every spawned rank ----
import importlib  # noqa: E402
import importlib.util  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if not dist.is_available():
    sys.exit("torch.distributed is not available")

BACKEND = os.environ["BACKEND"]


def _import_plugin(name):
    """Imports the module that registers the backend: the installed package (the checkout's
    plugin/torch/sharc has no built extension unless built in place), or exits saying how to
    install it."""
    try:
        importlib.import_module(name)
    except ImportError as e:
        top = name.split(".")[0]
        try:
            spec = importlib.util.find_spec(top)
        except ImportError:
            spec = None
        found = f"; '{top}' resolves to {spec.origin}" if spec and spec.origin else ""
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.exit(
            f"torch-distributed-suite: cannot import {name} ({type(e).__name__}: {e}){found}.\n"
            f"Install sharc into this Python (torch {torch.__version__}) first:\n"
            f"    {sys.executable} -m pip install --no-build-isolation {here}/plugin/torch\n"
            "(in the Debian root, `bash tools/torch-env.sh -- bash tools/torch-test.sh` installs "
            "it; a sharc/ source directory on sys.path or PYTHONPATH hides the installed one)")


if os.environ.get("DIST_SUITE_PLUGIN_MODULE"):
    _import_plugin(os.environ["DIST_SUITE_PLUGIN_MODULE"])  # registers the backend

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND not in _BUILTIN:
    for _feature in filter(None, os.environ.get("DIST_SUITE_FEATURES", "plugin").split(",")):
        DistTestCases.backend_feature.setdefault(_feature, set()).add(BACKEND)
    DistTestCases.backend_feature["plugin"].add(BACKEND)

torch.backends.cuda.matmul.allow_tf32 = False

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

# --smoke: fast tests (about a second each with fork) that run, rather than skip, on sharc with
# torch 2.6 and 2.15 at world size 2: collectives, point to point, groups, DDP.
SMOKE = [
    "test_all_reduce_sum", "test_all_reduce_sum_async", "test_all_reduce_sum_complex",
    "test_all_reduce_complex_unsupported_ops", "test_broadcast", "test_reduce_sum",
    "test_all_gather", "test_all_gather_coalesced_simple", "test_gather", "test_scatter",
    "test_barrier", "test_send_recv_with_tag", "test_isend", "test_irecv", "test_destroy_group",
    "test_DistributedDataParallelCPU", "test_ddp_create_graph", "test_send_recv_any_source",
    "test_send_recv_any_source_autograd_profiler", "test_send_recv_any_source_torch_profiler",
]


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if os.environ.get("DIST_SUITE_START_METHOD", "spawn") == "fork":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


def _main(args):
    import json
    import re
    import time
    import unittest

    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    missing = []
    if args.smoke:
        missing = [n for n in SMOKE if n not in names]
        names = [n for n in names if n in SMOKE]
    if args.patterns:
        regs = [re.compile(p) for p in args.patterns]
        names = [n for n in names if any(r.search(n) for r in regs)]
    if missing:
        print(f"smoke tests missing from this torch's suite: {missing}", file=sys.stderr)
    if args.list:
        print("\n".join(names))
        print(f"{len(names)} tests", file=sys.stderr)
        return 0
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)

    records = {}

    class Result(unittest.TextTestResult):
        def startTest(self, test):
            self._t0 = time.monotonic()
            super().startTest(test)

        def _record(self, test, status, text=""):
            name = test.id().split(".")[-1]
            records[name] = {"status": status,
                             "seconds": round(time.monotonic() - self._t0, 2),
                             "detail": text}

        def addSuccess(self, test):
            super().addSuccess(test)
            self._record(test, "passed")

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self._record(test, "skipped", reason)

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._record(test, "failed", self.failures[-1][1])

        def addError(self, test, err):
            super().addError(test, err)
            self._record(test, "error", self.errors[-1][1])

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            self._record(test, "xfail")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            self._record(test, "xpass")

        def stopTest(self, test):
            super().stopTest(test)
            self.stream.flush()

    print(f"backend={BACKEND} world_size={os.environ['WORLD_SIZE']} tests={len(names)} "
          f"start_method={os.environ['DIST_SUITE_START_METHOD']} "
          f"timeout={os.environ['DISTRIBUTED_TESTS_DEFAULT_TIMEOUT']}s "
          f"features={sorted(k for k, v in DistTestCases.backend_feature.items() if BACKEND in v)}",
          flush=True)
    t0 = time.monotonic()
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=args.verbosity,
                                     resultclass=Result).run(suite)
    wall = time.monotonic() - t0
    counts = {}
    for r in records.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"SUMMARY backend={BACKEND} world_size={os.environ['WORLD_SIZE']} "
          f"wall={wall:.0f}s " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())),
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": BACKEND, "world_size": int(os.environ["WORLD_SIZE"]),
                       "patterns": args.patterns, "wall_s": round(wall, 1),
                       "counts": counts, "tests": records}, f, indent=1)
    if args.smoke and (missing or counts.get("skipped")):
        print(f"SMOKE FAILED: {len(missing)} missing, {counts.get('skipped', 0)} skipped "
              "(a smoke test must run)", flush=True)
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(_main(ARGS))
