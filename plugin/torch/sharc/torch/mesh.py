"""Device meshes for hybrid sharding and tensor parallelism, checked against the node layout.

Both helpers build a 2-D :class:`~torch.distributed.device_mesh.DeviceMesh` whose inner
(fastest-varying) dimension holds consecutive ranks, so with the usual launch order (the ranks
of one node are consecutive: node ``n`` holds ranks ``n * R .. n * R + R - 1``) that dimension
stays inside a node when its size divides the ranks per node ``R``:

* :func:`hybrid_shard_mesh` -- the ``("replicate", "shard")`` mesh that FSDP's
  ``ShardingStrategy.HYBRID_SHARD`` takes as ``device_mesh``;
* :func:`tp_dp_mesh` -- the ``("dp", "tp")`` mesh for tensor parallelism inside a node and
  data parallelism across.

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

__all__ = ["ranks_per_node", "hybrid_shard_mesh", "tp_dp_mesh"]

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


def _valid_shard_degrees(world_size, ranks_per_node):
    """The shard degrees :func:`hybrid_shard_mesh` accepts for a layout: divisors of the world
    size that divide the ranks per node or are multiples of it."""
    return [d for d in _divisors(world_size)
            if ranks_per_node % d == 0 or d % ranks_per_node == 0]


def hybrid_shard_mesh(shard_degree, *, device_type="cpu", ranks_per_node=None) -> DeviceMesh:
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
        shard_degree: ranks per shard group; >= 1 and dividing the world size.
        device_type: the mesh's device type (``"cpu"``, ``"cuda"``).
        ranks_per_node: the ranks each node runs; ``None`` detects it with
            :func:`ranks_per_node` (and checks that each node's ranks are consecutive).

    Returns:
        The DeviceMesh, with dimension names ``("replicate", "shard")``.

    Raises:
        ValueError: if the shard degree does not fit the world size or the nodes (the message
            lists the shard degrees that do), or the nodes run different numbers of ranks.
        TypeError: if a degree is not an int.
        RuntimeError: if torch.distributed is not initialised.
    """
    _require_initialized("hybrid_shard_mesh()")
    shard_degree = _positive_int(shard_degree, "shard_degree")
    world, per_node = _layout(ranks_per_node)
    valid = _valid_shard_degrees(world, per_node)
    if shard_degree not in valid:
        if world % shard_degree != 0:
            why = f"it does not divide the world size {world}"
        elif shard_degree < per_node:
            why = (f"it does not divide the {per_node} ranks per node, so shard groups "
                   "would span node boundaries")
        else:
            why = (f"it is not a multiple of the {per_node} ranks per node, so shard groups "
                   "would contain parts of nodes")
        raise ValueError(
            f"shard_degree={shard_degree} does not fit {_layout_text(world, per_node)}: {why}; "
            f"valid shard degrees are {valid}"
        )
    return init_device_mesh(
        device_type,
        (world // shard_degree, shard_degree),
        mesh_dim_names=("replicate", "shard"),
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
    if per_node % tp_degree != 0:
        if tp_degree > per_node:
            why = (f"it exceeds the {per_node} ranks per node, so tensor-parallel groups "
                   "would span nodes")
        else:
            why = (f"it does not divide the {per_node} ranks per node, so tensor-parallel "
                   "groups would span node boundaries")
        raise ValueError(
            f"tp_degree={tp_degree} does not fit {_layout_text(world, per_node)}: {why}; "
            f"valid tp degrees are {_divisors(per_node)}"
        )
    return init_device_mesh(
        device_type,
        (world // tp_degree, tp_degree),
        mesh_dim_names=("dp", "tp"),
    )
