"""torch.distributed collectives over the sharc backend, checked against gloo and against
independent references.

Every check runs inside a few launched jobs (one per world size 2, 3 and 4, one for sub-groups,
one for errors, one with TCP rendezvous): the ranks loop over collectives x dtypes x reduce ops
x element counts x completion modes and return, per section, the mismatches they saw, so a whole
world size costs one process launch; the tests (test_world[ws-section], test_subgroups[part],
test_errors_*, ...) each check their part of a job's results. Each rank builds every rank's
inputs from a seed (so it computes the expected result itself, in float64 for floating types,
exactly for integers and bool), runs the collective on the group under test, runs it again with
identical inputs on a gloo group over the same ranks where gloo has the operation, and compares
the result with both.

    SHARC_TORCH_TEST_BACKEND=gloo   runs the whole file with gloo as the backend under test
                                    (a check of the harness; sharc-only features are skipped)
    SHARC_TORCH_TEST_TRACE=1        every rank prints each case as it starts (finding a hang)
    SHARC_TORCH_TEST_TIMEOUT=S      seconds a job may run before its ranks count as hung

torch 2.6's gloo, the reference, has gaps the checks work around: no AVG or PREMUL_SUM, no
reduce_scatter of lists or all_to_all of lists, no stacked all_gather_into_tensor output, no
int16; its reduce_scatter_tensor sums whatever op it is given (so it is compared for SUM only)
and its work never completes without a wait(); its send/recv works have no future.
"""
import datetime
import os
import sys
import time
import warnings
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


def _backend_importable():
    if BACKEND != "sharc":
        return True
    try:
        import sharc.torch  # noqa: F401
        return True
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(not _backend_importable(),
                                reason="sharc.torch is not installed (build plugin/torch)")


# ----------------------------------------------------------------------------- inputs, references

def _seed(key):
    return zlib.crc32(key.encode())


def _gen(key, shape, dtype, kind="any"):
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
def _redop(name):
    R = dist.ReduceOp
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(0.375)
    if name == "PREMUL_SUM_T":
        return dist._make_nccl_premul_sum(torch.tensor([1.5], dtype=torch.float32))
    return {"SUM": R.SUM, "AVG": R.AVG, "PRODUCT": R.PRODUCT, "MIN": R.MIN, "MAX": R.MAX}[name]


GLOO_OPS = {"SUM", "PRODUCT", "MIN", "MAX"}


def _ops_for(dtype, full=True):
    if dtype.is_floating_point:
        ops = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM", "PREMUL_SUM_T"]
    else:
        ops = ["SUM", "PRODUCT", "MIN", "MAX"]
    return ops if (FULL and full) else [o for o in ops if o in GLOO_OPS]


def _kind(op, dtype):
    if dtype == torch.bool:
        return "and" if op in ("PRODUCT", "MIN") else "or"
    return "prod" if op == "PRODUCT" else "sum"


def _ref_reduce(op, xs, dtype):
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


def _exact(op, dtype):
    return not dtype.is_floating_point or op in ("MIN", "MAX", None)


def _mismatch(got, want, dtype, exact, nranks, slack=1.0):
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


def _shape(n):
    """1001 elements go as a 3-d tensor (the backend must not care), others flat."""
    return (7, 11, 13) if n == 1001 else (n,)


# ----------------------------------------------------------------------------- running one call

def _complete(mode, start):
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


class _Group:
    """A group under test, its gloo twin over the same ranks, and this rank's place in it."""

    def __init__(self, name, members, pg, gloo):
        self.name, self.members, self.pg, self.gloo = name, members, pg, gloo
        self.size = len(members)
        self.rank = members.index(dist.get_rank())

    def glob(self, group_rank):
        return self.members[group_rank]


class _SectionStop(Exception):
    """Too many errors in one section: go on with the next."""


class _Checks:
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
        m = _mismatch(got, want, dtype, exact, nranks, slack)
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


def _p(what, G, dtype=None, op=None, n=None, mode=None):
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


# ----------------------------------------------------------------------------- collectives

