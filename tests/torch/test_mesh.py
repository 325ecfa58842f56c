"""Tests of the mesh helpers (sharc.torch.mesh): hybrid_shard_mesh, tp_dp_mesh, ranks_per_node.

The degree checks run in this process against a stand-in for torch.distributed (any world
size and node layout, no ranks needed); the meshes themselves are built on 4 real ranks, once
over gloo and once over sharc, both with ranks_per_node=2 given explicitly (emulating 2 nodes
of 2 ranks) and with the layout detected (one node of 4 ranks).
"""
import os
import time
import types

import pytest
import torch

from launcher import run_ranks

WORLD = 4


def _mesh_module():
    """sharc.torch.mesh (the installed package; mesh.py needs only torch.distributed)."""
    from sharc.torch import mesh

    return mesh


# --------------------------------------------------------------------------------------------
# Degree checks, in this process: torch.distributed replaced by a stand-in.


@pytest.fixture
def fake(monkeypatch):
    """The mesh module with a fake world: set `fake.world` and, for detection, `fake.keys` (the
    node key of every rank); `fake.calls` records the init_device_mesh calls."""
    mesh = _mesh_module()
    state = types.SimpleNamespace(mesh=mesh, world=4, keys=None, calls=[])
    fake_dist = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        get_world_size=lambda group=None: state.world,
    )
    monkeypatch.setattr(mesh, "dist", fake_dist)
    monkeypatch.setattr(mesh, "_gather_node_keys", lambda group: list(state.keys))

    def init_device_mesh(device_type, shape, *, mesh_dim_names=None):
        state.calls.append((device_type, shape, mesh_dim_names))
        return "mesh"

    monkeypatch.setattr(mesh, "init_device_mesh", init_device_mesh)
    return state


@pytest.mark.parametrize("world,per_node,shard,shape", [
    (4, 2, 1, (4, 1)),
    (4, 2, 2, (2, 2)),
    (4, 2, 4, (1, 4)),   # a multiple of the ranks per node: shard groups of whole nodes
    (8, 4, 2, (4, 2)),
    (8, 2, 8, (1, 8)),
    (6, 3, 3, (2, 3)),
    (6, 3, 6, (1, 6)),
    (12, 4, 8, None),    # 8 does not divide 12
    (4, 1, 2, (2, 2)),   # one rank per node: any divisor of the world
])
def test_hybrid_shard_valid_degrees(fake, world, per_node, shard, shape):
    fake.world = world
    if shape is None:
        with pytest.raises(ValueError, match="does not divide the world size 12"):
            fake.mesh.hybrid_shard_mesh(shard, ranks_per_node=per_node)
        return
    assert fake.mesh.hybrid_shard_mesh(shard, ranks_per_node=per_node) == "mesh"
    assert fake.calls == [("cpu", shape, ("replicate", "shard"))]


def test_hybrid_shard_device_type(fake):
    fake.mesh.hybrid_shard_mesh(2, device_type="cuda", ranks_per_node=2)
    assert fake.calls == [("cuda", (2, 2), ("replicate", "shard"))]


@pytest.mark.parametrize("world,per_node,shard,messages", [
    (4, 2, 3, ["shard_degree=3 does not fit 4 ranks on 2 nodes of 2 ranks",
               "it does not divide the world size 4", "valid shard degrees are [1, 2, 4]"]),
    (6, 3, 2, ["shard_degree=2 does not fit 6 ranks on 2 nodes of 3 ranks",
               "does not divide the 3 ranks per node", "span node boundaries",
               "valid shard degrees are [1, 3, 6]"]),
    (6, 2, 3, ["shard_degree=3", "not a multiple of the 2 ranks per node",
               "valid shard degrees are [1, 2, 6]"]),
    (12, 4, 6, ["shard_degree=6", "not a multiple of the 4 ranks per node",
                "valid shard degrees are [1, 2, 4, 12]"]),
    (4, 4, 8, ["shard_degree=8 does not fit 4 ranks on 1 node of 4 ranks",
               "does not divide the world size 4"]),
])
def test_hybrid_shard_invalid_degrees(fake, world, per_node, shard, messages):
    fake.world = world
    with pytest.raises(ValueError) as err:
        fake.mesh.hybrid_shard_mesh(shard, ranks_per_node=per_node)
    for message in messages:
        assert message in str(err.value)
    assert fake.calls == []


