"""Shared pieces of the FSDP2 and checkpoint tests: the models (the tiny transformer, and one
whose widths do not divide the world size), FSDP2 sharding of it on CPU meshes (1-D, HSDP,
FSDP2 + tensor/sequence parallel), gathering DTensors to numpy, and the one-process reference.

Everything here runs on CPU: meshes are made with init_device_mesh("cpu", ...) because the
default device type is the accelerator.
"""
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard  # noqa: F401
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)

from models import LAYERS, loss_fn, make_batches, make_model

# torch 2.6's FSDP2 cannot run on CPU at all: foreach_all_gather calls
# torch.cpu.Stream.record_event, which that release lacks (AttributeError).
FSDP2_ON_CPU = hasattr(torch.cpu.Stream, "record_event")
FSDP2_SKIP_REASON = (f"FSDP2 on CPU needs torch.cpu.Stream.record_event, missing in torch "
                     f"{torch.__version__} (FSDP2's foreach_all_gather raises AttributeError)")

LR = 0.1
MOMENTUM = 0.9
GLOBAL_BATCH = 8  # split over the data-parallel ranks

# Widths chosen so that FSDP2's dim-0 shards are uneven on 4 and 8 ranks: 30 rows
# (q/k/v/out, fc2, the norms) and 66 rows (embedding, head) leave a short last shard
# (and on 8 ranks 30 = 7 * 4 + 2).
UNEVEN = {"vocab": 66, "dim": 30, "heads": 3}