class _Battery:
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
        return [_gen(f"{key}/{r}", shape, dtype, kind) for r in range(self.G.size)]

    # -- all_reduce -----------------------------------------------------------------------
    def all_reduce(self):
        C, G = self.C, self.G
        for dtype in self.dtypes:
            for op in _ops_for(dtype, self.full):
                for n in self.counts:
                    self._all_reduce_case(dtype, op, n, self.mode())
        # complex tensors: torch reduces them as float pairs (SUM only)
        xs = self.inputs(self.key("ar-complex"), 1001, torch.complex64, "sum")
        want = torch.stack([x.to(torch.complex128) for x in xs]).sum(0)
        mode = self.mode()
        what = _p("all_reduce", G, torch.complex64, "SUM", 1001, mode)

        def go_complex():
            t = xs[G.rank].clone()
            _complete(mode, lambda a: dist.all_reduce(t, group=G.pg, async_op=a))
            C.expect(what, torch.view_as_real(t), torch.view_as_real(want), torch.float32,
                     False, G.size)
        C.run(what, go_complex)

        if self.large:
            for dtype, op in [(torch.float32, "SUM"), (torch.bfloat16, "AVG" if FULL else "SUM"),
                              (torch.int32, "MAX")]:
                self._all_reduce_case(dtype, op, LARGE, self.mode())

    def _all_reduce_case(self, dtype, op, n, mode):
        C, G = self.C, self.G
        what = _p("all_reduce", G, dtype, op, n, mode)
        key = self.key("ar", dtype, op, n)
        xs = self.inputs(key, _shape(n), dtype, _kind(op, dtype))
        want = _ref_reduce(op, xs, dtype)

        def go():
            t = xs[G.rank].clone()
            val = _complete(mode, lambda a: dist.all_reduce(t, op=_redop(op), group=G.pg,
                                                            async_op=a))
            C.expect(what, t, want, dtype, _exact(op, dtype), G.size)
            if mode == "future":
                C.true(what + " future value", isinstance(val, list) and len(val) == 1
                       and torch.equal(val[0], t), f"got {type(val).__name__}")
            if op in GLOO_OPS:
                r = xs[G.rank].clone()
                if C.gloo(f"all_reduce {dtype} {op}",
                          lambda: dist.all_reduce(r, op=_redop(op), group=G.gloo)):
                    C.expect(what + " vs gloo", t, r, dtype, _exact(op, dtype), G.size, 2.0)
        C.run(what, go)

    # -- all_gather_into_tensor / all_gather ------------------------------------------------
    def all_gather(self):
        C, G = self.C, self.G
        dtypes = self.dtypes + ([torch.int16, torch.complex64] if self.full and FULL else [])
        for dtype in dtypes:
            for n in self.counts:
                key = self.key("ag", dtype, n)
                shape = _shape(n)
                xs = self.inputs(key, shape, dtype)
                cat = torch.cat([x.reshape(-1) for x in xs])

                # into a tensor: concatenated (ws*d0, ...) and stacked (ws, d0, ...) outputs
                for stacked in (False, True) if FULL else (False,):  # gloo: concatenated only
                    mode = self.mode()
                    what = _p("all_gather_into_tensor" + (" stacked" if stacked else ""),
                              G, dtype, None, n, mode)
                    oshape = ((G.size,) + shape) if stacked else ((G.size * shape[0],) + shape[1:])

                    def go(oshape=oshape, what=what, mode=mode):
                        out = torch.full(oshape, 7, dtype=dtype) if dtype != torch.bool \
                            else torch.zeros(oshape, dtype=dtype)
                        x = xs[G.rank].clone()
                        _complete(mode, lambda a: dist.all_gather_into_tensor(
                            out, x, group=G.pg, async_op=a))
                        C.expect(what, out.reshape(-1), cat, dtype, True, G.size)
                        C.true(what + " input untouched", torch.equal(x, xs[G.rank]))
                        if dtype in DTYPES:  # gloo takes only the concatenated form
                            ref = torch.empty((G.size * shape[0],) + shape[1:], dtype=dtype)
                            if C.gloo(f"all_gather_into_tensor {dtype}",
                                      lambda: dist.all_gather_into_tensor(ref, x.clone(),
                                                                          group=G.gloo)):
                                C.expect(what + " vs gloo", out.reshape(-1), ref.reshape(-1),
                                         dtype, True, G.size)
                    C.run(what, go)

                # list form
                mode = self.mode()
                what = _p("all_gather", G, dtype, None, n, mode)

                def go_list(what=what, mode=mode):
                    outs = [torch.empty(shape, dtype=dtype) for _ in range(G.size)]
                    _complete(mode, lambda a: dist.all_gather(outs, xs[G.rank].clone(),
                                                              group=G.pg, async_op=a))
                    for r in range(G.size):
                        C.expect(f"{what} [{r}]", outs[r], xs[r], dtype, True, G.size)
                    if dtype in DTYPES:
                        refs = [torch.empty(shape, dtype=dtype) for _ in range(G.size)]
                        if C.gloo(f"all_gather {dtype}",
                                  lambda: dist.all_gather(refs, xs[G.rank].clone(), group=G.gloo)):
                            for r in range(G.size):
                                C.expect(f"{what} [{r}] vs gloo", outs[r], refs[r], dtype, True,
                                         G.size)
                C.run(what, go_list)

        # in place (the input is this rank's slice of the output, as FSDP passes it) and a
        # strided input (the backend may copy it)
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for n in (1, 1001):
                key = self.key("ag-inplace", dtype, n)
                xs = self.inputs(key, n, dtype)
                cat = torch.cat(xs)
                mode = self.mode()
                what = _p("all_gather_into_tensor in-place", G, dtype, None, n, mode)

                def go_inplace(what=what, mode=mode, xs=xs, cat=cat, n=n):
                    out = torch.zeros(G.size * n, dtype=dtype)
                    mine = out[G.rank * n:(G.rank + 1) * n]
                    mine.copy_(xs[G.rank])
                    _complete(mode, lambda a: dist.all_gather_into_tensor(out, mine, group=G.pg,
                                                                          async_op=a))
                    C.expect(what, out, cat, dtype, True, G.size)
                C.run(what, go_inplace)

                what = _p("all_gather_into_tensor strided input", G, dtype, None, n)

                def go_strided(what=what, xs=xs, cat=cat, n=n):
                    base = torch.zeros(2 * n, dtype=dtype)
                    base[::2] = xs[G.rank]
                    out = torch.empty(G.size * n, dtype=dtype)
                    dist.all_gather_into_tensor(out, base[::2], group=G.pg)
                    C.expect(what, out, cat, dtype, True, G.size)
                C.run(what, go_strided)

        if self.large:
            key = self.key("ag-large")
            xs = self.inputs(key, LARGE, torch.float32)
            what = _p("all_gather_into_tensor", G, torch.float32, None, LARGE)

            def go_large():
                out = torch.empty(G.size * LARGE)
                dist.all_gather_into_tensor(out, xs[G.rank], group=G.pg)
                C.expect(what, out, torch.cat(xs), torch.float32, True, G.size)
            C.run(what, go_large)

    # -- reduce_scatter_tensor / reduce_scatter ---------------------------------------------
    def reduce_scatter(self):
        C, G = self.C, self.G
        for dtype in self.dtypes:
            # torch 2.6's gloo reduce_scatter_tensor sums whatever op it is given
            for op in _ops_for(dtype, self.full) if FULL else ["SUM"]:
                for n in self.counts:
                    self._reduce_scatter_case(dtype, op, n, self.mode(True))
        if self.large:  # ~1M input elements
            self._reduce_scatter_case(torch.float32, "SUM", LARGE // G.size, self.mode(True), True)
            self._reduce_scatter_case(torch.int64, "MIN" if FULL else "SUM", LARGE // G.size,
                                      self.mode(True), True)

        # in place: the output is this rank's slice of the input
        for dtype, op in [(torch.float32, "SUM"), (torch.int32, "MAX" if FULL else "SUM"),
                          (torch.bfloat16, "AVG" if self.full and FULL else "SUM")]:
            n = 1001
            key = self.key("rs-inplace", dtype, op)
            xs = self.inputs(key, G.size * n, dtype, _kind(op, dtype))
            want = _ref_reduce(op, xs, dtype)[G.rank * n:(G.rank + 1) * n]
            mode = self.mode(True)
            what = _p("reduce_scatter_tensor in-place", G, dtype, op, n, mode)

            def go_inplace(what=what, mode=mode, xs=xs, want=want, op=op, dtype=dtype):
                buf = xs[G.rank].clone()
                out = buf[G.rank * n:(G.rank + 1) * n]
                _complete(mode, lambda a: dist.reduce_scatter_tensor(out, buf, op=_redop(op),
                                                                     group=G.pg, async_op=a))
                C.expect(what, out, want, dtype, _exact(op, dtype), G.size)
            C.run(what, go_inplace)

    def _reduce_scatter_case(self, dtype, op, n, mode, large=False):
        C, G = self.C, self.G
        key = self.key("rs", dtype, op, n)
        # input: ws blocks of n elements, as (ws*n,) or, for n = 1001, (ws*7, 11, 13)
        shape = _shape(n)
        ishape = (G.size * shape[0],) + shape[1:]
        xs = self.inputs(key, ishape, dtype, _kind(op, dtype))
        full_ref = _ref_reduce(op, xs, dtype).reshape(G.size, -1)
        want = full_ref[G.rank].reshape(shape)
        what = _p("reduce_scatter_tensor", G, dtype, op, n, mode)

        def go():
            out = torch.zeros(shape, dtype=dtype)
            x = xs[G.rank].clone()
            _complete(mode, lambda a: dist.reduce_scatter_tensor(out, x, op=_redop(op),
                                                                 group=G.pg, async_op=a))
            C.expect(what, out, want, dtype, _exact(op, dtype), G.size)
            C.true(what + " input untouched", torch.equal(x, xs[G.rank]))
            if op == "SUM" and not large:  # gloo's reduce_scatter_tensor only sums
                ref = torch.zeros(shape, dtype=dtype)
                if C.gloo(f"reduce_scatter_tensor {dtype} {op}",
                          lambda: dist.reduce_scatter_tensor(ref, xs[G.rank].clone(),
                                                             op=_redop(op), group=G.gloo)):
                    C.expect(what + " vs gloo", out, ref, dtype, _exact(op, dtype), G.size, 2.0)
        C.run(what, go)

        if not (self.full and FULL) or large:
            return
        # list form (gloo has none): the same data as ws separate tensors
        mode = self.mode()
        what = _p("reduce_scatter", G, dtype, op, n, mode)

        def go_list():
            ins = [b.reshape(shape).clone() for b in xs[G.rank].reshape(G.size, -1)]
            out = torch.zeros(shape, dtype=dtype)
            _complete(mode, lambda a: dist.reduce_scatter(out, ins, op=_redop(op), group=G.pg,
                                                          async_op=a))
            C.expect(what, out, want, dtype, _exact(op, dtype), G.size)
        C.run(what, go_list)

    # -- broadcast / reduce -----------------------------------------------------------------
    def broadcast(self):
        C, G = self.C, self.G
        for dtype in self.dtypes:
            for n in self.counts + ([LARGE] if self.large and dtype == torch.float32 else []):
                root = self.i % G.size
                mode = self.mode()
                key = self.key("bc", dtype, n, root)
                xs = self.inputs(key, _shape(n), dtype)
                what = _p(f"broadcast root={root}", G, dtype, None, n, mode)

                def go(what=what, mode=mode, xs=xs, root=root, dtype=dtype):
                    t = xs[G.rank].clone()
                    val = _complete(mode, lambda a: dist.broadcast(t, src=G.glob(root),
                                                                   group=G.pg, async_op=a))
                    C.expect(what, t, xs[root], dtype, True, G.size)
                    if mode == "future":
                        C.true(what + " future value", isinstance(val, list)
                               and torch.equal(val[0], t))
                    if t.numel() < 10**5:
                        r = xs[G.rank].clone()
                        if C.gloo(f"broadcast {dtype}",
                                  lambda: dist.broadcast(r, src=G.glob(root), group=G.gloo)):
                            C.expect(what + " vs gloo", t, r, dtype, True, G.size)
                C.run(what, go)

    def reduce(self):
        C, G = self.C, self.G
        for dtype in self.dtypes:
            for op in _ops_for(dtype, self.full):
                for n in self.counts:
                    root = self.i % G.size
                    mode = self.mode()
                    key = self.key("red", dtype, op, n, root)
                    xs = self.inputs(key, _shape(n), dtype, _kind(op, dtype))
                    want = _ref_reduce(op, xs, dtype)
                    what = _p(f"reduce root={root}", G, dtype, op, n, mode)

                    def go(what=what, mode=mode, xs=xs, want=want, root=root, op=op,
                           dtype=dtype):
                        t = xs[G.rank].clone()
                        _complete(mode, lambda a: dist.reduce(t, dst=G.glob(root), op=_redop(op),
                                                              group=G.pg, async_op=a))
                        if G.rank == root:
                            C.expect(what, t, want, dtype, _exact(op, dtype), G.size)
                        if op in GLOO_OPS:
                            r = xs[G.rank].clone()
                            if C.gloo(f"reduce {dtype} {op}",
                                      lambda: dist.reduce(r, dst=G.glob(root), op=_redop(op),
                                                          group=G.gloo)) and G.rank == root:
                                C.expect(what + " vs gloo", t, r, dtype, _exact(op, dtype),
                                         G.size, 2.0)
                    C.run(what, go)

    # -- gather / scatter -------------------------------------------------------------------
    def gather_scatter(self):
        C, G = self.C, self.G
        for dtype in self.dtypes:
            for n in self.counts:
                shape = _shape(n)
                root = self.i % G.size
                mode = self.mode()
                key = self.key("ga", dtype, n, root)
                xs = self.inputs(key, shape, dtype)
                what = _p(f"gather dst={root}", G, dtype, None, n, mode)

                def go_gather(what=what, mode=mode, xs=xs, root=root, dtype=dtype):
                    outs = ([torch.empty(shape, dtype=dtype) for _ in range(G.size)]
                            if G.rank == root else None)
                    _complete(mode, lambda a: dist.gather(xs[G.rank].clone(), outs,
                                                          dst=G.glob(root), group=G.pg,
                                                          async_op=a))
                    if G.rank == root:
                        for r in range(G.size):
                            C.expect(f"{what} [{r}]", outs[r], xs[r], dtype, True, G.size)
                    refs = ([torch.empty(shape, dtype=dtype) for _ in range(G.size)]
                            if G.rank == root else None)
                    if C.gloo(f"gather {dtype}",
                              lambda: dist.gather(xs[G.rank].clone(), refs, dst=G.glob(root),
                                                  group=G.gloo)) and G.rank == root:
                        for r in range(G.size):
                            C.expect(f"{what} [{r}] vs gloo", outs[r], refs[r], dtype, True,
                                     G.size)
                C.run(what, go_gather)

                root = self.i % G.size
                mode = self.mode()
                key = self.key("sc", dtype, n, root)
                chunks = [_gen(f"{key}/{r}", shape, dtype) for r in range(G.size)]
                what = _p(f"scatter src={root}", G, dtype, None, n, mode)

                def go_scatter(what=what, mode=mode, chunks=chunks, root=root, dtype=dtype):
                    out = torch.zeros(shape, dtype=dtype)
                    ins = [c.clone() for c in chunks] if G.rank == root else None
                    _complete(mode, lambda a: dist.scatter(out, ins, src=G.glob(root),
                                                           group=G.pg, async_op=a))
                    C.expect(what, out, chunks[G.rank], dtype, True, G.size)
                    ref = torch.zeros(shape, dtype=dtype)
                    ins = [c.clone() for c in chunks] if G.rank == root else None
                    if C.gloo(f"scatter {dtype}",
                              lambda: dist.scatter(ref, ins, src=G.glob(root), group=G.gloo)):
                        C.expect(what + " vs gloo", out, ref, dtype, True, G.size)
                C.run(what, go_scatter)

        # outputs that are not contiguous (columns of a matrix): the backend may stage them
        n = 101
        xs = self.inputs(self.key("ga-strided"), n, torch.float32)
        what = _p("gather/all_gather into non-contiguous outputs", G, torch.float32, None, n)

        def strided_outputs():
            mat = torch.zeros(n, G.size)
            outs = [mat[:, r] for r in range(G.size)]
            dist.all_gather(outs, xs[G.rank], group=G.pg)
            C.expect(what + " all_gather", mat.t(), torch.stack(xs), torch.float32, True,
                     G.size)
            mat2 = torch.zeros(n, G.size)
            outs2 = [mat2[:, r] for r in range(G.size)] if G.rank == 0 else None
            dist.gather(xs[G.rank], outs2, dst=G.glob(0), group=G.pg)
            if G.rank == 0:
                C.expect(what + " gather", mat2.t(), torch.stack(xs), torch.float32, True,
                         G.size)
        if FULL:  # gloo wants contiguous outputs
            C.run(what, strided_outputs)

    # -- barrier ------------------------------------------------------------------------------
    def barrier(self):
        """Every rank writes a store key before the barrier; after it all keys must exist."""
        C, G = self.C, self.G
        store = dist.distributed_c10d._get_default_store()
        for it, mode in enumerate(MODES):
            what = _p(f"barrier #{it}", G, mode=mode)

            def go(it=it, mode=mode, what=what):
                store.set(f"ctest/{self.G.name}/barrier{it}/{G.rank}", "1")
                time.sleep(0.002 * G.rank)  # later ranks arrive later
                _complete(mode, lambda a: dist.barrier(group=G.pg, async_op=a))
                keys = [f"ctest/{self.G.name}/barrier{it}/{r}" for r in range(G.size)]
                C.true(what, store.check(keys), "a rank left the barrier before all arrived")
            C.run(what, go)

    # -- all_to_all_single / all_to_all ---------------------------------------------------------
    def _split(self, i, j, salt):
        return (i * 7 + j * 3 + salt) % 4  # rows rank i sends to rank j (0 included)

    def all_to_all(self):
        C, G = self.C, self.G
        ws, me = G.size, G.rank
        for dtype in self.dtypes:
            # equal splits: every rank sends n elements (as rows of 3 for n = 1001 -> 333 rows)
            for n in self.counts:
                mode = self.mode()
                rows = 333 if n == 1001 else n
                key = self.key("a2a", dtype, n)
                xs = self.inputs(key, (ws * rows, 3), dtype)
                want = torch.cat([x[me * rows:(me + 1) * rows] for x in xs])
                what = _p("all_to_all_single equal", G, dtype, None, n, mode)

                def go(what=what, mode=mode, xs=xs, want=want, dtype=dtype, rows=rows):
                    out = torch.zeros(ws * rows, 3, dtype=dtype)
                    _complete(mode, lambda a: dist.all_to_all_single(out, xs[me].clone(),
                                                                     group=G.pg, async_op=a))
                    C.expect(what, out, want, dtype, True, ws)
                    ref = torch.zeros(ws * rows, 3, dtype=dtype)
                    if C.gloo(f"all_to_all_single {dtype}",
                              lambda: dist.all_to_all_single(ref, xs[me].clone(), group=G.gloo)):
                        C.expect(what + " vs gloo", out, ref, dtype, True, ws)
                C.run(what, go)

            # unequal splits (some 0), rows of 5 elements
            for salt in (0, 1):
                mode = self.mode()
                key = self.key("a2av", dtype, salt)
                chunk = {(i, j): _gen(f"{key}/{i}->{j}", (self._split(i, j, salt), 5), dtype)
                         for i in range(ws) for j in range(ws)}
                inp = torch.cat([chunk[(me, j)] for j in range(ws)])
                want = torch.cat([chunk[(j, me)] for j in range(ws)])
                in_splits = [self._split(me, j, salt) for j in range(ws)]
                out_splits = [self._split(j, me, salt) for j in range(ws)]
                what = _p(f"all_to_all_single splits in={in_splits} out={out_splits}", G, dtype,
                          mode=mode)

                def go_v(what=what, mode=mode, inp=inp, want=want, ins=in_splits,
                         outs=out_splits, dtype=dtype):
                    out = torch.zeros(sum(outs), 5, dtype=dtype)
                    _complete(mode, lambda a: dist.all_to_all_single(
                        out, inp.clone(), output_split_sizes=outs, input_split_sizes=ins,
                        group=G.pg, async_op=a))
                    C.expect(what, out, want, dtype, True, ws)
                    ref = torch.zeros(sum(outs), 5, dtype=dtype)
                    if C.gloo(f"all_to_all_single splits {dtype}",
                              lambda: dist.all_to_all_single(ref, inp.clone(), outs, ins,
                                                             group=G.gloo)):
                        C.expect(what + " vs gloo", out, ref, dtype, True, ws)
                C.run(what, go_v)

            if not (self.full and FULL):
                continue
            # lists (gloo has no all_to_all): tensor j of rank i goes to rank j, sizes differ
            mode = self.mode()
            key = self.key("a2al", dtype)
            chunk = {(i, j): _gen(f"{key}/{i}->{j}", self._split(i, j, 2) * 3, dtype)
                     for i in range(ws) for j in range(ws)}
            what = _p("all_to_all", G, dtype, mode=mode)

            def go_l(what=what, mode=mode, chunk=chunk, dtype=dtype):
                outs = [torch.zeros(self._split(j, me, 2) * 3, dtype=dtype) for j in range(ws)]
                ins = [chunk[(me, j)].clone() for j in range(ws)]
                _complete(mode, lambda a: dist.all_to_all(outs, ins, group=G.pg, async_op=a))
                for j in range(ws):
                    C.expect(f"{what} [{j}]", outs[j], chunk[(j, me)], dtype, True, ws)
            C.run(what, go_l)

        if self.large:
            key = self.key("a2a-large")
            rows = LARGE // ws
            xs = self.inputs(key, ws * rows, torch.float32)
            want = torch.cat([x[me * rows:(me + 1) * rows] for x in xs])
            what = _p("all_to_all_single equal", G, torch.float32, None, ws * rows)

            def go_large():
                out = torch.empty(ws * rows)
                dist.all_to_all_single(out, xs[me], group=G.pg)
                C.expect(what, out, want, torch.float32, True, ws)
            C.run(what, go_large)

    # -- point to point -------------------------------------------------------------------------
    def p2p(self):
        C, G = self.C, self.G
        ws, me = G.size, G.rank
        nxt, prv = (me + 1) % ws, (me - 1) % ws
        dtypes = [d for d in self.dtypes if d in (torch.float32, torch.bfloat16, torch.int64,
                                                  torch.bool, torch.uint8)] or self.dtypes[:1]
        for dtype in dtypes:
            for n in self.counts + ([LARGE] if self.large and dtype == torch.float32 else []):
                shape = _shape(n)
                key = self.key("p2p", dtype, n)
                msg = {(i, j): _gen(f"{key}/{i}->{j}", shape, dtype)
                       for i in range(ws) for j in range(ws) if i != j}

                # blocking send/recv around the ring (even ranks send first)
                what = _p("send/recv ring", G, dtype, None, n)

                def ring(what=what, msg=msg, dtype=dtype, shape=shape):
                    got = torch.zeros(shape, dtype=dtype)
                    if me % 2 == 0:
                        dist.send(msg[(me, nxt)].clone(), dst=G.glob(nxt), group=G.pg)
                        src = dist.recv(got, src=G.glob(prv), group=G.pg)
                    else:
                        src = dist.recv(got, src=G.glob(prv), group=G.pg)
                        dist.send(msg[(me, nxt)].clone(), dst=G.glob(nxt), group=G.pg)
                    C.expect(what, got, msg[(prv, me)], dtype, True, ws)
                    C.true(what + " return value", src == G.glob(prv), f"recv returned {src}")
                C.run(what, ring)

                if n == LARGE:
                    continue
                # isend/irecv with every peer: two tags posted in the opposite order on the
                # receiving side, then two messages on one tag (must arrive in order)
                what = _p("isend/irecv tags", G, dtype, None, n)

                def tags(what=what, msg=msg, dtype=dtype, shape=shape, key=key):
                    works, checks = [], []
                    for p in range(ws):
                        if p == me:
                            continue
                        a = msg[(me, p)].clone()
                        b = _gen(f"{key}/b/{me}->{p}", shape, dtype)
                        c1 = _gen(f"{key}/c1/{me}->{p}", shape, dtype)
                        c2 = _gen(f"{key}/c2/{me}->{p}", shape, dtype)
                        works += [dist.isend(a, dst=G.glob(p), group=G.pg, tag=11),
                                  dist.isend(b, dst=G.glob(p), group=G.pg, tag=22),
                                  dist.isend(c1, dst=G.glob(p), group=G.pg, tag=33),
                                  dist.isend(c2, dst=G.glob(p), group=G.pg, tag=33)]
                        ra, rb, rc1, rc2 = (torch.zeros(shape, dtype=dtype) for _ in range(4))
                        works += [dist.irecv(rb, src=G.glob(p), group=G.pg, tag=22),
                                  dist.irecv(ra, src=G.glob(p), group=G.pg, tag=11),
                                  dist.irecv(rc1, src=G.glob(p), group=G.pg, tag=33),
                                  dist.irecv(rc2, src=G.glob(p), group=G.pg, tag=33)]
                        checks += [(f"{what} from {p} tag 11", ra, msg[(p, me)]),
                                   (f"{what} from {p} tag 22", rb,
                                    _gen(f"{key}/b/{p}->{me}", shape, dtype)),
                                   (f"{what} from {p} tag 33 first", rc1,
                                    _gen(f"{key}/c1/{p}->{me}", shape, dtype)),
                                   (f"{what} from {p} tag 33 second", rc2,
                                    _gen(f"{key}/c2/{p}->{me}", shape, dtype))]
                    for k, w in enumerate(works):
                        if k % 2 and FULL:  # gloo's send/recv works have no future
                            w.get_future().wait()
                        else:
                            w.wait()
                    for desc, got, want in checks:
                        C.expect(desc, got, want, dtype, True, ws)
                C.run(what, tags)

            # batch_isend_irecv around the ring, both directions
            what = _p("batch_isend_irecv", G, dtype, None, 1001)

            def batch(what=what, dtype=dtype):
                key = self.key("batch", dtype)
                a = _gen(f"{key}/{me}->{nxt}", 1001, dtype)
                b = _gen(f"{key}/{me}->{prv}", 1001, dtype)
                ra, rb = torch.zeros(1001, dtype=dtype), torch.zeros(1001, dtype=dtype)
                ops = [dist.P2POp(dist.isend, a, G.glob(nxt), G.pg),
                       dist.P2POp(dist.irecv, ra, G.glob(prv), G.pg),
                       dist.P2POp(dist.isend, b, G.glob(prv), G.pg),
                       dist.P2POp(dist.irecv, rb, G.glob(nxt), G.pg)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                C.expect(what + " from prev", ra, _gen(f"{key}/{prv}->{me}", 1001, dtype), dtype,
                         True, ws)
                C.expect(what + " from next", rb, _gen(f"{key}/{nxt}->{me}", 1001, dtype), dtype,
                         True, ws)
            C.run(what, batch)

        # receive from any source: group rank 0 collects one message from every other rank.
        # sharc does not receive from any source: it must say so clearly (before anything is
        # posted), and a receive naming the source then gets the message.
        what = _p("recv from any source", G, torch.float32, None, 17)

        def anysrc():
            key = self.key("any")
            if me == 0:
                named = False
                if BACKEND == "sharc":
                    try:
                        dist.recv(torch.zeros(17), group=G.pg, tag=5)
                        C.true(what, False, "sharc received from any source after all?")
                    except RuntimeError as e:
                        C.true(what + " refusal", "any source" in str(e), f"error: {e}")
                    named = True
                seen = set()
                for sender in range(1, ws):
                    t = torch.zeros(17)
                    src = dist.recv(t, src=G.glob(sender) if named else None, group=G.pg, tag=5)
                    gsrc = G.members.index(src) if src in G.members else -1
                    seen.add(gsrc)
                    C.expect(f"{what} from {src}", t, _gen(f"{key}/{gsrc}", 17, torch.float32),
                             torch.float32, True, ws)
                C.true(what + " senders", seen == set(range(1, ws)), f"saw {sorted(seen)}")
            else:
                dist.send(_gen(f"{key}/{me}", 17, torch.float32), dst=G.glob(0), group=G.pg,
                          tag=5)
        C.run(what, anysrc)

    def p2p_large_tags(self):
        """Large tag values: every rank sends each peer messages whose tags differ by 8188
        (sharc's user tag space) and one with tag 2**20 + 3, received in the opposite order.
        A backend may refuse a tag it cannot represent (with an error that says so, the same
        on every rank), but must never deliver a message to a receive of another tag."""
        C, G = self.C, self.G
        ws, me = G.size, G.rank
        what = _p("isend/irecv large tags", G, torch.int64, None, 9)

        def big_tags():
            key = self.key("bigtags")
            tags = [9, 9 + 8188, 2**20 + 3, 4]  # used by no other section
            works, checks, refused = [], [], {}
            for p in range(ws):
                if p == me:
                    continue
                for tg in tags:
                    try:
                        works.append(dist.isend(_gen(f"{key}/{me}->{p}/{tg}", 9, torch.int64),
                                                dst=G.glob(p), group=G.pg, tag=tg))
                    except RuntimeError as e:
                        refused[tg] = str(e).splitlines()[0]
                for tg in reversed(tags):
                    if tg in refused:
                        continue
                    r = torch.zeros(9, dtype=torch.int64)
                    works.append(dist.irecv(r, src=G.glob(p), group=G.pg, tag=tg))
                    checks.append((f"{what} from {p} tag {tg}", r,
                                   _gen(f"{key}/{p}->{me}/{tg}", 9, torch.int64)))
            for w in works:
                w.wait()
            for desc, got, want in checks:
                C.expect(desc, got, want, torch.int64, True, ws)
            for tg, msg in refused.items():
                C.true(f"{what} tag {tg} refused", "tag" in msg and tg not in (9, 4),
                       f"unclear refusal: {msg}")
                if TRACE:
                    print(f"rank {me}: tag {tg} refused: {msg}", file=sys.stderr)
        C.run(what, big_tags)

    # -- coalesced forms --------------------------------------------------------------------------
    def coalesced(self):
        C, G = self.C, self.G
        sizes = [0, 1, 1001, 64]
        for dtype in [d for d in self.dtypes if d in (torch.float32, torch.bfloat16,
                                                      torch.int32)]:
            for op in [o for o in ("SUM", "MAX", "AVG", "PREMUL_SUM") if o in _ops_for(dtype,
                                                                                     self.full)]:
                key = self.key("coal", dtype, op)
                xs = {s: self.inputs(f"{key}/{s}", s, dtype, _kind(op, dtype)) for s in sizes}
                want = {s: _ref_reduce(op, xs[s], dtype) for s in sizes}
                exact = _exact(op, dtype)

                for async_op in (False, True):
                    what = _p(f"all_reduce_coalesced async={async_op}", G, dtype, op)

                    def arc(what=what, async_op=async_op, xs=xs, want=want, op=op, dtype=dtype):
                        ts = [xs[s][G.rank].clone() for s in sizes]
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            fut = dist.all_reduce_coalesced(ts, op=_redop(op), group=G.pg,
                                                            async_op=async_op)
                        if async_op:
                            fut.wait()
                        for s, t in zip(sizes, ts):
                            C.expect(f"{what} [{s}]", t, want[s], dtype, exact, G.size)
                    C.run(what, arc)

                # torch's coalescing manager, fast path (no device): all_reduce
                for async_ops in (False, True):
                    what = _p(f"_coalescing_manager all_reduce async_ops={async_ops}", G, dtype,
                              op)

                    def cm_ar(what=what, async_ops=async_ops, xs=xs, want=want, op=op,
                              dtype=dtype):
                        ts = [xs[s][G.rank].clone() for s in sizes]
                        with dist._coalescing_manager(group=G.pg, async_ops=async_ops) as cm:
                            for t in ts:
                                dist.all_reduce(t, op=_redop(op), group=G.pg)
                        if async_ops:
                            cm.wait()
                        for s, t in zip(sizes, ts):
                            C.expect(f"{what} [{s}]", t, want[s], dtype, exact, G.size)
                    C.run(what, cm_ar)

                # ... reduce_scatter_tensor (gloo's sums whatever op it is given)
                if not FULL and op != "SUM":
                    continue
                rs_in = {s: self.inputs(f"{key}/rs/{s}", G.size * s, dtype, _kind(op, dtype))
                         for s in sizes}
                rs_want = {s: _ref_reduce(op, rs_in[s], dtype)[G.rank * s:(G.rank + 1) * s]
                           for s in sizes}
                what = _p("_coalescing_manager reduce_scatter_tensor", G, dtype, op)

                def cm_rs(what=what, rs_in=rs_in, rs_want=rs_want, op=op, dtype=dtype):
                    outs = [torch.zeros(s, dtype=dtype) for s in sizes]
                    with dist._coalescing_manager(group=G.pg, async_ops=True) as cm:
                        for s, o in zip(sizes, outs):
                            dist.reduce_scatter_tensor(o, rs_in[s][G.rank].clone(),
                                                       op=_redop(op), group=G.pg)
                    cm.wait()
                    for s, o in zip(sizes, outs):
                        C.expect(f"{what} [{s}]", o, rs_want[s], dtype, exact, G.size)
                C.run(what, cm_rs)

            # ... all_gather_into_tensor
            key = self.key("coal-ag", dtype)
            ag_in = {s: self.inputs(f"{key}/{s}", s, dtype) for s in sizes}
            what = _p("_coalescing_manager all_gather_into_tensor", G, dtype)

            def cm_ag(what=what, ag_in=ag_in, dtype=dtype):
                outs = [torch.zeros(G.size * s, dtype=dtype) for s in sizes]
                with dist._coalescing_manager(group=G.pg):
                    for s, o in zip(sizes, outs):
                        dist.all_gather_into_tensor(o, ag_in[s][G.rank].clone(), group=G.pg)
                for s, o in zip(sizes, outs):
                    C.expect(f"{what} [{s}]", o, torch.cat(ag_in[s]), dtype, True, G.size)
            C.run(what, cm_ag)

        if not (self.full and FULL):
            return
        # the device form: the backend's startCoalescing/endCoalescing around the calls
        # (gloo has none); all_reduces, then a batch of sends and receives as NCCL-style code
        # (batch_isend_irecv on CUDA) issues them
        dtype = torch.float32
        key = self.key("coal-dev")
        xs = {s: self.inputs(f"{key}/{s}", s, dtype, "sum") for s in sizes}
        for async_ops in (False, True):
            what = _p(f"_coalescing_manager(device=cpu) all_reduce async_ops={async_ops}", G,
                      dtype, "SUM")

            def dev_ar(what=what, async_ops=async_ops):
                ts = [xs[s][G.rank].clone() for s in sizes]
                with dist._coalescing_manager(group=G.pg, device=torch.device("cpu"),
                                              async_ops=async_ops) as cm:
                    for t in ts:
                        dist.all_reduce(t, group=G.pg)
                if async_ops:
                    cm.wait()
                for s, t in zip(sizes, ts):
                    C.expect(f"{what} [{s}]", t, _ref_reduce("SUM", xs[s], dtype), dtype, False,
                             G.size)
            C.run(what, dev_ar)

        what = _p("_coalescing_manager(device=cpu) isend/irecv ring", G, dtype)

        def dev_p2p():
            ws, me = G.size, G.rank
            if ws == 1:
                return
            nxt, prv = (me + 1) % ws, (me - 1) % ws
            a = _gen(f"{key}/p2p/{me}", 1001, dtype)
            got = torch.zeros(1001, dtype=dtype)
            with dist._coalescing_manager(group=G.pg, device=torch.device("cpu"),
                                          async_ops=True) as cm:
                dist.isend(a, dst=G.glob(nxt), group=G.pg)
                dist.irecv(got, src=G.glob(prv), group=G.pg)
            cm.wait()
            C.expect(what, got, _gen(f"{key}/p2p/{prv}", 1001, dtype), dtype, True, ws)
        C.run(what, dev_p2p)

    # -- outputs that are views into larger buffers: nothing outside them may change -----------
    def guards(self):
        C, G = self.C, self.G
        ws, me = G.size, G.rank
        pad = 5

        def guarded(numel, dtype):
            buf = torch.full((numel + 2 * pad,), 3, dtype=dtype) if dtype != torch.bool \
                else torch.ones(numel + 2 * pad, dtype=dtype)
            return buf, buf[pad:pad + numel]

        def intact(what, buf, dtype):
            ref = torch.full((pad,), 3, dtype=dtype) if dtype != torch.bool \
                else torch.ones(pad, dtype=dtype)
            C.true(what + " guard before", torch.equal(buf[:pad], ref), f"{buf[:pad]}")
            C.true(what + " guard after", torch.equal(buf[-pad:], ref), f"{buf[-pad:]}")

        for dtype in [d for d in (torch.float16, torch.int8, torch.float64, torch.bool)
                      if d in self.dtypes] or self.dtypes[:1]:
            for n in (1, 1001):
                key = self.key("guard", dtype, n)
                op = "MAX"
                xs = self.inputs(f"{key}/ar", n, dtype, _kind(op, dtype))
                what = _p("all_reduce into a view", G, dtype, op, n)

                def ar(what=what, xs=xs, dtype=dtype, n=n):
                    buf, t = guarded(n, dtype)
                    t.copy_(xs[me])
                    dist.all_reduce(t, op=_redop(op), group=G.pg)
                    C.expect(what, t, _ref_reduce(op, xs, dtype), dtype, True, ws)
                    intact(what, buf, dtype)
                C.run(what, ar)

                xs = self.inputs(f"{key}/ag", n, dtype)
                what = _p("all_gather_into_tensor into a view", G, dtype, None, n)

                def ag(what=what, xs=xs, dtype=dtype, n=n):
                    buf, out = guarded(ws * n, dtype)
                    dist.all_gather_into_tensor(out, xs[me], group=G.pg)
                    C.expect(what, out, torch.cat(xs), dtype, True, ws)
                    intact(what, buf, dtype)
                C.run(what, ag)

                rop = op if FULL else "SUM"  # gloo's reduce_scatter_tensor only sums
                xs = self.inputs(f"{key}/rs", ws * n, dtype, _kind(rop, dtype))
                what = _p("reduce_scatter_tensor into a view", G, dtype, rop, n)

                def rs(what=what, xs=xs, dtype=dtype, n=n, op=rop):
                    buf, out = guarded(n, dtype)
                    dist.reduce_scatter_tensor(out, xs[me], op=_redop(op), group=G.pg)
                    C.expect(what, out, _ref_reduce(op, xs, dtype)[me * n:(me + 1) * n], dtype,
                             _exact(op, dtype), ws)
                    intact(what, buf, dtype)
                C.run(what, rs)

                xs = self.inputs(f"{key}/bc", n, dtype)
                what = _p("broadcast into a view", G, dtype, None, n)

                def bc(what=what, xs=xs, dtype=dtype, n=n):
                    buf, t = guarded(n, dtype)
                    t.copy_(xs[me])
                    dist.broadcast(t, src=G.glob(ws - 1), group=G.pg)
                    C.expect(what, t, xs[ws - 1], dtype, True, ws)
                    intact(what, buf, dtype)
                C.run(what, bc)

                xs = self.inputs(f"{key}/a2a", ws * n, dtype)
                what = _p("all_to_all_single into a view", G, dtype, None, n)

                def a2a(what=what, xs=xs, dtype=dtype, n=n):
                    buf, out = guarded(ws * n, dtype)
                    dist.all_to_all_single(out, xs[me], group=G.pg)
                    C.expect(what, out, torch.cat([x[me * n:(me + 1) * n] for x in xs]), dtype,
                             True, ws)
                    intact(what, buf, dtype)
                C.run(what, a2a)

    # -- work.wait(timeout): a wait that times out leaves the operation pending and usable --------
    def wait_timeout(self):
        C, G = self.C, self.G
        if not FULL or G.size < 2 or G.rank > 1:
            return
        store = dist.distributed_c10d._get_default_store()
        key = f"ctest/{G.name}/wait_timeout"
        msg = _gen(self.key("wait-timeout"), 33, torch.float32)
        what = _p("irecv wait(timeout=0.3 s) before the send", G)

        def go():
            if G.rank == 1:
                store.wait([key])
                dist.send(msg, dst=G.glob(0), group=G.pg, tag=77)
                return
            t = torch.zeros(33)
            w = dist.irecv(t, src=G.glob(1), group=G.pg, tag=77)
            t0 = time.monotonic()
            try:
                w.wait(datetime.timedelta(milliseconds=300))
                C.true(what, False, "wait() returned before the message was sent")
            except RuntimeError as e:
                secs = time.monotonic() - t0
                C.true(what + " error", "timed out" in str(e) and secs < 5,
                       f"after {secs:.1f} s: {e}")
            finally:
                store.set(key, "go")
            C.true(what + " then completes", w.wait() is True)
            C.expect(what + " then completes", t, msg, torch.float32, True, 2)
        C.run(what, go)

    # -- object collectives (pickled objects in uint8 tensors, sizes in int64 ones) ----------------
    def objects(self):
        C, G = self.C, self.G
        ws, me = G.size, G.rank

        def obj(r, salt):  # rank-dependent sizes, so torch pads to the largest
            return {"rank": r, "salt": salt, "text": f"{G.name}-{r}-" * (3 + 5 * r),
                    "t": torch.arange(r + 2)}

        def same(a, b):
            return (a.keys() == b.keys() and all(
                torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k]
                for k in a))

        what = _p("all_gather_object", G)

        def agobj():
            out = [None] * ws
            dist.all_gather_object(out, obj(me, "ag"), group=G.pg)
            C.true(what, all(same(out[r], obj(r, "ag")) for r in range(ws)), f"got {out}")
        C.run(what, agobj)

        root = ws - 1
        what = _p(f"broadcast_object_list src={root}", G)

        def bcobj():
            lst = [obj(root, "bc"), "x" * 100, 7] if me == root else [None, None, None]
            dist.broadcast_object_list(lst, src=G.glob(root), group=G.pg)
            C.true(what, same(lst[0], obj(root, "bc")) and lst[1:] == ["x" * 100, 7],
                   f"got {lst}")
        C.run(what, bcobj)

        what = _p("gather_object dst=0", G)

        def gaobj():
            out = [None] * ws if me == 0 else None
            dist.gather_object(obj(me, "ga"), out, dst=G.glob(0), group=G.pg)
            if me == 0:
                C.true(what, all(same(out[r], obj(r, "ga")) for r in range(ws)), f"got {out}")
        C.run(what, gaobj)

        what = _p(f"scatter_object_list src={root}", G)

        def scobj():
            out = [None]
            ins = [obj(r, "sc") for r in range(ws)] if me == root else None
            dist.scatter_object_list(out, ins, src=G.glob(root), group=G.pg)
            C.true(what, same(out[0], obj(me, "sc")), f"got {out}")
        C.run(what, scobj)

        what = _p("send_object_list/recv_object_list 0->1", G)

        def p2pobj():
            if ws == 1:
                return
            if me == 0:
                dist.send_object_list([obj(0, "p2p"), "tail"], dst=G.glob(1), group=G.pg)
            elif me == 1:
                lst = [None, None]
                dist.recv_object_list(lst, src=G.glob(0), group=G.pg)
                C.true(what, same(lst[0], obj(0, "p2p")) and lst[1] == "tail", f"got {lst}")
        C.run(what, p2pobj)

    SECTIONS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                "gather_scatter", "barrier", "all_to_all", "p2p", "p2p_large_tags", "coalesced",
                "objects", "guards", "wait_timeout"]

    def everything(self, prefix="", sections=None):
        for name in sections or self.SECTIONS:
            if name.startswith("p2p") and self.G.size == 1:
                continue  # nobody to send to
            self.C.section_run(prefix + name, getattr(self, name))


