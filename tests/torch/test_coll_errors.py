"""Errors over the sharc backend (collectives_harness.py has the design), in one launch of
3 ranks: ranks that disagree on sizes, dtypes or ops (each on a fresh group) get an exception
naming the collective well before the group's timeout, and the default group keeps working;
invalid arguments (non-contiguous tensors, unsupported ops and dtypes, wrongly sized outputs)
get a clear error on every rank; a sub-group's own timeout applies to its collectives. gloo
detects no mismatched calls, so these tests are skipped when it is the backend under test.
"""
import datetime
import sys
import time
import warnings

import pytest
import torch
import torch.distributed as dist

from collectives_harness import BACKEND, TRACE, launch, requires_backend

pytestmark = requires_backend


MISMATCH_TIMEOUT_S = 60  # the groups' own timeout: a mismatch must be reported well before it
MISMATCH_FAST_S = 20


def _mismatch_cases(rank, ws):
    """name -> (collectives named in the error, ranks that must fail, function run on a fresh
    group). Each makes the ranks disagree on sizes (or dtype, or op). Symmetric collectives
    must fail everywhere; for rooted ones the ranks whose transfers disagree must, and the
    others must at least not hang."""
    odd = rank == 0
    everyone = set(range(ws))

    def ar(g, async_op=False):
        t = torch.ones(10 if odd else 11)
        w = dist.all_reduce(t, group=g, async_op=async_op)
        return w

    def ar_wait(g):
        ar(g, True).wait()

    def ar_future(g):
        ar(g, True).get_future().wait()

    def ag(g):
        n = 8 if odd else 9
        dist.all_gather_into_tensor(torch.empty(ws * n), torch.ones(n), group=g)

    def rs(g):
        n = 4 if odd else 5
        dist.reduce_scatter_tensor(torch.empty(n), torch.ones(ws * n), group=g)

    def bc(g):  # the root (0) sends 100, the others expect 101
        dist.broadcast(torch.ones(100 if odd else 101), src=0, group=g)

    def red(g):
        dist.reduce(torch.ones(100 if odd else 101), dst=ws - 1, group=g)

    def a2a(g):  # every rank sends 1 element to each peer but expects 2 from each
        outs = [1 if r == rank else 2 for r in range(ws)]
        dist.all_to_all_single(torch.empty(sum(outs)), torch.ones(ws), outs, [1] * ws, group=g)

    def gath(g):  # rank 0 sends 6 where the root (ws - 1) expects 7
        outs = [torch.empty(7) for _ in range(ws)] if rank == ws - 1 else None
        dist.gather(torch.ones(6 if odd else 7), outs, dst=ws - 1, group=g)

    def ar_dtype(g):  # same bytes, different dtypes
        dist.all_reduce(torch.ones(16, dtype=torch.float32 if odd else torch.int32), group=g)

    def ar_op(g):
        dist.all_reduce(torch.ones(16), op=dist.ReduceOp.SUM if odd else dist.ReduceOp.MAX,
                        group=g)

    return {
        "all_reduce": (["all_reduce"], everyone, ar),
        "all_reduce dtypes differ": (["all_reduce"], everyone, ar_dtype),
        "all_reduce ops differ": (["all_reduce"], everyone, ar_op),
        "all_reduce async wait": (["all_reduce"], everyone, ar_wait),
        "all_reduce async future": (["all_reduce"], everyone, ar_future),
        "all_gather_into_tensor": (["all_gather_into_tensor"], everyone, ag),
        "reduce_scatter_tensor": (["reduce_scatter_tensor"], everyone, rs),
        "all_to_all_single": (["all_to_all"], everyone, a2a),
        "broadcast": (["broadcast"], everyone - {0}, bc),
        "reduce": (["reduce"], {0, ws - 1}, red),
        "gather": (["gather"], {ws - 1}, gath),  # rank 0's short send may just complete
    }


