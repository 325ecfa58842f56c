"""Point to point over the sharc backend (collectives_harness.py has the design): blocking
send/recv around the ring (with recv's return value), isend/irecv with every peer on tags posted
in the opposite order and two messages on one tag (which must arrive in order),
batch_isend_irecv both ways around the ring, receive from any source (sharc must refuse it
clearly), large tag values (refused with a clear error or delivered to the right receive, never
to another tag), and work.wait(timeout) on an irecv whose send comes later (times out, then
completes). Exact comparisons only.
"""
import datetime
import sys
import time

import pytest
import torch
import torch.distributed as dist

from collectives_harness import (BACKEND, FULL, TRACE, LARGE, WORLD_SIZES, gen, shape_of, label,
                                 battery_section, check_world, requires_backend)

pytestmark = requires_backend


@battery_section
def p2p(B):
    C, G = B.C, B.G
    ws, me = G.size, G.rank
    nxt, prv = (me + 1) % ws, (me - 1) % ws
    dtypes = [d for d in B.dtypes if d in (torch.float32, torch.bfloat16, torch.int64,
                                           torch.bool, torch.uint8)] or B.dtypes[:1]
    for dtype in dtypes:
        for n in B.counts + ([LARGE] if B.large and dtype == torch.float32 else []):
            shape = shape_of(n)
            key = B.key("p2p", dtype, n)
            msg = {(i, j): gen(f"{key}/{i}->{j}", shape, dtype)
                   for i in range(ws) for j in range(ws) if i != j}

            # blocking send/recv around the ring (even ranks send first)
            what = label("send/recv ring", G, dtype, None, n)

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
            what = label("isend/irecv tags", G, dtype, None, n)

            def tags(what=what, msg=msg, dtype=dtype, shape=shape, key=key):
                works, checks = [], []
                for p in range(ws):
                    if p == me:
                        continue
                    a = msg[(me, p)].clone()
                    b = gen(f"{key}/b/{me}->{p}", shape, dtype)
                    c1 = gen(f"{key}/c1/{me}->{p}", shape, dtype)
                    c2 = gen(f"{key}/c2/{me}->{p}", shape, dtype)
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
                                gen(f"{key}/b/{p}->{me}", shape, dtype)),
                               (f"{what} from {p} tag 33 first", rc1,
                                gen(f"{key}/c1/{p}->{me}", shape, dtype)),
                               (f"{what} from {p} tag 33 second", rc2,
                                gen(f"{key}/c2/{p}->{me}", shape, dtype))]
                for k, w in enumerate(works):
                    if k % 2 and FULL:  # gloo's send/recv works have no future
                        w.get_future().wait()
                    else:
                        w.wait()
                for desc, got, want in checks:
                    C.expect(desc, got, want, dtype, True, ws)
            C.run(what, tags)

        # batch_isend_irecv around the ring, both directions
        what = label("batch_isend_irecv", G, dtype, None, 1001)

        def batch(what=what, dtype=dtype):
            key = B.key("batch", dtype)
            a = gen(f"{key}/{me}->{nxt}", 1001, dtype)
            b = gen(f"{key}/{me}->{prv}", 1001, dtype)
            ra, rb = torch.zeros(1001, dtype=dtype), torch.zeros(1001, dtype=dtype)
            ops = [dist.P2POp(dist.isend, a, G.glob(nxt), G.pg),
                   dist.P2POp(dist.irecv, ra, G.glob(prv), G.pg),
                   dist.P2POp(dist.isend, b, G.glob(prv), G.pg),
                   dist.P2POp(dist.irecv, rb, G.glob(nxt), G.pg)]
            works = dist.batch_isend_irecv(ops)
            # sharc supports coalescing (where torch asks): the batch is one coalesced work
            pg = G.pg or dist.distributed_c10d._get_default_group()
            coalesces = getattr(pg._get_backend(torch.device("cpu")), "supports_coalescing", None)
            if BACKEND == "sharc" and coalesces is not None:
                C.true(what + " coalesced", coalesces and len(works) == 1,
                       f"supports_coalescing {coalesces}, {len(works)} works")
            for w in works:
                w.wait()
            C.expect(what + " from prev", ra, gen(f"{key}/{prv}->{me}", 1001, dtype), dtype,
                     True, ws)
            C.expect(what + " from next", rb, gen(f"{key}/{nxt}->{me}", 1001, dtype), dtype,
                     True, ws)
        C.run(what, batch)

    # receive from any source: group rank 0 collects two messages from every other rank, in
    # whatever order they come, each sender's in its own order. Then the senders' third
    # messages race: one goes to a receive from any source, the others to receives naming
    # their senders (what the race's losing receives took must reach them).
    what = label("recv from any source", G, torch.float32, None, 17)

    def anysrc():
        key = B.key("any")
        if me == 0:
            got = {}
            for _ in range(2 * (ws - 1)):
                t = torch.zeros(17)
                src = dist.recv(t, group=G.pg, tag=5)
                gsrc = G.members.index(src) if src in G.members else -1
                n = len(got.setdefault(gsrc, []))
                got[gsrc].append(n)
                C.expect(f"{what} #{n} from {src}", t, gen(f"{key}/{gsrc}/{n}", 17, torch.float32),
                         torch.float32, True, ws)
            C.true(what + " senders", sorted(got) == list(range(1, ws)), f"saw {sorted(got)}")
            dist.barrier(group=G.pg)  # every sender's first two are here: now the race
            t = torch.zeros(17)
            work = dist.irecv(t, group=G.pg, tag=5)
            work.wait()
            gsrc = work._source_rank()  # the sender's rank in the group
            C.true(what + " irecv source", 0 < gsrc < ws, f"source rank {gsrc}")
            C.expect(what + " irecv", t, gen(f"{key}/{gsrc}/2", 17, torch.float32), torch.float32,
                     True, ws)
            for sender in range(1, ws):
                if sender == gsrc:
                    continue
                t = torch.zeros(17)
                dist.recv(t, src=G.glob(sender), group=G.pg, tag=5)
                C.expect(f"{what} named from {sender}", t,
                         gen(f"{key}/{sender}/2", 17, torch.float32), torch.float32, True, ws)
        else:
            for n in range(3):
                if n == 2:
                    dist.barrier(group=G.pg)
                dist.send(gen(f"{key}/{me}/{n}", 17, torch.float32), dst=G.glob(0), group=G.pg,
                          tag=5)
    C.run(what, anysrc)

    # works dropped before they finish (an exception between irecv and wait): the receives
    # still run into their tensors, which the backend must keep (4 MiB: freed memory would be
    # unmapped, and the late write would crash the rank); the group keeps working after.
    n_drop = 1 << 20
    what = label("dropped irecv", G, torch.float32, None, n_drop)

    def dropped():
        key = B.key("dropped")
        if me == 0:
            for sender in range(1, ws):
                dist.irecv(torch.zeros(n_drop), src=G.glob(sender), group=G.pg, tag=6)
        dist.barrier(group=G.pg)  # rank 0's works and tensors are gone
        if me != 0:
            dist.send(gen(f"{key}/{me}", n_drop, torch.float32), dst=G.glob(0), group=G.pg, tag=6)
        junk = [torch.ones(n_drop) for _ in range(4)]  # reuses the freed memory, if any
        t = torch.arange(1001, dtype=torch.float32) * (me + 1)
        dist.all_reduce(t, group=G.pg)
        want = torch.arange(1001, dtype=torch.float64) * sum(r + 1 for r in range(ws))
        C.expect(what + " all_reduce after", t, want, torch.float32, True, ws)
        C.true(what + " memory", all(bool((j == 1).all()) for j in junk), "a late write landed")
    C.run(what, dropped)


