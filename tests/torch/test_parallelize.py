"""Tests of sharc.torch.parallelize (FSDP2 hybrid sharding + tensor parallelism) on a real
Hugging Face LlamaForCausalLM (tiny, random weights: llama_support.py).

Each degree pair (hybrid_shard_degree, tensor_parallel_degree) trains the model from the same
seed on the same global batches, each data-parallel rank on its slice, and is checked against
one-process training of the whole batches: the loss of every rank at every step (that of its
slice under the reference), the full gradients of every parameter at every step (gathered
before the optimizer step) and the final parameters. One launch per world size runs all its
pairs (4 ranks: (4,1), (2,1), (2,2), (1,4) and an emulated 2-node layout; 8 ranks: (8,1),
(2,2), (2,4)), plus bad degrees on the real ranks. One 4-rank run over
gloo is compared with the same pairs over the backend under test. The degree checks are also
run in this process against a stand-in world (any size and node layout, no ranks).

Tolerances. Against the one-process reference the arithmetic differs only in order and
grouping: gradients are sums over the batch split into per-rank partial sums (then averaged
by the backend), and the tensor-parallel layers sum partial matmuls over ranks. In float32
that is a few ulps per operation, grown through 2 layers and 3 SGD steps. Measured on 4 and 8
ranks (gloo and sharc): losses (~5) within 1.4e-6, gradients (entries up to 0.2) within
4.8e-7, parameters (up to ~1) within 3.6e-7. Checked with rtol 1e-5 plus atol 5e-6 for
losses and parameters and 2e-6 for gradients: several times the measured error, far below
any real mistake (a wrong average or a missing shard is off by whole percents). Backend
against gloo: the same sums in possibly different orders, rtol 1e-5 / atol 1e-6.
"""
import os
import time
import types

import pytest
import torch

from launcher import run_ranks

pytest.importorskip("transformers", reason="Hugging Face transformers is not installed")
import llama_support as L  # noqa: E402  (needs transformers)

# The package under test; sharc.torch.parallelize needs no more than torch.distributed.
pytest.importorskip("sharc.torch", reason="sharc.torch is not installed")

BACKEND = os.environ.get("SHARC_TORCH_TEST_BACKEND", "sharc")
STEPS = 3
GLOBAL_BATCH = 8  # split over the world_size / tensor_parallel_degree data-parallel ranks
LR = 0.5
MOMENTUM = 0.9
RTOL, ATOL, GRAD_ATOL = 1e-5, 5e-6, 2e-6
GLOO_RTOL, GLOO_ATOL = 1e-5, 1e-6

# (hybrid_shard_degree, tensor_parallel_degree, ranks_per_node or None to detect it)
PAIRS_4 = [(4, 1, None),  # FSDP over all ranks
           (2, 1, None),  # HSDP: (replicate, shard) = (2, 2)
           (2, 2, None),  # FSDP + TP: (shard, tp) = (2, 2)
           (1, 4, None),  # TP only (and a 1-rank shard dimension)
           (1, 2, 2)]     # 2 "nodes" of 2: TP inside a node, replicated across (2, 1, 2)
PAIRS_8 = [(8, 1, None),  # FSDP over all ranks
           (2, 2, None),  # HSDP + TP: (replicate, shard, tp) = (2, 2, 2)
           (2, 4, None)]  # FSDP + TP: (shard, tp) = (2, 4)
GLOO_PAIRS = [(2, 2, None), (1, 4, None)]


def _parallelize():
    from sharc.torch import parallelize

    return parallelize


def _mesh_module():
    from sharc.torch import mesh

    return mesh


# --------------------------------------------------------------------------------------------
# On the ranks.


def _full(t):
    """The whole tensor of a (possibly DTensor) parameter or gradient (a collective), as a
    numpy array: tensors sent back to the launcher would live in shared memory that goes
    away with the rank's process."""
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu().clone().numpy()


