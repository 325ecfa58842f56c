"""The shared harness of the test_coll_*.py files: torch.distributed collectives over the sharc
backend, checked against gloo and against independent references.

Each test_coll_*.py file holds one family of checks (all_reduce/reduce, all_gather, ...) as
"battery sections": functions of a Battery (a group under test, dtypes, element counts) that
loop over collectives x dtypes x reduce ops x element counts x completion modes and record, in
a Checks, the mismatches they saw. The sections of every collected file run in one launched job
per world size (2, 3 and 4 ranks), in the fixed order SECTION_ORDER, launched the first time a
test asks for it and shared by all the files' tests (test_world[ws-section] checks its section
of the job's results), so that splitting the checks into files costs no extra process launches;
running one file alone runs only that file's sections. The sub-group, TCP-rendezvous and error
jobs (test_coll_subgroups.py, test_coll_errors.py) are launched once each.

Each rank builds every rank's inputs from a seed (so it computes the expected result itself, in
float64 for floating types, exactly for integers and bool), runs the collective on the group
under test, runs it again with identical inputs on a gloo group over the same ranks where gloo
has the operation, and compares the result with both.

    SHARC_TORCH_TEST_BACKEND=gloo   runs the files with gloo as the backend under test
                                    (a check of the harness; sharc-only features are skipped)
    SHARC_TORCH_TEST_TRACE=1        every rank prints each case as it starts (finding a hang)
    SHARC_TORCH_TEST_TIMEOUT=S      seconds a job may run before its ranks count as hung

torch 2.6's gloo, the reference, has gaps the checks work around: no AVG or PREMUL_SUM, no
reduce_scatter of lists or all_to_all of lists, no stacked all_gather_into_tensor output, no
int16; its reduce_scatter_tensor sums whatever op it is given (so it is compared for SUM only)
and its work never completes without a wait(); its send/recv works have no future.
"""
import importlib
import os
import sys
import time
import zlib

import pytest
import torch
import torch.distributed as dist

from launcher import run_ranks

BACKEND = os.environ.get("SHARC_TORCH_TEST_BACKEND", "sharc")
# Features gloo lacks (so only checked when the backend under test is sharc): AVG, PREMUL_SUM,
# reduce_scatter of lists, all_to_all of lists, and coalescing with a device.
FULL = BACKEND != "gloo"
ENV = {"GLOO_SOCKET_IFNAME": "lo"}
# Seconds a launched job may take before its ranks count as hung.
JOB_TIMEOUT = int(os.environ.get("SHARC_TORCH_TEST_TIMEOUT", "240"))
TRACE = bool(os.environ.get("SHARC_TORCH_TEST_TRACE"))  # ranks print each case as it starts

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool]
COUNTS = [0, 1, 1001]
LARGE = 1_048_583  # ~1M elements, not a multiple of 2, 3 or 4
# How a call is completed: synchronously, work.wait(), work.get_future().wait(), or spinning on
# work.is_completed() (gloo's reduce_scatter_tensor never completes without a wait: not polled).
MODES = ["sync", "wait", "future", "poll"] if FULL else ["sync", "wait", "future"]
# Relative tolerance and absolute tolerance per contributing rank (values are in [-1.5, 1.5]).
TOL = {torch.float32: (1e-5, 2e-6), torch.float64: (1e-12, 1e-12),
       torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}
WORLD_SIZES = [2, 3, 4]


def _backend_importable():
    if BACKEND != "sharc":
        return True
    try:
        import sharc.torch  # noqa: F401
        return True
    except ImportError:
        return False


# Every test_coll_*.py file: pytestmark = requires_backend
requires_backend = pytest.mark.skipif(not _backend_importable(),
                                      reason="sharc.torch is not installed (build plugin/torch)")


# ----------------------------------------------------------------------------- inputs, references

def _seed(key):
    return zlib.crc32(key.encode())


