"""Runs a function on N local ranks, each in its own process with torch.distributed
initialised, and returns what each rank returned (or raises with the failing rank's traceback).

    results = run_ranks(4, fn, arg1, backend="sharc")   # fn(rank, world_size, arg1)

The ranks rendezvous through a FileStore in a fresh temporary directory (init="file", no port)
or a TCPStore on a free loopback port (init="tcp"). `fn` must be a module-level function
(the processes are spawned, not forked). `device_id` (e.g. "cuda:0") is passed on to
init_process_group.
"""
import os
import socket
import tempfile
import traceback

import torch.multiprocessing as mp

DEFAULT_TIMEOUT_S = 240


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(rank, world_size, backend, init_method, env, fn, args, results, device_id=None,
           nodes=1):
    import datetime

    os.environ.update(env)
    if nodes > 1:  # emulated nodes: contiguous blocks of ranks (sharc reads SHARC_NODE_ID)
        os.environ["SHARC_NODE_ID"] = f"node{rank * nodes // world_size}"
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ["LOCAL_RANK"] = str(rank)
    os.environ["LOCAL_WORLD_SIZE"] = str(world_size)
    try:
        import torch
        import torch.distributed as dist

        torch.manual_seed(1234 + rank)
        if "sharc" in backend:
            import sharc.torch  # noqa: F401  registers the backend
        dist.init_process_group(
            backend=backend,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=DEFAULT_TIMEOUT_S),
            **({"device_id": torch.device(device_id)} if device_id else {}),
        )
        try:
            out = fn(rank, world_size, *args)
        except BaseException:
            if dist.is_initialized():
                dist.destroy_process_group()
            raise
        # Report before tearing down: a hang in teardown (torch 2.6's gloo destructor can
        # deadlock on the GIL) then costs the join timeout, not the whole run.
        results.put((rank, True, out))
        if dist.is_initialized():  # `fn` may have ended the group itself
            dist.destroy_process_group()
        return
    except BaseException:  # noqa: BLE001  every failure goes back to the parent
        results.put((rank, False, traceback.format_exc()))


def run_ranks(world_size, fn, *args, backend="sharc", init="file", env=None,
              timeout=DEFAULT_TIMEOUT_S, device_id=None, nodes=1):
    """Runs fn(rank, world_size, *args) on `world_size` ranks; returns the results by rank.
    `nodes` > 1 lays the ranks out on that many emulated nodes (SHARC_NODE_ID)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="sharc-torch-") as tmp:
        if init == "file":
            init_method = "file://" + os.path.join(tmp, "store")
        else:
            init_method = f"tcp://127.0.0.1:{_free_port()}"
        child_env = {"USE_LIBUV": "0"}
        child_env.update(env or {})
        procs = [
            ctx.Process(target=_child,
                        args=(r, world_size, backend, init_method, child_env, fn, args, results,
                              device_id, nodes))
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        got = {}
        failures = []
        try:
            for _ in range(world_size):
                rank, ok, value = results.get(timeout=timeout)
                got[rank] = value
                if not ok:
                    failures.append(f"rank {rank} failed:\n{value}")
        except Exception as e:  # queue.Empty: a rank hung or died without reporting
            missing = sorted(set(range(world_size)) - set(got))
            failures.append(f"ranks {missing} did not report within {timeout} s ({e!r})")
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
                    p.join()
        if failures:
            raise AssertionError("\n".join(failures))
        return [got[r] for r in range(world_size)]