def _local_error_cases(ws):
    """name -> (words the message must contain, function); each call is invalid on every
    rank alike, so the backend can reject it before communicating."""
    R = dist.ReduceOp

    def noncontig_out_ag():
        out = torch.empty(2 * ws * 4)[::2]
        dist.all_gather_into_tensor(out, torch.ones(4))

    def noncontig_ar():
        dist.all_reduce(torch.ones(8, 4).t())

    def noncontig_out_rs():
        dist.reduce_scatter_tensor(torch.empty(8)[::2], torch.ones(4 * ws))

    def band():
        dist.all_reduce(torch.ones(4, dtype=torch.int32), op=R.BAND)

    def bxor():
        dist.all_reduce(torch.ones(4, dtype=torch.int64), op=R.BXOR)

    def avg_int():
        dist.all_reduce(torch.ones(4, dtype=torch.int32), op=R.AVG)

    def premul_int():
        dist.all_reduce(torch.ones(4, dtype=torch.int64), op=dist._make_nccl_premul_sum(2.0))

    def int16_sum():
        dist.all_reduce(torch.ones(4, dtype=torch.int16))

    def coalesced_bad():  # the second tensor is invalid: the first may already be in flight
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dist.all_reduce_coalesced([torch.ones(8), torch.ones(8, 4).t()])

    def ag_size():  # output not ws x input, on every rank
        dist.all_gather_into_tensor(torch.empty(ws * 4 + 1), torch.ones(4))

    return {
        "all_gather_into_tensor non-contiguous output": (["all_gather_into_tensor",
                                                          "contiguous"], noncontig_out_ag),
        "all_reduce non-contiguous": (["all_reduce", "contiguous"], noncontig_ar),
        "reduce_scatter_tensor non-contiguous output": (["reduce_scatter_tensor",
                                                         "contiguous"], noncontig_out_rs),
        "all_reduce BAND": (["all_reduce", "op"], band),
        "all_reduce BXOR": (["all_reduce", "op"], bxor),
        "all_reduce AVG int32": (["all_reduce", "AVG"], avg_int),
        "all_reduce PREMUL_SUM int64": (["all_reduce", "PREMUL_SUM"], premul_int),
        "all_reduce int16": (["all_reduce"], int16_sum),
        "all_gather_into_tensor wrong output size": (["all_gather_into_tensor"], ag_size),
        "all_reduce_coalesced second tensor non-contiguous": (["all_reduce_coalesced",
                                                               "contiguous"], coalesced_bad),
    }


SUBGROUP_TIMEOUT_S = 3


def _subgroup_timeout(rank):
    """A group made with new_group(timeout=3 s): rank 0 all_reduces alone, and must get a
    timeout error after about 3 s (not the default group's timeout). If it is still pending after
    15 s, the other ranks join the all_reduce so that the job can go on. Returns rank 0's
    (outcome, seconds, message)."""
    g = dist.new_group(timeout=datetime.timedelta(seconds=SUBGROUP_TIMEOUT_S))
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(16)
    if rank != 0:
        store.wait(["ctest/timeout/state"])
        if store.get("ctest/timeout/state") == b"pending":
            dist.all_reduce(t, group=g)
        return None
    w = dist.all_reduce(t, group=g, async_op=True)
    t0 = time.monotonic()
    while not w.is_completed() and time.monotonic() - t0 < 15:
        time.sleep(0.01)
    secs = time.monotonic() - t0
    if not w.is_completed():
        store.set("ctest/timeout/state", "pending")
        w.wait()
        return ("still pending", secs, "")
    store.set("ctest/timeout/state", "failed")
    try:
        w.wait()
        return ("completed", secs, "")
    except Exception as e:  # noqa: BLE001
        return (type(e).__name__, secs, str(e)[:400])