def gen(key, shape, dtype, kind="any"):
    """A deterministic tensor for `key`. kind: 'any' (full range, nothing is computed from it),
    'sum' (small enough that ws-way sums stay exact in integers), 'prod' (products too),
    'or'/'and' (bool biased so that the logical result is not constant)."""
    g = torch.Generator().manual_seed(_seed(key))
    if isinstance(shape, int):
        shape = (shape,)
    if dtype == torch.bool:
        p = {"and": 0.85, "or": 0.15}.get(kind, 0.5)
        return torch.rand(shape, generator=g) < p
    if dtype.is_floating_point or dtype.is_complex:
        x = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
        if kind == "prod":  # magnitudes in [0.5, 1.5]
            x = torch.sign(x) * (x.abs() + 0.5)
        elif kind == "any":
            x = x * 1000
        if dtype.is_complex:
            return torch.complex(x, x.flip(-1) if x.dim() else x).to(dtype)
        return x.to(dtype)
    info = torch.iinfo(dtype)
    if kind == "prod":
        lo, hi = max(info.min, -3), 3
    elif kind == "sum":
        lo, hi = {torch.int8: (-30, 30), torch.uint8: (0, 60), torch.int16: (-2000, 2000),
                  torch.int32: (-(2**20), 2**20), torch.int64: (-(2**40), 2**40)}[dtype]
    else:
        lo, hi = (info.min, info.max) if dtype != torch.int64 else (-(2**62), 2**62)
    return torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(dtype)


# Reduce ops by name; PREMUL_SUM comes with a scalar or a tensor factor.
def redop(name):
    R = dist.ReduceOp
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(0.375)
    if name == "PREMUL_SUM_T":
        return dist._make_nccl_premul_sum(torch.tensor([1.5], dtype=torch.float32))
    return {"SUM": R.SUM, "AVG": R.AVG, "PRODUCT": R.PRODUCT, "MIN": R.MIN, "MAX": R.MAX}[name]


GLOO_OPS = {"SUM", "PRODUCT", "MIN", "MAX"}


def ops_for(dtype, full=True):
    if dtype.is_floating_point:
        ops = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM", "PREMUL_SUM_T"]
    else:
        ops = ["SUM", "PRODUCT", "MIN", "MAX"]
    return ops if (FULL and full) else [o for o in ops if o in GLOO_OPS]


def kind_for(op, dtype):
    if dtype == torch.bool:
        return "and" if op in ("PRODUCT", "MIN") else "or"
    return "prod" if op == "PRODUCT" else "sum"


def ref_reduce(op, xs, dtype):
    """op over the ranks' tensors xs, in float64 / int64 / bool."""
    if dtype == torch.bool:
        s = torch.stack(xs)
        return s.any(0) if op in ("SUM", "MAX") else s.all(0)
    acc = torch.float64 if dtype.is_floating_point else torch.int64
    s = torch.stack([x.to(acc) for x in xs])
    if op == "SUM":
        return s.sum(0)
    if op == "AVG":
        return s.sum(0) / len(xs)
    if op == "PRODUCT":
        return s.prod(0)
    if op == "MIN":
        return s.amin(0)
    if op == "MAX":
        return s.amax(0)
    if op == "PREMUL_SUM":
        return (s * 0.375).sum(0)
    if op == "PREMUL_SUM_T":
        return (s * 1.5).sum(0)
    raise ValueError(op)


def is_exact(op, dtype):
    return not dtype.is_floating_point or op in ("MIN", "MAX", None)


def mismatch(got, want, dtype, exact, nranks, slack=1.0):
    """None if `got` (dtype) matches `want` (a reference or another backend's result), else
    a description of the first difference."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != dtype:
        return f"dtype {got.dtype}, expected {dtype}"
    if got.numel() == 0:
        return None
    if got.is_complex():
        got, want = torch.view_as_real(got), torch.view_as_real(want.to(dtype))
    g = got.reshape(-1)
    w = want.reshape(-1)
    if exact or not dtype.is_floating_point:
        bad = g != w.to(dtype)
    else:
        rtol, atol = TOL[dtype]
        bad = ~torch.isclose(g.double(), w.double(), rtol=rtol * slack,
                             atol=atol * nranks * slack)
    if not bool(bad.any()):
        return None
    i = int(bad.nonzero()[0])
    return (f"{int(bad.sum())} of {g.numel()} elements differ; first at flat index {i}: "
            f"got {g[i].item()!r}, expected {w[i].item()!r}")


def shape_of(n):
    """1001 elements go as a 3-d tensor (the backend must not care), others flat."""
    return (7, 11, 13) if n == 1001 else (n,)


# ----------------------------------------------------------------------------- running one call

def complete(mode, start):
    """Runs start(async_op) to completion the way `mode` says; returns the work's future value
    for mode 'future', else None. Raises AssertionError on misbehaving work objects."""
    if mode == "sync":
        w = start(False)
        assert w is None, f"synchronous call returned {w!r}"
        return None
    w = start(True)
    assert w is not None, "async_op=True returned no work"
    if mode == "wait":
        assert w.wait() is True, "work.wait() did not return True"
        assert w.is_completed(), "work.is_completed() is False after wait()"
        assert w.wait() is True, "a second work.wait() did not return True"
        return None
    if mode == "future":
        fut = w.get_future()
        value = fut.wait()
        assert fut.done(), "future not done after wait()"
        w.wait()
        return value
    if mode == "poll":
        deadline = time.monotonic() + 120
        while not w.is_completed():
            assert time.monotonic() < deadline, "work.is_completed() stayed False for 120 s"
            time.sleep(0)
        assert w.wait() is True
        return None
    raise ValueError(mode)


class Group:
    """A group under test, its gloo twin over the same ranks, and this rank's place in it."""

    def __init__(self, name, members, pg, gloo):
        self.name, self.members, self.pg, self.gloo = name, members, pg, gloo
        self.size = len(members)
        self.rank = members.index(dist.get_rank())

    def glob(self, group_rank):
        return self.members[group_rank]


