"""all_gather_into_tensor and all_gather over the sharc backend (collectives_harness.py has the
design): every dtype (with int16 and complex64 for sharc) x 0, 1 and 1001 elements x completion
mode, concatenated and stacked outputs, the list form, the input untouched, in place (the input
is this rank's slice of the output, as FSDP passes it), a strided input, ~1M elements. Gathers
move bytes, so the results must equal the inputs and gloo's result exactly.
"""
import pytest
import torch
import torch.distributed as dist

from collectives_harness import (FULL, DTYPES, LARGE, WORLD_SIZES, shape_of, complete, label,
                                 battery_section, check_world, requires_backend)

pytestmark = requires_backend


@battery_section
def all_gather(B):
    C, G = B.C, B.G
    dtypes = B.dtypes + ([torch.int16, torch.complex64] if B.full and FULL else [])
    for dtype in dtypes:
        for n in B.counts:
            key = B.key("ag", dtype, n)
            shape = shape_of(n)
            xs = B.inputs(key, shape, dtype)
            cat = torch.cat([x.reshape(-1) for x in xs])

            # into a tensor: concatenated (ws*d0, ...) and stacked (ws, d0, ...) outputs
            for stacked in (False, True) if FULL else (False,):  # gloo: concatenated only
                mode = B.mode()
                what = label("all_gather_into_tensor" + (" stacked" if stacked else ""),
                             G, dtype, None, n, mode)
                oshape = ((G.size,) + shape) if stacked else ((G.size * shape[0],) + shape[1:])

                def go(oshape=oshape, what=what, mode=mode):
                    out = torch.full(oshape, 7, dtype=dtype) if dtype != torch.bool \
                        else torch.zeros(oshape, dtype=dtype)
                    x = xs[G.rank].clone()
                    complete(mode, lambda a: dist.all_gather_into_tensor(
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
            mode = B.mode()
            what = label("all_gather", G, dtype, None, n, mode)

            def go_list(what=what, mode=mode):
                outs = [torch.empty(shape, dtype=dtype) for _ in range(G.size)]
                complete(mode, lambda a: dist.all_gather(outs, xs[G.rank].clone(),
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
            key = B.key("ag-inplace", dtype, n)
            xs = B.inputs(key, n, dtype)
            cat = torch.cat(xs)
            mode = B.mode()
            what = label("all_gather_into_tensor in-place", G, dtype, None, n, mode)

            def go_inplace(what=what, mode=mode, xs=xs, cat=cat, n=n):
                out = torch.zeros(G.size * n, dtype=dtype)
                mine = out[G.rank * n:(G.rank + 1) * n]
                mine.copy_(xs[G.rank])
                complete(mode, lambda a: dist.all_gather_into_tensor(out, mine, group=G.pg,
                                                                     async_op=a))
                C.expect(what, out, cat, dtype, True, G.size)
            C.run(what, go_inplace)

            what = label("all_gather_into_tensor strided input", G, dtype, None, n)

            def go_strided(what=what, xs=xs, cat=cat, n=n):
                base = torch.zeros(2 * n, dtype=dtype)
                base[::2] = xs[G.rank]
                out = torch.empty(G.size * n, dtype=dtype)
                dist.all_gather_into_tensor(out, base[::2], group=G.pg)
                C.expect(what, out, cat, dtype, True, G.size)
            C.run(what, go_strided)

    if B.large:
        key = B.key("ag-large")
        xs = B.inputs(key, LARGE, torch.float32)
        what = label("all_gather_into_tensor", G, torch.float32, None, LARGE)

        def go_large():
            out = torch.empty(G.size * LARGE)
            dist.all_gather_into_tensor(out, xs[G.rank], group=G.pg)
            C.expect(what, out, torch.cat(xs), torch.float32, True, G.size)
        C.run(what, go_large)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("section", ["all_gather"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