# ----------------------------------------------------------------------------- rank functions

def _settle(groups):
    """Lets gloo's worker threads drop their last references before the groups are destroyed:
    torch 2.6's ProcessGroupGloo destructor holds the GIL while it joins threads that may need it
    to free a tensor, and the launcher's destroy_process_group then hangs now and then."""
    for g in groups:
        if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER:
            dist.barrier(group=g)
    time.sleep(0.3)


def _result(C, t0):
    return {"fails": C.fails, "checks": C.counts, "seconds": C.seconds,
            "total_seconds": round(time.time() - t0, 1),
            "gloo_unsupported": sorted(C.gloo_unsupported)}


def _world_job(rank, ws, large):
    t0 = time.time()
    C = _Checks(rank)
    gloo = dist.new_group(backend="gloo")
    G = _Group(f"world{ws}", list(range(ws)), None, gloo)
    _Battery(C, G, large=large).everything()
    _settle([gloo])
    return _result(C, t0)


SUBGROUPS = {"g13": [1, 3], "g02": [0, 2], "g012": [0, 1, 2], "g3": [3]}


def _reinit(rank, ws, C):
    """Destroys the default group and makes a new one (rendezvous through a fresh TCPStore),
    then checks the new world and a sub-group carved from it."""
    old_store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        try:
            store = dist.TCPStore("127.0.0.1", 0, ws, is_master=True, use_libuv=False,
                                  wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
        finally:  # the others wait for the port either way
            old_store.set("ctest/reinit_port", str(store.port if "store" in locals() else -1))
    port = int(old_store.get("ctest/reinit_port"))
    if rank != 0:
        if port < 0:
            raise RuntimeError("rank 0 could not start the TCPStore")
        store = dist.TCPStore("127.0.0.1", port, ws, is_master=False, use_libuv=False,
                              timeout=datetime.timedelta(seconds=60))
    dist.barrier()
    dist.destroy_process_group()
    dist.init_process_group(BACKEND, store=store, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=120))
    t = torch.full((7,), float(rank + 1))
    C.run("re-initialised world all_reduce", lambda: dist.all_reduce(t))
    C.expect("re-initialised world all_reduce", t, torch.full((7,), ws * (ws + 1) / 2),
             torch.float32, True, ws)
    sub = dist.new_group(ranks=[0, ws - 1])
    if rank in (0, ws - 1):
        u = torch.full((3,), float(rank))
        C.run("re-initialised sub-group all_reduce", lambda: dist.all_reduce(u, group=sub))
        C.expect("re-initialised sub-group all_reduce", u, torch.full((3,), float(ws - 1)),
                 torch.float32, True, 2)
    dist.barrier()
    time.sleep(0.3)  # see _settle