class _SectionStop(Exception):
    """Too many errors in one section: go on with the next."""


class Checks:
    """Collects mismatch descriptions per section (a battery section, a sub-group, ...);
    exceptions in one case are recorded and the run goes on (a case that raised on every rank
    leaves the groups usable), up to a limit per section."""

    MAX_ERRORS = 12

    def __init__(self, rank):
        self.rank = rank
        self.section = "setup"
        self.fails = {}   # section -> descriptions
        self.counts = {}  # section -> checks made
        self.seconds = {}  # section -> time it took on this rank
        self.errors = 0
        self.gloo_unsupported = set()

    def begin(self, section):
        self.section, self.errors, self._t0 = section, 0, time.time()
        self.counts.setdefault(section, 0)

    def end(self):
        self.seconds[self.section] = round(time.time() - self._t0, 2)

    def fail(self, msg):
        self.fails.setdefault(self.section, []).append(f"rank {self.rank}: {msg}")
        if TRACE:
            print(f"rank {self.rank}: {msg}", file=sys.stderr, flush=True)

    def expect(self, what, got, want, dtype, exact, nranks, slack=1.0):
        self.counts[self.section] = self.counts.get(self.section, 0) + 1
        m = mismatch(got, want, dtype, exact, nranks, slack)
        if m:
            self.fail(f"{what}: {m}")

    def true(self, what, cond, detail=""):
        self.counts[self.section] = self.counts.get(self.section, 0) + 1
        if not cond:
            self.fail(f"{what}: {detail or 'check failed'}")

    def run(self, what, fn):
        if TRACE:
            print(f"[rank {self.rank}] {time.time():.2f} {what}", file=sys.stderr, flush=True)
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            self.errors += 1
            first = str(e).strip().splitlines()[0][:400] if str(e).strip() else ""
            self.fail(f"{what}: raised {type(e).__name__}: {first}")
            if self.errors >= self.MAX_ERRORS:
                self.fail(f"{self.MAX_ERRORS} errors: the rest of this section is skipped")
                raise _SectionStop()

    def section_run(self, section, fn):
        """Runs fn as a section of its own."""
        self.begin(section)
        try:
            fn()
        except _SectionStop:
            pass
        self.end()

    def gloo(self, what, fn):
        """Runs fn on gloo; False (and remembered) where gloo lacks the operation."""
        try:
            fn()
            return True
        except (RuntimeError, ValueError) as e:
            s = str(e)
            if any(k in s for k in ("not support", "Cannot use", "does not implement",
                                    "Unsupported", "unsupported", "not implemented")):
                self.gloo_unsupported.add(what)
                return False
            raise


def label(what, G, dtype=None, op=None, n=None, mode=None):
    parts = [what, f"group={G.name}"]
    if dtype is not None:
        parts.append(str(dtype).replace("torch.", ""))
    if op is not None:
        parts.append(op)
    if n is not None:
        parts.append(f"n={n}")
    if mode is not None:
        parts.append(mode)
    return " ".join(parts)


# ----------------------------------------------------------------------------- battery sections

# The order in which a job runs the sections: a Battery's case counter cycles completion modes
# and roots over the cases of all the sections it runs, so a fixed order gives every case the
# same mode and root in every full run.
SECTION_ORDER = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                 "gather_scatter", "barrier", "all_to_all", "p2p", "p2p_large_tags",
                 "coalesced", "objects", "guards", "wait_timeout"]
SECTIONS = {}  # name -> function(Battery), filled as the test_coll_*.py files are imported


def battery_section(fn):
    """Registers fn(B) as the battery section named fn.__name__ (one of SECTION_ORDER)."""
    assert fn.__name__ in SECTION_ORDER, f"{fn.__name__} is not in SECTION_ORDER"
    SECTIONS[fn.__name__] = fn
    return fn