def opt_for(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def make_uneven_model(seed=0):
    """A TinyTransformer of width 30 and vocabulary 66, initialised like models.make_model
    (the data's token ids stay below 64, so the extra vocabulary rows only get gradients
    through the softmax)."""
    return make_model(seed=seed, **UNEVEN)


def build_model(uneven=False):
    return make_uneven_model(0) if uneven else make_model(seed=0)


def settle_before_destroy():
    """Lets the backends' worker threads drop finished work before the launcher destroys the
    groups (torch 2.6's ~ProcessGroupGloo can deadlock on the GIL otherwise; see
    test_training._settle_before_destroy)."""
    time.sleep(0.5)


# --------------------------------------------------------------------------------------------
# Sharding


def sequence_parallel_plan():
    """Megatron-style tensor parallelism with sequence parallelism between the blocks: the
    residual stream is sharded over the sequence (dim 1) on the "tp" ranks; the norms run
    sequence-parallel, q/k/v and fc1 column-wise (all-gather of the sequence in), out and fc2
    row-wise (reduce-scatter back to sequence shards), the head column-wise over the
    vocabulary with the logits gathered. The embeddings stay replicated over "tp" (FSDP2
    shards them over "dp"); the first block cuts its input into sequence shards."""
    plan = {
        "blocks.0": PrepareModuleInput(input_layouts=(Replicate(),),
                                       desired_input_layouts=(Shard(1),), use_local_output=True),
        "ln": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    for i in range(LAYERS):
        plan[f"blocks.{i}.ln1"] = SequenceParallel()
        plan[f"blocks.{i}.ln2"] = SequenceParallel()
        for name in ("attn.q", "attn.k", "attn.v", "mlp.fc1"):
            plan[f"blocks.{i}.{name}"] = ColwiseParallel(input_layouts=Shard(1))
        for name in ("attn.out", "mlp.fc2"):
            plan[f"blocks.{i}.{name}"] = RowwiseParallel(output_layouts=Shard(1))
    return plan


def fsdp_modules(model):
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def shard_model(model, rank, world_size, layout="fsdp", mp_policy=None):
    """Applies FSDP2 to `model` (each Block its own unit, then the root) on a CPU mesh and
    returns (model, dp_rank, dp_size): which slice of each global batch this rank trains on.
    model.mesh_backends names the backends of the mesh's groups.

    layout: "fsdp" -- 1-D mesh of all ranks; "hsdp" -- (replicate=2, shard=world/2);
    "fsdp_tp" -- (dp=world/2, tp=2): sequence_parallel_plan() on "tp", FSDP2 on "dp"."""
    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    if layout == "fsdp":
        mesh = init_device_mesh("cpu", (world_size,))
        dp_rank, dp_size = rank, world_size
    elif layout == "hsdp":
        mesh = init_device_mesh("cpu", (2, world_size // 2),
                                mesh_dim_names=("replicate", "shard"))
        dp_rank, dp_size = rank, world_size
    elif layout == "fsdp_tp":
        mesh2d = init_device_mesh("cpu", (world_size // 2, 2), mesh_dim_names=("dp", "tp"))
        model = parallelize_module(model, mesh2d["tp"], sequence_parallel_plan())
        model.mesh_backends = mesh_backends(mesh2d)
        mesh = mesh2d["dp"]
        dp_rank, dp_size = mesh.get_local_rank(), mesh.size()
    else:
        raise ValueError(f"unknown layout {layout!r}")
    for block in model.blocks:
        fully_shard(block, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    if not hasattr(model, "mesh_backends"):
        model.mesh_backends = mesh_backends(mesh)
    return model, dp_rank, dp_size


def mesh_backends(mesh):
    """The backend names of a mesh's process groups (to show the run did not fall back to
    another backend for the sub-groups)."""
    return sorted({dist.get_backend(g) for g in mesh.get_all_groups()})


def batch_slice(dp_rank, dp_size, global_batch=GLOBAL_BATCH):
    per_rank = global_batch // dp_size
    return slice(dp_rank * per_rank, (dp_rank + 1) * per_rank)


# --------------------------------------------------------------------------------------------
# Gathering


def full(t):
    """The whole tensor (DTensors gathered over every mesh dimension: a collective)."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def to_numpy(t):
    """float32 numpy copy (numpy has no bfloat16)."""
    t = t.detach().cpu()
    return (t.float() if t.is_floating_point() else t).clone().numpy()


def full_params(model):
    """{name: numpy} of the whole parameters (every rank must call it)."""
    return {n: to_numpy(full(p)) for n, p in model.named_parameters()}


def full_grads(model):
    """{name: numpy} of the whole gradients (every rank must call it)."""
    return {n: to_numpy(full(p.grad)) for n, p in model.named_parameters()}


# --------------------------------------------------------------------------------------------
# One-process reference


def reference_training(steps, uneven=False, grad_scale=1.0):
    """One-process float32 training on the whole batches: SGD with momentum on the
    gradients of the mean loss times `grad_scale` (what a custom gradient divide factor does).
    Returns {"logits": per step, "grads": last step's gradients (scaled), "params": final}."""
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        model = build_model(uneven)
        opt = opt_for(model.parameters())
        logits_per_step = []
        grads = None
        for inputs, targets in make_batches(steps, GLOBAL_BATCH):
            opt.zero_grad(set_to_none=True)
            logits = model(inputs)
            loss_fn(logits, targets).backward()
            if grad_scale != 1.0:
                for p in model.parameters():
                    p.grad.mul_(grad_scale)
            grads = {n: to_numpy(p.grad) for n, p in model.named_parameters()}
            opt.step()
            logits_per_step.append(logits.detach())
        params = {n: to_numpy(p) for n, p in model.named_parameters()}
        return {"logits": logits_per_step, "grads": grads, "params": params}
    finally:
        torch.use_deterministic_algorithms(was_deterministic)


def reference_slice_losses(ref, steps, dp_rank, dp_size):
    """The loss each data-parallel rank should see at each step: the reference logits of its
    slice of the batch."""
    part = batch_slice(dp_rank, dp_size)
    return [loss_fn(logits[part], targets[part]).item()
            for logits, (_, targets) in zip(ref["logits"], make_batches(steps, GLOBAL_BATCH))]


def assert_arrays_close(got, want, rtol, atol, what):
    """Same keys; every array close to rtol/atol (messages name the tensor)."""
    assert got.keys() == want.keys(), f"{what}: names differ: {sorted(got)} vs {sorted(want)}"
    for name, value in want.items():
        assert got[name].shape == value.shape, f"{what}: {name} shape {got[name].shape}"
        torch.testing.assert_close(
            torch.from_numpy(np.asarray(got[name])), torch.from_numpy(np.asarray(value)),
            rtol=rtol, atol=atol, msg=lambda m, name=name: f"{what}: {name}: {m}")
