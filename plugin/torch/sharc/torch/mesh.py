"""Device meshes for hybrid sharding and tensor parallelism, checked against the node layout.

Both helpers build a 2-D :class:`~torch.distributed.device_mesh.DeviceMesh` whose inner
(fastest-varying) dimension holds consecutive ranks, so with the usual launch order (the ranks
of one node are consecutive: node ``n`` holds ranks ``n * R .. n * R + R - 1``) that dimension
stays inside a node when its size divides the ranks per node ``R``:

* :func:`hybrid_shard_mesh` -- the ``("replicate", "shard")`` mesh that FSDP's
  ``ShardingStrategy.HYBRID_SHARD`` takes as ``device_mesh``;
* :func:`tp_dp_mesh` -- the ``("dp", "tp")`` mesh for tensor parallelism inside a node and
  data parallelism across;
* :func:`hybrid_shard_tp_mesh` -- both at once, ``("replicate", "shard", "tp")`` (size-1
  ``replicate`` and ``tp`` dimensions left out), the mesh :func:`sharc.torch.parallelize` uses.

Sizes that would put a group partly on one node and partly on another are refused with a
``ValueError`` that lists the sizes that fit. The ranks per node is found by
:func:`ranks_per_node` (a collective over the group) unless it is passed explicitly, which
also lets tests emulate several nodes on one machine.

This module uses only ``torch.distributed``; it does not need the sharc extension.
"""
import operator
import socket
from collections import Counter

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

__all__ = ["ranks_per_node", "hybrid_shard_mesh", "tp_dp_mesh", "hybrid_shard_tp_mesh"]

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _node_key():
    """What tells this process's node apart: hostname plus the kernel's boot id (containers
    sharing a kernel can share a hostname pattern; two boots of a machine are different nodes)."""
    try:
        with open(_BOOT_ID, encoding="ascii") as f:
            boot_id = f.read().strip()
    except OSError:
        boot_id = ""
    return f"{socket.gethostname()}/{boot_id}"


def _require_initialized(what):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{what} needs torch.distributed to be initialised; "
            "call torch.distributed.init_process_group() first"
        )


def _gather_node_keys(group):
    """The node key of every rank of ``group``, in group-rank order (a collective)."""
    keys = [None] * dist.get_world_size(group)
    dist.all_gather_object(keys, _node_key(), group=group)
    return keys


def _count_per_node(keys):
    counts = Counter(keys)
    if len(set(counts.values())) != 1:
        detail = ", ".join(f"{key.split('/')[0]}: {n}" for key, n in sorted(counts.items()))
        raise ValueError(
            "the nodes run different numbers of ranks "
            f"({detail}); launch the same number of ranks on every node"
        )
    return next(iter(counts.values()))


def ranks_per_node(group=None) -> int:
    """Returns the number of ranks of ``group`` that run on this rank's node.

    A node is identified by its hostname and its kernel boot id
    (``/proc/sys/kernel/random/boot_id``). This is a collective: every rank of ``group``
    (default: the default process group) must call it, and all get the same answer.

    Args:
        group: the process group to look at; ``None`` for the default group.

    Returns:
        The ranks per node, the same on every rank.

    Raises:
        ValueError: if the nodes run different numbers of ranks of ``group``, or this rank
            is not in ``group``.
        RuntimeError: if torch.distributed is not initialised.
    """
    _require_initialized("ranks_per_node()")
    if group is not None and dist.get_rank(group) < 0:
        raise ValueError("ranks_per_node(group): this rank is not a member of the group")
    return _count_per_node(_gather_node_keys(group))


