"""DTensor and functional collectives on sharc process groups (CPU, 4 ranks), every value
checked against float64 host math (numpy) on the inputs, which every rank regenerates from
seeds.

* DTensor on a 1-D mesh (4) and a 2-D mesh (2x2): distribute_tensor (Shard(0), Shard(1),
  Replicate; scatter/broadcast from rank 0), full_tensor(), redistribute between Shard,
  Replicate and Partial: Shard->Replicate (all-gather), Shard(0)->Shard(1) (all-to-all),
  Partial->Replicate (all-reduce: sum, avg, max), Partial->Shard (reduce-scatter), with
  shapes that do not divide evenly (padded collectives).
* torch.distributed._functional_collectives on the whole group and on a 2-rank sub-group:
  all_gather_tensor, reduce_scatter_tensor, all_reduce (sum, avg, max), all_to_all_single with
  uneven splits, broadcast, the coalesced forms, and the raw _c10d_functional ops followed by
  wait_tensor. The C++ functional ops call the backend's allgather_into_tensor_coalesced /
  reduce_scatter_tensor_coalesced even for one tensor, so these are the paths checked.

All checks run in one launch per backend (gloo too, which shows the checks themselves are
right); each becomes one test here. Data movement must be bit-exact; sums and averages of 2-4
float32 values are compared with float32 rounding tolerance.

At the end, torch's own DTensorTestBase harness (torch.testing._internal) drives sharc: its
DTensorConverter tries every sharding of an op's arguments, and its Transformer is
parallelized with torch's own tensor/sequence-parallel plan and compared with the unsharded
model.
"""
import os
import sys
import traceback

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from launcher import run_ranks

WORLD = 4
# Reductions of a few float32 values against float64 (inputs ~N(0, 1)).
RTOL, ATOL = 1e-6, 1e-6

CHECKS = {}  # name -> (function, exact)


def check(name, exact=True):
    """Registers fn(ctx) -> (got, want): got a tensor from the collective, want float64 numpy."""
    def register(fn):
        assert name not in CHECKS, name
        CHECKS[name] = (fn, exact)
        return fn
    return register


