"""all_reduce and reduce over the sharc backend (collectives_harness.py has the design): every
dtype x reduce op (AVG and PREMUL_SUM with a scalar or a tensor factor only for floating types
and sharc) x 0, 1 and 1001 elements (as a 3-d tensor) x completion mode (sync, wait, future,
poll), the future's value, complex64 sums, ~1M-element cases; reduce cycles the root. Results
are compared with the float64/int64/bool reference (tolerances: collectives_harness.TOL, per
contributing rank) and with gloo's result where gloo has the op (twice the tolerance: both
round).
"""
import pytest
import torch
import torch.distributed as dist

from collectives_harness import (FULL, LARGE, GLOO_OPS, WORLD_SIZES, redop, ops_for, kind_for,
                                 ref_reduce, is_exact, shape_of, complete, label, battery_section,
                                 check_world, requires_backend)

pytestmark = requires_backend


@battery_section
def all_reduce(B):
    C, G = B.C, B.G
    for dtype in B.dtypes:
        for op in ops_for(dtype, B.full):
            for n in B.counts:
                _all_reduce_case(B, dtype, op, n, B.mode())
    # complex tensors: torch reduces them as float pairs (SUM only)
    xs = B.inputs(B.key("ar-complex"), 1001, torch.complex64, "sum")
    want = torch.stack([x.to(torch.complex128) for x in xs]).sum(0)
    mode = B.mode()
    what = label("all_reduce", G, torch.complex64, "SUM", 1001, mode)

    def go_complex():
        t = xs[G.rank].clone()
        complete(mode, lambda a: dist.all_reduce(t, group=G.pg, async_op=a))
        C.expect(what, torch.view_as_real(t), torch.view_as_real(want), torch.float32,
                 False, G.size)
    C.run(what, go_complex)

    if B.large:
        for dtype, op in [(torch.float32, "SUM"), (torch.bfloat16, "AVG" if FULL else "SUM"),
                          (torch.int32, "MAX")]:
            _all_reduce_case(B, dtype, op, LARGE, B.mode())


def _all_reduce_case(B, dtype, op, n, mode):
    C, G = B.C, B.G
    what = label("all_reduce", G, dtype, op, n, mode)
    key = B.key("ar", dtype, op, n)
    xs = B.inputs(key, shape_of(n), dtype, kind_for(op, dtype))
    want = ref_reduce(op, xs, dtype)

    def go():
        t = xs[G.rank].clone()
        val = complete(mode, lambda a: dist.all_reduce(t, op=redop(op), group=G.pg,
                                                       async_op=a))
        C.expect(what, t, want, dtype, is_exact(op, dtype), G.size)
        if mode == "future":
            C.true(what + " future value", isinstance(val, list) and len(val) == 1
                   and torch.equal(val[0], t), f"got {type(val).__name__}")
        if op in GLOO_OPS:
            r = xs[G.rank].clone()
            if C.gloo(f"all_reduce {dtype} {op}",
                      lambda: dist.all_reduce(r, op=redop(op), group=G.gloo)):
                C.expect(what + " vs gloo", t, r, dtype, is_exact(op, dtype), G.size, 2.0)
    C.run(what, go)


@battery_section
def reduce(B):
    C, G = B.C, B.G
    for dtype in B.dtypes:
        for op in ops_for(dtype, B.full):
            for n in B.counts:
                root = B.i % G.size
                mode = B.mode()
                key = B.key("red", dtype, op, n, root)
                xs = B.inputs(key, shape_of(n), dtype, kind_for(op, dtype))
                want = ref_reduce(op, xs, dtype)
                what = label(f"reduce root={root}", G, dtype, op, n, mode)

                def go(what=what, mode=mode, xs=xs, want=want, root=root, op=op,
                       dtype=dtype):
                    t = xs[G.rank].clone()
                    complete(mode, lambda a: dist.reduce(t, dst=G.glob(root), op=redop(op),
                                                         group=G.pg, async_op=a))
                    if G.rank == root:
                        C.expect(what, t, want, dtype, is_exact(op, dtype), G.size)
                    if op in GLOO_OPS:
                        r = xs[G.rank].clone()
                        if C.gloo(f"reduce {dtype} {op}",
                                  lambda: dist.reduce(r, dst=G.glob(root), op=redop(op),
                                                      group=G.gloo)) and G.rank == root:
                            C.expect(what + " vs gloo", t, r, dtype, is_exact(op, dtype),
                                     G.size, 2.0)
                C.run(what, go)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("section", ["all_reduce", "reduce"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
