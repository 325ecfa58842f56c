"""The planner behind ``hybrid_shard_degree="auto"`` (and ``tensor_parallel_degree="auto"``).

sharc's planner (``include/sharc/plan_fsdp.hpp``, the command line ``sharc-plan fsdp``) takes a
model's size and shape, the ranks per node and the memory of one rank's device, and ranks every
valid (hybrid_shard_degree, tensor_parallel_degree) by the communication time per step that the
tuner's cost model predicts, among those whose parameters, gradients, optimizer state, gathered
layer and activations fit. Here it runs on this host's links (the tuner's parameters: built-in
defaults, what the host reports, ``SHARC_TUNER_FILE``).
"""
import logging
import os

import torch
import torch.distributed as dist
from torch import nn

from .. import _C
from . import mesh as _mesh

_log = logging.getLogger("sharc.torch")

PLAN_OPTION_KEYS = ("seq_len", "micro_batch", "memory_bytes")


def model_spec(model, *, layers=None, seq_len=None, micro_batch=1, param_bytes=None) -> dict:
    """What the planner needs to know about ``model``, read off the module (and its Hugging
    Face ``config`` when it has one).

    Args:
        model: the module (unsharded).
        layers: its number of blocks (FSDP units); None counts the elements of its
            largest ``nn.ModuleList``.
        seq_len: tokens per sequence; None takes ``config.max_position_embeddings`` capped
            at 4096, else 2048.
        micro_batch: sequences per rank and step.
        param_bytes: bytes per element that collectives move; None: the parameters' own.
    """
    params = list(model.parameters())
    if not params:
        raise ValueError("model_spec: the model has no parameters")
    config = getattr(model, "config", None)
    if layers is None:
        lists = [len(m) for m in model.modules() if isinstance(m, nn.ModuleList)]
        layers = max(lists, default=1)
    hidden = getattr(config, "hidden_size", None) or max(
        (m.in_features for m in model.modules() if isinstance(m, nn.Linear)), default=1)
    if seq_len is None:
        seq_len = min(int(getattr(config, "max_position_embeddings", 0) or 2048), 4096)
    if param_bytes is None:
        param_bytes = params[0].element_size()
    return {
        "name": type(model).__name__,
        "parameters": float(sum(p.numel() for p in params)),
        "layers": int(layers),
        "hidden": int(hidden),
        "seq_len": int(seq_len),
        "micro_batch": int(micro_batch),
        "vocab": int(getattr(config, "vocab_size", 0) or 0),
        "param_bytes": float(param_bytes),
        "tied_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
    }


def device_memory_bytes(device_type, ranks_per_node) -> float:
    """Memory of one rank's device: the current CUDA device's, or on CPU this host's
    physical memory shared by its ranks."""
    if device_type == "cuda":
        return float(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / ranks_per_node


def plan_fsdp(spec, *, world_size, ranks_per_node, memory_bytes) -> list:
    """Every valid (hybrid_shard_degree, tensor_parallel_degree) for ``spec`` (from
    :func:`model_spec`) on ``world_size`` ranks, ``ranks_per_node`` per node, each with
    ``memory_bytes`` of device memory, ranked best first: dicts with the degrees, ``fits``,
    ``memory_bytes`` (and its parts), predicted ``comm_us`` per step (and its parts),
    ``inter_node_bytes_per_node`` and, for the first, ``reason``. Needs no process group."""
    world = _mesh._positive_int(world_size, "world_size")
    per_node = _mesh._positive_int(ranks_per_node, "ranks_per_node")
    if world % per_node != 0:
        raise ValueError(f"ranks_per_node={per_node} does not divide the world size {world}")
    return _C._plan_fsdp(spec["name"], spec["parameters"], spec["layers"], spec["hidden"],
                         spec["seq_len"], spec["micro_batch"], spec["vocab"],
                         spec["param_bytes"], spec.get("tied_embeddings", False),
                         world // per_node, per_node, float(memory_bytes))


def choose(spec, *, world, per_node, memory_bytes, tp_choices, shard_choices=None) -> dict:
    """The planner's best candidate whose tp degree is in ``tp_choices`` (and shard degree in
    ``shard_choices`` when given) and that fits; ValueError naming the smallest footprint
    when none fits."""
    ranked = plan_fsdp(spec, world_size=world, ranks_per_node=per_node,
                       memory_bytes=memory_bytes)
    allowed = [c for c in ranked if c["tensor_parallel_degree"] in tp_choices and (
        shard_choices is None or c["hybrid_shard_degree"] in shard_choices)]
    for c in allowed:
        if c["fits"]:
            return c
    if not allowed:
        raise ValueError(f"the planner found no (hybrid_shard_degree, tensor_parallel_degree) "
                         f"with tensor_parallel_degree in {sorted(tp_choices)} for "
                         f"{_mesh._layout_text(world, per_node)}")
    least = min(allowed, key=lambda c: c["memory_bytes"])
    raise ValueError(
        f"no hybrid_shard_degree fits {spec['name']} ({spec['parameters']:.3g} parameters) in "
        f"{memory_bytes / 2**30:.1f} GiB per rank on {_mesh._layout_text(world, per_node)}: "
        f"the smallest footprint is {least['memory_bytes'] / 2**30:.1f} GiB "
        f"(hybrid_shard_degree={least['hybrid_shard_degree']}, "
        f"tensor_parallel_degree={least['tensor_parallel_degree']}); use more ranks, "
        "or pass plan_options={'memory_bytes': ...} if the device has more")


def agreed_choice(spec, *, world, per_node, memory_bytes, tp_choices) -> dict:
    """:func:`choose` on rank 0, broadcast so that every rank builds the same mesh (each rank's
    device memory and tuner file could differ). A collective."""
    box = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = choose(spec, world=world, per_node=per_node, memory_bytes=memory_bytes,
                            tp_choices=tp_choices)
        except ValueError as e:
            box[0] = {"error": str(e)}
    dist.broadcast_object_list(box, src=0)
    choice = box[0]
    if "error" in choice:
        raise ValueError(f"hybrid_shard_degree=\"auto\" (planned on rank 0): {choice['error']}")
    if dist.get_rank() == 0:
        _log.info("sharc.torch: planned hybrid_shard_degree=%d tensor_parallel_degree=%d "
                  "(%s)", choice["hybrid_shard_degree"], choice["tensor_parallel_degree"],
                  choice["reason"])
    return choice


def plan_options(options) -> dict:
    """Checks ``plan_options`` (None or a dict with keys among PLAN_OPTION_KEYS)."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"plan_options must be a dict or None, got {type(options).__name__}")
    unknown = sorted(set(options) - set(PLAN_OPTION_KEYS))
    if unknown:
        raise ValueError(f"plan_options: unknown keys {unknown}; valid keys are "
                         f"{list(PLAN_OPTION_KEYS)}")
    return dict(options)
