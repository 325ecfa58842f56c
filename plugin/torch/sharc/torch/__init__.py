"""Registers sharc as the torch.distributed backend "sharc" (CPU and CUDA tensors), so that

    import sharc.torch
    dist.init_process_group(backend="sharc")          # or "cpu:sharc,cuda:nccl"

runs existing scripts (FSDP FULL_SHARD / HYBRID_SHARD, DDP, tensor parallel) over sharc.
Each process group gets its rendezvous from the store torch hands it; sub-groups of the
default group share its endpoint. One backend object serves both devices; CUDA tensors follow
ProcessGroupNCCL's stream rules (a collective runs on the group's internal stream after the
work queued on the current stream; ``Work.wait()`` makes the current stream wait for it).
Also exports mesh helpers for hybrid sharding and tensor parallelism.
"""
import datetime
import os

import torch  # noqa: F401  loads libtorch before the extension
import torch.distributed as dist

from .. import _C
from .mesh import hybrid_shard_mesh, hybrid_shard_tp_mesh, ranks_per_node, tp_dp_mesh
from .parallelize import auto_tp_plan, parallelize
from .planner import model_spec, plan_fsdp

__all__ = ["hybrid_shard_mesh", "tp_dp_mesh", "hybrid_shard_tp_mesh", "ranks_per_node",
           "parallelize", "auto_tp_plan", "model_spec", "plan_fsdp", "BACKEND", "DEVICES"]

BACKEND = "sharc"
# The devices whose tensors the backend takes (torch maps both to one backend object).
DEVICES = ["cpu", "cuda"]


def _trace_dir_from_torch():
    """torch's Flight Recorder writes to TORCH_FR_DUMP_TEMP_FILE (a path prefix): sharc's
    flight records go to the same directory unless SHARC_TRACE_DIR says otherwise. Done at
    import, before sharc reads its configuration (once per process)."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if prefix and not os.environ.get("SHARC_TRACE_DIR"):
        os.environ["SHARC_TRACE_DIR"] = os.path.dirname(os.path.abspath(prefix))


_trace_dir_from_torch()


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _create_backend(dist_opts, backend_opts):  # noqa: ARG001  (no sharc-specific options yet)
    return _C._create_backend(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        _seconds(dist_opts.timeout),
        list(dist_opts.global_ranks_in_group),
    )


def _patch_set_pg_timeout():
    """torch before 2.12 has no Backend.set_timeout, and its _set_pg_timeout changes only
    Gloo and NCCL backends: there it also changes the group's sharc backends (as other
    vendors' backends patch it). From 2.12 _set_pg_timeout reaches every backend itself."""
    c10d = dist.distributed_c10d
    if hasattr(dist, "set_timeout") or getattr(c10d._set_pg_timeout, "_sharc", False):
        return
    original = c10d._set_pg_timeout

    def _set_pg_timeout(timeout, group=None):
        pg = group if group is not None else c10d._get_default_group()
        if c10d._rank_not_in_group(pg):
            raise ValueError("Invalid process group specified")
        sharc_backends, others = [], False
        for device in pg._device_types:
            try:
                b = pg._get_backend(device)
            except RuntimeError:
                continue
            if not isinstance(b, _C.ProcessGroupSharc):
                others = True
            elif all(b is not s for s in sharc_backends):
                sharc_backends.append(b)
        for b in sharc_backends:
            b._set_default_timeout(timeout)
        if others or not sharc_backends:  # e.g. "cpu:sharc,cuda:nccl": torch's sets NCCL's
            original(timeout, group)

    _set_pg_timeout._sharc = True
    c10d._set_pg_timeout = _set_pg_timeout


_patch_set_pg_timeout()

if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=DEVICES)