@battery_section
def p2p_large_tags(B):
    """Large tag values: every rank sends each peer messages whose tags differ by 8188
    (sharc's user tag space) and one with tag 2**20 + 3, received in the opposite order.
    A backend may refuse a tag it cannot represent (with an error that says so, the same
    on every rank), but must never deliver a message to a receive of another tag."""
    C, G = B.C, B.G
    ws, me = G.size, G.rank
    what = label("isend/irecv large tags", G, torch.int64, None, 9)

    def big_tags():
        key = B.key("bigtags")
        tags = [9, 9 + 8188, 2**20 + 3, 4]  # used by no other section
        works, checks, refused = [], [], {}
        for p in range(ws):
            if p == me:
                continue
            for tg in tags:
                try:
                    works.append(dist.isend(gen(f"{key}/{me}->{p}/{tg}", 9, torch.int64),
                                            dst=G.glob(p), group=G.pg, tag=tg))
                except RuntimeError as e:
                    refused[tg] = str(e).splitlines()[0]
            for tg in reversed(tags):
                if tg in refused:
                    continue
                r = torch.zeros(9, dtype=torch.int64)
                works.append(dist.irecv(r, src=G.glob(p), group=G.pg, tag=tg))
                checks.append((f"{what} from {p} tag {tg}", r,
                               gen(f"{key}/{p}->{me}/{tg}", 9, torch.int64)))
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


@battery_section
def wait_timeout(B):
    C, G = B.C, B.G
    if not FULL or G.size < 2 or G.rank > 1:
        return
    store = dist.distributed_c10d._get_default_store()
    key = f"ctest/{G.name}/wait_timeout"
    msg = gen(B.key("wait-timeout"), 33, torch.float32)
    what = label("irecv wait(timeout=0.3 s) before the send", G)

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


# ----------------------------------------------------------------------------- tests

# wait_timeout checks sharc only (its section does nothing under gloo)
@pytest.mark.parametrize("section",
                         ["p2p", "p2p_large_tags"] + (["wait_timeout"] if FULL else []))
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_world(ws, section):
    """The section on the default group of `ws` ranks (one launch per world size for the
    sections of every collected file)."""
    check_world(ws, section)
