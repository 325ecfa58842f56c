"""Object collectives over the sharc backend (collectives_harness.py has the design):
all_gather_object, broadcast_object_list, gather_object, scatter_object_list and
send_object_list/recv_object_list, with objects whose pickled sizes differ per rank (torch
pickles them into uint8 tensors, pads to the largest, and sends the sizes in int64 tensors).
"""
import pytest
import torch
import torch.distributed as dist

from collectives_harness import (WORLD_SIZES, label, battery_section, check_world,
                                 requires_backend)

pytestmark = requires_backend


@battery_section
def objects(B):
    C, G = B.C, B.G
    ws, me = G.size, G.rank

    def obj(r, salt):  # rank-dependent sizes, so torch pads to the largest
        return {"rank": r, "salt": salt, "text": f"{G.name}-{r}-" * (3 + 5 * r),
                "t": torch.arange(r + 2)}

    def same(a, b):
        return (a.keys() == b.keys() and all(
            torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k]
            for k in a))

    what = label("all_gather_object", G)

    def agobj():
        out = [None] * ws
        dist.all_gather_object(out, obj(me, "ag"), group=G.pg)
        C.true(what, all(same(out[r], obj(r, "ag")) for r in range(ws)), f"got {out}")
    C.run(what, agobj)

    root = ws - 1
    what = label(f"broadcast_object_list src={root}", G)

    def bcobj():
        lst = [obj(root, "bc"), "x" * 100, 7] if me == root else [None, None, None]
        dist.broadcast_object_list(lst, src=G.glob(root), group=G.pg)
        C.true(what, same(lst[0], obj(root, "bc")) and lst[1:] == ["x" * 100, 7],
               f"got {lst}")
    C.run(what, bcobj)

    what = label("gather_object dst=0", G)

    def gaobj():
        out = [None] * ws if me == 0 else None
        dist.gather_object(obj(me, "ga"), out, dst=G.glob(0), group=G.pg)
        if me == 0:
            C.true(what, all(same(out[r], obj(r, "ga")) for r in range(ws)), f"got {out}")
    C.run(what, gaobj)

    what = label(f"scatter_object_list src={root}", G)

    def scobj():
        out = [None]
        ins = [obj(r, "sc") for r in range(ws)] if me == root else None
        dist.scatter_object_list(out, ins, src=G.glob(root), group=G.pg)
        C.true(what, same(out[0], obj(me, "sc")), f"got {out}")
    C.run(what, scobj)

    what = label("send_object_list/recv_object_list 0->1", G)

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


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("section", ["objects"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
