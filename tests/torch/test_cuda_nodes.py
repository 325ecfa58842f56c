"""CUDA tensors on the sharc backend across emulated nodes, where a GPU exists (they skip
cleanly elsewhere): 4 processes share cuda:0, laid out on 2 nodes (SHARC_NODE_ID), so every
collective crosses "nodes" and takes the engine's device path (SHARC_DEVICE_PATH=direct,
libfabric shm between the nodes: FI_HMEM registrations where libfabric has CUDA, else staged
per link), with sharc's kernels reducing on the device.

* the collectives job of test_cuda.py (every op and dtype against float64);
* FSDP (FULL_SHARD) and DDP: the losses of the CPU run over sharc;
* FSDP2 (fully_shard) on the test transformer, and sharc.torch.parallelize with
  hybrid_shard_degree=2 x tensor_parallel_degree=2 on the Llama test model: the final
  parameters of one-process training on the whole batches.

    python3 -m pytest tests/torch/test_cuda_nodes.py   # run by tools/gpu-check.sh
"""
import time

import pytest
import torch

from launcher import run_ranks

pytest.importorskip("sharc.torch", reason="sharc.torch is not installed (build plugin/torch)")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

NODES = 2
DEVICE_PATH_ENV = {"SHARC_DEVICE_PATH": "direct", "SHARC_FI_PROVIDER": "shm", "SHARC_SHM": "0",
                   "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
STEPS, GLOBAL_BATCH, LR, MOMENTUM = 3, 8, 0.1, 0.9
PARAM_RTOL, PARAM_ATOL = 1e-4, 1e-5


def test_collectives_across_two_nodes():
    from test_cuda import _collectives_job

    results = run_ranks(4, _collectives_job, 4, backend="sharc", device_id="cuda:0",
                        env=DEVICE_PATH_ENV, nodes=NODES)
    errors = [e for res in results for e in res["errors"]]
    assert not errors, "\n".join(errors[:40])
    assert all(res["checks"] > 50 for res in results)


def test_fsdp_and_ddp_across_two_nodes_match_cpu():
    from test_cuda import LOSS_ATOL, LOSS_RTOL, _train_both

    cuda = run_ranks(4, _train_both, "cuda", STEPS, backend="sharc", env=DEVICE_PATH_ENV,
                     nodes=NODES)
    cpu = run_ranks(4, _train_both, "cpu", STEPS, backend="sharc")
    for strategy in ("fsdp_full_shard", "ddp"):
        for rank, (g, w) in enumerate(zip(cuda, cpu)):
            torch.testing.assert_close(
                torch.tensor(g[strategy], dtype=torch.float64),
                torch.tensor(w[strategy], dtype=torch.float64), rtol=LOSS_RTOL, atol=LOSS_ATOL,
                msg=lambda m: f"{strategy} rank {rank}: {g[strategy]} vs {w[strategy]}: {m}")


def _fsdp2(rank, ws, steps):
    from torch.distributed.fsdp import fully_shard

    from models import Block, loss_fn, make_batches, make_model

    torch.cuda.set_device(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda", 0)
    model = make_model(seed=0).to(device)
    for module in model.modules():
        if isinstance(module, Block):
            fully_shard(module)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    per_rank = GLOBAL_BATCH // ws
    part = slice(rank * per_rank, (rank + 1) * per_rank)
    for inputs, targets in make_batches(steps, GLOBAL_BATCH):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(inputs[part].to(device)), targets[part].to(device)).backward()
        opt.step()
    params = {n: p.full_tensor().detach().cpu() for n, p in model.named_parameters()}
    time.sleep(0.5)
    return params if rank == 0 else None


def _one_process_fsdp2_reference(steps):
    from models import loss_fn, make_batches, make_model

    model = make_model(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for inputs, targets in make_batches(steps, GLOBAL_BATCH):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(inputs), targets).backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


def test_fsdp2_across_two_nodes_matches_one_process():
    got = run_ranks(4, _fsdp2, STEPS, backend="sharc", device_id="cuda:0", env=DEVICE_PATH_ENV,
                    nodes=NODES)[0]
    want = _one_process_fsdp2_reference(STEPS)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=PARAM_RTOL, atol=PARAM_ATOL,
                                   msg=lambda m: f"{name}: {m}")


def _parallelized(rank, ws, steps):
    pytest.importorskip("transformers")
    import llama_support as L
    from sharc.torch import parallelize

    torch.cuda.set_device(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda", 0)
    model = L.make_model().to(device)
    for layer in model.model.layers:  # see test_parallelize._train_pair
        layer.self_attn.num_heads, layer.self_attn.num_key_value_heads = L.HEADS, L.KV_HEADS
    model, mesh = parallelize(model, hybrid_shard_degree=2, tensor_parallel_degree=2,
                              ranks_per_node=2)
    tp = mesh["tp"].size()
    dp_rank, dp_size = rank // tp, ws // tp
    per_rank = GLOBAL_BATCH // dp_size
    part = slice(dp_rank * per_rank, (dp_rank + 1) * per_rank)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for tokens in L.make_batches(steps, GLOBAL_BATCH):
        opt.zero_grad(set_to_none=True)
        batch = tokens[part].to(device)
        model(input_ids=batch, labels=batch).loss.backward()
        opt.step()
    params = {n: p.full_tensor().detach().cpu() for n, p in model.named_parameters()}
    time.sleep(0.5)
    return params if rank == 0 else None


def test_parallelize_across_two_nodes_matches_one_process():
    pytest.importorskip("transformers", reason="Hugging Face transformers is not installed")
    import llama_support as L

    got = run_ranks(4, _parallelized, STEPS, backend="sharc", device_id="cuda:0",
                    env=DEVICE_PATH_ENV, nodes=NODES)[0]
    _, _, want = L.train_reference(STEPS, GLOBAL_BATCH, LR, MOMENTUM)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=PARAM_RTOL, atol=PARAM_ATOL,
                                   msg=lambda m: f"{name}: {m}")
