"""torch's split_group on sharc groups (Backend.split, torch 2.9 and newer): the ranks of each
split form a group over the parent's endpoint, in the order the split lists them; ranks in no
split get GroupMember.NON_GROUP_MEMBER; splits of splits follow; the parent keeps working.
Every result is checked against a float64 reference computed here."""
import pytest
import torch
import torch.distributed as dist

from launcher import run_ranks

VERSION = tuple(int(x) for x in torch.__version__.split(".")[:2])
pytestmark = pytest.mark.skipif(VERSION < (2, 9), reason=f"torch {torch.__version__} has no "
                                "Backend.split (added in 2.9)")


def _values(global_rank, n=1001):
    return torch.arange(n, dtype=torch.float64) * (global_rank + 1) + global_rank / 7


def _check_group(pg, members, me):
    """all_reduce and all_gather on `pg`, whose group ranks are `members` (global ranks) in
    order; returns the problems found."""
    bad = []
    if dist.get_rank(pg) != members.index(me) or dist.get_world_size(pg) != len(members):
        bad.append(f"rank {dist.get_rank(pg)} of {dist.get_world_size(pg)}, expected "
                   f"{members.index(me)} of {len(members)}")
    t = _values(me).to(torch.float32)
    dist.all_reduce(t, group=pg)
    want = sum(_values(g) for g in members)
    if not torch.allclose(t.double(), want, rtol=1e-6, atol=1e-3):
        bad.append(f"all_reduce: max error {(t.double() - want).abs().max().item()}")
    got = [torch.zeros(1, dtype=torch.int64) for _ in members]
    dist.all_gather(got, torch.tensor([me]), group=pg)
    if [int(x) for x in got] != members:
        bad.append(f"all_gather of global ranks gave {[int(x) for x in got]}, expected {members}")
    return bad


def _split_job(rank, ws):
    bad = []
    world = dist.group.WORLD
    if not world._get_backend(torch.device("cpu")).supports_splitting:
        bad.append("supports_splitting is False")
    # two splits at once, the second in reverse order
    pg = dist.split_group(split_ranks=[[0, 1], [3, 2]])
    bad += _check_group(pg, [0, 1] if rank < 2 else [3, 2], rank)
    # one split: ranks 0 and 3 are in none
    mid = dist.split_group(split_ranks=[[1, 2]])
    if rank in (1, 2):
        bad += _check_group(mid, [1, 2], rank)
    elif mid != dist.GroupMember.NON_GROUP_MEMBER:
        bad.append(f"rank {rank} is in no split but got {mid}")
    # a split of a split: its ranks are the parent group's
    three = dist.split_group(split_ranks=[[0, 1, 2]])
    if rank < 3:
        bad += _check_group(three, [0, 1, 2], rank)
        two = dist.split_group(parent_pg=three, split_ranks=[[2, 0]])
        if rank in (0, 2):
            bad += _check_group(two, [2, 0], rank)
        elif two != dist.GroupMember.NON_GROUP_MEMBER:
            bad.append(f"rank {rank} is in no split of the split but got {two}")
    bad += _check_group(world, [0, 1, 2, 3], rank)  # the parent still works
    return bad


def test_split_group_forms_groups_over_the_parent():
    results = run_ranks(4, _split_job)
    problems = [f"rank {r}: {b}" for r, bs in enumerate(results) for b in bs]
    assert not problems, "\n".join(problems)
