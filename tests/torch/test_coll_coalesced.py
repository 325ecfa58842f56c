"""Coalesced forms over the sharc backend (collectives_harness.py has the design):
all_reduce_coalesced, torch's _coalescing_manager fast path (no device) around all_reduce,
reduce_scatter_tensor and all_gather_into_tensor, and (sharc only) the device form, where the
backend's startCoalescing/endCoalescing surround all_reduces and a batch of sends and receives,
for float32, bfloat16 and int32 tensors of 0, 1, 1001 and 64 elements in one batch. Compared
with the float64/int64 reference (collectives_harness.TOL).
"""
import warnings

import pytest
import torch
import torch.distributed as dist

from collectives_harness import (FULL, WORLD_SIZES, gen, redop, ops_for, kind_for, ref_reduce,
                                 is_exact, label, battery_section, check_world, requires_backend)

pytestmark = requires_backend


@battery_section
def coalesced(B):
    C, G = B.C, B.G
    sizes = [0, 1, 1001, 64]
    for dtype in [d for d in B.dtypes if d in (torch.float32, torch.bfloat16,
                                               torch.int32)]:
        for op in [o for o in ("SUM", "MAX", "AVG", "PREMUL_SUM") if o in ops_for(dtype,
                                                                                  B.full)]:
            key = B.key("coal", dtype, op)
            xs = {s: B.inputs(f"{key}/{s}", s, dtype, kind_for(op, dtype)) for s in sizes}
            want = {s: ref_reduce(op, xs[s], dtype) for s in sizes}
            exact = is_exact(op, dtype)

            for async_op in (False, True):
                what = label(f"all_reduce_coalesced async={async_op}", G, dtype, op)

                def arc(what=what, async_op=async_op, xs=xs, want=want, op=op, dtype=dtype):
                    ts = [xs[s][G.rank].clone() for s in sizes]
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        fut = dist.all_reduce_coalesced(ts, op=redop(op), group=G.pg,
                                                        async_op=async_op)
                    if async_op:
                        fut.wait()
                    for s, t in zip(sizes, ts):
                        C.expect(f"{what} [{s}]", t, want[s], dtype, exact, G.size)
                C.run(what, arc)

            # torch's coalescing manager, fast path (no device): all_reduce
            for async_ops in (False, True):
                what = label(f"_coalescing_manager all_reduce async_ops={async_ops}", G, dtype,
                             op)

                def cm_ar(what=what, async_ops=async_ops, xs=xs, want=want, op=op,
                          dtype=dtype):
                    ts = [xs[s][G.rank].clone() for s in sizes]
                    with dist._coalescing_manager(group=G.pg, async_ops=async_ops) as cm:
                        for t in ts:
                            dist.all_reduce(t, op=redop(op), group=G.pg)
                    if async_ops:
                        cm.wait()
                    for s, t in zip(sizes, ts):
                        C.expect(f"{what} [{s}]", t, want[s], dtype, exact, G.size)
                C.run(what, cm_ar)

            # ... reduce_scatter_tensor (gloo's sums whatever op it is given)
            if not FULL and op != "SUM":
                continue
            rs_in = {s: B.inputs(f"{key}/rs/{s}", G.size * s, dtype, kind_for(op, dtype))
                     for s in sizes}
            rs_want = {s: ref_reduce(op, rs_in[s], dtype)[G.rank * s:(G.rank + 1) * s]
                       for s in sizes}
            what = label("_coalescing_manager reduce_scatter_tensor", G, dtype, op)

            def cm_rs(what=what, rs_in=rs_in, rs_want=rs_want, op=op, dtype=dtype):
                outs = [torch.zeros(s, dtype=dtype) for s in sizes]
                with dist._coalescing_manager(group=G.pg, async_ops=True) as cm:
                    for s, o in zip(sizes, outs):
                        dist.reduce_scatter_tensor(o, rs_in[s][G.rank].clone(),
                                                   op=redop(op), group=G.pg)
                cm.wait()
                for s, o in zip(sizes, outs):
                    C.expect(f"{what} [{s}]", o, rs_want[s], dtype, exact, G.size)
            C.run(what, cm_rs)

        # ... all_gather_into_tensor
        key = B.key("coal-ag", dtype)
        ag_in = {s: B.inputs(f"{key}/{s}", s, dtype) for s in sizes}
        what = label("_coalescing_manager all_gather_into_tensor", G, dtype)

        def cm_ag(what=what, ag_in=ag_in, dtype=dtype):
            outs = [torch.zeros(G.size * s, dtype=dtype) for s in sizes]
            with dist._coalescing_manager(group=G.pg):
                for s, o in zip(sizes, outs):
                    dist.all_gather_into_tensor(o, ag_in[s][G.rank].clone(), group=G.pg)
            for s, o in zip(sizes, outs):
                C.expect(f"{what} [{s}]", o, torch.cat(ag_in[s]), dtype, True, G.size)
        C.run(what, cm_ag)

    if not (B.full and FULL):
        return
    # the device form: the backend's startCoalescing/endCoalescing around the calls
    # (gloo has none); all_reduces, then a batch of sends and receives as NCCL-style code
    # (batch_isend_irecv on CUDA) issues them
    dtype = torch.float32
    key = B.key("coal-dev")
    xs = {s: B.inputs(f"{key}/{s}", s, dtype, "sum") for s in sizes}
    for async_ops in (False, True):
        what = label(f"_coalescing_manager(device=cpu) all_reduce async_ops={async_ops}", G,
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
                C.expect(f"{what} [{s}]", t, ref_reduce("SUM", xs[s], dtype), dtype, False,
                         G.size)
        C.run(what, dev_ar)

    what = label("_coalescing_manager(device=cpu) isend/irecv ring", G, dtype)

    def dev_p2p():
        ws, me = G.size, G.rank
        if ws == 1:
            return
        nxt, prv = (me + 1) % ws, (me - 1) % ws
        a = gen(f"{key}/p2p/{me}", 1001, dtype)
        got = torch.zeros(1001, dtype=dtype)
        with dist._coalescing_manager(group=G.pg, device=torch.device("cpu"),
                                      async_ops=True) as cm:
            dist.isend(a, dst=G.glob(nxt), group=G.pg)
            dist.irecv(got, src=G.glob(prv), group=G.pg)
        cm.wait()
        C.expect(what, got, gen(f"{key}/p2p/{prv}", 1001, dtype), dtype, True, ws)
    C.run(what, dev_p2p)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("section", ["coalesced"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
