"""The sharc backend with CUDA tensors, where a GPU exists (the other tests skip cleanly).

Every GPU test puts all its ranks on cuda:0 (2 or 4 processes sharing one GPU, as the
engine's CUDA IPC path allows). Each launched job loops over its cases and returns the
mismatches it saw, so that a world size costs one launch:

* collectives on CUDA tensors, checked element by element against a float64 reference that
  every rank computes on the host from the seeded inputs of all ranks: all_reduce (SUM, AVG,
  MAX over float32, bfloat16, float16, int32), all_gather_into_tensor, reduce_scatter_tensor,
  broadcast, the list forms, the staged operations (all_to_all_single, send/recv, gather), a
  coalesced block, and barrier;
* the stream rules (ProcessGroupNCCL's): the collective waits for the work queued on the
  current stream before it; work.wait() (and the future) makes the current stream wait for
  the collective without blocking the host; a tensor dropped right after the call is kept
  alive (the work holds it, and the caching allocator does not reuse its memory early);
* FSDP FULL_SHARD (and DDP) on 4 processes sharing cuda:0 for a few steps: the losses equal
  those of the same run over the sharc backend on the CPU, to float32 rounding.

The first test runs everywhere: the backend is registered for both cpu and cuda.

    python3 -m pytest tests/torch/test_cuda.py      # with torch+CUDA and sharc installed
"""
import time
import zlib

import pytest
import torch
import torch.distributed as dist

from launcher import run_ranks


def _sharc_importable():
    try:
        import sharc.torch  # noqa: F401
        return True
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(not _sharc_importable(),
                                reason="sharc.torch is not installed (build plugin/torch)")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

STEPS = 5
GLOBAL_BATCH = 8
LR, MOMENTUM = 0.1, 0.9
# The GPU's GEMMs sum in another order than the CPU's, so a CUDA run and a CPU run differ by
# float32 rounding of the compute as well as of the reductions (test_training.py's tolerance
# against a one-process run, which differs the same way).
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-5
# Relative tolerance and absolute tolerance per contributing rank (values in [-1, 1]).
TOL = {torch.float32: (1e-5, 2e-6), torch.float16: (2e-3, 2e-3),
       torch.bfloat16: (1.6e-2, 1.6e-2), torch.int32: (0, 0)}
COUNTS = [1, 1000, 262_147]  # the last: 1 MiB of float32, not a multiple of 2 or 4
HOST_DELAY_S = 0.3  # ranks > 0 start late, so rank 0's collective is still running


# ------------------------------------------------------------------------ registration (CPU)

def _registration_job(rank, ws):
    import sharc.torch as st

    pg = dist.distributed_c10d._get_default_group()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    return {"config": str(dist.get_backend_config()),
            "capability": list(dist.Backend.backend_capability[st.BACKEND]),
            "device_types": sorted(d.type for d in pg._device_types),
            "sum": t.tolist(), "bound": str(pg.bound_device_id)}


def test_registered_for_cpu_and_cuda():
    """One sharc backend serves both devices; a group bound to a CUDA device_id is created
    and runs (CPU collectives here when there is no GPU)."""
    # A CUDA build of current torch refuses a device_id beyond its device count (no GPU here);
    # a CPU-only build (Debian's 2.6) binds the group anyway, so the binding is checked there.
    bindable = torch.cuda.device_count() > 0 or torch.version.cuda is None
    for device_id in (None, "cuda:0") if bindable else (None,):
        results = run_ranks(2, _registration_job, backend="sharc", device_id=device_id)
        for res in results:
            assert set(res["config"].split(",")) == {"cpu:sharc", "cuda:sharc"}, res
            assert res["capability"] == ["cpu", "cuda"], res
            assert res["device_types"] == ["cpu", "cuda"], res
            assert res["sum"] == [3.0] * 4, res
            assert res["bound"] == str(device_id), res


# ------------------------------------------------------------------------ helpers