def _error_job(rank, ws):
    """Returns, per case, what this rank saw: ok, or the exception's type, message and how long
    it took; and whether the default group still worked afterwards."""
    out = {"mismatch": {}, "local": {}, "world_after": []}

    def world_ok(tag):
        t = torch.full((33,), float(rank))
        try:
            dist.all_reduce(t)
            ok = bool((t == sum(range(ws))).all())
            out["world_after"].append((tag, ok, "" if ok else f"got {t[:3].tolist()}"))
        except Exception as e:  # noqa: BLE001
            out["world_after"].append((tag, False, f"{type(e).__name__}: {e}"[:300]))

    for name, (calls, must, fn) in _mismatch_cases(rank, ws).items():
        g = dist.new_group(timeout=datetime.timedelta(seconds=MISMATCH_TIMEOUT_S))
        if TRACE:
            print(f"[rank {rank}] mismatch {name}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            fn(g)
            seen = ("ok", "", time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001
            seen = (type(e).__name__, str(e)[:600], time.monotonic() - t0)
        out["mismatch"][name] = (calls, rank in must) + seen
        world_ok(name)

    out["timeout"] = _subgroup_timeout(rank)
    world_ok("sub-group timeout")

    for name, (words, fn) in _local_error_cases(ws).items():
        if TRACE:
            print(f"[rank {rank}] local error {name}", file=sys.stderr, flush=True)
        try:
            fn()
            seen = ("ok", "")
        except Exception as e:  # noqa: BLE001
            seen = (type(e).__name__, str(e)[:600])
        out["local"][name] = (words,) + seen
        world_ok(name)
    time.sleep(0.3)
    return out


# ----------------------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def error_results():
    """One launch (3 ranks) of every error case, shared by the tests below."""
    if BACKEND == "gloo":
        pytest.skip("gloo detects no mismatched calls (the ranks would hang until the timeout)")
    results = launch(3, _error_job)
    if TRACE:
        for rank, res in enumerate(results):
            for section in ("mismatch", "local"):
                for name, seen in res[section].items():
                    print(f"rank {rank} {section} {name}: {seen}")
            print(f"rank {rank} timeout: {res['timeout']}")
    return results


def test_errors_mismatched_sizes(error_results):
    """Ranks passing different sizes (on a fresh group each) get an exception naming the
    collective, well before the timeout, on every rank (rooted collectives: on the ranks whose
    transfers disagree); the default group keeps working."""
    problems, notes = [], []
    for rank, res in enumerate(error_results):
        for name, (calls, must, kind, msg, secs) in res["mismatch"].items():
            if secs > MISMATCH_FAST_S:
                problems.append(f"rank {rank}: mismatch '{name}': returned after {secs:.1f} s "
                                f"(a timeout, not a detected mismatch?): {kind}: {msg}")
            if kind == "ok":
                (problems if must else notes).append(
                    f"rank {rank}: mismatch '{name}': no error ({secs:.1f} s)")
                continue
            if not any(c in msg for c in calls):
                problems.append(f"rank {rank}: mismatch '{name}': error does not name "
                                f"{calls}: {kind}: {msg}")
            if not kind.endswith("Error"):
                problems.append(f"rank {rank}: mismatch '{name}': raised {kind}")
        for tag, ok, detail in res["world_after"]:
            if not ok:
                problems.append(f"rank {rank}: default group broken after '{tag}': {detail}")
    print("\n".join(notes))
    assert not problems, "\n".join(problems)


def test_errors_invalid_arguments(error_results):
    """Non-contiguous outputs, unsupported ops (BAND, BXOR, AVG/PREMUL_SUM of integers), a
    dtype sharc cannot reduce, a wrongly sized output: a clear error on every rank."""
    problems = []
    for rank, res in enumerate(error_results):
        for name, (words, kind, msg) in res["local"].items():
            if kind == "ok":
                problems.append(f"rank {rank}: '{name}': no error")
            elif not all(w in msg for w in words):
                problems.append(f"rank {rank}: '{name}': message lacks {words}: {kind}: {msg}")
    assert not problems, "\n".join(problems)


def test_subgroup_timeout(error_results):
    """new_group(timeout=3 s): a collective that cannot complete fails after about 3 s."""
    kind, secs, msg = error_results[0]["timeout"]
    assert kind not in ("completed", "still pending") and secs <= 3 * SUBGROUP_TIMEOUT_S, (
        f"all_reduce alone on new_group(timeout={SUBGROUP_TIMEOUT_S} s): {kind} after "
        f"{secs:.1f} s {msg}")
    assert "all_reduce" in msg, f"the timeout error does not name all_reduce: {kind}: {msg}"