def _train_pair(rank, world, shard, tp, per_node, plan_options=None):
    import torch.distributed as dist

    model = L.make_model()
    # transformers < 4.48 kept the head counts on the attention module and checked shapes
    # against them; parallelize divides them by the tp degree (checked by hand against 4.47.1,
    # whose eager attention fails under TP without it). 5.x infers them and ignores these.
    for layer in model.model.layers:
        layer.self_attn.num_heads, layer.self_attn.num_key_value_heads = L.HEADS, L.KV_HEADS
    model, mesh = _parallelize()(model, hybrid_shard_degree=shard, tensor_parallel_degree=tp,
                                 ranks_per_node=per_node, plan_options=plan_options)
    tp = mesh["tp"].size() if "tp" in mesh.mesh_dim_names else 1  # "auto": the planner's
    attn = model.model.layers[1].self_attn
    head_counts = (attn.num_heads, attn.num_key_value_heads)
    # Consecutive ranks form a tp group, so the tp groups are the data-parallel ranks.
    dp_rank, dp_size = rank // tp, world // tp
    per_rank = GLOBAL_BATCH // dp_size
    part = slice(dp_rank * per_rank, (dp_rank + 1) * per_rank)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses, grads = [], []
    for tokens in L.make_batches(STEPS, GLOBAL_BATCH):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=tokens[part], labels=tokens[part]).loss
        loss.backward()
        step_grads = {n: _full(p.grad) for n, p in model.named_parameters()}
        grads.append(step_grads if rank == 0 else None)
        opt.step()
        losses.append(loss.item())
    params = {n: _full(p) for n, p in model.named_parameters()}
    # Per parameter: the names of its DTensor's mesh, its full and its local shape.
    layouts = {n: (str(p.device_mesh.mesh_dim_names), tuple(p.shape), tuple(p.to_local().shape))
               for n, p in model.named_parameters()}
    dist.barrier()
    return {
        "dp_rank": dp_rank, "dp_size": dp_size, "losses": losses,
        "grads": grads if rank == 0 else None,
        "params": params if rank == 0 else None,
        "mesh": (mesh.mesh_dim_names, tuple(mesh.mesh.shape), mesh.get_coordinate()),
        "layouts": layouts, "head_counts": head_counts,
    }


def _error_of(call):
    try:
        call()
    except (ValueError, TypeError, NotImplementedError) as e:
        return type(e).__name__, str(e)
    return None


def _bad_degrees(rank, world):
    """Bad calls on the real ranks (all raise before any mesh is made): their messages."""
    p = _parallelize()
    model = L.make_model()
    calls = {
        "shard_3": lambda: p(model, hybrid_shard_degree=3),
        "tp_3": lambda: p(model, hybrid_shard_degree=1, tensor_parallel_degree=3),
        "tp_over_node": lambda: p(model, hybrid_shard_degree=1, tensor_parallel_degree=4,
                                  ranks_per_node=2),
        "auto_tp_alone": lambda: p(model, hybrid_shard_degree=2, tensor_parallel_degree="auto"),
        "auto_no_fit": lambda: p(model, hybrid_shard_degree="auto", plan_options={
            "memory_bytes": 1024}),
        "auto_bad_option": lambda: p(model, hybrid_shard_degree="auto", plan_options={
            "seq": 8}),
    }
    return {key: _error_of(call) for key, call in calls.items()}


def _planned(world):
    """The planner's ranked candidates for the test model on `world` ranks of one node, as
    parallelize(..., "auto") asks for them (same spec): with all the memory there is, and with
    the least memory in which a candidate without tensor parallelism fits (by bisection)."""
    from sharc.torch import model_spec, plan_fsdp
    from sharc.torch.parallelize import _find_blocks

    model = L.make_model()
    spec = model_spec(model, layers=len(_find_blocks(model, None)))

    def ranked(memory):
        return plan_fsdp(spec, world_size=world, ranks_per_node=world, memory_bytes=memory)

    lo, hi = 0.0, 2.0**40
    for _ in range(80):
        mid = (lo + hi) / 2
        fit = any(c["fits"] and c["tensor_parallel_degree"] == 1 for c in ranked(mid))
        lo, hi = (lo, mid) if fit else (mid, hi)
    return {"all": ranked(2.0**40), "tight_memory": hi, "tight": ranked(hi)}


