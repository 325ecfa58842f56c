"""Hybrid sharding plus tensor parallelism in one call, in the spirit of SageMaker model
parallel v2's ``hybrid_shard_degree`` / ``tensor_parallel_degree``::

    import torch.distributed as dist
    import sharc.torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dist.init_process_group("sharc")          # e.g. 16 ranks: 2 nodes of 8
    model = LlamaForCausalLM(LlamaConfig(...))
    model, mesh = sharc.torch.parallelize(model, hybrid_shard_degree=4,
                                          tensor_parallel_degree=2)
    # mesh: ("replicate", "shard", "tp") = (2, 4, 2). Each rank feeds its data-parallel
    # slice: dp_rank = dist.get_rank() // 2 of dp_size = 16 // 2 data-parallel groups.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ...                                       # the training loop is unchanged

What :func:`parallelize` does, in this order:

1. builds one node-aligned mesh with :func:`sharc.torch.mesh.hybrid_shard_tp_mesh`:
   ``tp`` innermost (consecutive ranks on one node), ``shard`` next, ``replicate``
   outermost; size-1 ``replicate`` and ``tp`` dimensions are left out;
2. if ``tensor_parallel_degree > 1``, applies ``parallelize_module`` over ``mesh["tp"]``
   with a Megatron-style plan (see :func:`auto_tp_plan`) or the plan given;
3. applies FSDP2 ``fully_shard`` to every transformer block and then to the root, over the
   ``("replicate", "shard")`` part of the mesh (HSDP when ``replicate > 1``).

Attention under tensor parallelism: a rank holds ``heads / tensor_parallel_degree`` heads, so
the attention's forward must take its head count from the width of its local projections.
Hugging Face transformers 5.x does (``view(*input_shape, -1, head_dim)`` in 5.24's
LlamaAttention); 4.x versions such as 4.47 kept ``num_heads`` / ``num_key_value_heads`` (and
``hidden_size``) on the attention module and checked shapes against them, so those attributes
are divided by the degree here, as torchtitan did for its own model (with 4.47.1, eager
attention fails under TP without it and trains like one process with it). A forward that
reads head counts from ``model.config`` does not work under TP.
"""
import fnmatch
import re
import types

import torch
import torch.nn as nn

from . import mesh as _mesh
from . import planner as _planner

__all__ = ["parallelize", "auto_tp_plan", "fsdp2_runs_on_cpu"]

# Layer names of Llama-style models (Llama, Mistral, Qwen2, Gemma, ...): q/k/v and the MLP's
# gate/up projections split their outputs, o_proj and down_proj their inputs, so that each
# attention and each MLP costs one all-reduce in forward and one in backward.
COLWISE_NAMES = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROWWISE_NAMES = ("o_proj", "down_proj")
EMBEDDING_NAMES = ("embed_tokens",)
OUTPUT_NAMES = ("lm_head",)
# Head counts older attention modules keep as attributes (divided by the tp degree).
_HEAD_ATTRS = ("num_heads", "num_key_value_heads")


