"""FSDP2 (`fully_shard`) training over sharc on CPU, checked against the same training over gloo
and against one-process training of the same model on the same data.

Configurations (each builds its own model and mesh; all of them run in one launch per world
size and backend: 4 ranks over gloo and over sharc; on 8 ranks, to keep the file's time on
2 cores down, fsdp, hsdp and uneven over sharc against the one-process reference only):
  fsdp           -- fully_shard per block + root on a 1-D mesh: all-gather + reduce-scatter
                    with ReduceOp.AVG (FSDP2's default for float32);
  hsdp           -- 2-D (replicate, shard) mesh: reduce-scatter in a shard group, all-reduce
                    (AVG) across the replicate group;
  fsdp_tp        -- (dp, tp) mesh: tensor + sequence parallel on "tp" (all-gather,
                    reduce-scatter, all-reduce of DTensors), FSDP2 on "dp";
  bf16           -- MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32);
  divide_factor  -- set_gradient_divide_factor(2 * world) (where torch lacks it, the older
                    set_reduce_scatter_divide_factor): ReduceOp.PREMUL_SUM(1 / (2 * world)),
                    so the gradients are half the mean;
  force_sum      -- set_force_sum_reduction_for_comms(True): SUM then a separate divide;
  uneven         -- widths 30 and 66, not divisible by the world size: padded uneven shards.

Per-step losses of every rank, the last step's full gradients (gathered before the optimizer
step) and the final full parameters are compared. The one-process reference is what proves
correctness: FSDP2 asks for ReduceOp.AVG, which gloo in older torch silently summed
(pytorch/pytorch#162338), so agreeing with gloo alone is not enough.

Tolerances: against gloo, float32 rounding of a different summation order (a few ulps, grown
over the steps); against one process, gradient sums in a different order and grouping, as in
test_training.py. bf16 against one-process float32 training: bf16 has an 8-bit mantissa
(relative rounding 2^-9 = 0.002 per operation), so logits, gradients and the parameters
after a few steps differ by up to a few percent of their size.
"""
import functools

import pytest
import torch

from fsdp2_support import (FSDP2_ON_CPU, FSDP2_SKIP_REASON, GLOBAL_BATCH, FSDPModule,
                           MixedPrecisionPolicy, assert_arrays_close, batch_slice, build_model,
                           fsdp_modules, full_grads, full_params, opt_for,
                           reference_slice_losses, reference_training, settle_before_destroy,
                           shard_model)
from launcher import run_ranks
from models import loss_fn, make_batches

WORLDS = [4, 8]
GLOO_WORLDS = [4]  # gloo at 8 ranks adds a launch; the one-process reference decides there
CONFIGS_8 = ["fsdp", "hsdp", "uneven"]  # larger groups, and shards of 4,...,4,2 rows
STEPS = 4

pytestmark = pytest.mark.skipif(not FSDP2_ON_CPU, reason=FSDP2_SKIP_REASON)

CONFIGS = {
    "fsdp": {"layout": "fsdp"},
    "hsdp": {"layout": "hsdp"},
    "fsdp_tp": {"layout": "fsdp_tp"},
    "bf16": {"layout": "fsdp", "bf16": True},
    "divide_factor": {"layout": "fsdp", "divide": True},
    "force_sum": {"layout": "fsdp", "force_sum": True},
    "uneven": {"layout": "fsdp", "uneven": True},
}

# What this torch can run (skipped with the reason otherwise).
_DIVIDE_METHOD = ("set_gradient_divide_factor" if hasattr(FSDPModule, "set_gradient_divide_factor")
                  else "set_reduce_scatter_divide_factor")
_UNSUPPORTED = {}
if not hasattr(FSDPModule, "set_force_sum_reduction_for_comms"):
    _UNSUPPORTED["force_sum"] = (f"torch {torch.__version__} has no FSDPModule."
                                 "set_force_sum_reduction_for_comms (pytorch/pytorch#155915)")