def _gen(key, n, dtype):
    """Seeded values of `dtype` (floats in [-1, 1], ints small enough to sum exactly)."""
    g = torch.Generator().manual_seed(zlib.crc32(key.encode()))
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)
    return torch.randint(-(2**20), 2**20, (n,), generator=g, dtype=torch.int64).to(dtype)


def _mismatch(what, got, want, dtype, nranks):
    """None, or a line describing where `got` (any device) departs from float64 `want`."""
    got = got.detach().cpu().to(torch.float64).reshape(-1)
    want = want.to(torch.float64).reshape(-1)
    if got.shape != want.shape:
        return f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    rtol, atol = TOL.get(dtype, (0, 0))
    bad = ((got - want).abs() > atol * nranks + rtol * want.abs()).nonzero()
    if bad.numel():
        i = int(bad[0])
        return (f"{what}: {bad.numel()} of {want.numel()} elements differ, first at {i}: "
                f"{got[i].item()} vs {want[i].item()}")
    return None


class _Cases:
    def __init__(self, rank, ws):
        self.rank, self.ws = rank, ws
        self.dev = torch.device("cuda", 0)
        self.errors = []
        self.count = 0

    def check(self, what, got, want, dtype=torch.float32, nranks=None):
        self.count += 1
        err = _mismatch(f"rank {self.rank} ws {self.ws} {what}", got, want, dtype,
                        nranks or self.ws)
        if err:
            self.errors.append(err)

    def inputs(self, key, n, dtype):
        """Every rank's input (host tensors, exact in `dtype`)."""
        return [_gen(f"{key}-{r}", n, dtype) for r in range(self.ws)]

    def delay(self):
        """Ranks > 0 start late: rank 0's collective cannot finish before then."""
        if self.rank > 0:
            time.sleep(HOST_DELAY_S)


def _reduce(op, xs, ws):
    stack = torch.stack([x.to(torch.float64) for x in xs])
    if op == "MAX":
        return stack.max(0).values
    total = stack.sum(0)
    return total / ws if op == "AVG" else total


# ------------------------------------------------------------------------ collectives job