def _torch_apis():
    """DTensor, TP and FSDP2, imported on first use: torch.distributed.tensor pulls in sympy,
    ~0.6 s that every `import sharc.torch` (every rank of every launch) would pay otherwise."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        ParallelStyle,
        RowwiseParallel,
        parallelize_module,
    )

    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch < 2.6 kept FSDP2 private
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return types.SimpleNamespace(
        Replicate=Replicate, ColwiseParallel=ColwiseParallel, ParallelStyle=ParallelStyle,
        RowwiseParallel=RowwiseParallel, parallelize_module=parallelize_module,
        MixedPrecisionPolicy=MixedPrecisionPolicy, fully_shard=fully_shard)


def auto_tp_plan(model):
    """The tensor-parallel plan :func:`parallelize` uses for ``tp_plan="auto"``.

    By layer name: ``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj``, ``up_proj``
    (``nn.Linear``) column-wise; ``o_proj``, ``down_proj`` row-wise; ``embed_tokens``
    (``nn.Embedding``) split over the vocabulary with replicated input and output
    (``RowwiseParallel(input_layouts=Replicate())``); ``lm_head`` column-wise with its logits
    gathered (``output_layouts=Replicate()``), so the loss is computed as without TP. Tied input
    and output embeddings are left replicated (one parameter cannot take both layouts).

    Returns:
        ``{module FQN: ParallelStyle}``, to pass to ``parallelize_module`` (or to edit and pass
        as ``tp_plan``).
    """
    api = _torch_apis()
    modules = dict(model.named_modules())
    tied = _tied_embedding_names(modules)
    plan = {}
    for fqn, module in modules.items():
        leaf = fqn.rsplit(".", 1)[-1]
        if isinstance(module, nn.Linear) and leaf in COLWISE_NAMES:
            plan[fqn] = api.ColwiseParallel()
        elif isinstance(module, nn.Linear) and leaf in ROWWISE_NAMES:
            plan[fqn] = api.RowwiseParallel()
        elif isinstance(module, nn.Embedding) and leaf in EMBEDDING_NAMES and fqn not in tied:
            plan[fqn] = api.RowwiseParallel(input_layouts=api.Replicate())
        elif isinstance(module, nn.Linear) and leaf in OUTPUT_NAMES and fqn not in tied:
            plan[fqn] = api.ColwiseParallel(output_layouts=api.Replicate())
    return plan


def _tied_embedding_names(modules):
    """FQNs of embedding / output modules whose weight is shared with another module."""
    owners = {}
    for fqn, module in modules.items():
        if fqn.rsplit(".", 1)[-1] in EMBEDDING_NAMES + OUTPUT_NAMES:
            weight = getattr(module, "weight", None)
            if weight is not None:
                owners.setdefault(id(weight), []).append(fqn)
    return {fqn for fqns in owners.values() if len(fqns) > 1 for fqn in fqns}


def _resolve_plan(model, plan):
    """[(fqn, module, style)] for every module a plan key matches, the way parallelize_module
    matches them (one fnmatch pattern per dotted path element)."""
    modules = dict(model.named_modules())
    out = []
    for key, style in plan.items():
        atoms = key.split(".")
        for fqn, module in modules.items():
            parts = fqn.split(".") if fqn else []
            if len(parts) == len(atoms) and all(
                    fnmatch.fnmatchcase(p, a) for p, a in zip(parts, atoms)):
                out.append((fqn, module, style))
    return out


def _split_sizes(model, resolved):
    """[(description, size)]: the sizes the plan splits, which the tp degree must divide. A
    projection inside an attention module that has ``head_dim`` is counted in heads (a rank
    must hold whole heads); other layers in features."""
    api = _torch_apis()
    modules = dict(model.named_modules())
    out = []
    for fqn, module, style in resolved:
        if isinstance(module, nn.Linear):
            colwise = isinstance(style, api.ColwiseParallel)
            size = module.out_features if colwise else module.in_features
            what = "out_features" if colwise else "in_features"
        elif isinstance(module, nn.Embedding):
            rowwise = isinstance(style, api.RowwiseParallel)
            size = module.num_embeddings if rowwise else module.embedding_dim
            what = "num_embeddings" if rowwise else "embedding_dim"
        else:
            continue
        parent = modules.get(fqn.rsplit(".", 1)[0] if "." in fqn else "")
        head_dim = getattr(parent, "head_dim", None)
        if (isinstance(module, nn.Linear) and isinstance(head_dim, int) and head_dim > 0
                and size % head_dim == 0):
            out.append((f"{fqn} ({size // head_dim} heads of dimension {head_dim})",
                        size // head_dim))
        else:
            out.append((f"{fqn} ({what}={size})", size))
    return out


def _check_tp_degree(tp, world, per_node, sizes):
    """Raises ValueError listing the tp degrees that fit both the nodes and the model."""
    def model_reason(d):
        # One entry per layer name, not per layer: model.layers.*.self_attn.q_proj.
        bad = list(dict.fromkeys(re.sub(r"\.\d+\.", ".*.", what)
                                 for what, size in sizes if size % d != 0))
        if not bad:
            return None
        verb = "does" if len(bad) == 1 else "do"
        return f"{', '.join(bad)} {verb} not split into {d} equal parts"

    valid = [d for d in _mesh._divisors(per_node)
             if model_reason(d) is None]
    why = _mesh._tp_node_reason(tp, per_node) or model_reason(tp)
    if why is not None:
        raise ValueError(
            f"tensor_parallel_degree={tp} does not fit the model on "
            f"{_mesh._layout_text(world, per_node)}: {why}; "
            f"valid tensor_parallel_degree values are {valid}"
        )


def _find_blocks(model, blocks):
    """The modules that get their own FSDP unit: ``blocks`` if given (modules or module
    classes), else the classes Hugging Face names in ``_no_split_modules`` (its transformer
    blocks), else the elements of the outermost ``nn.ModuleList``s."""
    if blocks is not None:
        if isinstance(blocks, type) or (isinstance(blocks, tuple)
                                        and all(isinstance(b, type) for b in blocks)):
            found = [m for m in model.modules() if isinstance(m, blocks)]
        else:
            found = list(blocks)
            for b in found:
                if not isinstance(b, nn.Module):
                    raise TypeError(f"blocks must be modules or module classes, got {b!r}")
        if not found:
            raise ValueError(f"no module of the model matches blocks={blocks!r}")
        return found
    names = set(getattr(model, "_no_split_modules", None) or ())
    if names:
        found = [m for m in model.modules() if type(m).__name__ in names]
        if found:
            return found
    found, inside = [], set()
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and id(m) not in inside:
            found.extend(m)
            inside.update(id(x) for x in m.modules())
    if not found:
        raise ValueError(
            "found no transformer blocks to shard one by one (no _no_split_modules, no "
            "nn.ModuleList); pass blocks=[...] (modules or module classes)"
        )
    return found


def fsdp2_runs_on_cpu():
    """Whether this torch's FSDP2 can shard CPU tensors: torch 2.6's calls
    ``record_event`` on the CPU stream stub, which it lacks (added by 2.8)."""
    return hasattr(torch.cpu.Stream, "record_event")


def _device_type(model, device):
    if device is not None:
        return device if isinstance(device, str) else device.type
    for p in model.parameters():
        return "cuda" if p.device.type == "cuda" else "cpu"
    return "cpu"


def parallelize(model, *, hybrid_shard_degree, tensor_parallel_degree=1, mixed_precision=None,
                tp_plan="auto", device=None, ranks_per_node=None, blocks=None,
                reshard_after_forward=True, plan_options=None):
    """Shards ``model`` with FSDP2 over ``hybrid_shard_degree`` ranks (replicated across the
    rest) and splits its layers over ``tensor_parallel_degree`` ranks; returns
    ``(model, mesh)``.

    ``world_size = replicate * hybrid_shard_degree * tensor_parallel_degree``. Tensor-parallel
    groups are consecutive ranks on one node; a shard group with its tensor-parallel peers
    (``hybrid_shard_degree * tensor_parallel_degree`` consecutive ranks) lies inside a node or
    is made of whole nodes. Gradients are averaged over the ``replicate * hybrid_shard_degree``
    data-parallel ranks, so each must be fed a different slice of the batch, e.g.::

        tp = 2
        model, mesh = parallelize(model, hybrid_shard_degree=2, tensor_parallel_degree=tp)
        dp_rank, dp_size = dist.get_rank() // tp, dist.get_world_size() // tp
        for batch in loader:                      # the same global batch on every rank
            n = len(batch) // dp_size
            part = batch[dp_rank * n:(dp_rank + 1) * n]
            model(input_ids=part, labels=part).loss.backward()
            opt.step()
            opt.zero_grad()

    Parameters become DTensors (sharded over ``shard``, and over ``tp`` for the split layers);
    ``p.full_tensor()`` gathers one. ``torch.distributed`` must be initialised (any backend;
    ``"sharc"`` after ``import sharc.torch``). This is a collective: every rank calls it with
    the same arguments and an identical model.

    Args:
        model: the module, on ``device`` (its parameters are moved there otherwise).
        hybrid_shard_degree: ranks a parameter is sharded over (an int), or ``"auto"``: sharc's
            planner (:mod:`sharc.torch.planner`, the model of ``sharc-plan fsdp``) picks the
            degree with the least predicted communication per step among those whose
            memory per rank fits, on rank 0, for every rank.
        tensor_parallel_degree: ranks a layer is split over; must divide the ranks per node
            and every size the plan splits (head counts, MLP width, vocabulary). ``"auto"``
            (only with ``hybrid_shard_degree="auto"``) lets the planner pick it too, among
            the degrees that fit the nodes and the model.
        mixed_precision: a ``torch.distributed.fsdp.MixedPrecisionPolicy``, or None (FSDP2's
            default: compute in the parameters' dtype).
        tp_plan: ``"auto"`` (:func:`auto_tp_plan`) or ``{module FQN or fnmatch pattern:
            ParallelStyle}`` as ``parallelize_module`` takes it. Unused when
            ``tensor_parallel_degree == 1``.
        device: the mesh's device type (``"cpu"``, ``"cuda"``); None infers it from the
            model's parameters.
        ranks_per_node: the ranks each node runs; None detects it
            (:func:`sharc.torch.mesh.ranks_per_node`).
        blocks: the modules that get their own FSDP unit (modules, or a module class / tuple
            of classes); None: Hugging Face's ``_no_split_modules`` classes, else the elements
            of the outermost ``nn.ModuleList``s.
        reshard_after_forward: passed to ``fully_shard`` for the blocks (the root keeps its
            parameters gathered between forward and backward, as FSDP2 does by default).
        plan_options: for ``"auto"``, a dict overriding what the planner is told:
            ``seq_len`` (tokens per sequence; default the config's
            ``max_position_embeddings`` capped at 4096), ``micro_batch`` (sequences per rank
            and step, default 1), ``memory_bytes`` (of one rank's device; default the CUDA
            device's, or on CPU the host's memory divided by its ranks).

    Returns:
        ``(model, mesh)``: the same module object, now FSDP2 (and TP) sharded, and the
        DeviceMesh from :func:`sharc.torch.mesh.hybrid_shard_tp_mesh`; its dimensions are
        ``("replicate", "shard", "tp")`` less those of size 1 other than ``"shard"``.

    Raises:
        ValueError: a degree that does not fit the world size, the nodes or the model (the
            message lists the values that do); no blocks found; ``"auto"`` and no degree
            fits the memory (the message names the smallest footprint).
        TypeError: a degree that is not an int, a bad ``tp_plan`` or ``mixed_precision``.
        RuntimeError: torch.distributed not initialised; CPU tensors on a torch whose FSDP2
            cannot shard them (2.6; see :func:`fsdp2_runs_on_cpu`).
    """
    _mesh._require_initialized("parallelize()")
    api = _torch_apis()
    auto_shard = isinstance(hybrid_shard_degree, str) and hybrid_shard_degree == "auto"
    if not auto_shard:
        hybrid_shard_degree = _mesh._positive_int(hybrid_shard_degree, "hybrid_shard_degree")
    auto_tp = isinstance(tensor_parallel_degree, str) and tensor_parallel_degree == "auto"
    if auto_tp and not auto_shard:
        raise ValueError('tensor_parallel_degree="auto" needs hybrid_shard_degree="auto" (the '
                         "planner picks both), got hybrid_shard_degree="
                         f"{hybrid_shard_degree}")
    tp = 0 if auto_tp else _mesh._positive_int(tensor_parallel_degree, "tensor_parallel_degree")
    options = _planner.plan_options(plan_options)
    if mixed_precision is None:
        mixed_precision = api.MixedPrecisionPolicy()
    elif not isinstance(mixed_precision, api.MixedPrecisionPolicy):
        raise TypeError("mixed_precision must be a torch.distributed.fsdp.MixedPrecisionPolicy "
                        f"or None, got {type(mixed_precision).__name__}")
    if isinstance(tp_plan, str):
        if tp_plan != "auto":
            raise ValueError(f'tp_plan must be "auto" or a dict, got {tp_plan!r}')
        plan = auto_tp_plan(model) if tp != 1 else {}
    elif isinstance(tp_plan, dict):
        for key, style in tp_plan.items():
            if not isinstance(key, str) or not isinstance(style, api.ParallelStyle):
                raise TypeError("tp_plan must map module names (str) to ParallelStyle "
                                f"objects, got {key!r}: {style!r}")
        plan = dict(tp_plan)
    else:
        raise TypeError(f'tp_plan must be "auto" or a dict, got {type(tp_plan).__name__}')
    resolved = _resolve_plan(model, plan) if tp != 1 else []
    if tp > 1 and not resolved:
        raise ValueError(
            "tensor_parallel_degree > 1 but the tensor-parallel plan matches no module of "
            f"the model (the automatic plan looks for {COLWISE_NAMES + ROWWISE_NAMES} "
            "nn.Linear layers); pass tp_plan={module name: ParallelStyle}"
        )

    block_modules = _find_blocks(model, blocks)  # before any collective: a bad `blocks` is local

    # The layout is a collective; later checks use the value, so they need no more traffic.
    world, per_node = _mesh._layout(ranks_per_node)
    sizes = _split_sizes(model, resolved)
    if auto_tp:
        tp_choices = [d for d in _mesh._divisors(per_node)
                      if d == 1 or (resolved and _tp_fits(d, world, per_node, sizes))]
    else:
        _check_tp_degree(tp, world, per_node, sizes)
        tp_choices = [tp]
    if auto_shard:
        spec = _planner.model_spec(
            model, layers=len(block_modules), seq_len=options.get("seq_len"),
            micro_batch=options.get("micro_batch", 1),
            param_bytes=_param_bytes(mixed_precision))
        memory = options.get("memory_bytes") or _planner.device_memory_bytes(
            _device_type(model, device), per_node)
        choice = _planner.agreed_choice(spec, world=world, per_node=per_node,
                                        memory_bytes=memory, tp_choices=tp_choices)
        hybrid_shard_degree = choice["hybrid_shard_degree"]
        tp = choice["tensor_parallel_degree"]
        if tp == 1:
            plan, resolved = {}, []
    # Checked here too (hybrid_shard_tp_mesh checks again): bad degrees come before the CPU
    # check below, so their message names the valid values on any torch.
    _mesh._check_shard_degree(hybrid_shard_degree, world, per_node, name="hybrid_shard_degree",
                              valid_name="valid hybrid_shard_degree values are", tp_degree=tp)
    device_type = _device_type(model, device)
    if device_type == "cpu" and not fsdp2_runs_on_cpu():
        raise RuntimeError(
            f"parallelize() on CPU: FSDP2 (fully_shard) in torch {torch.__version__} cannot "
            "run on CPU tensors (its CPU stream stub has no record_event); use torch >= 2.8 "
            "or CUDA tensors"
        )
    mesh = _mesh.hybrid_shard_tp_mesh(hybrid_shard_degree, tp, device_type=device_type,
                                      ranks_per_node=per_node)

    if tp > 1:
        api.parallelize_module(model, mesh["tp"], plan)
        _localize_head_counts(model, resolved, tp)

    dp_dims = tuple(n for n in mesh.mesh_dim_names if n in ("replicate", "shard"))
    dp_mesh = mesh[dp_dims] if len(dp_dims) > 1 else mesh[dp_dims[0]]
    for block in block_modules:  # parallelize_module kept the module objects
        api.fully_shard(block, mesh=dp_mesh, mp_policy=mixed_precision,
                        reshard_after_forward=reshard_after_forward)
    api.fully_shard(model, mesh=dp_mesh, mp_policy=mixed_precision)
    return model, mesh


def _tp_fits(tp, world, per_node, sizes):
    try:
        _check_tp_degree(tp, world, per_node, sizes)
        return True
    except ValueError:
        return False


def _param_bytes(mixed_precision):
    """Bytes per element FSDP's collectives move: the policy's param_dtype, else None (the
    parameters' own)."""
    dtype = getattr(mixed_precision, "param_dtype", None)
    return torch.empty((), dtype=dtype).element_size() if dtype is not None else None


def _localize_head_counts(model, resolved, tp):
    """Divides the head counts that attention modules of older Hugging Face versions keep as
    attributes (and use to reshape) by the tp degree: after the column-wise split, each rank
    computes ``heads / tp`` heads. ``hidden_size`` on such a module (the attention output
    width) is divided too. Modules whose forward infers the count (-1) have none of these."""
    api = _torch_apis()
    modules = dict(model.named_modules())
    done = set()
    for fqn, _, style in resolved:
        if not isinstance(style, api.ColwiseParallel) or "." not in fqn:
            continue
        parent = modules[fqn.rsplit(".", 1)[0]]
        if id(parent) in done or not any(isinstance(getattr(parent, a, None), int)
                                         for a in _HEAD_ATTRS):
            continue
        done.add(id(parent))
        for attr in _HEAD_ATTRS + ("hidden_size",):
            value = getattr(parent, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(parent, attr, value // tp)