@pytest.mark.parametrize("world,per_node,tp,shape", [
    (4, 2, 1, (4, 1)),
    (4, 2, 2, (2, 2)),
    (4, 4, 4, (1, 4)),
    (8, 4, 2, (4, 2)),
    (6, 3, 3, (2, 3)),
])
def test_tp_dp_valid_degrees(fake, world, per_node, tp, shape):
    fake.world = world
    assert fake.mesh.tp_dp_mesh(tp, ranks_per_node=per_node) == "mesh"
    assert fake.calls == [("cpu", shape, ("dp", "tp"))]


@pytest.mark.parametrize("world,per_node,tp,messages", [
    (4, 2, 4, ["tp_degree=4 does not fit 4 ranks on 2 nodes of 2 ranks",
               "exceeds the 2 ranks per node", "valid tp degrees are [1, 2]"]),
    (8, 4, 8, ["exceeds the 4 ranks per node", "valid tp degrees are [1, 2, 4]"]),
    (6, 3, 2, ["tp_degree=2", "does not divide the 3 ranks per node",
               "valid tp degrees are [1, 3]"]),
    (4, 4, 3, ["tp_degree=3", "does not divide the 4 ranks per node",
               "valid tp degrees are [1, 2, 4]"]),
])
def test_tp_dp_invalid_degrees(fake, world, per_node, tp, messages):
    fake.world = world
    with pytest.raises(ValueError) as err:
        fake.mesh.tp_dp_mesh(tp, ranks_per_node=per_node)
    for message in messages:
        assert message in str(err.value)
    assert fake.calls == []


@pytest.mark.parametrize("fn", ["hybrid_shard_mesh", "tp_dp_mesh"])
def test_degree_type_and_range(fake, fn):
    make = getattr(fake.mesh, fn)
    name = "shard_degree" if fn == "hybrid_shard_mesh" else "tp_degree"
    with pytest.raises(ValueError, match=f"{name} must be >= 1, got 0"):
        make(0, ranks_per_node=2)
    with pytest.raises(ValueError, match=f"{name} must be >= 1, got -2"):
        make(-2, ranks_per_node=2)
    with pytest.raises(TypeError, match=f"{name} must be an int"):
        make(2.0, ranks_per_node=2)
    with pytest.raises(TypeError, match=f"{name} must be an int"):
        make(True, ranks_per_node=2)
    with pytest.raises(ValueError, match="ranks_per_node must be >= 1, got 0"):
        make(1, ranks_per_node=0)
    with pytest.raises(ValueError, match="ranks_per_node=3 does not divide the world size 4"):
        make(1, ranks_per_node=3)
    assert fake.calls == []


def test_detected_layout(fake):
    fake.keys = ["a/1", "a/1", "b/2", "b/2"]
    assert fake.mesh.ranks_per_node() == 2
    fake.mesh.hybrid_shard_mesh(2)
    fake.mesh.hybrid_shard_mesh(4)
    fake.mesh.tp_dp_mesh(2)
    assert [c[1] for c in fake.calls] == [(2, 2), (1, 4), (2, 2)]
    with pytest.raises(ValueError, match="exceeds the 2 ranks per node"):
        fake.mesh.tp_dp_mesh(4)
    # An explicit ranks_per_node wins over the detected one (no collective).
    fake.keys = None
    fake.mesh.tp_dp_mesh(4, ranks_per_node=4)
    assert fake.calls[-1] == ("cpu", (1, 4), ("dp", "tp"))


def test_detected_uneven_nodes(fake):
    fake.keys = ["a/1", "a/1", "a/1", "b/2"]
    with pytest.raises(ValueError, match=r"different numbers of ranks \(a: 3, b: 1\)"):
        fake.mesh.ranks_per_node()
    with pytest.raises(ValueError, match="same number of ranks on every node"):
        fake.mesh.hybrid_shard_mesh(2)
    assert fake.calls == []


def test_detected_interleaved_nodes(fake):
    fake.keys = ["a/1", "b/2", "a/1", "b/2"]
    assert fake.mesh.ranks_per_node() == 2  # the count is fine; the order is not
    with pytest.raises(ValueError, match="ranks of a node are not consecutive"):
        fake.mesh.hybrid_shard_mesh(2)
    with pytest.raises(ValueError, match="launch the ranks node by node"):
        fake.mesh.tp_dp_mesh(2)
    assert fake.calls == []


def test_not_initialized():
    mesh = _mesh_module()
    import torch.distributed as dist

    assert not dist.is_initialized()
    for call in (lambda: mesh.ranks_per_node(), lambda: mesh.hybrid_shard_mesh(1),
                 lambda: mesh.tp_dp_mesh(1)):
        with pytest.raises(RuntimeError, match="init_process_group"):
            call()