def _positive_int(value, name):
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _layout(ranks_per_node_arg):
    """(world size, ranks per node), checked: the ranks per node divides the world size and,
    when detected, the ranks of each node are consecutive (so inner mesh dimensions of a
    size that divides it stay inside a node)."""
    world = dist.get_world_size()
    if ranks_per_node_arg is not None:
        per_node = _positive_int(ranks_per_node_arg, "ranks_per_node")
        if world % per_node != 0:
            raise ValueError(
                f"ranks_per_node={per_node} does not divide the world size {world}; "
                "pass the number of ranks each node runs (or None to detect it)"
            )
        return world, per_node
    keys = _gather_node_keys(None)
    per_node = _count_per_node(keys)
    for rank, key in enumerate(keys):
        first = (rank // per_node) * per_node
        if key != keys[first]:
            raise ValueError(
                f"the ranks of a node are not consecutive (rank {rank} runs on "
                f"{key.split('/')[0]}, rank {first} on {keys[first].split('/')[0]}); "
                "launch the ranks node by node (as torchrun does), so that the groups of "
                "consecutive ranks these meshes make stay inside nodes"
            )
    return world, per_node


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _layout_text(world, per_node):
    nodes = world // per_node
    return (f"{world} ranks on {nodes} node{'s' if nodes != 1 else ''} "
            f"of {per_node} rank{'s' if per_node != 1 else ''}")


def _valid_shard_degrees(world_size, ranks_per_node, tp_degree=1):
    """The shard degrees that fit a layout: divisors ``d`` of ``world_size / tp_degree`` whose
    block of ``d * tp_degree`` consecutive ranks (a shard group with its tensor-parallel peers)
    divides the ranks per node or is a multiple of it."""
    return [d for d in _divisors(world_size // tp_degree)
            if ranks_per_node % (d * tp_degree) == 0 or (d * tp_degree) % ranks_per_node == 0]


def _check_shard_degree(shard_degree, world, per_node, *, name="shard_degree",
                        valid_name="valid shard degrees are", tp_degree=1):
    """Raises ValueError (listing the valid choices) if ``shard_degree`` does not fit."""
    valid = _valid_shard_degrees(world, per_node, tp_degree)
    if shard_degree in valid:
        return
    block = shard_degree * tp_degree
    # With tensor parallelism inside, a shard group and its tp peers are one block of ranks.
    what = "it" if tp_degree == 1 else (
        f"{name} * tensor_parallel_degree = {shard_degree} * {tp_degree} = {block}")
    if world % block != 0:
        why = f"{what} does not divide the world size {world}"
    elif block < per_node:
        why = (f"{what} does not divide the {per_node} ranks per node, so shard groups "
               "would span node boundaries")
    else:
        why = (f"{what} is not a multiple of the {per_node} ranks per node, so shard groups "
               "would contain parts of nodes")
    with_tp = "" if tp_degree == 1 else f" with tensor_parallel_degree={tp_degree}"
    raise ValueError(
        f"{name}={shard_degree} does not fit {_layout_text(world, per_node)}{with_tp}: {why}; "
        f"{valid_name} {valid}"
    )


def _tp_node_reason(tp_degree, per_node):
    """Why a tp degree does not fit the nodes (None if it does): tp groups stay inside one."""
    if per_node % tp_degree == 0:
        return None
    if tp_degree > per_node:
        return (f"it exceeds the {per_node} ranks per node, so tensor-parallel groups "
                "would span nodes")
    return (f"it does not divide the {per_node} ranks per node, so tensor-parallel "
            "groups would span node boundaries")


def hybrid_shard_mesh(shard_degree, *, device_type="cpu", ranks_per_node=None, model=None,
                      plan_options=None) -> DeviceMesh:
    """Returns the 2-D ``("replicate", "shard")`` mesh for FSDP ``HYBRID_SHARD``.

    The mesh has shape ``(world_size // shard_degree, shard_degree)``: each shard group is
    ``shard_degree`` consecutive ranks (parameters are sharded across it), and the ranks at
    the same position of every shard group form a replicate group (gradients are all-reduced
    across it). Pass it as ``FSDP(model, device_mesh=mesh,
    sharding_strategy=ShardingStrategy.HYBRID_SHARD)``.

    The shard groups must line up with the nodes: a shard degree up to the ranks per node must
    divide it (each shard group inside one node), a larger one must be a multiple of it (each
    shard group made of whole nodes).

    This is a collective: every rank must call it with the same arguments.

    Args:
        shard_degree: ranks per shard group; >= 1 and dividing the world size. ``"auto"``:
            sharc's planner picks it for ``model`` (see :func:`sharc.torch.parallelize`;
            here without tensor parallelism), on rank 0 for every rank.
        device_type: the mesh's device type (``"cpu"``, ``"cuda"``).
        ranks_per_node: the ranks each node runs; ``None`` detects it with
            :func:`ranks_per_node` (and checks that each node's ranks are consecutive).
        model: the (unsharded) module to plan for; needed with ``"auto"`` only.
        plan_options: as for :func:`sharc.torch.parallelize` (``seq_len``, ``micro_batch``,
            ``memory_bytes``).

    Returns:
        The DeviceMesh, with dimension names ``("replicate", "shard")``.

    Raises:
        ValueError: if the shard degree does not fit the world size or the nodes (the message
            lists the shard degrees that do), or the nodes run different numbers of ranks.
        TypeError: if a degree is not an int.
        RuntimeError: if torch.distributed is not initialised.
    """
    _require_initialized("hybrid_shard_mesh()")
    if isinstance(shard_degree, str) and shard_degree == "auto":
        if model is None:
            raise ValueError('hybrid_shard_mesh("auto") needs model=: the planner sizes the '
                             "shard groups by the model's parameters")
        from . import planner  # here: planner imports this module
        options = planner.plan_options(plan_options)
        world, per_node = _layout(ranks_per_node)
        spec = planner.model_spec(model, seq_len=options.get("seq_len"),
                                  micro_batch=options.get("micro_batch", 1))
        memory = options.get("memory_bytes") or planner.device_memory_bytes(device_type,
                                                                           per_node)
        shard_degree = planner.agreed_choice(spec, world=world, per_node=per_node,
                                             memory_bytes=memory,
                                             tp_choices=[1])["hybrid_shard_degree"]
        ranks_per_node = per_node
    shard_degree = _positive_int(shard_degree, "shard_degree")
    world, per_node = _layout(ranks_per_node)
    _check_shard_degree(shard_degree, world, per_node)
    return init_device_mesh(
        device_type,
        (world // shard_degree, shard_degree),
        mesh_dim_names=("replicate", "shard"),
    )


def _check_tp_degree(tp, world, per_node, name, valid_text):
    """Raises ValueError naming the valid degrees when `tp` does not fit inside a node."""
    why = _tp_node_reason(tp, per_node)
    if why is not None:
        raise ValueError(
            f"{name}={tp} does not fit {_layout_text(world, per_node)}: {why}; "
            f"{valid_text} {_divisors(per_node)}"
        )


def tp_dp_mesh(tp_degree, *, device_type="cpu", ranks_per_node=None) -> DeviceMesh:
    """Returns the 2-D ``("dp", "tp")`` mesh for tensor parallelism inside a node.

    The mesh has shape ``(world_size // tp_degree, tp_degree)``: each tensor-parallel group is
    ``tp_degree`` consecutive ranks on one node (use ``mesh["tp"]`` with
    ``parallelize_module``), and the ranks at the same position of every tp group form a
    data-parallel group (``mesh["dp"]``, e.g. for FSDP or a gradient all-reduce).

    Tensor parallelism communicates in every layer, so its groups must not cross nodes: the
    tp degree must divide the ranks per node.

    This is a collective: every rank must call it with the same arguments.

    Args:
        tp_degree: ranks per tensor-parallel group; >= 1 and dividing the ranks per node.
        device_type: the mesh's device type (``"cpu"``, ``"cuda"``).
        ranks_per_node: the ranks each node runs; ``None`` detects it with
            :func:`ranks_per_node` (and checks that each node's ranks are consecutive).

    Returns:
        The DeviceMesh, with dimension names ``("dp", "tp")``.

    Raises:
        ValueError: if the tp degree does not divide the ranks per node (the message lists
            those that do), or the nodes run different numbers of ranks.
        TypeError: if a degree is not an int.
        RuntimeError: if torch.distributed is not initialised.
    """
    _require_initialized("tp_dp_mesh()")
    tp_degree = _positive_int(tp_degree, "tp_degree")
    world, per_node = _layout(ranks_per_node)
    _check_tp_degree(tp_degree, world, per_node, "tp_degree", "valid tp degrees are")
    return init_device_mesh(
        device_type,
        (world // tp_degree, tp_degree),
        mesh_dim_names=("dp", "tp"),
    )


def hybrid_shard_tp_mesh(hybrid_shard_degree, tensor_parallel_degree=1, *, device_type="cpu",
                         ranks_per_node=None) -> DeviceMesh:
    """Returns the ``("replicate", "shard", "tp")`` mesh for hybrid sharding of a
    tensor-parallel model (FSDP2 over ``("replicate", "shard")``, TP over ``"tp"``).

    The full shape is ``(replicate, hybrid_shard_degree, tensor_parallel_degree)`` with
    ``replicate = world_size // (hybrid_shard_degree * tensor_parallel_degree)``; ``tp`` is
    innermost (consecutive ranks, inside a node), then ``shard``, then ``replicate``. A
    ``replicate`` or ``tp`` dimension of size 1 is left out (it would only add one-rank process
    groups), so the names are one of ``("replicate", "shard", "tp")``, ``("shard", "tp")``,
    ``("replicate", "shard")`` or ``("shard",)``; ``"shard"`` is always there.

    The tensor-parallel degree must divide the ranks per node; a shard group together with its
    tensor-parallel peers (``hybrid_shard_degree * tensor_parallel_degree`` consecutive ranks)
    must divide the ranks per node or be a multiple of it.

    This is a collective: every rank must call it with the same arguments.

    Args:
        hybrid_shard_degree: ranks a parameter is sharded over (FSDP).
        tensor_parallel_degree: ranks per tensor-parallel group.
        device_type: the mesh's device type (``"cpu"``, ``"cuda"``).
        ranks_per_node: the ranks each node runs; ``None`` detects it with
            :func:`ranks_per_node` (and checks that each node's ranks are consecutive).

    Returns:
        The DeviceMesh.

    Raises:
        ValueError: if a degree does not fit the world size or the nodes (the message lists
            the values that do), or the nodes run different numbers of ranks.
        TypeError: if a degree is not an int.
        RuntimeError: if torch.distributed is not initialised.
    """
    _require_initialized("hybrid_shard_tp_mesh()")
    shard = _positive_int(hybrid_shard_degree, "hybrid_shard_degree")
    tp = _positive_int(tensor_parallel_degree, "tensor_parallel_degree")
    world, per_node = _layout(ranks_per_node)
    _check_tp_degree(tp, world, per_node, "tensor_parallel_degree",
                     "valid tensor_parallel_degree values are")
    _check_shard_degree(shard, world, per_node, name="hybrid_shard_degree",
                        valid_name="valid hybrid_shard_degree values are", tp_degree=tp)
    dims = [("replicate", world // (shard * tp)), ("shard", shard), ("tp", tp)]
    dims = [(n, size) for n, size in dims if size > 1 or n == "shard"]
    return init_device_mesh(
        device_type,
        tuple(size for _, size in dims),
        mesh_dim_names=tuple(n for n, _ in dims),
    )