def _collectives(C):
    dev, ws, rank = C.dev, C.ws, C.rank
    R = dist.ReduceOp
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32):
        for op in ("SUM", "AVG", "MAX"):
            if op == "AVG" and not dtype.is_floating_point:
                continue
            for n in COUNTS:
                xs = C.inputs(f"ar-{dtype}-{op}-{n}", n, dtype)
                t = xs[rank].to(dev)
                dist.all_reduce(t, op=getattr(R, op))
                C.check(f"all_reduce {op} {dtype} n={n}", t, _reduce(op, xs, ws), dtype)
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        for n in COUNTS:
            xs = C.inputs(f"ag-{dtype}-{n}", n, dtype)
            out = torch.empty(ws * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, xs[rank].to(dev))
            C.check(f"all_gather_into_tensor {dtype} n={n}", out, torch.cat(xs), dtype, 1)
            outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(ws)]
            dist.all_gather(outs, xs[rank].to(dev))
            C.check(f"all_gather (list) {dtype} n={n}", torch.cat(outs), torch.cat(xs), dtype, 1)
    for dtype in (torch.float32, torch.bfloat16):
        for op in ("SUM", "AVG", "MAX"):
            for n in COUNTS:
                xs = C.inputs(f"rs-{dtype}-{op}-{n}", ws * n, dtype)
                out = torch.empty(n, dtype=dtype, device=dev)
                dist.reduce_scatter_tensor(out, xs[rank].to(dev), op=getattr(R, op))
                want = _reduce(op, xs, ws)[rank * n:(rank + 1) * n]
                C.check(f"reduce_scatter_tensor {op} {dtype} n={n}", out, want, dtype)
        xs = C.inputs(f"rsl-{dtype}", ws * 1000, dtype)
        out = torch.empty(1000, dtype=dtype, device=dev)
        dist.reduce_scatter(out, list(xs[rank].to(dev).chunk(ws)))
        C.check(f"reduce_scatter (list) {dtype}", out,
                _reduce("SUM", xs, ws)[rank * 1000:(rank + 1) * 1000], dtype)
    for root in (0, ws - 1):
        for n in COUNTS:
            xs = C.inputs(f"bc-{root}-{n}", n, torch.float32)
            t = (xs[rank] if rank == root else torch.zeros(n)).to(dev)
            dist.broadcast(t, src=root)
            C.check(f"broadcast root={root} n={n}", t, xs[root], torch.float32, 1)
    # Staged through host memory (no stream-ordered form).
    xs = C.inputs("a2a", ws * 100, torch.float32)
    out = torch.empty(ws * 100, device=dev)
    dist.all_to_all_single(out, xs[rank].to(dev))
    want = torch.cat([xs[r][rank * 100:(rank + 1) * 100] for r in range(ws)])
    C.check("all_to_all_single (staged)", out, want, torch.float32, 1)
    xs = C.inputs("p2p", 500, torch.float32)
    got = torch.zeros(500, device=dev)
    if rank % 2 == 0:
        dist.send(xs[rank].to(dev), (rank + 1) % ws)
        dist.recv(got, (rank - 1) % ws)
    else:
        dist.recv(got, (rank - 1) % ws)
        dist.send(xs[rank].to(dev), (rank + 1) % ws)
    C.check("send/recv ring (staged)", got, xs[(rank - 1) % ws], torch.float32, 1)
    xs = C.inputs("gather", 300, torch.float32)
    outs = [torch.zeros(300, device=dev) for _ in range(ws)] if rank == 0 else None
    dist.gather(xs[rank].to(dev), outs, dst=0)
    if rank == 0:
        C.check("gather (staged)", torch.cat(outs), torch.cat(xs), torch.float32, 1)
    # A CPU collective on the same group, between CUDA ones.
    xs = C.inputs("cpu", 1000, torch.float32)
    t = xs[rank].clone()
    dist.all_reduce(t)
    C.check("all_reduce of a CPU tensor", t, _reduce("SUM", xs, ws))
    # A coalesced block (the backend's startCoalescing/endCoalescing).
    xs, ys = C.inputs("co-a", 777, torch.float32), C.inputs("co-b", 99, torch.float32)
    a, b = xs[rank].to(dev), ys[rank].to(dev)
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    C.check("coalesced all_reduce (a)", a, _reduce("SUM", xs, ws))
    C.check("coalesced all_reduce (b)", b, _reduce("SUM", ys, ws))


def _stream_rules(C):
    dev, ws, rank = C.dev, C.ws, C.rank
    n = 1 << 20
    xs = C.inputs("order", n, torch.float32)
    src = xs[rank].to(dev)
    torch.cuda.synchronize()
    # The collective starts after the work queued before it on the current stream (here a
    # side stream): the input is written behind a long GPU sleep.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.zeros(n, device=dev)
        torch.cuda._sleep(100_000_000)
        t.copy_(src)
        dist.all_reduce(t)
        got = t.clone()
    side.synchronize()
    C.check("all_reduce after queued work (side stream)", got, _reduce("SUM", xs, ws))
    # work.wait() makes the current stream wait (no host block): the result is read on the
    # current stream right after wait(), while the other ranks have not even started.
    for how in ("wait", "future"):
        t = src.clone()
        C.delay()
        work = dist.all_reduce(t, async_op=True)
        if how == "wait":
            work.wait()
            got = t * 1
        else:
            got = work.get_future().then(lambda f: f.value()[0] * 1).wait()
        C.check(f"all_reduce async, {how}, result used on the current stream", got,
                _reduce("SUM", xs, ws))
        deadline = time.monotonic() + 60
        while not work.is_completed() and time.monotonic() < deadline:
            time.sleep(0.001)
        if not work.is_completed():
            C.errors.append(f"rank {rank}: is_completed() still False 60 s after wait()")
    # A tensor dropped right after the call: the work keeps it, and its memory is not handed
    # out again (here to tensors filled with garbage) before the collective has read it.
    for keep_work in (True, False):
        xs = C.inputs(f"free-{keep_work}", n, torch.float32)
        out = torch.empty(ws * n, device=dev)
        inp = xs[rank].to(dev)
        C.delay()
        work = dist.all_gather_into_tensor(out, inp, async_op=True)
        del inp
        if not keep_work:
            del work
        garbage = [torch.full((n,), 7.0, device=dev) for _ in range(4)]
        if keep_work:
            work.wait()
        else:  # the internal stream is in order: waiting on a later call covers this one
            dist.all_reduce(torch.ones(1, device=dev))
        C.check(f"all_gather of a dropped input (work kept: {keep_work})", out, torch.cat(xs),
                torch.float32, 1)
        del garbage
    # barrier: nobody leaves before the last rank has arrived.
    time.sleep(0.1 * rank)
    arrived = time.time()
    dist.barrier()
    left = time.time()
    return arrived, left


