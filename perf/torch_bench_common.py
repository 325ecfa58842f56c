#!/usr/bin/env python3
"""Shared by the torch benchmarks (perf/torch_bench.py, perf/torch_bench_fsdp2.py): launching N
local ranks of one process group (fork or spawn, FileStore rendezvous, a report pipe per rank,
stack dumps and kills on a hang), the environment those ranks need, the alternating launch
order that lets two backends see the same machine noise, and size/time formatting.

Not a benchmark itself; nothing here knows about collectives or models.
"""
import datetime
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import shlex
import signal
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS_TORCH = os.path.normpath(os.path.join(HERE, "..", "tests", "torch"))
PLUGIN = os.path.normpath(os.path.join(HERE, "..", "plugin", "torch"))

MIB = 1 << 20
LAUNCHES = []  # per launch: seconds each rank spent in init / fn / destroy_process_group


# ---------------------------------------------------------------------------------------------
# Launching ranks
# ---------------------------------------------------------------------------------------------

# Tensors a rank has handed to a backend, kept referenced until after destroy_process_group.
# Otherwise a gloo worker thread can drop the last reference to a tensor whose Python object
# is gone, which needs the GIL, while the main thread holds the GIL joining that worker in
# ~ProcessGroupGloo: destroy_process_group then never returns (seen here, about one launch
# in two, on the 2-core machine).
KEEPALIVE = []


def _child(rank, world_size, backend, init_method, fn, args, conn, num_threads):
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ["LOCAL_RANK"] = str(rank)
    os.environ["LOCAL_WORLD_SIZE"] = str(world_size)
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent's dump on a hang
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(num_threads)
        torch.manual_seed(1234 + rank)
        if "sharc" in backend:
            import sharc.torch  # noqa: F401  registers the backend
        t0 = time.perf_counter()
        dist.init_process_group(backend=backend, init_method=init_method, rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=300))
        t1 = time.perf_counter()
        try:
            out = fn(rank, world_size, *args)
            # The result goes out (synchronously, on this rank's own pipe) before the
            # teardown, so a teardown that hangs costs the parent only its wait for the exit.
            conn.send(("result", True, (out, {"init_s": t1 - t0,
                                              "run_s": time.perf_counter() - t1})))
        finally:
            t2 = time.perf_counter()
            dist.destroy_process_group()
        conn.send(("destroyed", True, time.perf_counter() - t2))
    except BaseException:  # noqa: BLE001  every failure goes back to the parent
        try:
            conn.send(("result", False, traceback.format_exc()))
        except OSError:
            pass
    finally:
        conn.close()


def _dump_stacks(procs, ranks):
    for r in ranks:
        if procs[r].is_alive():
            os.kill(procs[r].pid, signal.SIGUSR1)
    time.sleep(3.0)


def run_ranks(world_size, fn, *args, backend, num_threads, timeout, teardown_timeout=60,
              start_method="fork"):
    """Runs fn(rank, world_size, *args) on `world_size` local ranks (FileStore rendezvous);
    returns the results by rank. Fails fast if a rank dies without reporting; past `timeout`
    seconds the ranks dump their Python stacks to stderr (SIGUSR1) and are killed. A rank
    whose destroy_process_group has not returned `teardown_timeout` s after the last result
    is killed and noted in LAUNCHES (and on stderr), without failing the launch. Each rank
    reports on its own pipe, so one rank stuck in its teardown cannot hold up another's
    report (a shared multiprocessing.Queue's write lock can)."""
    ctx = mp.get_context(start_method)
    with tempfile.TemporaryDirectory(prefix="sharc-torch-bench-") as tmp:
        init_method = "file://" + os.path.join(tmp, "store")
        pipes = [ctx.Pipe(duplex=False) for _ in range(world_size)]
        procs = [ctx.Process(target=_child, args=(r, world_size, backend, init_method, fn, args,
                                                  pipes[r][1], num_threads))
                 for r in range(world_size)]
        for p in procs:
            p.start()
        for _, w in pipes:
            w.close()  # the parent's copies: EOF on a reader once its rank has exited
        readers = {pipes[r][0]: r for r in range(world_size)}
        got, destroyed, failures = {}, {}, []
        deadline = time.monotonic() + timeout
        teardown_deadline = None
        try:
            while readers and not failures:
                for conn in mp_connection.wait(list(readers), timeout=1.0):
                    r = readers[conn]
                    try:
                        kind, ok, value = conn.recv()
                    except (EOFError, OSError):
                        del readers[conn]  # exited
                        if r not in got:
                            procs[r].join(5)
                            failures.append(f"rank {r} exited without reporting "
                                            f"(exit code {procs[r].exitcode})")
                        else:
                            destroyed.setdefault(r, None)
                        continue
                    if kind == "result":
                        got[r] = value
                        if not ok:
                            failures.append(f"rank {r} failed:\n{value}")
                        elif len(got) == world_size:
                            teardown_deadline = time.monotonic() + teardown_timeout
                    else:
                        destroyed[r] = value
                now = time.monotonic()
                if failures or not readers:
                    break
                if len(got) < world_size and now > deadline:
                    waiting = [r for r in range(world_size) if r not in got]
                    _dump_stacks(procs, waiting)
                    failures.append(f"ranks {waiting} did not report within {timeout} s "
                                    f"(stacks above)")
                elif teardown_deadline is not None and now > teardown_deadline:
                    waiting = sorted(r for r in readers.values() if r not in destroyed)
                    print(f"torch bench: {backend} launch of {fn.__name__}: ranks {waiting} "
                          f"still in destroy_process_group after {teardown_timeout} s; their "
                          f"stacks follow, then they are killed", file=sys.stderr, flush=True)
                    _dump_stacks(procs, waiting)
                    break
        finally:
            for p in procs:
                p.join(timeout=10 if not failures else 2)
                if p.is_alive():
                    p.kill()
                    p.join()
            for r, _ in pipes:
                r.close()
        if failures:
            raise RuntimeError(f"{backend} launch of {fn.__name__} on {world_size} ranks:\n"
                               + "\n".join(failures))
        phases = []
        for r in range(world_size):
            ph = dict(got[r][1])
            ph["destroy_s"] = destroyed.get(r)
            phases.append(ph)
        LAUNCHES.append({"backend": backend, "fn": fn.__name__, "world_size": world_size,
                         "phases": phases,
                         "teardown_hung_ranks": [r for r in range(world_size)
                                                 if r not in destroyed]})
        return [got[r][0] for r in range(world_size)]



# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------

def parse_size(text):
    """'4' or '4M' = 4 MiB; also 'K' (KiB), 'G' (GiB), 'B' (bytes)."""
    t = text.strip().upper()
    mult = MIB
    for suffix, m in (("KIB", 1 << 10), ("MIB", MIB), ("GIB", 1 << 30), ("K", 1 << 10),
                      ("M", MIB), ("G", 1 << 30), ("B", 1)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    return int(float(t) * mult)


def fmt_size(b):
    if b >= MIB and b % MIB == 0:
        return f"{b // MIB} MiB"
    if b >= MIB:
        return f"{b / MIB:.2f} MiB"
    if b >= 1024:
        return f"{b / 1024:g} KiB"
    return f"{b} B"


def fmt_us(s):
    us = s * 1e6
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"



def phases():
    """', init/run/destroy_process_group ... s' (slowest rank) of the last launch."""
    launch = LAUNCHES[-1]

    def worst(k):
        vals = [p[k] for p in launch["phases"] if p.get(k) is not None]
        return f"{max(vals):.1f}" if vals else "?"

    out = f", {worst('init_s')}/{worst('run_s')}/{worst('destroy_s')} s in " \
          f"init/run/destroy_process_group"
    if launch["teardown_hung_ranks"]:
        out += f"; ranks {launch['teardown_hung_ranks']} hung in destroy_process_group, killed"
    return out


def say(line=""):
    print(line, flush=True)


# ---------------------------------------------------------------------------------------------
# Environment, launch order, reporting
# ---------------------------------------------------------------------------------------------

def setup_environment():
    """Makes tests/torch's helpers importable to the ranks (and sharc from the source tree
    when it is not installed but built in place there), and keeps the stores and gloo on
    loopback. Call before forking ranks."""
    import glob
    import importlib.util

    paths = [TESTS_TORCH]
    # The installed package wins: the source tree's sharc/ has no extension unless it was
    # built in place, and on the path first it would hide the installed one.
    if (importlib.util.find_spec("sharc") is None
            and glob.glob(os.path.join(PLUGIN, "sharc", "_C*.so"))):
        paths.insert(0, PLUGIN)
    for p in paths:
        if os.path.isdir(p):
            os.environ["PYTHONPATH"] = p + (os.pathsep + os.environ["PYTHONPATH"]
                                            if os.environ.get("PYTHONPATH") else "")
        if p == TESTS_TORCH and p not in sys.path:
            sys.path.insert(0, p)  # the parent too: spawned children get its sys.path
    os.environ.setdefault("USE_LIBUV", "0")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


def threads_per_rank(requested, ranks):
    """torch intra-op threads per rank: --threads, else cores / ranks, at least 1."""
    return requested or max(1, (os.cpu_count() or 1) // ranks)


def alternating(first, second, repeats):
    """first second second first first second ...: `repeats` launches of each, so that a drift
    in the machine's load over the run hits both alike."""
    order = []
    for rep in range(repeats):
        order += [first, second] if rep % 2 == 0 else [second, first]
    return order


def command_line():
    """How this script was invoked, for the report."""
    return "python3 " + shlex.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