def rand(shape, seed):
    """float32 N(0, 1) data from a seed (any rank can make any rank's data)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def np64(t):
    return t.double().numpy()


def chunk(a, n, i, dim=0):
    """Piece i of n of a numpy array as DTensor cuts it: torch.chunk's sizes, then empty
    pieces (9 columns on 4 ranks: 3, 3, 3, 0)."""
    pieces = torch.chunk(torch.from_numpy(a), n, dim=dim)
    if i < len(pieces):
        return pieces[i].numpy()
    shape = list(a.shape)
    shape[dim] = 0
    return np.zeros(shape, dtype=a.dtype)


class Ctx:
    """What a check needs: the rank, the meshes, and its coordinates on the 2x2 mesh (a, b)
    (init_device_mesh lays ranks out row-major: rank = 2 * a + b)."""

    def __init__(self, rank, world_size):
        self.rank, self.world = rank, world_size
        self.mesh1 = init_device_mesh("cpu", (world_size,))
        self.mesh2 = init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("a", "b"))
        self.a, self.b = divmod(rank, world_size // 2)
        self.group_b = self.mesh2.get_group("b")  # the 2 ranks of this row
        self.ranks_b = [2 * self.a, 2 * self.a + 1]


# --------------------------------------------------------------------------------------------
# DTensor on the 1-D mesh


@check("distribute_shard0_from_rank0")
def _(c):
    # Ranks other than 0 pass other data: the shards must be rank 0's (scatter from rank 0).
    full = rand((10, 6), 1 if c.rank == 0 else 50 + c.rank)
    d = distribute_tensor(full, c.mesh1, [Shard(0)])
    return d.to_local(), chunk(np64(rand((10, 6), 1)), c.world, c.rank)


@check("distribute_shard1")
def _(c):  # 9 columns on 4 ranks: the last shard is empty
    d = distribute_tensor(rand((5, 9), 2), c.mesh1, [Shard(1)])
    return d.to_local(), chunk(np64(rand((5, 9), 2)), c.world, c.rank, 1)


@check("shard1_full_tensor")
def _(c):
    d = distribute_tensor(rand((5, 9), 2), c.mesh1, [Shard(1)])
    return d.full_tensor(), np64(rand((5, 9), 2))


@check("distribute_replicate_from_rank0")
def _(c):
    d = distribute_tensor(rand((3, 4), 3 if c.rank == 0 else 60 + c.rank), c.mesh1, [Replicate()])
    return d.to_local(), np64(rand((3, 4), 3))


@check("shard0_to_replicate_uneven")
def _(c):  # all-gather of shards 3, 3, 3, 1 rows
    d = distribute_tensor(rand((10, 6), 4), c.mesh1, [Shard(0)])
    return d.redistribute(c.mesh1, [Replicate()]).to_local(), np64(rand((10, 6), 4))


@check("shard0_to_shard1")
def _(c):  # all-to-all
    d = distribute_tensor(rand((8, 12), 5), c.mesh1, [Shard(0)])
    return (d.redistribute(c.mesh1, [Shard(1)]).to_local(),
            chunk(np64(rand((8, 12), 5)), c.world, c.rank, 1))


def _partial_inputs(c, shape, seed):
    return rand(shape, seed + c.rank), [np64(rand(shape, seed + r)) for r in range(c.world)]


@check("partial_sum_to_replicate", exact=False)
def _(c):  # all-reduce
    local, all_ = _partial_inputs(c, (6, 5), 100)
    d = DTensor.from_local(local, c.mesh1, [Partial()])
    return d.redistribute(c.mesh1, [Replicate()]).to_local(), sum(all_)


@check("partial_avg_to_replicate", exact=False)
def _(c):
    local, all_ = _partial_inputs(c, (6, 5), 110)
    d = DTensor.from_local(local, c.mesh1, [Partial("avg")])
    return d.redistribute(c.mesh1, [Replicate()]).to_local(), sum(all_) / c.world


@check("partial_max_to_replicate")
def _(c):
    local, all_ = _partial_inputs(c, (6, 5), 120)
    d = DTensor.from_local(local, c.mesh1, [Partial("max")])
    return d.redistribute(c.mesh1, [Replicate()]).to_local(), np.maximum.reduce(all_)


@check("partial_sum_to_shard0_uneven", exact=False)
def _(c):  # reduce-scatter of 10 rows on 4 ranks (padded)
    local, all_ = _partial_inputs(c, (10, 3), 130)
    d = DTensor.from_local(local, c.mesh1, [Partial()])
    return (d.redistribute(c.mesh1, [Shard(0)]).to_local(),
            chunk(sum(all_), c.world, c.rank))


@check("partial_avg_to_shard1", exact=False)
def _(c):
    local, all_ = _partial_inputs(c, (3, 8), 140)
    d = DTensor.from_local(local, c.mesh1, [Partial("avg")])
    return (d.redistribute(c.mesh1, [Shard(1)]).to_local(),
            chunk(sum(all_) / c.world, c.world, c.rank, 1))


@check("partial_full_tensor", exact=False)
def _(c):
    local, all_ = _partial_inputs(c, (4, 4), 150)
    return DTensor.from_local(local, c.mesh1, [Partial()]).full_tensor(), sum(all_)


# --------------------------------------------------------------------------------------------
# DTensor on the 2x2 mesh (sub-group collectives)


@check("2d_distribute_shard0_shard1")
def _(c):
    d = distribute_tensor(rand((6, 10), 200), c.mesh2, [Shard(0), Shard(1)])
    return d.to_local(), chunk(chunk(np64(rand((6, 10), 200)), 2, c.a), 2, c.b, 1)


@check("2d_shard0_shard1_full_tensor")
def _(c):
    d = distribute_tensor(rand((6, 10), 200), c.mesh2, [Shard(0), Shard(1)])
    return d.full_tensor(), np64(rand((6, 10), 200))


@check("2d_shard_shard_to_replicate_replicate")
def _(c):
    d = distribute_tensor(rand((7, 5), 210), c.mesh2, [Shard(0), Shard(1)])
    return (d.redistribute(c.mesh2, [Replicate(), Replicate()]).to_local(),
            np64(rand((7, 5), 210)))


@check("2d_replicate_shard0_to_shard1_replicate")
def _(c):
    d = distribute_tensor(rand((8, 6), 220), c.mesh2, [Replicate(), Shard(0)])
    return (d.redistribute(c.mesh2, [Shard(1), Replicate()]).to_local(),
            chunk(np64(rand((8, 6), 220)), 2, c.a, 1))


@check("2d_shard0_partial_to_shard0_replicate", exact=False)
def _(c):  # all-reduce in each row group (dim "b")
    local = rand((3, 4), 230 + c.rank)
    d = DTensor.from_local(local, c.mesh2, [Shard(0), Partial()])
    want = sum(np64(rand((3, 4), 230 + r)) for r in c.ranks_b)
    return d.redistribute(c.mesh2, [Shard(0), Replicate()]).to_local(), want


@check("2d_partial_shard1_to_shard0_shard1", exact=False)
def _(c):  # reduce-scatter in each column group (dim "a")
    local = rand((6, 2), 240 + c.rank)
    d = DTensor.from_local(local, c.mesh2, [Partial(), Shard(1)])
    column = sum(np64(rand((6, 2), 240 + 2 * a + c.b)) for a in range(2))
    return d.redistribute(c.mesh2, [Shard(0), Shard(1)]).to_local(), chunk(column, 2, c.a)


@check("2d_partial_partial_full_tensor", exact=False)
def _(c):
    local = rand((4, 3), 250 + c.rank)
    d = DTensor.from_local(local, c.mesh2, [Partial(), Partial()])
    return d.full_tensor(), sum(np64(rand((4, 3), 250 + r)) for r in range(c.world))


# --------------------------------------------------------------------------------------------
# Functional collectives (world group, and the 2-rank row group)


def _world():
    return dist.group.WORLD


@check("funcol_all_gather_dim0")
def _(c):
    out = funcol.all_gather_tensor(rand((3, 5), 300 + c.rank), 0, _world())
    return out, np.concatenate([np64(rand((3, 5), 300 + r)) for r in range(c.world)], 0)


@check("funcol_all_gather_dim1_subgroup")
def _(c):
    out = funcol.all_gather_tensor(rand((2, 3), 310 + c.rank), 1, c.group_b)
    return out, np.concatenate([np64(rand((2, 3), 310 + r)) for r in c.ranks_b], 1)


@check("funcol_reduce_scatter_sum_dim0", exact=False)
def _(c):
    out = funcol.reduce_scatter_tensor(rand((8, 3), 320 + c.rank), "sum", 0, _world())
    total = sum(np64(rand((8, 3), 320 + r)) for r in range(c.world))
    return out, chunk(total, c.world, c.rank)


@check("funcol_reduce_scatter_avg_dim1_subgroup", exact=False)
def _(c):
    out = funcol.reduce_scatter_tensor(rand((3, 4), 330 + c.rank), "avg", 1, c.group_b)
    mean = sum(np64(rand((3, 4), 330 + r)) for r in c.ranks_b) / 2
    return out, chunk(mean, 2, c.b, 1)


for _op in ("sum", "avg", "max"):
    def _all_reduce(c, op=_op):
        out = funcol.all_reduce(rand((4, 5), 340 + c.rank), op, _world())
        all_ = [np64(rand((4, 5), 340 + r)) for r in range(c.world)]
        want = {"sum": sum(all_), "avg": sum(all_) / c.world, "max": np.maximum.reduce(all_)}
        return out, want[op]
    check(f"funcol_all_reduce_{_op}", exact=(_op == "max"))(_all_reduce)


def _a2a_split(src, dst):
    """Rows rank `src` sends to rank `dst`: 1 to 3, different for every pair (uneven)."""
    return (src + 2 * dst) % 3 + 1


@check("funcol_all_to_all_single_uneven")
def _(c):
    def send(src):  # the rows `src` sends, in destination order
        return rand((sum(_a2a_split(src, d) for d in range(c.world)), 4), 350 + src)

    out = funcol.all_to_all_single(
        send(c.rank), [_a2a_split(s, c.rank) for s in range(c.world)],
        [_a2a_split(c.rank, d) for d in range(c.world)], _world())
    pieces = []
    for src in range(c.world):
        start = sum(_a2a_split(src, d) for d in range(c.rank))
        pieces.append(np64(send(src))[start:start + _a2a_split(src, c.rank)])
    return out, np.concatenate(pieces, 0)


@check("funcol_broadcast_subgroup")
def _(c):
    # src is a rank of the group (1: the second rank of the row), not a global rank.
    out = funcol.broadcast(rand((5,), 360 + c.rank), 1, c.group_b)
    return out, np64(rand((5,), 360 + c.ranks_b[1]))


@check("funcol_all_gather_coalesced")
def _(c):
    outs = funcol.all_gather_into_tensor_coalesced(
        [rand((2, 3), 370 + c.rank), rand((5,), 380 + c.rank)], _world())
    want = [np.concatenate([np64(rand(s, seed + r)) for r in range(c.world)], 0)
            for s, seed in (((2, 3), 370), ((5,), 380))]
    return torch.cat([o.reshape(-1) for o in outs]), np.concatenate([w.reshape(-1) for w in want])


@check("funcol_reduce_scatter_coalesced", exact=False)
def _(c):
    outs = funcol.reduce_scatter_tensor_coalesced(
        [rand((4, 2), 390 + c.rank), rand((8,), 400 + c.rank)], "sum", [0, 0], _world())
    want = [chunk(sum(np64(rand(s, seed + r)) for r in range(c.world)), c.world, c.rank)
            for s, seed in (((4, 2), 390), ((8,), 400))]
    return torch.cat([o.reshape(-1) for o in outs]), np.concatenate([w.reshape(-1) for w in want])


@check("funcol_all_reduce_coalesced", exact=False)
def _(c):
    outs = funcol.all_reduce_coalesced([rand((3,), 410 + c.rank), rand((2, 2), 420 + c.rank)],
                                       "sum", _world())
    want = [sum(np64(rand(s, seed + r)) for r in range(c.world))
            for s, seed in (((3,), 410), ((2, 2), 420))]
    return torch.cat([o.reshape(-1) for o in outs]), np.concatenate([w.reshape(-1) for w in want])


@check("c10d_functional_ops_wait_tensor", exact=False)
def _(c):
    """The raw ops return before the data is there; wait_tensor completes them (Work::wait)."""
    ops = torch.ops._c10d_functional
    name = _world().group_name
    gathered = ops.all_gather_into_tensor(rand((2, 2), 430 + c.rank), c.world, name)
    scattered = ops.reduce_scatter_tensor(rand((8,), 440 + c.rank), "sum", c.world, name)
    reduced = ops.all_reduce(rand((3,), 450 + c.rank), "max", name)
    outs = [funcol.wait_tensor(t) for t in (gathered, scattered, reduced)]
    want = [np.concatenate([np64(rand((2, 2), 430 + r)) for r in range(c.world)], 0),
            chunk(sum(np64(rand((8,), 440 + r)) for r in range(c.world)), c.world, c.rank),
            np.maximum.reduce([np64(rand((3,), 450 + r)) for r in range(c.world)])]
    return torch.cat([o.reshape(-1) for o in outs]), np.concatenate([w.reshape(-1) for w in want])


del _


# --------------------------------------------------------------------------------------------
# Running the checks


def _run_checks(rank, world_size):
    """Runs every check in order (the same on every rank: they are collectives) and returns
    {name: (got float64 numpy, want) or the error text}. A check that raises on every rank
    (an unsupported call) is reported and the next one runs."""
    import time
    import warnings

    # torch 2.15 renamed some functional collectives (all_gather_tensor -> all_gather_single);
    # the old names, which 2.6 has too, still forward to the same ops.
    warnings.filterwarnings("ignore", category=FutureWarning)
    c = Ctx(rank, world_size)
    out = {}
    for name, (fn, _exact) in CHECKS.items():
        if os.environ.get("SHARC_TEST_VERBOSE"):  # to find the check a hang is in
            print(f"rank {rank}: {name}", file=sys.stderr, flush=True)
        try:
            got, want = fn(c)
            if isinstance(got, DTensor):
                raise TypeError(f"{name} returned a DTensor, not its local tensor")
            out[name] = (got.detach().double().numpy(), np.asarray(want, dtype=np.float64))
        except Exception:  # noqa: BLE001  reported by the check's test
            out[name] = traceback.format_exc()
    out["_backends"] = sorted({dist.get_backend(g) for mesh in (c.mesh1, c.mesh2)
                               for g in mesh.get_all_groups()})
    time.sleep(0.5)  # see test_training._settle_before_destroy
    return out


_LAUNCHES = {}


def _results(backend):
    """The checks' results on every rank of one launch per backend; a failed launch is
    remembered too, so that its error is reported once per check, not relaunched."""
    if backend == "sharc":
        pytest.importorskip("sharc.torch", reason="sharc.torch is not installed")
    if backend not in _LAUNCHES:
        try:
            _LAUNCHES[backend] = run_ranks(WORLD, _run_checks, backend=backend)
        except Exception as e:  # noqa: BLE001
            _LAUNCHES[backend] = e
    if isinstance(_LAUNCHES[backend], Exception):
        raise _LAUNCHES[backend]
    return _LAUNCHES[backend]


def _gloo_lacks_avg():
    """gloo gained AVG after torch 2.6 (pytorch/pytorch#149781): before, its all-reduce
    refused it and its reduce-scatter silently summed. sharc must average everywhere."""
    value = _results("gloo")[0]["funcol_all_reduce_avg"]
    return isinstance(value, str) and "Cannot use ReduceOp.AVG with Gloo" in value


@pytest.mark.parametrize("backend", ["gloo", "sharc"])
def test_mesh_groups_use_backend(backend):
    """The meshes' groups (the whole world, rows and columns of the 2x2 mesh) all run on the
    backend under test: no sub-group fell back to another backend."""
    for rank, res in enumerate(_results(backend)):
        assert res["_backends"] == [backend], f"rank {rank}: {res['_backends']}"


@pytest.mark.parametrize("backend", ["gloo", "sharc"])
@pytest.mark.parametrize("name", list(CHECKS))
def test_collective(backend, name):
    exact = CHECKS[name][1]
    for rank, res in enumerate(_results(backend)):
        value = res[name]
        if backend == "gloo" and "avg" in name and _gloo_lacks_avg():
            pytest.skip(f"gloo in torch {torch.__version__} has no ReduceOp.AVG: all-reduce "
                        f"refuses it, reduce-scatter sums (pytorch/pytorch#162338)")
        assert not isinstance(value, str), f"{name} failed on rank {rank} ({backend}):\n{value}"
        got, want = value
        assert got.shape == want.shape, f"{name} rank {rank}: shape {got.shape} vs {want.shape}"
        if exact:
            assert np.array_equal(got, want), (
                f"{name} rank {rank}: max diff {np.abs(got - want).max()} (must be exact)")
        else:
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name} rank {rank} ({backend})")


# --------------------------------------------------------------------------------------------
# torch's own DTensor test harness (torch.testing._internal), pointed at sharc. Each test
# method spawns its 4 ranks (a few seconds each on 2 cores), so there are only two.

from torch.testing._internal.distributed._tensor.common_dtensor import (  # noqa: E402
    DTensorTestBase, ModelArgs, Transformer, with_comms)


class SharcDTensorTestBase(DTensorTestBase):
    """DTensorTestBase on CPU with backend "sharc": its init_pg accepts only a fixed list of
    backends, so it is replaced (the signature covers torch 2.6 and 2.15)."""

    @property
    def world_size(self):
        return WORLD

    @property
    def backend(self):
        return "sharc"

    @property
    def device_type(self):
        return "cpu"

    @device_type.setter
    def device_type(self, value):  # torch 2.6's with_comms assigns it; CPU stays
        pass

    def init_pg(self, eager_init=False, backend=None):
        import sharc.torch  # noqa: F401  registers the backend in this rank

        dist.init_process_group(backend="sharc", world_size=self.world_size, rank=self.rank,
                                init_method=f"file://{self.file_name}")

    def setUp(self):
        pytest.importorskip("sharc.torch", reason="sharc.torch is not installed")
        super().setUp()


class TestUpstreamHarness(SharcDTensorTestBase):
    @with_comms
    def test_op_over_every_sharding(self):
        """DTensorConverter runs each op on every Shard/Replicate combination of its
        arguments (matmul of Shard(1) x Shard(0) gives a Partial result, summed by
        full_tensor) and compares with the op on plain tensors."""
        mesh = self.build_device_mesh()
        torch.manual_seed(0)  # the same inputs on every rank
        a, b = torch.randn(8, 12), torch.randn(12, 4)
        self._test_op(mesh, torch.mm, a, b)
        self._test_op(mesh, torch.add, a, torch.randn(8, 12))
        self._test_op(mesh, torch.sum, a, 1)

    @with_comms
    def test_transformer_sequence_parallel(self):
        """torch's test Transformer with its own tensor + sequence-parallel plan
        (Transformer.parallelize) gives the unsharded model's logits and gradients."""
        torch.manual_seed(0)
        args = ModelArgs(n_layers=2, vocab_size=16, max_seq_len=8, dim=16, n_heads=4,
                         dropout_p=0.0, weight_tying=False)
        model = Transformer(args)
        reference = Transformer(args)
        reference.load_state_dict(model.state_dict())
        mesh = self.build_device_mesh()
        # local_output_for_attn: q/k/v as local tensors, since CPU attention
        # (_scaled_dot_product_flash_attention_for_cpu) has no DTensor sharding rule.
        model = Transformer.parallelize(model, mesh, True, local_output_for_attn=True)
        tokens = torch.randint(0, args.vocab_size, (2, args.max_seq_len),
                               generator=torch.Generator().manual_seed(1))
        out, want = model(tokens), reference(tokens)
        out = out.full_tensor() if isinstance(out, DTensor) else out
        self.assertEqual(out, want, atol=1e-5, rtol=1e-5)
        out.sum().backward()
        want.sum().backward()
        for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
            grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            self.assertEqual(grad, q.grad, atol=1e-5, rtol=1e-4, msg=f"gradient of {name}")