def _collectives_job(rank, ws):
    torch.cuda.set_device(0)
    C = _Cases(rank, ws)
    _collectives(C)
    arrived, left = _stream_rules(C)
    torch.cuda.synchronize()
    return {"errors": C.errors, "checks": C.count, "arrived": arrived, "left": left}


@needs_cuda
@pytest.mark.parametrize("ws", [2, 4])
def test_cuda_collectives(ws):
    import sharc._C as C

    ok, why = C._cuda_available()
    assert ok, f"libsharc cannot use CUDA here ({why}); reinstall it where nvcc is found"
    results = run_ranks(ws, _collectives_job, ws, backend="sharc", device_id="cuda:0")
    errors = [e for res in results for e in res["errors"]]
    assert not errors, "\n".join(errors[:40])
    assert all(res["checks"] > 50 for res in results)
    last_arrival = max(res["arrived"] for res in results)
    assert all(res["left"] >= last_arrival for res in results), "barrier released early"


# ------------------------------------------------------------------------ training

def _train(rank, ws, strategy, device_type, steps):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.nn.parallel import DistributedDataParallel as DDP

    from models import Block, loss_fn, make_batches, make_model

    if device_type == "cuda":
        torch.cuda.set_device(0)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cpu")
    torch.use_deterministic_algorithms(True, warn_only=True)
    model = make_model(seed=0).to(device)
    if strategy == "fsdp_full_shard":
        model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=device,
                     auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True)
    else:
        model = DDP(model, device_ids=[0] if device_type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    per_rank = GLOBAL_BATCH // ws
    part = slice(rank * per_rank, (rank + 1) * per_rank)
    losses = []
    for inputs, targets in make_batches(steps, GLOBAL_BATCH):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs[part].to(device)), targets[part].to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    time.sleep(0.5)  # see test_training._settle_before_destroy
    return losses


def _train_both(rank, ws, device_type, steps):
    return {s: _train(rank, ws, s, device_type, steps) for s in ("fsdp_full_shard", "ddp")}


@needs_cuda
def test_cuda_training_matches_cpu():
    """FSDP FULL_SHARD and DDP on 4 processes sharing cuda:0 over sharc give the losses of the
    same runs over sharc on the CPU, at every step on every rank."""
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    cuda = run_ranks(4, _train_both, "cuda", STEPS, backend="sharc", env=env)
    cpu = run_ranks(4, _train_both, "cpu", STEPS, backend="sharc")
    for strategy in ("fsdp_full_shard", "ddp"):
        for rank, (g, w) in enumerate(zip(cuda, cpu)):
            got, want = g[strategy], w[strategy]
            assert len(got) == len(want) == STEPS
            torch.testing.assert_close(
                torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64),
                rtol=LOSS_RTOL, atol=LOSS_ATOL,
                msg=lambda m: f"{strategy} rank {rank}: CUDA losses {got} vs CPU {want}: {m}")
        assert cuda[0][strategy][-1] < cuda[0][strategy][0], "the CUDA run does not train"
