"""The backend's life cycle as current torch drives it: the group's options and timeout
(dist.set_timeout), abort and shutdown (every pending work fails with a clear error within a
second, also when a peer is gone; shutdown fails a collective blocked in another thread within
its closing wait, and an abort cuts that wait short), the error state (Backend.get_error), and that neither
dist.destroy_process_group() nor interpreter exit hangs.

torch 2.6's c10d::Backend has none of abort/shutdown/get_error/options/set_timeout (they came
in 2.7-2.12, see plugin/torch/csrc/torch_compat.hpp), so those tests skip there; the exit
tests and _set_pg_timeout (which sharc.torch extends to sharc groups before 2.12) run on every
version.
"""
import datetime
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
import torch
import torch.distributed as dist

from launcher import run_ranks

VERSION = tuple(int(x) for x in torch.__version__.split(".")[:2])
needs = lambda major, minor, what: pytest.mark.skipif(  # noqa: E731
    VERSION < (major, minor), reason=f"torch {torch.__version__} has no {what} (added in "
    f"{major}.{minor})")


def _backend():
    return dist.group.WORLD._get_backend(torch.device("cpu"))


def _options_job(rank, ws):
    b = _backend()
    sub = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=77))
    return (b.options.backend, b.options._timeout.total_seconds(),
            sub._get_backend(torch.device("cpu")).options._timeout.total_seconds(),
            str(b.get_error()))


@needs(2, 9, "Backend.options (getBackendOptions)")
def test_options_name_the_backend_and_its_timeout():
    for name, world_s, sub_s, err in run_ranks(2, _options_job):
        assert name == "sharc"
        assert world_s == 240  # the launcher's timeout
        assert sub_s == 77
        assert err.endswith("SUCCESS")


def _error_state():
    return str(_backend().get_error()) if hasattr(_backend(), "get_error") else "no get_error"