class Battery:
    """What the sections run on: C (the Checks), G (the group), the dtypes and element counts to
    loop over, whether to include ~1M-element cases (large) and features gloo lacks (full)."""

    def __init__(self, C, G, dtypes=DTYPES, counts=COUNTS, large=True, full=True):
        self.C, self.G = C, G
        self.dtypes, self.counts, self.large, self.full = dtypes, counts, large, full
        self.i = 0  # case counter: cycles completion modes and roots

    def mode(self, gloo_sync_only=False):
        self.i += 1
        if gloo_sync_only and not FULL:
            return "sync"
        return MODES[self.i % len(MODES)]

    def key(self, *parts):
        return "/".join([self.G.name] + [str(p) for p in parts])

    def inputs(self, key, shape, dtype, kind="any"):
        return [gen(f"{key}/{r}", shape, dtype, kind) for r in range(self.G.size)]

    def run(self, sections, prefix=""):
        """Runs the named sections in the given order, each as a section of C."""
        for name in sections:
            if name.startswith("p2p") and self.G.size == 1:
                continue  # nobody to send to
            self.C.section_run(prefix + name, lambda name=name: SECTIONS[name](self))


# ----------------------------------------------------------------------------- rank functions

def settle(groups):
    """Lets gloo's worker threads drop their last references before the groups are destroyed:
    torch 2.6's ProcessGroupGloo destructor holds the GIL while it joins threads that may need it
    to free a tensor, and the launcher's destroy_process_group then hangs now and then."""
    for g in groups:
        if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER:
            dist.barrier(group=g)
    time.sleep(0.3)


def result_of(C, t0):
    return {"fails": C.fails, "checks": C.counts, "seconds": C.seconds,
            "total_seconds": round(time.time() - t0, 1),
            "gloo_unsupported": sorted(C.gloo_unsupported)}


def import_sections(modules):
    """Imports the modules (test_coll_*.py by module name) that define battery sections."""
    for m in modules:
        importlib.import_module(m)


def world_job(rank, ws, large, modules):
    """Every section the modules define, in SECTION_ORDER, on the default group."""
    import_sections(modules)
    t0 = time.time()
    C = Checks(rank)
    gloo = dist.new_group(backend="gloo")
    G = Group(f"world{ws}", list(range(ws)), None, gloo)
    Battery(C, G, large=large).run([s for s in SECTION_ORDER if s in SECTIONS])
    settle([gloo])
    return result_of(C, t0)


# ----------------------------------------------------------------------------- test side

def launch(ws, fn, *args, init="file"):
    return run_ranks(ws, fn, *args, backend=BACKEND, init=init, env=ENV, timeout=JOB_TIMEOUT)


_JOBS = {}  # launched jobs, shared by the tests that check their sections


def job(key, start):
    """The results of a job, launched the first time a test asks for it; a job that failed to
    report fails every test that asks for it (without launching it again)."""
    if key not in _JOBS:
        try:
            _JOBS[key] = (True, start())
        except AssertionError as e:
            _JOBS[key] = (False, str(e))
    ok, value = _JOBS[key]
    if not ok:
        raise AssertionError(f"job {key} failed:\n{value}")
    return value


def assert_sections(results, match, need_checks=True):
    """No failure in the sections `match` accepts, on any rank, and some checks made."""
    fails = [f for r in results for sec, fs in sorted(r["fails"].items()) if match(sec)
             for f in fs]
    checks = sum(n for r in results for sec, n in r["checks"].items() if match(sec))
    secs = round(max(sum(t for sec, t in r["seconds"].items() if match(sec)) for r in results), 2)
    lacks = sorted({x for r in results for x in r.get("gloo_unsupported", [])})
    print(f"{checks} checks over all ranks, {secs} s" + (f"; gloo lacks {lacks}" if lacks else ""))
    assert not fails, f"{len(fails)} failed checks:\n" + "\n".join(fails[:60])
    if need_checks:
        assert checks > 0, "no checks ran"


def check_world(ws, section):
    """Checks one section of the world job of `ws` ranks: the battery (all dtypes x ops x counts
    x completion modes, with ~1M-element cases) on the default group, every section of every
    imported test_coll_*.py file in one launch per world size."""
    modules = sorted({fn.__module__ for fn in SECTIONS.values()})
    results = job(f"world{ws}", lambda: launch(ws, world_job, True, modules))
    assert_sections(results, lambda sec: sec == section, need_checks=section != "wait_timeout")
