"""Groups other than the default one, over the sharc backend (collectives_harness.py has the
design): sub-groups of 4 ranks ([1,3] and [0,2] at once, the uneven [0,1,2], the single [3]),
each with a smaller battery of every family's sections (fewer dtypes and counts, no large cases);
async collectives interleaved across the groups and the world, and two threads issuing
collectives on two groups at once; the default group destroyed and made anew in the same
processes; and a battery with a TCPStore rendezvous (init_method tcp://) instead of a FileStore.
"""
import datetime
import time

import pytest
import torch
import torch.distributed as dist

from collectives_harness import (BACKEND, SECTION_ORDER, SECTIONS, gen, ref_reduce, mismatch,
                                 Group, Checks, Battery, settle, result_of, import_sections,
                                 launch, job, assert_sections, requires_backend)

pytestmark = requires_backend


# The sub-group and TCP jobs run the sections of every family, so their ranks import every
# test_coll_*.py file that defines sections. (The parent imports only the files pytest
# collects: which sections the world jobs run stays the choice of the collected files.)
FAMILIES = ["test_coll_all_reduce", "test_coll_all_gather", "test_coll_reduce_scatter",
            "test_coll_broadcast", "test_coll_gather_scatter", "test_coll_p2p",
            "test_coll_coalesced", "test_coll_objects", "test_coll_guards"]


def _import_families():
    import_sections(FAMILIES)
    missing = [s for s in SECTION_ORDER if s not in SECTIONS]
    if missing:
        raise RuntimeError(f"no test_coll_*.py file in FAMILIES defines the sections {missing}")


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
    time.sleep(0.3)  # see settle


def _subgroup_job(rank, ws):
    """Sub-groups of 4 ranks: two disjoint pairs, an uneven triple and a single rank, each
    checked with a smaller battery, then collectives interleaved across the groups and the
    world; last, the default group is destroyed and made anew in the same processes."""
    _import_families()
    t0 = time.time()
    C = Checks(rank)
    world_gloo = dist.new_group(backend="gloo")
    groups = {}
    for name, members in SUBGROUPS.items():  # every rank creates every group, in one order
        pg = dist.new_group(ranks=members)
        pg_gloo = dist.new_group(ranks=members, backend="gloo")
        if rank in members:
            groups[name] = Group(name, members, pg, pg_gloo)
    dtypes = [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8]
    for G in groups.values():
        sections = [x for x in SECTION_ORDER if x not in ("p2p_large_tags", "wait_timeout")]
        Battery(C, G, dtypes=dtypes, counts=[1, 1001], large=False).run(sections, G.name + ".")

    def mixed():
        # interleaved: async collectives on every group this rank is in and on the world,
        # started before any is waited for
        W = Group("world", list(range(ws)), None, world_gloo)
        what = "interleaved sub-group and world all_reduce"

        def interleaved():
            pending = []
            for it in range(3):
                for G in list(groups.values()) + [W]:
                    xs = [gen(f"il/{G.name}/{it}/{r}", 999, torch.int64, "sum")
                          for r in range(G.size)]
                    t = xs[G.rank].clone()
                    pending.append((f"{what} {G.name} #{it}", t, ref_reduce("SUM", xs,
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
                        xs = [gen(f"thr/{k}/{it}/{r}", 257 * (k + 1), torch.int32, "sum")
                              for r in range(ws)]
                        t = xs[rank].clone()
                        if it % 2:
                            dist.all_reduce(t, group=thread_groups[k])
                        else:
                            dist.all_reduce(t, group=thread_groups[k], async_op=True).wait()
                        m = mismatch(t, ref_reduce("SUM", xs, torch.int32), torch.int32,
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
    settle([world_gloo] + [G.gloo for G in groups.values()])
    C.section_run("reinit", lambda: C.run("re-initialise", lambda: _reinit(rank, ws, C)))
    return result_of(C, t0)


def _tcp_job(rank, ws):
    """A smaller battery and a sub-group, with the ranks meeting through a TCPStore."""
    _import_families()
    t0 = time.time()
    C = Checks(rank)
    gloo = dist.new_group(backend="gloo")
    G = Group(f"tcp{ws}", list(range(ws)), None, gloo)
    B = Battery(C, G, dtypes=[torch.float32, torch.int64, torch.bool], counts=[0, 1001],
                large=False)
    B.run(["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "p2p",
           "barrier", "objects"])
    sub = dist.new_group(ranks=[0, 1])  # a sub-group's rendezvous through the TCPStore too

    def subgroup():
        if rank in (0, 1):
            t = torch.full((5,), float(rank + 1))
            C.run("tcp sub-group all_reduce", lambda: dist.all_reduce(t, group=sub))
            C.expect("tcp sub-group all_reduce", t, torch.full((5,), 3.0), torch.float32, True,
                     2)
    C.section_run("subgroup", subgroup)
    settle([gloo])
    return result_of(C, t0)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("part", list(SUBGROUPS) + ["mixed", "reinit"])
def test_subgroups(part):
    """Sub-groups of 4 ranks ([1,3] and [0,2] at once, the uneven [0,1,2], the single [3]) each
    with a smaller battery; 'mixed': async collectives interleaved across groups sharing the
    world's endpoint, and two threads on two groups; 'reinit': the default group destroyed and
    made anew in the same processes. One launch for all."""
    results = job("subgroups", lambda: launch(4, _subgroup_job))
    assert_sections(results, lambda sec: sec.split(".")[0] == part)


def test_tcp_store():
    """Collectives (and a sub-group) with a TCPStore rendezvous (init_method tcp://)."""
    assert_sections(launch(2, _tcp_job, init="tcp"), lambda sec: True)
