"""torch's shrink_group on sharc (Backend.shrink, torch 2.10 and newer): the ranks not excluded
form a group over the same endpoint, renumbered densely, which becomes the default group when
the default group is shrunk; an excluded rank that left takes no part. Sums are checked
exactly against a float64 reference computed here. (A rank SIGKILLed mid-collective, on the
engine: tests/multirank/test_shrink.cc.)"""
import pytest
import torch
import torch.distributed as dist

from launcher import run_ranks

HAS_SHRINK = hasattr(dist.distributed_c10d, "shrink_group")
pytestmark = pytest.mark.skipif(not HAS_SHRINK, reason=f"torch {torch.__version__} has no "
                                "shrink_group")


def _sum_check(pg, members, me):
    """all_reduce of (global rank + 1) * i on `pg`; the problems found."""
    t = torch.arange(1001, dtype=torch.float32) * (me + 1)
    dist.all_reduce(t, group=pg)
    want = torch.arange(1001, dtype=torch.float64) * sum(m + 1 for m in members)
    bad = int((t.double() != want).sum())
    return [f"all_reduce over {members}: {bad} of 1001 elements differ"] if bad else []


def _shrink_job(rank, ws):
    bad = []
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    if not backend.supports_shrinking:
        bad.append("supports_shrinking is False")
    bad += _sum_check(None, list(range(ws)), rank)
    if rank == 2:
        return bad  # excluded: leaves without taking part
    pg = dist.distributed_c10d.shrink_group([2])
    if (dist.get_rank(pg), dist.get_world_size(pg)) != ([0, 1, 2, 2][rank], 3):
        bad.append(f"rank {dist.get_rank(pg)} of {dist.get_world_size(pg)} after the shrink")
    bad += _sum_check(pg, [0, 1, 3], rank)
    bad += _sum_check(None, [0, 1, 3], rank)  # it is the default group now
    return bad


def test_shrink_group_leaves_the_excluded_rank_out():
    results = run_ranks(4, _shrink_job)
    problems = [f"rank {r}: {b}" for r, bs in enumerate(results) for b in bs]
    assert not problems, "\n".join(problems)
