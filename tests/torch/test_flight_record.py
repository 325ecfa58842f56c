"""Flight records through the torch backend: with TORCH_FR_DUMP_TEMP_FILE set (torch's Flight
Recorder's dump prefix) and SHARC_TRACE_DIR unset, a failing collective makes every rank write
its sharc flight record into that prefix's directory; the error names the call's sequence
number; and misuse (rank 0 calls all_reduce where rank 1 calls all_gather) fails on both
ranks within the stall-probe threshold plus a second, not at the 60 s timeout.
"""
import glob
import json
import os
import re
import tempfile
import time

import pytest

pytest.importorskip("torch")
from launcher import run_ranks  # noqa: E402


def _mismatch(rank, world_size):
    import torch
    import torch.distributed as dist

    x = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(x)  # calls #1..#3 agree
    start = time.monotonic()
    try:
        if rank == 0:
            dist.all_reduce(x)
        else:
            out = [torch.empty(1000) for _ in range(world_size)]
            dist.all_gather(out, x)
    except Exception as e:  # noqa: BLE001  (the error is what is checked)
        return time.monotonic() - start, str(e)
    return time.monotonic() - start, None


def test_mismatch_fails_fast_and_dumps_where_torch_dumps():
    with tempfile.TemporaryDirectory(prefix="sharc-fr-") as tmp:
        env = {"TORCH_FR_DUMP_TEMP_FILE": os.path.join(tmp, "comm_lib_trace_rank_"),
               "SHARC_STALL_PROBE_MS": "1000", "SHARC_TRACE_DIR": ""}
        results = run_ranks(2, _mismatch, env=env)
        for rank, (elapsed, error) in enumerate(results):
            assert error is not None, f"rank {rank} succeeded"
            assert re.search(r"(AllReduce|AllGather) #\d+", error), error
            assert elapsed <= 2.0, f"rank {rank} failed after {elapsed:.1f} s: {error}"
        dumps = sorted(glob.glob(os.path.join(tmp, "sharc-trace-*.json")))
        assert len(dumps) == 2, os.listdir(tmp)
        for path in dumps:
            record = json.load(open(path))
            assert record["format"] == "sharc-trace"
            states = [e["state"] for c in record["communicators"] for e in c["entries"]]
            assert states.count("failed") >= 1 and states.count("completed") >= 3, states
