"""reduce_scatter_tensor and reduce_scatter (the list form, sharc only: gloo has none) over the
sharc backend (collectives_harness.py has the design): every dtype x reduce op x 0, 1 and 1001
elements per rank x completion mode, the input untouched, in place (the output is this rank's
slice of the input), ~1M input elements. Compared with the float64/int64/bool reference
(collectives_harness.TOL) and, for SUM only, with gloo (torch 2.6's gloo reduce_scatter_tensor
sums whatever op it is given; twice the tolerance as both round).
"""
import pytest
import torch
import torch.distributed as dist

from collectives_harness import (FULL, LARGE, WORLD_SIZES, redop, ops_for, kind_for, ref_reduce,
                                 is_exact, shape_of, complete, label, battery_section,
                                 check_world, requires_backend)

pytestmark = requires_backend


@battery_section
def reduce_scatter(B):
    C, G = B.C, B.G
    for dtype in B.dtypes:
        # torch 2.6's gloo reduce_scatter_tensor sums whatever op it is given
        for op in ops_for(dtype, B.full) if FULL else ["SUM"]:
            for n in B.counts:
                _reduce_scatter_case(B, dtype, op, n, B.mode(True))
    if B.large:  # ~1M input elements
        _reduce_scatter_case(B, torch.float32, "SUM", LARGE // G.size, B.mode(True), True)
        _reduce_scatter_case(B, torch.int64, "MIN" if FULL else "SUM", LARGE // G.size,
                             B.mode(True), True)

    # in place: the output is this rank's slice of the input
    for dtype, op in [(torch.float32, "SUM"), (torch.int32, "MAX" if FULL else "SUM"),
                      (torch.bfloat16, "AVG" if B.full and FULL else "SUM")]:
        n = 1001
        key = B.key("rs-inplace", dtype, op)
        xs = B.inputs(key, G.size * n, dtype, kind_for(op, dtype))
        want = ref_reduce(op, xs, dtype)[G.rank * n:(G.rank + 1) * n]
        mode = B.mode(True)
        what = label("reduce_scatter_tensor in-place", G, dtype, op, n, mode)

        def go_inplace(what=what, mode=mode, xs=xs, want=want, op=op, dtype=dtype):
            buf = xs[G.rank].clone()
            out = buf[G.rank * n:(G.rank + 1) * n]
            complete(mode, lambda a: dist.reduce_scatter_tensor(out, buf, op=redop(op),
                                                                group=G.pg, async_op=a))
            C.expect(what, out, want, dtype, is_exact(op, dtype), G.size)
        C.run(what, go_inplace)


def _reduce_scatter_case(B, dtype, op, n, mode, large=False):
    C, G = B.C, B.G
    key = B.key("rs", dtype, op, n)
    # input: ws blocks of n elements, as (ws*n,) or, for n = 1001, (ws*7, 11, 13)
    shape = shape_of(n)
    ishape = (G.size * shape[0],) + shape[1:]
    xs = B.inputs(key, ishape, dtype, kind_for(op, dtype))
    full_ref = ref_reduce(op, xs, dtype).reshape(G.size, -1)
    want = full_ref[G.rank].reshape(shape)
    what = label("reduce_scatter_tensor", G, dtype, op, n, mode)

    def go():
        out = torch.zeros(shape, dtype=dtype)
        x = xs[G.rank].clone()
        complete(mode, lambda a: dist.reduce_scatter_tensor(out, x, op=redop(op),
                                                            group=G.pg, async_op=a))
        C.expect(what, out, want, dtype, is_exact(op, dtype), G.size)
        C.true(what + " input untouched", torch.equal(x, xs[G.rank]))
        if op == "SUM" and not large:  # gloo's reduce_scatter_tensor only sums
            ref = torch.zeros(shape, dtype=dtype)
            if C.gloo(f"reduce_scatter_tensor {dtype} {op}",
                      lambda: dist.reduce_scatter_tensor(ref, xs[G.rank].clone(),
                                                         op=redop(op), group=G.gloo)):
                C.expect(what + " vs gloo", out, ref, dtype, is_exact(op, dtype), G.size, 2.0)
    C.run(what, go)

    if not (B.full and FULL) or large:
        return
    # list form (gloo has none): the same data as ws separate tensors
    mode = B.mode()
    what = label("reduce_scatter", G, dtype, op, n, mode)

    def go_list():
        ins = [b.reshape(shape).clone() for b in xs[G.rank].reshape(G.size, -1)]
        out = torch.zeros(shape, dtype=dtype)
        complete(mode, lambda a: dist.reduce_scatter(out, ins, op=redop(op), group=G.pg,
                                                     async_op=a))
        C.expect(what, out, want, dtype, is_exact(op, dtype), G.size)
    C.run(what, go_list)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("section", ["reduce_scatter"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
