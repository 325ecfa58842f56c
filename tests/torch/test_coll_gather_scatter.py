"""gather, scatter, all_to_all_single and all_to_all over the sharc backend
(collectives_harness.py has the design): every dtype x 0, 1 and 1001 elements x completion mode
with cycling roots, gather/all_gather into non-contiguous outputs (columns of a matrix),
all_to_all_single with equal and unequal splits (some 0), the list form all_to_all (sharc only:
gloo has none) with sizes that differ per pair, ~1M elements. Data movement only: compared
exactly with the inputs and gloo.
"""
import pytest
import torch
import torch.distributed as dist

from collectives_harness import (FULL, LARGE, WORLD_SIZES, gen, shape_of, complete, label,
                                 battery_section, check_world, requires_backend)

pytestmark = requires_backend


@battery_section
def gather_scatter(B):
    C, G = B.C, B.G
    for dtype in B.dtypes:
        for n in B.counts:
            shape = shape_of(n)
            root = B.i % G.size
            mode = B.mode()
            key = B.key("ga", dtype, n, root)
            xs = B.inputs(key, shape, dtype)
            what = label(f"gather dst={root}", G, dtype, None, n, mode)

            def go_gather(what=what, mode=mode, xs=xs, root=root, dtype=dtype):
                outs = ([torch.empty(shape, dtype=dtype) for _ in range(G.size)]
                        if G.rank == root else None)
                complete(mode, lambda a: dist.gather(xs[G.rank].clone(), outs,
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

            root = B.i % G.size
            mode = B.mode()
            key = B.key("sc", dtype, n, root)
            chunks = [gen(f"{key}/{r}", shape, dtype) for r in range(G.size)]
            what = label(f"scatter src={root}", G, dtype, None, n, mode)

            def go_scatter(what=what, mode=mode, chunks=chunks, root=root, dtype=dtype):
                out = torch.zeros(shape, dtype=dtype)
                ins = [c.clone() for c in chunks] if G.rank == root else None
                complete(mode, lambda a: dist.scatter(out, ins, src=G.glob(root),
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
    xs = B.inputs(B.key("ga-strided"), n, torch.float32)
    what = label("gather/all_gather into non-contiguous outputs", G, torch.float32, None, n)

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


def _split(i, j, salt):
    return (i * 7 + j * 3 + salt) % 4  # rows rank i sends to rank j (0 included)


@battery_section
def all_to_all(B):
    C, G = B.C, B.G
    ws, me = G.size, G.rank
    for dtype in B.dtypes:
        # equal splits: every rank sends n elements (as rows of 3 for n = 1001 -> 333 rows)
        for n in B.counts:
            mode = B.mode()
            rows = 333 if n == 1001 else n
            key = B.key("a2a", dtype, n)
            xs = B.inputs(key, (ws * rows, 3), dtype)
            want = torch.cat([x[me * rows:(me + 1) * rows] for x in xs])
            what = label("all_to_all_single equal", G, dtype, None, n, mode)

            def go(what=what, mode=mode, xs=xs, want=want, dtype=dtype, rows=rows):
                out = torch.zeros(ws * rows, 3, dtype=dtype)
                complete(mode, lambda a: dist.all_to_all_single(out, xs[me].clone(),
                                                                group=G.pg, async_op=a))
                C.expect(what, out, want, dtype, True, ws)
                ref = torch.zeros(ws * rows, 3, dtype=dtype)
                if C.gloo(f"all_to_all_single {dtype}",
                          lambda: dist.all_to_all_single(ref, xs[me].clone(), group=G.gloo)):
                    C.expect(what + " vs gloo", out, ref, dtype, True, ws)
            C.run(what, go)

        # unequal splits (some 0), rows of 5 elements
        for salt in (0, 1):
            mode = B.mode()
            key = B.key("a2av", dtype, salt)
            chunk = {(i, j): gen(f"{key}/{i}->{j}", (_split(i, j, salt), 5), dtype)
                     for i in range(ws) for j in range(ws)}
            inp = torch.cat([chunk[(me, j)] for j in range(ws)])
            want = torch.cat([chunk[(j, me)] for j in range(ws)])
            in_splits = [_split(me, j, salt) for j in range(ws)]
            out_splits = [_split(j, me, salt) for j in range(ws)]
            what = label(f"all_to_all_single splits in={in_splits} out={out_splits}", G, dtype,
                         mode=mode)

            def go_v(what=what, mode=mode, inp=inp, want=want, ins=in_splits,
                     outs=out_splits, dtype=dtype):
                out = torch.zeros(sum(outs), 5, dtype=dtype)
                complete(mode, lambda a: dist.all_to_all_single(
                    out, inp.clone(), output_split_sizes=outs, input_split_sizes=ins,
                    group=G.pg, async_op=a))
                C.expect(what, out, want, dtype, True, ws)
                ref = torch.zeros(sum(outs), 5, dtype=dtype)
                if C.gloo(f"all_to_all_single splits {dtype}",
                          lambda: dist.all_to_all_single(ref, inp.clone(), outs, ins,
                                                         group=G.gloo)):
                    C.expect(what + " vs gloo", out, ref, dtype, True, ws)
            C.run(what, go_v)

        if not (B.full and FULL):
            continue
        # lists (gloo has no all_to_all): tensor j of rank i goes to rank j, sizes differ
        mode = B.mode()
        key = B.key("a2al", dtype)
        chunk = {(i, j): gen(f"{key}/{i}->{j}", _split(i, j, 2) * 3, dtype)
                 for i in range(ws) for j in range(ws)}
        what = label("all_to_all", G, dtype, mode=mode)

        def go_l(what=what, mode=mode, chunk=chunk, dtype=dtype):
            outs = [torch.zeros(_split(j, me, 2) * 3, dtype=dtype) for j in range(ws)]
            ins = [chunk[(me, j)].clone() for j in range(ws)]
            complete(mode, lambda a: dist.all_to_all(outs, ins, group=G.pg, async_op=a))
            for j in range(ws):
                C.expect(f"{what} [{j}]", outs[j], chunk[(j, me)], dtype, True, ws)
        C.run(what, go_l)

    if B.large:
        key = B.key("a2a-large")
        rows = LARGE // ws
        xs = B.inputs(key, ws * rows, torch.float32)
        want = torch.cat([x[me * rows:(me + 1) * rows] for x in xs])
        what = label("all_to_all_single equal", G, torch.float32, None, ws * rows)

        def go_large():
            out = torch.empty(ws * rows)
            dist.all_to_all_single(out, xs[me], group=G.pg)
            C.expect(what, out, want, torch.float32, True, ws)
        C.run(what, go_large)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("section", ["gather_scatter", "all_to_all"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
