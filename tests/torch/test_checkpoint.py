"""torch.distributed.checkpoint (DCP) over sharc: a sharded model and its Adam optimizer, after
two training steps on 4 ranks, saved with dcp.save (sharded state from
torch.distributed.checkpoint.state_dict.get_state_dict), then loaded with dcp.load +
set_state_dict into freshly initialised models

  * on the same 4 ranks: every full parameter and optimizer state tensor (exp_avg,
    exp_avg_sq, step) bit-identical to the saved ones, and one more training step gives
    bit-identical parameters to the run that never stopped;
  * on 2 ranks (resharded): the full tensors bit-identical again; the next step close to the
    4-rank one (float32 rounding: the gradient mean over 2 slices instead of 4 sums in a
    different order);
  * also on 2 ranks, set_model_state_dict / set_optimizer_state_dict of the full (unsharded)
    state given on rank 0 only, with broadcast_from_rank0, into another fresh model:
    bit-identical.

Two sharded layouts: FSDP2 (fully_shard per block + root on a 1-D mesh; torch 2.6's FSDP2
does not run on CPU, so skipped there) and tensor parallelism (parallelize_module on a 1-D
mesh: column/row-wise block layers and a vocabulary-sharded head), which runs on both torch
versions. DCP's own traffic (plans and metadata gathered, scattered and broadcast as pickled
objects; barriers) runs over the same sharc group. The checkpoint directory is pytest's tmp
dir, shared by the ranks.
"""
import os

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                     set_model_state_dict,
                                                     set_optimizer_state_dict, set_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module

from fsdp2_support import (FSDP2_ON_CPU, FSDP2_SKIP_REASON, batch_slice, settle_before_destroy,
                           shard_model, to_numpy)
from launcher import run_ranks
from models import loss_fn, make_batches, make_model, tp_plan

SAVE_WORLD, LOAD_WORLD = 4, 2
STEPS = 2  # before saving; one more after loading
LR = 1e-2
# Adam divides by sqrt(exp_avg_sq) + eps: with the default 1e-8 it blows rounding noise up to
# lr-sized steps where the gradient is zero in exact arithmetic (the key biases: softmax does
# not see them), so 2 and 4 ranks would disagree there by ~lr after one step. A larger eps
# keeps such steps at noise level and leaves real gradients (1e-3 and up) normalised.
EPS = 1e-3

LAYOUTS = ["fsdp2", "tp"]
_SKIP = {} if FSDP2_ON_CPU else {"fsdp2": FSDP2_SKIP_REASON}
RUNNABLE = tuple(layout for layout in LAYOUTS if layout not in _SKIP)

# Resharded next step vs the 4-rank one (see the module docstring).
RTOL, ATOL = 1e-5, 1e-6


def _build(layout, rank, world_size, seed):
    """(model, optimizer, this rank's batch slice) for `layout`, initialised from `seed`."""
    model = make_model(seed=seed)
    if layout == "fsdp2":
        model, dp_rank, dp_size = shard_model(model, rank, world_size, "fsdp")
        part = batch_slice(dp_rank, dp_size)
    elif layout == "tp":  # every rank trains on the whole batch
        model = parallelize_module(model, init_device_mesh("cpu", (world_size,)), tp_plan(embedding=False))
        part = slice(None)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    return model, torch.optim.Adam(model.parameters(), lr=LR, eps=EPS), part


def _step(model, opt, part, batch):
    inputs, targets = batch
    opt.zero_grad(set_to_none=True)
    loss_fn(model(inputs[part]), targets[part]).backward()
    opt.step()


def _full_state(model, opt):
    """{"model.<fqn>" / "optim.<fqn>.<key>": numpy} of the whole (gathered) model and optimizer
    state, from get_state_dict(full_state_dict=True) (collectives on every rank)."""
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    out = {f"model.{k}": _exact_numpy(v) for k, v in msd.items()}
    for fqn, state in osd["state"].items():
        for key, value in state.items():
            out[f"optim.{fqn}.{key}"] = _exact_numpy(value)
    return out


def _exact_numpy(t):
    t = t.full_tensor() if isinstance(t, DTensor) else t
    return t.detach().cpu().clone().numpy()  # float32 stays float32: compared bit for bit


def _full_params(model):
    return {n: to_numpy(p.full_tensor() if isinstance(p, DTensor) else p)
            for n, p in model.named_parameters()}


def _load(model, opt, path):
    """dcp.load into this model's own (sharded) state dicts, then set_state_dict."""
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def _save_and_reload(rank, world_size, layouts, root):
    """4 ranks: train, save; reload into a fresh model; one more step on both."""
    torch.use_deterministic_algorithms(True)
    batches = make_batches(STEPS + 1, 8)
    out = {}
    for layout in layouts:
        path = os.path.join(root, layout)
        model, opt, part = _build(layout, rank, world_size, seed=0)
        for batch in batches[:STEPS]:
            _step(model, opt, part, batch)
        saved = _full_state(model, opt)
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)

        fresh, fresh_opt, _ = _build(layout, rank, world_size, seed=1)
        _load(fresh, fresh_opt, path)
        loaded = _full_state(fresh, fresh_opt)
        _step(model, opt, part, batches[STEPS])
        _step(fresh, fresh_opt, part, batches[STEPS])
        result = {"saved": saved, "loaded": loaded, "next": _full_params(model),
                  "next_restored": _full_params(fresh)}
        out[layout] = result if rank == 0 else None
    settle_before_destroy()
    return out