RUNNABLE = [c for c in CONFIGS if c not in _UNSUPPORTED]
# gloo cannot do the divide factor's reduce op, so that configuration has only the
# one-process reference.
_GLOO_UNSUPPORTED = {"divide_factor": "gloo has no ReduceOp.PREMUL_SUM "
                                      "(\"Cannot use ReduceOp.PREMUL_SUM with Gloo\")"}

# sharc vs gloo (same algorithm, different summation order).
RTOL, ATOL = 1e-5, 1e-6
# vs one process (float32), as in test_training.py.
REF_RTOL, REF_ATOL = 1e-4, 1e-5
# bf16 compute vs gloo with the same policy: the bf16 casts of parameters that differ by an
# ulp of float32 can round to neighbouring bf16 values, which the next steps carry on.
BF16_RTOL, BF16_ATOL = 1e-3, 1e-4
# bf16 compute vs one-process float32 training (see the module docstring).
# Measured on 4 and 8 ranks: losses within 0.046, gradients and parameters within 1e-3
# absolute (a 4x gradient from a summed AVG would be far outside).
BF16_REF_RTOL, BF16_REF_ATOL = 2e-2, 5e-3


def _tolerances(config, against_reference):
    if CONFIGS[config].get("bf16"):
        return (BF16_REF_RTOL, BF16_REF_ATOL) if against_reference else (BF16_RTOL, BF16_ATOL)
    return (REF_RTOL, REF_ATOL) if against_reference else (RTOL, ATOL)


def _grad_scale(config):
    """Gradients relative to the mean: divide factor 2 * world on a sum over world ranks."""
    return 0.5 if CONFIGS[config].get("divide") else 1.0


def _train(rank, world_size, config, steps):
    """One rank of one configuration: its per-step losses; on rank 0 also the last step's
    full gradients and the final full parameters (gathered on every rank)."""
    spec = CONFIGS[config]
    mp_policy = None
    if spec.get("bf16"):
        mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model, dp_rank, dp_size = shard_model(build_model(spec.get("uneven", False)), rank,
                                          world_size, spec["layout"], mp_policy)
    for module in fsdp_modules(model):
        if spec.get("divide"):
            getattr(module, _DIVIDE_METHOD)(2.0 * world_size)
        if spec.get("force_sum"):
            module.set_force_sum_reduction_for_comms(True)
    opt = opt_for(model.parameters())
    part = batch_slice(dp_rank, dp_size)
    losses = []
    grads = None
    for step, (inputs, targets) in enumerate(make_batches(steps, GLOBAL_BATCH)):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs[part]), targets[part])
        loss.backward()
        if step == steps - 1:
            grads = full_grads(model)  # a collective: every rank gathers
        opt.step()
        losses.append(loss.float().item())
    params = full_params(model)
    out = {"losses": losses, "dp_rank": dp_rank, "dp_size": dp_size,
           "backends": model.mesh_backends}
    if rank == 0:
        out.update(grads=grads, params=params)
    return out


def _train_all(rank, world_size, configs, steps):
    torch.use_deterministic_algorithms(True)
    out = {c: _train(rank, world_size, c, steps) for c in configs}
    settle_before_destroy()
    return out


_LAUNCHES = {}


def _configs_for(world_size):
    return [c for c in RUNNABLE if world_size == 4 or c in CONFIGS_8]


def _runs(backend, world_size):
    """All runnable configurations on `world_size` ranks of `backend`, in one launch:
    {config: [result of each rank]}. A failed launch is remembered (its error reported by
    every test that needs it, not relaunched)."""
    if backend == "sharc":
        pytest.importorskip("sharc.torch", reason="sharc.torch is not installed")
    key = (backend, world_size)
    if key not in _LAUNCHES:
        configs = [c for c in _configs_for(world_size)
                   if backend != "gloo" or c not in _GLOO_UNSUPPORTED]
        try:
            runs = run_ranks(world_size, _train_all, tuple(configs), STEPS, backend=backend)
            _LAUNCHES[key] = {c: [r[c] for r in runs] for c in configs}
        except Exception as e:  # noqa: BLE001
            _LAUNCHES[key] = e
    if isinstance(_LAUNCHES[key], Exception):
        raise _LAUNCHES[key]
    return _LAUNCHES[key]