def _set_timeout_job(rank, ws, how):
    import warnings

    t = torch.ones(4)
    dist.all_reduce(t)  # within the group's 240 s
    one = datetime.timedelta(seconds=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # _set_pg_timeout is deprecated in 2.12+
        {"set_timeout": lambda: dist.set_timeout(one),
         "_set_pg_timeout": lambda: dist.distributed_c10d._set_pg_timeout(one),
         "_set_default_timeout": lambda: _backend()._set_default_timeout(one)}[how]()
    if rank == 1:
        time.sleep(4)  # rank 0's all-reduce must not wait for this
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        return ("completed", time.monotonic() - start, _error_state())
    except Exception as e:  # noqa: BLE001
        return (str(e), time.monotonic() - start, _error_state())


# dist.set_timeout reaches a custom backend's setTimeout from torch 2.12; _set_pg_timeout
# does on every version (sharc.torch extends it before 2.12), and sharc's backend object has
# _set_default_timeout as Gloo's and NCCL's do.
@pytest.mark.parametrize("how", [
    pytest.param("set_timeout", marks=needs(2, 12, "Backend.set_timeout")),
    "_set_pg_timeout", "_set_default_timeout"])
def test_set_timeout_bounds_later_operations(how):
    (msg0, took0, err0), (msg1, _, err1) = run_ranks(2, _set_timeout_job, how)
    assert "completed" not in msg0 and took0 < 3, (msg0, took0)
    assert "time" in msg0.lower(), msg0
    assert "completed" not in msg1, msg1
    if VERSION >= (2, 7):  # Backend.get_error
        assert err0.endswith("TIMEOUT"), err0
        # Rank 1 comes late and finds the group failed by rank 0.
        assert err1.endswith("REMOTE_ERROR"), (msg1, err1)


def _abort_job(rank, ws):
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if rank == 0:
        # An all-reduce rank 1 never joins, aborted from another thread.
        work = dist.all_reduce(t, async_op=True)
        threading.Timer(0.3, lambda: dist.group.WORLD.abort()).start()
        start = time.monotonic()
        try:
            work.wait()
            msg = "completed"
        except Exception as e:  # noqa: BLE001
            msg = str(e)
        took = time.monotonic() - start
    else:
        # Waits for a message rank 0 never sends: fails through rank 0's abort notice.
        start = time.monotonic()
        try:
            dist.recv(t, src=0)
            msg = "completed"
        except Exception as e:  # noqa: BLE001
            msg = str(e)
        took = time.monotonic() - start
    err = str(_backend().get_error())
    try:
        dist.all_reduce(t)
        later = "completed"
    except Exception as e:  # noqa: BLE001
        later = str(e)
    start = time.monotonic()
    dist.destroy_process_group()  # after an abort: returns at once
    return msg, took, err, later, time.monotonic() - start


@needs(2, 7, "Backend.abort")
def test_abort_fails_pending_work_here_and_on_peers():
    (msg0, took0, err0, later0, destroy0), (msg1, took1, err1, later1, destroy1) = run_ranks(
        2, _abort_job)
    assert "abort" in msg0 and took0 < 1.3, (msg0, took0)
    assert "rank 0" in msg1 and "abort" in msg1 and took1 < 5, (msg1, took1)
    assert err0.endswith("COMM_ERROR") and err1.endswith("REMOTE_ERROR"), (err0, err1)
    assert "completed" not in later0 and "completed" not in later1
    assert destroy0 < 2 and destroy1 < 2


def _blocked_all_reduce(t, out):
    """Runs an all-reduce the peer never joins; records how it ended and when."""
    try:
        dist.all_reduce(t)
        out["msg"] = "completed"
    except Exception as e:  # noqa: BLE001
        out["msg"] = str(e)
    out["end"] = time.monotonic()


def _shutdown_while_blocked_job(rank, ws, abort_too):
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if rank == 1:
        time.sleep(4)  # never joins: rank 0's closing barrier waits for nobody
        return None
    out = {}
    blocked = threading.Thread(target=_blocked_all_reduce, args=(t, out))
    blocked.start()
    time.sleep(0.3)  # the thread is in its wait
    start = time.monotonic()
    if abort_too:
        # shutdown() in one thread (in its closing barrier), abort() from another: the abort
        # ends the barrier instead of waiting for its bound.
        shut = threading.Thread(target=dist.group.WORLD.shutdown)
        shut.start()
        time.sleep(0.2)
        aborted = time.monotonic()
        dist.group.WORLD.abort()
        shut.join(10)
        ended = time.monotonic() - aborted
    else:
        dist.group.WORLD.shutdown()
        ended = time.monotonic() - start
    blocked.join(10)
    return out.get("msg", "still blocked"), out.get("end", float("inf")) - start, ended


@needs(2, 7, "Backend.shutdown")
def test_shutdown_fails_a_blocked_collective_within_its_closing_wait():
    msg, took, shut = run_ranks(2, _shutdown_while_blocked_job, False)[0]
    # The closing barrier waits at most 1 s (nobody comes); then the pending work fails.
    assert "completed" not in msg and "still blocked" not in msg, msg
    assert shut < 2.5 and took < 2.5, (msg, took, shut)


@needs(2, 7, "Backend.abort")
def test_abort_during_shutdown_ends_its_closing_barrier():
    msg, took, after_abort = run_ranks(2, _shutdown_while_blocked_job, True)[0]
    assert "completed" not in msg and "still blocked" not in msg, msg
    # Shutdown's barrier would wait 1 s; the abort 0.2 s into it ends it at once.
    assert after_abort < 0.6, (msg, after_abort)
    assert took < 1.5, (msg, took)


# Scripts run as their own interpreters: what happens at exit is the point.
_RANK_SCRIPT = textwrap.dedent("""
    import os, sys, time, datetime
    import torch, torch.distributed as dist
    import sharc.torch  # noqa: F401
    rank, mode, store = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("sharc", init_method="file://" + store, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    t = torch.ones(1 << 20)
    dist.all_reduce(t)
    assert t[0].item() == 2
    if mode == "failed-halfway":
        # Calls refused at their second tensor: the first tensor's operation was issued (or,
        # for all_reduce_coalesced, nothing was), and freeing its tensors right away must not
        # let the engine write into freed memory (glibc aborted at a later malloc).
        import warnings
        warnings.simplefilter("ignore")
        for _ in range(5):
            for bad_call in (
                lambda: dist.all_reduce_coalesced([torch.ones(8), torch.ones(8, 4).t()]),
                lambda: dist.group.WORLD.allgather_into_tensor_coalesced(
                    [torch.empty(16), torch.empty(3)], [torch.ones(8), torch.ones(8)]),
            ):
                try:
                    bad_call()
                    raise SystemExit("a bad call was accepted")
                except RuntimeError:
                    pass
            t = torch.ones(1 << 16)
            dist.all_reduce(t)
            assert t[0].item() == 2 and t[-1].item() == 2
        dist.destroy_process_group()
        print("failed-halfway: ok", flush=True)
    if mode == "peer-dies" and rank == 1:
        os._exit(0)  # gone without a word: no destroy, no atexit
    if mode == "peer-dies":
        time.sleep(0.5)
        start = time.monotonic()
        dist.destroy_process_group()
        print("destroy took", round(time.monotonic() - start, 2), flush=True)
    # mode "no-destroy": the interpreter exits with the group alive.
""")


def _run_pair(mode):
    with tempfile.TemporaryDirectory(prefix="sharc-exit-") as tmp:
        script = os.path.join(tmp, "rank.py")
        with open(script, "w") as f:
            f.write(_RANK_SCRIPT)
        env = dict(os.environ, USE_LIBUV="0")
        procs = [subprocess.Popen([sys.executable, script, str(r), mode, os.path.join(tmp, "s")],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=env)
                 for r in range(2)]
        start = time.monotonic()
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=90)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append(p.communicate()[0] + "\n<killed after 90 s>")
        return [p.returncode for p in procs], outs, time.monotonic() - start


def test_interpreter_exit_without_destroy_does_not_hang():
    codes, outs, _ = _run_pair("no-destroy")
    assert codes == [0, 0], outs


def test_calls_refused_halfway_leave_the_process_sound():
    codes, outs, _ = _run_pair("failed-halfway")
    assert codes == [0, 0], outs
    assert all("failed-halfway: ok" in o for o in outs), outs


def test_destroy_with_a_dead_peer_returns_quickly():
    codes, outs, _ = _run_pair("peer-dies")
    assert codes == [0, 0], outs
    took = float(outs[0].split("destroy took")[1].split()[0])
    assert took < 3, outs[0]