def _run_all(rank, world, pairs):
    out = {"errors": _bad_degrees(rank, world)}
    for shard, tp, per_node in pairs:
        out[(shard, tp, per_node)] = _train_pair(rank, world, shard, tp, per_node)
    if world == 4 and BACKEND == "sharc":
        # "auto" for both degrees with all the memory there is; then "auto" for the shard
        # degree alone (tp 1) with just enough memory for the smallest footprint.
        planned = _planned(world)
        out["planned"] = planned if rank == 0 else None
        out["auto"] = _train_pair(rank, world, "auto", "auto", None)
        out["auto_tight"] = _train_pair(rank, world, "auto", 1, None,
                                        plan_options={"memory_bytes": planned["tight_memory"]})
    # The default group still works after the failed calls and all the meshes.
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t)
    out["world_sum"] = t.item()
    time.sleep(0.5)  # see test_training._settle_before_destroy (torch 2.6 gloo teardown)
    return out


# --------------------------------------------------------------------------------------------
# Fixtures: one launch per world size.


def _needs_fsdp2_on_cpu():
    """FSDP2 shards CPU tensors from torch 2.8 on; torch 2.6's fully_shard fails on them
    ("'Stream' object has no attribute 'record_event'"), and parallelize says so up front
    (test_old_torch_refuses_cpu)."""
    from sharc.torch.parallelize import fsdp2_runs_on_cpu

    return pytest.mark.skipif(not fsdp2_runs_on_cpu(),
                              reason=f"torch {torch.__version__}: FSDP2 cannot shard CPU "
                                     "tensors (torch.cpu.Stream has no record_event)")


@pytest.fixture(scope="module")
def reference():
    return L.train_reference(STEPS, GLOBAL_BATCH, LR, MOMENTUM)


@pytest.fixture(scope="module")
def runs4():
    return run_ranks(4, _run_all, PAIRS_4, backend=BACKEND)


@pytest.fixture(scope="module")
def runs8():
    return run_ranks(8, _run_all, PAIRS_8, backend=BACKEND, timeout=400)


@pytest.fixture(scope="module")
def gloo4():
    return run_ranks(4, _run_all, GLOO_PAIRS, backend="gloo")


# --------------------------------------------------------------------------------------------
# Checks.


def _close(got, want, rtol, atol, what):
    got, want = (torch.as_tensor(x) for x in (got, want))
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def _mesh_degrees(result):
    names, shape, _ = result["mesh"]
    dims = dict(zip(names, shape))
    return dims.get("shard", 1), dims.get("tp", 1)


def _check_against_reference(results, key, reference):
    tp = _mesh_degrees(results[0][key])[1]
    ref_logits, ref_grads, ref_params = reference
    batches = L.make_batches(STEPS, GLOBAL_BATCH)
    for rank, res in enumerate(results):
        run = res[key]
        assert run["dp_size"] == len(results) // tp
        per_rank = GLOBAL_BATCH // run["dp_size"]
        part = slice(run["dp_rank"] * per_rank, (run["dp_rank"] + 1) * per_rank)
        for step, (loss, logits, tokens) in enumerate(zip(run["losses"], ref_logits, batches)):
            want = L.shifted_loss(logits[part], tokens[part]).item()
            _close(loss, want, RTOL, ATOL, f"{key} rank {rank} step {step} loss")
    run = results[0][key]
    assert run["grads"][0].keys() == ref_grads[0].keys()
    for step, (got, want) in enumerate(zip(run["grads"], ref_grads)):
        for name, g in want.items():
            _close(got[name], g, RTOL, GRAD_ATOL, f"{key} step {step} gradient of {name}")
    for name, value in ref_params.items():
        _close(run["params"][name], value, RTOL, ATOL, f"{key} final {name}")