@functools.lru_cache(maxsize=None)
def _reference(uneven, grad_scale):
    return reference_training(STEPS, uneven=uneven, grad_scale=grad_scale)


def _check_against_reference(results, config, backend):
    spec = CONFIGS[config]
    for rank, res in enumerate(results):  # every mesh group ran on the backend under test
        assert res["backends"] == [backend], f"{config}: rank {rank} used {res['backends']}"
    ref = _reference(spec.get("uneven", False), _grad_scale(config))
    rtol, atol = _tolerances(config, against_reference=True)
    for rank, res in enumerate(results):
        want = reference_slice_losses(ref, STEPS, res["dp_rank"], res["dp_size"])
        torch.testing.assert_close(
            res["losses"], want, rtol=rtol, atol=atol,
            msg=lambda m, rank=rank: f"{config}: rank {rank} losses vs one process: {m}")
    assert_arrays_close(results[0]["grads"], ref["grads"], rtol, atol,
                        f"{config}: last step's gradients vs one process")
    assert_arrays_close(results[0]["params"], ref["params"], rtol, atol,
                        f"{config}: final parameters vs one process")
    # It trains: the loss of rank 0's slice went down.
    assert results[0]["losses"][-1] < results[0]["losses"][0], config


def _params(with_gloo):
    """(world, config) pairs; those this torch (or gloo, where the test needs it) cannot run
    are skipped with the reason."""
    out = []
    for w in (GLOO_WORLDS if with_gloo else WORLDS):
        for c in (CONFIGS if w == 4 else CONFIGS_8):
            reason = _UNSUPPORTED.get(c) or (with_gloo and _GLOO_UNSUPPORTED.get(c))
            out.append(pytest.param(w, c, id=f"{w}ranks-{c}",
                                    marks=[pytest.mark.skip(reason=reason)] if reason else []))
    return out


@pytest.mark.parametrize("world_size,config", _params(with_gloo=True))
def test_gloo_matches_one_process(world_size, config):
    """The baseline is right: gloo's FSDP2 run equals one-process training."""
    _check_against_reference(_runs("gloo", world_size)[config], config, "gloo")


@pytest.mark.parametrize("world_size,config", _params(with_gloo=False))
def test_sharc_matches_one_process(world_size, config):
    """sharc's FSDP2 run equals one-process training: losses of every rank's slice, the last
    step's gradients, the final parameters."""
    _check_against_reference(_runs("sharc", world_size)[config], config, "sharc")


@pytest.mark.parametrize("world_size,config", _params(with_gloo=True))
def test_sharc_matches_gloo(world_size, config):
    """sharc and gloo agree closely (same algorithm, summation order aside)."""
    got = _runs("sharc", world_size)[config]
    want = _runs("gloo", world_size)[config]
    rtol, atol = _tolerances(config, against_reference=False)
    for rank, (g, w) in enumerate(zip(got, want)):
        assert (g["dp_rank"], g["dp_size"]) == (w["dp_rank"], w["dp_size"])
        torch.testing.assert_close(
            g["losses"], w["losses"], rtol=rtol, atol=atol,
            msg=lambda m, rank=rank: f"{config}: rank {rank} losses, sharc vs gloo: {m}")
    assert_arrays_close(got[0]["grads"], want[0]["grads"], rtol, atol,
                        f"{config}: last step's gradients, sharc vs gloo")
    assert_arrays_close(got[0]["params"], want[0]["params"], rtol, atol,
                        f"{config}: final parameters, sharc vs gloo")