def _load_resharded(rank, world_size, layouts, root):
    """2 ranks: load the 4-rank checkpoint, one more step; also set_state_dict of the full
    state broadcast from rank 0 into another fresh model."""
    torch.use_deterministic_algorithms(True)
    batches = make_batches(STEPS + 1, 8)
    out = {}
    for layout in layouts:
        model, opt, part = _build(layout, rank, world_size, seed=1)
        _load(model, opt, os.path.join(root, layout))
        loaded = _full_state(model, opt)

        # The full state dict, given on rank 0 only, broadcast into a third model.
        full_msd, full_osd = get_state_dict(model, opt,
                                            options=StateDictOptions(full_state_dict=True))
        other, other_opt, _ = _build(layout, rank, world_size, seed=2)
        # Separately for model and optimizer: set_state_dict(model_state_dict={}) on ranks
        # other than 0 would treat the call as optimizer-only and skip the model's broadcast.
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(other, full_msd if rank == 0 else {}, options=options)
        set_optimizer_state_dict(other, other_opt, full_osd if rank == 0 else {}, options=options)
        broadcast = _full_state(other, other_opt)

        _step(model, opt, part, batches[STEPS])
        result = {"loaded": loaded, "broadcast": broadcast, "next": _full_params(model)}
        out[layout] = result if rank == 0 else None
    settle_before_destroy()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both launches over sharc: {"save": {layout: rank 0's result}, "reshard": {...}}."""
    pytest.importorskip("sharc.torch", reason="sharc.torch is not installed")
    root = str(tmp_path_factory.mktemp("dcp"))
    saved = run_ranks(SAVE_WORLD, _save_and_reload, RUNNABLE, root, backend="sharc")[0]
    resharded = run_ranks(LOAD_WORLD, _load_resharded, RUNNABLE, root, backend="sharc")[0]
    return {"save": saved, "reshard": resharded, "root": root}


def _assert_identical(got, want, what):
    assert got.keys() == want.keys(), f"{what}: keys differ: {sorted(set(got) ^ set(want))}"
    for key, value in want.items():
        assert got[key].dtype == value.dtype and got[key].shape == value.shape, f"{what}: {key}"
        assert np.array_equal(got[key], value), (
            f"{what}: {key} differs (max diff {np.abs(got[key] - value).max()})")


def _layouts():
    return [pytest.param(layout, marks=[pytest.mark.skip(reason=_SKIP[layout])]
                         if layout in _SKIP else []) for layout in LAYOUTS]


@pytest.mark.parametrize("layout", _layouts())
def test_checkpoint_written(runs, layout):
    """dcp.save wrote the metadata file and data files under the shared directory."""
    files = os.listdir(os.path.join(runs["root"], layout))
    assert ".metadata" in files, files
    assert any(f.endswith(".distcp") for f in files), files


@pytest.mark.parametrize("layout", _layouts())
def test_state_has_optimizer(runs, layout):
    """The state compared below holds every parameter and Adam's three state tensors of each
    (a check that the comparisons are not vacuous)."""
    saved = runs["save"][layout]["saved"]
    params = [k for k in saved if k.startswith("model.")]
    assert len(params) == len(list(make_model().parameters()))
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert sum(k.endswith("." + key) for k in saved) == len(params), key
    # Two steps of training moved the state away from a fresh model's.
    fresh = {f"model.{n}": to_numpy(p) for n, p in make_model(seed=1).named_parameters()}
    assert all(not np.array_equal(saved[k], fresh[k]) for k in params)


@pytest.mark.parametrize("layout", _layouts())
def test_load_same_world_bit_identical(runs, layout):
    res = runs["save"][layout]
    _assert_identical(res["loaded"], res["saved"], f"{layout}: loaded on 4 ranks vs saved")
    # The restored optimizer continues exactly like the original one.
    _assert_identical(res["next_restored"], res["next"], f"{layout}: next step after loading")


@pytest.mark.parametrize("layout", _layouts())
def test_load_resharded_bit_identical(runs, layout):
    _assert_identical(runs["reshard"][layout]["loaded"], runs["save"][layout]["saved"],
                      f"{layout}: loaded on 2 ranks vs saved on 4")


@pytest.mark.parametrize("layout", _layouts())
def test_resharded_next_step(runs, layout):
    got, want = runs["reshard"][layout]["next"], runs["save"][layout]["next"]
    assert got.keys() == want.keys()
    for name, value in want.items():
        torch.testing.assert_close(torch.from_numpy(got[name]), torch.from_numpy(value),
                                   rtol=RTOL, atol=ATOL, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("layout", _layouts())
def test_set_state_dict_broadcast_from_rank0(runs, layout):
    _assert_identical(runs["reshard"][layout]["broadcast"], runs["save"][layout]["saved"],
                      f"{layout}: full state broadcast from rank 0 vs saved")