def _check_layout(results, key, degrees=None):
    """The mesh has the documented shape and names, and the parameters are sharded over it:
    every parameter over "shard" (when > 1), the planned layers also over "tp"."""
    shard, tp = degrees or key[:2]
    world = len(results)
    dims = [("replicate", world // (shard * tp)), ("shard", shard), ("tp", tp)]
    dims = [(n, s) for n, s in dims if s > 1 or n == "shard"]
    names, shape = tuple(n for n, _ in dims), tuple(s for _, s in dims)
    for rank, res in enumerate(results):
        got_names, got_shape, coord = res[key]["mesh"]
        assert (got_names, got_shape) == (names, shape), (key, rank)
        # tp innermost, then shard, then replicate: row-major coordinates of the rank.
        assert list(coord) == torch.arange(world).reshape(shape).eq(rank).nonzero()[0].tolist()
        # q_proj (64 x 64): split on dim 0 by TP, then that split on dim 0 by FSDP; the
        # norm (64) only by FSDP.
        layouts = res[key]["layouts"]
        q_mesh, q_full, q_local = layouts["model.layers.0.self_attn.q_proj.weight"]
        n_mesh, n_full, n_local = layouts["model.layers.0.input_layernorm.weight"]
        assert (q_full, q_local) == ((L.HIDDEN, L.HIDDEN), (L.HIDDEN // (shard * tp), L.HIDDEN))
        assert (n_full, n_local) == ((L.HIDDEN,), (L.HIDDEN // shard,))
        assert ("'tp'" in q_mesh) == (tp > 1) and "'tp'" not in n_mesh, (key, q_mesh, n_mesh)
        assert res[key]["head_counts"] == (L.HEADS // tp, L.KV_HEADS // tp), key


@_needs_fsdp2_on_cpu()
@pytest.mark.parametrize("key", PAIRS_4, ids=str)
def test_4_ranks_match_one_process(runs4, reference, key):
    _check_against_reference(runs4, key, reference)
    _check_layout(runs4, key)
    # It trains: the last step's loss is below the first's.
    assert runs4[0][key]["losses"][-1] < runs4[0][key]["losses"][0]


@_needs_fsdp2_on_cpu()
@pytest.mark.parametrize("key", PAIRS_8, ids=str)
def test_8_ranks_match_one_process(runs8, reference, key):
    _check_against_reference(runs8, key, reference)
    _check_layout(runs8, key)


@_needs_fsdp2_on_cpu()
@pytest.mark.skipif(BACKEND == "gloo", reason="the backend under test is gloo itself")
@pytest.mark.parametrize("key", GLOO_PAIRS, ids=str)
def test_matches_gloo(runs4, gloo4, key):
    """The backend under test trains like gloo, step by step and rank by rank."""
    for rank, (got, want) in enumerate(zip(runs4, gloo4)):
        _close(got[key]["losses"], want[key]["losses"], GLOO_RTOL, GLOO_ATOL,
               f"{key} rank {rank} losses")
    got, want = runs4[0][key], gloo4[0][key]
    for step in range(STEPS):
        for name, g in want["grads"][step].items():
            _close(got["grads"][step][name], g, GLOO_RTOL, GLOO_ATOL,
                   f"{key} step {step} gradient of {name}")
    for name, value in want["params"].items():
        _close(got["params"][name], value, GLOO_RTOL, GLOO_ATOL, f"{key} final {name}")


@_needs_fsdp2_on_cpu()
@pytest.mark.skipif(BACKEND != "sharc", reason="the planner runs with the sharc backend")
@pytest.mark.parametrize("case", ["auto", "auto_tight"])
def test_auto_degrees_follow_the_planner(runs4, reference, case):
    """hybrid_shard_degree="auto": every rank builds the mesh of the planner's best fitting
    candidate (with tensor_parallel_degree="auto", or 1), and trains like one process. With
    memory for the smallest footprint only, the choice is a candidate of that footprint,
    not the one with the least communication."""
    planned = runs4[0]["planned"]
    if case == "auto":
        fits = [c for c in planned["all"] if c["fits"]]
    else:
        tp1 = [c for c in planned["tight"] if c["tensor_parallel_degree"] == 1]
        fits = [c for c in tp1 if c["fits"]]
        assert fits[0]["memory_bytes"] == min(c["memory_bytes"] for c in tp1), tp1
        untight = [c for c in planned["all"] if c["tensor_parallel_degree"] == 1]
        assert untight[0]["hybrid_shard_degree"] != fits[0]["hybrid_shard_degree"], (
            "the memory limit should change the choice", untight)
    want = (fits[0]["hybrid_shard_degree"], fits[0]["tensor_parallel_degree"])
    for rank, res in enumerate(runs4):
        assert _mesh_degrees(res[case]) == want, (case, rank, ranked)
    _check_against_reference(runs4, case, reference)
    _check_layout(runs4, case, degrees=want)


@_needs_fsdp2_on_cpu()
def test_bad_degrees_on_ranks(runs4, runs8):
    for results, world in ((runs4, 4), (runs8, 8)):
        for res in results:
            errors = res["errors"]
            assert errors["shard_3"] == ("ValueError", errors["shard_3"][1])
            assert "hybrid_shard_degree=3 does not fit" in errors["shard_3"][1]
            assert ("valid hybrid_shard_degree values are "
                    f"{[d for d in (1, 2, 4, 8) if world % d == 0]}") in errors["shard_3"][1]
            assert errors["tp_3"][0] == "ValueError"
            assert ("valid tensor_parallel_degree values are "
                    f"{[d for d in (1, 2, 4, 8) if world % d == 0 and d <= 4]}"
                    ) in errors["tp_3"][1]
            assert errors["tp_over_node"][0] == "ValueError"
            assert "exceeds the 2 ranks per node" in errors["tp_over_node"][1]
            assert "valid tensor_parallel_degree values are [1, 2]" in errors["tp_over_node"][1]
            assert errors["auto_tp_alone"][0] == "ValueError"
            assert 'tensor_parallel_degree="auto" needs hybrid_shard_degree="auto"' in (
                errors["auto_tp_alone"][1])
            assert errors["auto_no_fit"][0] == "ValueError"
            assert "no hybrid_shard_degree fits LlamaForCausalLM" in errors["auto_no_fit"][1]
            assert "the smallest footprint is" in errors["auto_no_fit"][1]
            assert errors["auto_bad_option"][0] == "ValueError"
            assert "unknown keys ['seq']" in errors["auto_bad_option"][1]
            assert res["world_sum"] == world


# --------------------------------------------------------------------------------------------
# Degree checks in this process, against a stand-in world (as in test_mesh.py): torch's
# process-group calls are replaced, parallelize and the mesh code are the real ones.


@pytest.fixture
def fake(monkeypatch):
    mesh = _mesh_module()
    state = types.SimpleNamespace(world=4, calls=[])
    monkeypatch.setattr(mesh, "dist", types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True,
        get_world_size=lambda group=None: state.world))

    def init_device_mesh(device_type, shape, *, mesh_dim_names=None):
        state.calls.append((device_type, shape, mesh_dim_names))
        raise _Built()

    monkeypatch.setattr(mesh, "init_device_mesh", init_device_mesh)
    return state


class _Built(Exception):
    """Raised by the stand-in init_device_mesh: the checks passed and a mesh was asked for."""


def _call(**kwargs):
    kwargs.setdefault("ranks_per_node", None)
    return _parallelize()(L.make_model(), **kwargs)


@pytest.mark.parametrize("world,per_node,shard,tp,shape,names", [
    (4, 4, 4, 1, (4,), ("shard",)),
    (4, 4, 2, 1, (2, 2), ("replicate", "shard")),
    (4, 4, 2, 2, (2, 2), ("shard", "tp")),
    (4, 4, 1, 4, (1, 4), ("shard", "tp")),
    (16, 8, 4, 2, (2, 4, 2), ("replicate", "shard", "tp")),
    (16, 8, 8, 2, (8, 2), ("shard", "tp")),      # shard groups across the 2 nodes
    (16, 4, 2, 4, (2, 2, 4), ("replicate", "shard", "tp")),
    (8, 8, 1, 1, (8, 1), ("replicate", "shard")),  # pure replication (DDP-like)
])
def test_valid_degrees_make_mesh(fake, world, per_node, shard, tp, shape, names):
    fake.world = world
    with pytest.raises(_Built):
        _call(hybrid_shard_degree=shard, tensor_parallel_degree=tp, ranks_per_node=per_node,
              device="cuda")  # the mesh is not made, so any device type does here
    assert fake.calls == [("cuda", shape, names)]


def test_old_torch_refuses_cpu(fake):
    """On a torch whose FSDP2 cannot shard CPU tensors, a clear error before any mesh."""
    from sharc.torch.parallelize import fsdp2_runs_on_cpu

    if fsdp2_runs_on_cpu():
        with pytest.raises(_Built):
            _call(hybrid_shard_degree=4, ranks_per_node=4)
        assert fake.calls == [("cpu", (4,), ("shard",))]
    else:
        with pytest.raises(RuntimeError, match=r"FSDP2 \(fully_shard\) in torch .* cannot run "
                                               "on CPU tensors"):
            _call(hybrid_shard_degree=4, ranks_per_node=4)
        assert fake.calls == []


@pytest.mark.parametrize("world,per_node,shard,tp,messages", [
    (4, 4, 3, 1, ["hybrid_shard_degree=3 does not fit 4 ranks on 1 node of 4 ranks",
                  "does not divide the world size 4",
                  "valid hybrid_shard_degree values are [1, 2, 4]"]),
    (8, 4, 3, 2, ["hybrid_shard_degree=3 does not fit 8 ranks on 2 nodes of 4 ranks with "
                  "tensor_parallel_degree=2",
                  "hybrid_shard_degree * tensor_parallel_degree = 3 * 2 = 6 does not divide",
                  "valid hybrid_shard_degree values are [1, 2, 4]"]),
    (12, 4, 3, 2, ["not a multiple of the 4 ranks per node",
                   "valid hybrid_shard_degree values are [1, 2, 6]"]),
    (12, 6, 2, 2, ["hybrid_shard_degree * tensor_parallel_degree = 2 * 2 = 4 does not divide "
                   "the 6 ranks per node", "valid hybrid_shard_degree values are [1, 3, 6]"]),
    (16, 8, 1, 8, ["tensor_parallel_degree=8 does not fit the model on 16 ranks on 2 nodes "
                   "of 8 ranks",
                   "model.layers.*.self_attn.k_proj (4 heads of dimension 8), "
                   "model.layers.*.self_attn.v_proj (4 heads of dimension 8) do not split "
                   "into 8 equal parts",
                   "valid tensor_parallel_degree values are [1, 2, 4]"]),
    (16, 4, 1, 8, ["exceeds the 4 ranks per node",
                   "valid tensor_parallel_degree values are [1, 2, 4]"]),
    (12, 6, 1, 3, ["model.embed_tokens (num_embeddings=128), "
                   "model.layers.*.self_attn.q_proj (8 heads of dimension 8), ",
                   "model.layers.*.mlp.down_proj (in_features=128), lm_head (out_features=128) "
                   "do not split into 3 equal parts",
                   "valid tensor_parallel_degree values are [1, 2]"]),
])
def test_invalid_degrees(fake, world, per_node, shard, tp, messages):
    fake.world = world
    with pytest.raises(ValueError) as err:
        _call(hybrid_shard_degree=shard, tensor_parallel_degree=tp, ranks_per_node=per_node)
    for message in messages:
        assert message in str(err.value)
    assert fake.calls == []


def test_bad_arguments(fake):
    with pytest.raises(TypeError, match="hybrid_shard_degree must be an int"):
        _call(hybrid_shard_degree=2.0)
    with pytest.raises(ValueError, match="tensor_parallel_degree must be >= 1, got 0"):
        _call(hybrid_shard_degree=1, tensor_parallel_degree=0)
    with pytest.raises(ValueError, match='tensor_parallel_degree="auto" needs '
                       'hybrid_shard_degree="auto"'):
        _call(hybrid_shard_degree=1, tensor_parallel_degree="auto")
    with pytest.raises(TypeError, match="plan_options must be a dict or None, got str"):
        _call(hybrid_shard_degree="auto", plan_options="fast")
    with pytest.raises(TypeError, match="mixed_precision must be"):
        _call(hybrid_shard_degree=1, mixed_precision="bf16")
    with pytest.raises(ValueError, match='tp_plan must be "auto" or a dict'):
        _call(hybrid_shard_degree=1, tensor_parallel_degree=2, tp_plan="megatron")
    with pytest.raises(TypeError, match="tp_plan must map module names"):
        _call(hybrid_shard_degree=1, tensor_parallel_degree=2, tp_plan={"lm_head": "colwise"})
    with pytest.raises(ValueError, match="no module of the model matches blocks="):
        _call(hybrid_shard_degree=1, blocks=torch.nn.Conv2d)
    with pytest.raises(TypeError, match="blocks must be modules or module classes"):
        _call(hybrid_shard_degree=1, blocks=["model.layers.0"])
    from torch.distributed.tensor.parallel import ColwiseParallel

    with pytest.raises(ValueError, match="plan matches no module"):
        _call(hybrid_shard_degree=1, tensor_parallel_degree=2,
              tp_plan={"no.such.layer": ColwiseParallel()})
    assert fake.calls == []


def test_auto_plan_covers_llama():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from sharc.torch import auto_tp_plan

    plan = auto_tp_plan(L.make_model())
    assert len(plan) == L.LAYERS * 7 + 2
    assert isinstance(plan["model.layers.1.self_attn.k_proj"], ColwiseParallel)
    assert isinstance(plan["model.layers.1.mlp.down_proj"], RowwiseParallel)
    assert isinstance(plan["model.embed_tokens"], RowwiseParallel)
    assert isinstance(plan["lm_head"], ColwiseParallel)
    # Tied input and output embeddings: one parameter cannot be split both ways; both stay
    # replicated, the blocks are split as before.
    from transformers import LlamaForCausalLM

    config = L.make_config()
    config.tie_word_embeddings = True
    tied = LlamaForCausalLM(config)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    plan = auto_tp_plan(tied)
    assert "lm_head" not in plan and "model.embed_tokens" not in plan
    assert len(plan) == L.LAYERS * 7


def test_not_initialized():
    import torch.distributed as dist

    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        _call(hybrid_shard_degree=1)


def test_block_detection():
    """FSDP units: Hugging Face's _no_split_modules classes, else the outermost ModuleList's
    elements (the tiny transformer of models.py), else what `blocks` names."""
    from sharc.torch.parallelize import _find_blocks

    import models

    llama = L.make_model()
    assert _find_blocks(llama, None) == list(llama.model.layers)
    tiny = models.TinyTransformer()
    assert _find_blocks(tiny, None) == list(tiny.blocks)
    assert _find_blocks(tiny, models.Attention) == [b.attn for b in tiny.blocks]
    assert _find_blocks(tiny, [tiny.head]) == [tiny.head]