def _subgroup_job(rank, ws):
    """Sub-groups of 4 ranks: two disjoint pairs, an uneven triple and a single rank, each
    checked with a smaller battery, then collectives interleaved across the groups and the
    world; last, the default group is destroyed and made anew in the same processes."""
    t0 = time.time()
    C = _Checks(rank)
    world_gloo = dist.new_group(backend="gloo")
    groups = {}
    for name, members in SUBGROUPS.items():  # every rank creates every group, in one order
        pg = dist.new_group(ranks=members)
        pg_gloo = dist.new_group(ranks=members, backend="gloo")
        if rank in members:
            groups[name] = _Group(name, members, pg, pg_gloo)
    dtypes = [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8]
    for G in groups.values():
        sections = [x for x in _Battery.SECTIONS if x not in ("p2p_large_tags", "wait_timeout")]
        _Battery(C, G, dtypes=dtypes, counts=[1, 1001], large=False).everything(
            G.name + ".", sections)

    def mixed():
        # interleaved: async collectives on every group this rank is in and on the world,
        # started before any is waited for
        W = _Group("world", list(range(ws)), None, world_gloo)
        what = "interleaved sub-group and world all_reduce"

        def interleaved():
            pending = []
            for it in range(3):
                for G in list(groups.values()) + [W]:
                    xs = [_gen(f"il/{G.name}/{it}/{r}", 999, torch.int64, "sum")
                          for r in range(G.size)]
                    t = xs[G.rank].clone()
                    pending.append((f"{what} {G.name} #{it}", t, _ref_reduce("SUM", xs,
                                                                            torch.int64),
                                    dist.all_reduce(t, group=G.pg, async_op=True)))
            for desc, t, want, w in reversed(pending):
                w.wait()
                C.expect(desc, t, want, torch.int64, True, ws)
        C.run(what, interleaved)

        # two Python threads, each with its own group over all ranks, issuing collectives at
        # the same time (as DDP's reducer does beside the training loop)
        import threading
        thread_groups = [dist.new_group(), dist.new_group()]
        what = "two threads on two groups"

        def threads():
            errors = []

            def loop(k):
                try:
                    for it in range(25):
                        xs = [_gen(f"thr/{k}/{it}/{r}", 257 * (k + 1), torch.int32, "sum")
                              for r in range(ws)]
                        t = xs[rank].clone()
                        if it % 2:
                            dist.all_reduce(t, group=thread_groups[k])
                        else:
                            dist.all_reduce(t, group=thread_groups[k], async_op=True).wait()
                        m = _mismatch(t, _ref_reduce("SUM", xs, torch.int32), torch.int32,
                                      True, ws)
                        if m:
                            errors.append(f"thread {k} iteration {it}: {m}")
                except Exception as e:  # noqa: BLE001
                    errors.append(f"thread {k}: {type(e).__name__}: {e}")
            ts = [threading.Thread(target=loop, args=(k,)) for k in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(timeout=120)
            C.true(what, not errors and not any(t.is_alive() for t in ts),
                   "; ".join(errors) or "a thread hung")
        C.run(what, threads)
    C.section_run("mixed", mixed)
    _settle([world_gloo] + [G.gloo for G in groups.values()])
    C.section_run("reinit", lambda: C.run("re-initialise", lambda: _reinit(rank, ws, C)))
    return _result(C, t0)


def _tcp_job(rank, ws):
    t0 = time.time()
    C = _Checks(rank)
    gloo = dist.new_group(backend="gloo")
    G = _Group(f"tcp{ws}", list(range(ws)), None, gloo)
    B = _Battery(C, G, dtypes=[torch.float32, torch.int64, torch.bool], counts=[0, 1001],
                 large=False)
    B.everything(sections=["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                           "all_to_all", "p2p", "barrier", "objects"])
    sub = dist.new_group(ranks=[0, 1])  # a sub-group's rendezvous through the TCPStore too

    def subgroup():
        if rank in (0, 1):
            t = torch.full((5,), float(rank + 1))
            C.run("tcp sub-group all_reduce", lambda: dist.all_reduce(t, group=sub))
            C.expect("tcp sub-group all_reduce", t, torch.full((5,), 3.0), torch.float32, True,
                     2)
    C.section_run("subgroup", subgroup)
    _settle([gloo])
    return _result(C, t0)


# ----------------------------------------------------------------------------- error rank functions

MISMATCH_TIMEOUT_S = 60  # the groups' own timeout: a mismatch must be reported well before it
MISMATCH_FAST_S = 20


def _mismatch_cases(rank, ws):
    """name -> (collectives named in the error, ranks that must fail, function run on a fresh
    group). Each makes the ranks disagree on sizes (or dtype, or op). Symmetric collectives
    must fail everywhere; for rooted ones the ranks whose transfers disagree must, and the
    others must at least not hang."""
    odd = rank == 0
    everyone = set(range(ws))

    def ar(g, async_op=False):
        t = torch.ones(10 if odd else 11)
        w = dist.all_reduce(t, group=g, async_op=async_op)
        return w

    def ar_wait(g):
        ar(g, True).wait()

    def ar_future(g):
        ar(g, True).get_future().wait()

    def ag(g):
        n = 8 if odd else 9
        dist.all_gather_into_tensor(torch.empty(ws * n), torch.ones(n), group=g)

    def rs(g):
        n = 4 if odd else 5
        dist.reduce_scatter_tensor(torch.empty(n), torch.ones(ws * n), group=g)

    def bc(g):  # the root (0) sends 100, the others expect 101
        dist.broadcast(torch.ones(100 if odd else 101), src=0, group=g)

    def red(g):
        dist.reduce(torch.ones(100 if odd else 101), dst=ws - 1, group=g)

    def a2a(g):  # every rank sends 1 element to each peer but expects 2 from each
        outs = [1 if r == rank else 2 for r in range(ws)]
        dist.all_to_all_single(torch.empty(sum(outs)), torch.ones(ws), outs, [1] * ws, group=g)

    def gath(g):  # rank 0 sends 6 where the root (ws - 1) expects 7
        outs = [torch.empty(7) for _ in range(ws)] if rank == ws - 1 else None
        dist.gather(torch.ones(6 if odd else 7), outs, dst=ws - 1, group=g)

    def ar_dtype(g):  # same bytes, different dtypes
        dist.all_reduce(torch.ones(16, dtype=torch.float32 if odd else torch.int32), group=g)

    def ar_op(g):
        dist.all_reduce(torch.ones(16), op=dist.ReduceOp.SUM if odd else dist.ReduceOp.MAX,
                        group=g)

    return {
        "all_reduce": (["all_reduce"], everyone, ar),
        "all_reduce dtypes differ": (["all_reduce"], everyone, ar_dtype),
        "all_reduce ops differ": (["all_reduce"], everyone, ar_op),
        "all_reduce async wait": (["all_reduce"], everyone, ar_wait),
        "all_reduce async future": (["all_reduce"], everyone, ar_future),
        "all_gather_into_tensor": (["all_gather_into_tensor"], everyone, ag),
        "reduce_scatter_tensor": (["reduce_scatter_tensor"], everyone, rs),
        "all_to_all_single": (["all_to_all"], everyone, a2a),
        "broadcast": (["broadcast"], everyone - {0}, bc),
        "reduce": (["reduce"], {0, ws - 1}, red),
        "gather": (["gather"], {ws - 1}, gath),  # rank 0's short send may just complete
    }


def _local_error_cases(ws):
    """name -> (words the message must contain, function); each call is invalid on every
    rank alike, so the backend can reject it before communicating."""
    R = dist.ReduceOp

    def noncontig_out_ag():
        out = torch.empty(2 * ws * 4)[::2]
        dist.all_gather_into_tensor(out, torch.ones(4))

    def noncontig_ar():
        dist.all_reduce(torch.ones(8, 4).t())

    def noncontig_out_rs():
        dist.reduce_scatter_tensor(torch.empty(8)[::2], torch.ones(4 * ws))

    def band():
        dist.all_reduce(torch.ones(4, dtype=torch.int32), op=R.BAND)

    def bxor():
        dist.all_reduce(torch.ones(4, dtype=torch.int64), op=R.BXOR)

    def avg_int():
        dist.all_reduce(torch.ones(4, dtype=torch.int32), op=R.AVG)

    def premul_int():
        dist.all_reduce(torch.ones(4, dtype=torch.int64), op=dist._make_nccl_premul_sum(2.0))

    def int16_sum():
        dist.all_reduce(torch.ones(4, dtype=torch.int16))

    def coalesced_bad():  # the second tensor is invalid: the first may already be in flight
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dist.all_reduce_coalesced([torch.ones(8), torch.ones(8, 4).t()])

    def ag_size():  # output not ws x input, on every rank
        dist.all_gather_into_tensor(torch.empty(ws * 4 + 1), torch.ones(4))

    return {
        "all_gather_into_tensor non-contiguous output": (["all_gather_into_tensor",
                                                           "contiguous"], noncontig_out_ag),
        "all_reduce non-contiguous": (["all_reduce", "contiguous"], noncontig_ar),
        "reduce_scatter_tensor non-contiguous output": (["reduce_scatter_tensor",
                                                          "contiguous"], noncontig_out_rs),
        "all_reduce BAND": (["all_reduce", "op"], band),
        "all_reduce BXOR": (["all_reduce", "op"], bxor),
        "all_reduce AVG int32": (["all_reduce", "AVG"], avg_int),
        "all_reduce PREMUL_SUM int64": (["all_reduce", "PREMUL_SUM"], premul_int),
        "all_reduce int16": (["all_reduce"], int16_sum),
        "all_gather_into_tensor wrong output size": (["all_gather_into_tensor"], ag_size),
        "all_reduce_coalesced second tensor non-contiguous": (["all_reduce_coalesced",
                                                               "contiguous"], coalesced_bad),
    }


SUBGROUP_TIMEOUT_S = 3


def _subgroup_timeout(rank):
    """A group made with new_group(timeout=3 s): rank 0 all_reduces alone, and must get a
    timeout error after about 3 s (not the default group's timeout). If it is still pending after
    15 s, the other ranks join the all_reduce so that the job can go on. Returns rank 0's
    (outcome, seconds, message)."""
    g = dist.new_group(timeout=datetime.timedelta(seconds=SUBGROUP_TIMEOUT_S))
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(16)
    if rank != 0:
        store.wait(["ctest/timeout/state"])
        if store.get("ctest/timeout/state") == b"pending":
            dist.all_reduce(t, group=g)
        return None
    w = dist.all_reduce(t, group=g, async_op=True)
    t0 = time.monotonic()
    while not w.is_completed() and time.monotonic() - t0 < 15:
        time.sleep(0.01)
    secs = time.monotonic() - t0
    if not w.is_completed():
        store.set("ctest/timeout/state", "pending")
        w.wait()
        return ("still pending", secs, "")
    store.set("ctest/timeout/state", "failed")
    try:
        w.wait()
        return ("completed", secs, "")
    except Exception as e:  # noqa: BLE001
        return (type(e).__name__, secs, str(e)[:400])


def _error_job(rank, ws):
    """Returns, per case, what this rank saw: ok, or the exception's type, message and how long
    it took; and whether the default group still worked afterwards."""
    out = {"mismatch": {}, "local": {}, "world_after": []}

    def world_ok(tag):
        t = torch.full((33,), float(rank))
        try:
            dist.all_reduce(t)
            ok = bool((t == sum(range(ws))).all())
            out["world_after"].append((tag, ok, "" if ok else f"got {t[:3].tolist()}"))
        except Exception as e:  # noqa: BLE001
            out["world_after"].append((tag, False, f"{type(e).__name__}: {e}"[:300]))

    for name, (calls, must, fn) in _mismatch_cases(rank, ws).items():
        g = dist.new_group(timeout=datetime.timedelta(seconds=MISMATCH_TIMEOUT_S))
        if TRACE:
            print(f"[rank {rank}] mismatch {name}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            fn(g)
            seen = ("ok", "", time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001
            seen = (type(e).__name__, str(e)[:600], time.monotonic() - t0)
        out["mismatch"][name] = (calls, rank in must) + seen
        world_ok(name)

    out["timeout"] = _subgroup_timeout(rank)
    world_ok("sub-group timeout")

    for name, (words, fn) in _local_error_cases(ws).items():
        if TRACE:
            print(f"[rank {rank}] local error {name}", file=sys.stderr, flush=True)
        try:
            fn()
            seen = ("ok", "")
        except Exception as e:  # noqa: BLE001
            seen = (type(e).__name__, str(e)[:600])
        out["local"][name] = (words,) + seen
        world_ok(name)
    time.sleep(0.3)
    return out


# ----------------------------------------------------------------------------- tests

def _launch(ws, fn, *args, init="file"):
    return run_ranks(ws, fn, *args, backend=BACKEND, init=init, env=ENV, timeout=JOB_TIMEOUT)


_JOBS = {}  # launched jobs, shared by the tests that check their sections


def _job(key, launch):
    """The results of a job, launched the first time a test asks for it; a job that failed to
    report fails every test that asks for it (without launching it again)."""
    if key not in _JOBS:
        try:
            _JOBS[key] = (True, launch())
        except AssertionError as e:
            _JOBS[key] = (False, str(e))
    ok, value = _JOBS[key]
    if not ok:
        raise AssertionError(f"job {key} failed:\n{value}")
    return value


def _assert_sections(results, match, need_checks=True):
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


WORLD_SECTIONS = [x for x in _Battery.SECTIONS if FULL or x != "wait_timeout"]


@pytest.mark.parametrize("section", WORLD_SECTIONS)
@pytest.mark.parametrize("ws", [2, 3, 4])
def test_world(ws, section):
    """One part of the battery (all dtypes x ops x counts x completion modes, with ~1M-element
    cases) on the default group of `ws` ranks; all parts run in one launch per world size."""
    results = _job(f"world{ws}", lambda: _launch(ws, _world_job, True))
    _assert_sections(results, lambda sec: sec == section, need_checks=section != "wait_timeout")


@pytest.mark.parametrize("part", list(SUBGROUPS) + ["mixed", "reinit"])
def test_subgroups(part):
    """Sub-groups of 4 ranks ([1,3] and [0,2] at once, the uneven [0,1,2], the single [3]) each
    with a smaller battery; 'mixed': async collectives interleaved across groups sharing the
    world's endpoint, and two threads on two groups; 'reinit': the default group destroyed and
    made anew in the same processes. One launch for all."""
    results = _job("subgroups", lambda: _launch(4, _subgroup_job))
    _assert_sections(results, lambda sec: sec.split(".")[0] == part)


def test_tcp_store():
    """Collectives (and a sub-group) with a TCPStore rendezvous (init_method tcp://)."""
    _assert_sections(_launch(2, _tcp_job, init="tcp"), lambda sec: True)


@pytest.fixture(scope="module")
def error_results():
    """One launch (3 ranks) of every error case, shared by the tests below."""
    if BACKEND == "gloo":
        pytest.skip("gloo detects no mismatched calls (the ranks would hang until the timeout)")
    results = _launch(3, _error_job)
    if TRACE:
        for rank, res in enumerate(results):
            for section in ("mismatch", "local"):
                for name, seen in res[section].items():
                    print(f"rank {rank} {section} {name}: {seen}")
            print(f"rank {rank} timeout: {res['timeout']}")
    return results


def test_errors_mismatched_sizes(error_results):
    """Ranks passing different sizes (on a fresh group each) get an exception naming the
    collective, well before the timeout, on every rank (rooted collectives: on the ranks whose
    transfers disagree); the default group keeps working."""
    problems, notes = [], []
    for rank, res in enumerate(error_results):
        for name, (calls, must, kind, msg, secs) in res["mismatch"].items():
            if secs > MISMATCH_FAST_S:
                problems.append(f"rank {rank}: mismatch '{name}': returned after {secs:.1f} s "
                                f"(a timeout, not a detected mismatch?): {kind}: {msg}")
            if kind == "ok":
                (problems if must else notes).append(
                    f"rank {rank}: mismatch '{name}': no error ({secs:.1f} s)")
                continue
            if not any(c in msg for c in calls):
                problems.append(f"rank {rank}: mismatch '{name}': error does not name "
                                f"{calls}: {kind}: {msg}")
            if not kind.endswith("Error"):
                problems.append(f"rank {rank}: mismatch '{name}': raised {kind}")
        for tag, ok, detail in res["world_after"]:
            if not ok:
                problems.append(f"rank {rank}: default group broken after '{tag}': {detail}")
    print("\n".join(notes))
    assert not problems, "\n".join(problems)


def test_errors_invalid_arguments(error_results):
    """Non-contiguous outputs, unsupported ops (BAND, BXOR, AVG/PREMUL_SUM of integers), a
    dtype sharc cannot reduce, a wrongly sized output: a clear error on every rank."""
    problems = []
    for rank, res in enumerate(error_results):
        for name, (words, kind, msg) in res["local"].items():
            if kind == "ok":
                problems.append(f"rank {rank}: '{name}': no error")
            elif not all(w in msg for w in words):
                problems.append(f"rank {rank}: '{name}': message lacks {words}: {kind}: {msg}")
    assert not problems, "\n".join(problems)


def test_subgroup_timeout(error_results):
    """new_group(timeout=3 s): a collective that cannot complete fails after about 3 s."""
    kind, secs, msg = error_results[0]["timeout"]
    assert kind not in ("completed", "still pending") and secs <= 3 * SUBGROUP_TIMEOUT_S, (
        f"all_reduce alone on new_group(timeout={SUBGROUP_TIMEOUT_S} s): {kind} after "
        f"{secs:.1f} s {msg}")
    assert "all_reduce" in msg, f"the timeout error does not name all_reduce: {kind}: {msg}"
