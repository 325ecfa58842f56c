"""Outputs that are views into larger buffers, over the sharc backend (collectives_harness.py
has the design): all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast and
all_to_all_single into a view with 5 guard elements on either side, for float16, int8, float64
and bool, 1 and 1001 elements: the result must be right and nothing outside the view may change.
"""
import pytest
import torch
import torch.distributed as dist

from collectives_harness import (FULL, WORLD_SIZES, redop, kind_for, ref_reduce, is_exact, label,
                                 battery_section, check_world, requires_backend)

pytestmark = requires_backend


@battery_section
def guards(B):
    C, G = B.C, B.G
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
                  if d in B.dtypes] or B.dtypes[:1]:
        for n in (1, 1001):
            key = B.key("guard", dtype, n)
            op = "MAX"
            xs = B.inputs(f"{key}/ar", n, dtype, kind_for(op, dtype))
            what = label("all_reduce into a view", G, dtype, op, n)

            def ar(what=what, xs=xs, dtype=dtype, n=n):
                buf, t = guarded(n, dtype)
                t.copy_(xs[me])
                dist.all_reduce(t, op=redop(op), group=G.pg)
                C.expect(what, t, ref_reduce(op, xs, dtype), dtype, True, ws)
                intact(what, buf, dtype)
            C.run(what, ar)

            xs = B.inputs(f"{key}/ag", n, dtype)
            what = label("all_gather_into_tensor into a view", G, dtype, None, n)

            def ag(what=what, xs=xs, dtype=dtype, n=n):
                buf, out = guarded(ws * n, dtype)
                dist.all_gather_into_tensor(out, xs[me], group=G.pg)
                C.expect(what, out, torch.cat(xs), dtype, True, ws)
                intact(what, buf, dtype)
            C.run(what, ag)

            rop = op if FULL else "SUM"  # gloo's reduce_scatter_tensor only sums
            xs = B.inputs(f"{key}/rs", ws * n, dtype, kind_for(rop, dtype))
            what = label("reduce_scatter_tensor into a view", G, dtype, rop, n)

            def rs(what=what, xs=xs, dtype=dtype, n=n, op=rop):
                buf, out = guarded(n, dtype)
                dist.reduce_scatter_tensor(out, xs[me], op=redop(op), group=G.pg)
                C.expect(what, out, ref_reduce(op, xs, dtype)[me * n:(me + 1) * n], dtype,
                         is_exact(op, dtype), ws)
                intact(what, buf, dtype)
            C.run(what, rs)

            xs = B.inputs(f"{key}/bc", n, dtype)
            what = label("broadcast into a view", G, dtype, None, n)

            def bc(what=what, xs=xs, dtype=dtype, n=n):
                buf, t = guarded(n, dtype)
                t.copy_(xs[me])
                dist.broadcast(t, src=G.glob(ws - 1), group=G.pg)
                C.expect(what, t, xs[ws - 1], dtype, True, ws)
                intact(what, buf, dtype)
            C.run(what, bc)

            xs = B.inputs(f"{key}/a2a", ws * n, dtype)
            what = label("all_to_all_single into a view", G, dtype, None, n)

            def a2a(what=what, xs=xs, dtype=dtype, n=n):
                buf, out = guarded(ws * n, dtype)
                dist.all_to_all_single(out, xs[me], group=G.pg)
                C.expect(what, out, torch.cat([x[me * n:(me + 1) * n] for x in xs]), dtype,
                         True, ws)
                intact(what, buf, dtype)
            C.run(what, a2a)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("section", ["guards"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
