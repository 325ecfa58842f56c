"""broadcast and barrier over the sharc backend (collectives_harness.py has the design):
broadcast of every dtype x 0, 1 and 1001 elements (and ~1M float32) from a cycling root x
completion mode, exact against the root's input and gloo's result; barrier in every completion
mode, checked through the store (every rank wrote its key before entering; after the barrier all
keys must exist, with later ranks arriving later).
"""
import time

import pytest
import torch
import torch.distributed as dist

from collectives_harness import (LARGE, MODES, WORLD_SIZES, shape_of, complete, label,
                                 battery_section, check_world, requires_backend)

pytestmark = requires_backend


@battery_section
def broadcast(B):
    C, G = B.C, B.G
    for dtype in B.dtypes:
        for n in B.counts + ([LARGE] if B.large and dtype == torch.float32 else []):
            root = B.i % G.size
            mode = B.mode()
            key = B.key("bc", dtype, n, root)
            xs = B.inputs(key, shape_of(n), dtype)
            what = label(f"broadcast root={root}", G, dtype, None, n, mode)

            def go(what=what, mode=mode, xs=xs, root=root, dtype=dtype):
                t = xs[G.rank].clone()
                val = complete(mode, lambda a: dist.broadcast(t, src=G.glob(root),
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


@battery_section
def barrier(B):
    """Every rank writes a store key before the barrier; after it all keys must exist."""
    C, G = B.C, B.G
    store = dist.distributed_c10d._get_default_store()
    for it, mode in enumerate(MODES):
        what = label(f"barrier #{it}", G, mode=mode)

        def go(it=it, mode=mode, what=what):
            # add, not set: TCPStore answers an add only once the server holds the key, while a
            # set is not acknowledged and may reach the server after a peer's check does
            store.add(f"ctest/{B.G.name}/barrier{it}/{G.rank}", 1)
            time.sleep(0.002 * G.rank)  # later ranks arrive later
            complete(mode, lambda a: dist.barrier(group=G.pg, async_op=a))
            keys = [f"ctest/{B.G.name}/barrier{it}/{r}" for r in range(G.size)]
            C.true(what, store.check(keys), "a rank left the barrier before all arrived")
        C.run(what, go)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("section", ["broadcast", "barrier"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