def test_node_key_names_host_and_boot():
    mesh = _mesh_module()
    host, boot = mesh._node_key().split("/", 1)
    assert host
    if os.path.exists("/proc/sys/kernel/random/boot_id"):
        assert len(boot) == 36


def _planner_fake(monkeypatch):
    """The planner as rank 0 of the fake world (its broadcast a no-op)."""
    from sharc.torch import planner

    monkeypatch.setattr(planner, "dist", types.SimpleNamespace(
        get_rank=lambda: 0, broadcast_object_list=lambda box, src: None))
    return planner


def test_hybrid_shard_auto_follows_the_planner(fake, monkeypatch):
    """hybrid_shard_mesh("auto", model=...) builds the mesh of the planner's first fitting
    candidate without tensor parallelism; with memory for the smallest footprint only, it
    moves to that candidate."""
    pytest.importorskip("sharc.torch", reason="sharc.torch is not installed")
    planner = _planner_fake(monkeypatch)
    model = torch.nn.Sequential(torch.nn.ModuleList(torch.nn.Linear(256, 256)
                                                    for _ in range(4)))
    fake.world = 8
    spec = planner.model_spec(model)

    def first_fit(memory):
        ranked = planner.plan_fsdp(spec, world_size=8, ranks_per_node=4, memory_bytes=memory)
        return next((c for c in ranked if c["fits"] and c["tensor_parallel_degree"] == 1), None)

    lo, hi = 0.0, 2.0**40
    for _ in range(80):  # the least memory in which one fits
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if first_fit(mid) else (mid, hi)
    for memory in (2.0**40, hi):
        want = first_fit(memory)["hybrid_shard_degree"]
        fake.calls.clear()
        fake.mesh.hybrid_shard_mesh("auto", ranks_per_node=4, model=model,
                                    plan_options={"memory_bytes": memory})
        assert fake.calls == [("cpu", (8 // want, want), ("replicate", "shard"))], memory
    assert first_fit(2.0**40)["hybrid_shard_degree"] != first_fit(hi)["hybrid_shard_degree"]
    with pytest.raises(ValueError, match=r'hybrid_shard_mesh\("auto"\) needs model='):
        fake.mesh.hybrid_shard_mesh("auto", ranks_per_node=4)


def test_package_exports():
    sharc_torch = pytest.importorskip("sharc.torch", reason="sharc.torch is not installed")
    from sharc.torch import mesh

    assert sharc_torch.hybrid_shard_mesh is mesh.hybrid_shard_mesh
    assert sharc_torch.tp_dp_mesh is mesh.tp_dp_mesh
    assert sharc_torch.ranks_per_node is mesh.ranks_per_node


# --------------------------------------------------------------------------------------------
# Real meshes on 4 ranks.


def _group_ranks(mesh, dim):
    import torch.distributed as dist

    return dist.get_process_group_ranks(mesh.get_group(dim))


def _sum_over(mesh, dim, value):
    """All-reduces `value` over the mesh dimension's group: checks the group communicates."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(value)])
    dist.all_reduce(t, group=mesh.get_group(dim))
    return t.item()


def _describe(mesh, value):
    names = mesh.mesh_dim_names
    return {
        "device_type": mesh.device_type,
        "layout": mesh.mesh.tolist(),
        "names": names,
        "groups": {n: _group_ranks(mesh, n) for n in names},
        "sums": {n: _sum_over(mesh, n, value) for n in names},
    }


def _settle_before_destroy():
    """Lets gloo's worker threads drop finished work before the launcher destroys the groups:
    torch 2.6's ~ProcessGroupGloo holds the GIL while waiting for workers that may need it to
    free a tensor, so destroy_process_group() deadlocks now and then (see test_training.py)."""
    time.sleep(0.5)


def _mesh_ranks(rank, world_size):
    import torch.distributed as dist

    mesh = _mesh_module()
    out = {"ranks_per_node": mesh.ranks_per_node()}
    pair = dist.new_group([0, 1])  # every rank creates it; ranks 0 and 1 use it
    if rank in (0, 1):
        out["ranks_per_node_pair"] = mesh.ranks_per_node(pair)
    else:
        try:
            mesh.ranks_per_node(pair)
        except ValueError as e:
            out["ranks_per_node_pair"] = str(e)
    out["hybrid_2x2"] = _describe(mesh.hybrid_shard_mesh(2, ranks_per_node=2), 1 + rank)
    out["hybrid_1x4"] = _describe(mesh.hybrid_shard_mesh(4, ranks_per_node=2), 1 + rank)
    out["hybrid_4x1"] = _describe(mesh.hybrid_shard_mesh(1, ranks_per_node=2), 1 + rank)
    out["hybrid_detected"] = _describe(mesh.hybrid_shard_mesh(2), 1 + rank)
    out["tp_dp_2x2"] = _describe(mesh.tp_dp_mesh(2, ranks_per_node=2), 1 + rank)
    out["tp_dp_detected"] = _describe(mesh.tp_dp_mesh(4), 1 + rank)
    errors = {}
    for key, call in [("hybrid_3", lambda: mesh.hybrid_shard_mesh(3, ranks_per_node=2)),
                      ("tp_4_of_2", lambda: mesh.tp_dp_mesh(4, ranks_per_node=2))]:
        try:
            call()
            errors[key] = None
        except ValueError as e:
            errors[key] = str(e)
    out["errors"] = errors
    # The default group still works after the failed calls (nobody was left in a collective).
    import torch

    t = torch.ones(1)
    dist.all_reduce(t)
    out["world_sum"] = t.item()
    _settle_before_destroy()
    return out


def _backends():
    yield "gloo"
    try:
        import sharc.torch  # noqa: F401
    except ImportError:
        yield pytest.param("sharc", marks=pytest.mark.skip(reason="sharc.torch is not installed"))
        return
    yield "sharc"


@pytest.fixture(scope="module", params=list(_backends()))
def ranks(request):
    return run_ranks(WORLD, _mesh_ranks, backend=request.param)


def test_ranks_per_node_detected(ranks):
    assert [r["ranks_per_node"] for r in ranks] == [4] * WORLD
    assert [r["ranks_per_node_pair"] for r in ranks[:2]] == [2, 2]
    for r in ranks[2:]:
        assert "not a member of the group" in r["ranks_per_node_pair"]


def _check(ranks, key, layout, names, groups):
    """groups[dim][rank]: the ranks of `rank`'s group along `dim`."""
    for rank, res in enumerate(ranks):
        got = res[key]
        assert got["device_type"] == "cpu"
        assert got["layout"] == layout
        assert got["names"] == names
        for dim in names:
            assert got["groups"][dim] == groups[dim][rank], (key, dim, rank)
            assert got["sums"][dim] == sum(1 + r for r in groups[dim][rank]), (key, dim, rank)


def test_hybrid_shard_two_nodes(ranks):
    _check(ranks, "hybrid_2x2", [[0, 1], [2, 3]], ("replicate", "shard"), {
        "shard": [[0, 1], [0, 1], [2, 3], [2, 3]],        # inside a node
        "replicate": [[0, 2], [1, 3], [0, 2], [1, 3]],    # across the nodes
    })


def test_hybrid_shard_across_nodes(ranks):
    _check(ranks, "hybrid_1x4", [[0, 1, 2, 3]], ("replicate", "shard"), {
        "shard": [[0, 1, 2, 3]] * 4,
        "replicate": [[0], [1], [2], [3]],
    })


def test_hybrid_shard_degree_one(ranks):
    _check(ranks, "hybrid_4x1", [[0], [1], [2], [3]], ("replicate", "shard"), {
        "shard": [[0], [1], [2], [3]],
        "replicate": [[0, 1, 2, 3]] * 4,
    })


def test_hybrid_shard_detected_one_node(ranks):
    _check(ranks, "hybrid_detected", [[0, 1], [2, 3]], ("replicate", "shard"), {
        "shard": [[0, 1], [0, 1], [2, 3], [2, 3]],
        "replicate": [[0, 2], [1, 3], [0, 2], [1, 3]],
    })


def test_tp_dp_two_nodes(ranks):
    _check(ranks, "tp_dp_2x2", [[0, 1], [2, 3]], ("dp", "tp"), {
        "tp": [[0, 1], [0, 1], [2, 3], [2, 3]],
        "dp": [[0, 2], [1, 3], [0, 2], [1, 3]],
    })


def test_tp_dp_detected_one_node(ranks):
    _check(ranks, "tp_dp_detected", [[0, 1, 2, 3]], ("dp", "tp"), {
        "tp": [[0, 1, 2, 3]] * 4,
        "dp": [[0], [1], [2], [3]],
    })


def test_invalid_degrees_on_ranks(ranks):
    for res in ranks:
        assert "valid shard degrees are [1, 2, 4]" in res["errors"]["hybrid_3"]
        assert "valid tp degrees are [1, 2]" in res["errors"]["tp_4_of_2"]
        assert res["world_sum"] == WORLD
