#!/usr/bin/env python3
"""FSDP2 training-step time of a tiny Hugging Face Llama, sharc vs gloo (CPU tensors).

    .venv/bin/python perf/torch_bench_fsdp2.py [--world 4] [--launches 5] [--json FILE]
    .venv/bin/python perf/torch_bench_fsdp2.py --smoke                 (CI: under a minute)

Needs transformers, and a torch whose FSDP2 runs on CPU (torch.cpu.Stream.record_event: not
torch 2.6, which the script refuses with that reason).

Model: transformers.LlamaForCausalLM from a small LlamaConfig (default hidden 256, MLP 704,
4 layers, 8 heads, vocabulary 1024: 3.74 M parameters), random weights drawn after
torch.manual_seed(0), so every rank and every launch starts from the same model; float32,
"sdpa" attention. FSDP2: fully_shard on each decoder layer, then on the root, over a 1-D CPU
mesh of --world ranks (the default group); AdamW. Each rank trains on its own batches
(--batch sequences of --seq random tokens per rank, from a seed of the rank), the same for
both backends.

Timing: a barrier on a separate gloo group before each step (so no rank starts early and no
measured group carries it), then zero_grad, forward with labels, backward and optimizer step.
A launch's step time is the median over its --steps steps after --warmup untimed ones, on each
rank, then the maximum over the ranks. Launches alternate sharc gloo gloo sharc sharc gloo ...
(--launches per backend), so a drift in the machine's other load hits both alike; a backend's
step time is the median over its launches, and the ratio is gloo / sharc (> 1: sharc faster).
Each adjacent (sharc, gloo) pair of launches also gives a ratio; their spread shows how noisy
the machine was. Alongside: each rank's CPU time per step, its main thread's (compute, and any
spinning while it waits) and its other threads' (the backend's workers), since with more ranks
than cores a rank's CPU comes out of the others' compute.

Sanity check that both backends did the same work: every launch's per-rank, per-step losses
and a checksum of the final parameters (sum and sum of squares of all shards, float64, summed
over the ranks) are compared with the first launch of the second backend. They differ only
by float32 rounding (sharc and gloo add the ranks' gradients in different orders; AdamW then
carries that into the weights), far below the 1e-4 relative tolerance used; a wrong reduction
or a missed gradient moves them by orders of magnitude more. A mismatch makes the exit status 1.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench_common import (KEEPALIVE, LAUNCHES, alternating, command_line,  # noqa: E402
                                phases, run_ranks, say, setup_environment, threads_per_rank)

RTOL = 1e-4  # losses and parameter checksums, sharc vs gloo (see the docstring)

# --smoke: 2 ranks, a model of 0.1 M parameters, one launch per backend, 3 steps.
SMOKE = {"world": 2, "hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "vocab": 128,
         "seq": 32, "batch": 2, "steps": 2, "warmup": 1, "launches": 1}


def _fully_shard():
    try:  # torch >= 2.6 exports FSDP2 here; earlier releases only under _composable
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # pragma: no cover
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def _llama_config(cfg):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
        intermediate_size=cfg["intermediate"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], num_key_value_heads=cfg["heads"],
        max_position_embeddings=cfg["seq"], tie_word_embeddings=False, attention_dropout=0.0,
        attn_implementation=cfg["attn"])


def _worker(rank, n, cfg):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import LlamaForCausalLM

    sync = dist.new_group(backend="gloo")  # barriers and the checksum only
    torch.manual_seed(0)  # the same initial weights on every rank and in every launch
    model = LlamaForCausalLM(_llama_config(cfg)).float().train()
    n_params = sum(p.numel() for p in model.parameters())
    # "cpu": the default device type of a CUDA build of torch is cuda.
    mesh = init_device_mesh("cpu", (n,))
    fully_shard = _fully_shard()
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    KEEPALIVE.extend([model, opt])
    gen = torch.Generator().manual_seed(100 + rank)
    data = [torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=gen)
            for _ in range(cfg["warmup"] + cfg["steps"])]
    times, losses, bg_cpu, main_cpu = [], [], [], []
    for i, tokens in enumerate(data):
        sync.barrier()
        c0, m0 = time.process_time(), time.thread_time()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        # CPU time of the process's other threads (the backend's workers and progress
        # threads, torch's intra-op pool if --threads > 1): what a backend takes from compute.
        main = time.thread_time() - m0  # compute, and any spinning while waiting
        bg = (time.process_time() - c0) - main
        if i >= cfg["warmup"]:
            times.append(dt)
            bg_cpu.append(bg)
            main_cpu.append(main)
        losses.append(float(loss.detach()))
    # Checksum of the trained parameters: each rank's shards, added up over the ranks.
    local = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            shard = p.to_local().double()
            local += torch.stack([shard.sum(), (shard * shard).sum()])
    dist.all_reduce(local, group=sync)
    sync.barrier()
    return {"times_s": times, "losses": losses, "params": n_params,
            "checksum": local.tolist(), "other_threads_cpu_s": bg_cpu,
            "main_thread_cpu_s": main_cpu}


def _rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def _summarise(launches, backends):
    """launches: [(backend, per-rank results)] in launch order."""
    a, b = backends
    step = {x: [] for x in backends}
    for backend, per_rank in launches:
        step[backend].append(max(statistics.median(r["times_s"]) for r in per_rank))
    med = {x: statistics.median(step[x]) for x in backends}
    # CPU per step (main thread; other threads): median over each rank's steps, mean over
    # ranks and launches. On a machine with more ranks than cores, CPU one rank spends waiting
    # is taken from another rank's compute.
    def cpu(key):
        return {x: statistics.mean(statistics.median(r[key]) for bk, pr in launches if bk == x
                                   for r in pr) for x in backends}
    # Adjacent launches pair up (a b), (b a), ...: the ratio within each pair.
    pairs = []
    for i in range(0, len(launches) - 1, 2):
        t = {launches[j][0]: max(statistics.median(r["times_s"]) for r in launches[j][1])
             for j in (i, i + 1)}
        pairs.append(t[b] / t[a])
    ref = next(pr for bk, pr in launches if bk == b)
    worst_loss, worst_sum = 0.0, 0.0
    for _, per_rank in launches:
        for r, rr in zip(per_rank, ref):
            worst_loss = max([worst_loss] + [_rel(x, y) for x, y in zip(r["losses"], rr["losses"])])
        worst_sum = max([worst_sum] + [_rel(x, y) for x, y in
                                       zip(per_rank[0]["checksum"], ref[0]["checksum"])])
    return {"step_s": med, "launch_step_s": step, "ratio": med[b] / med[a],
            "pair_ratios": pairs, "max_rel_loss_diff": worst_loss,
            "max_rel_checksum_diff": worst_sum, "other_threads_cpu_s": cpu("other_threads_cpu_s"),
            "main_thread_cpu_s": cpu("main_thread_cpu_s"),
            "agree": worst_loss <= RTOL and worst_sum <= RTOL,
            "params": launches[0][1][0]["params"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--launches", type=int, default=5,
                    help="launches per backend, ordered sharc gloo gloo sharc ... (default 5)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per launch (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=704, help="MLP width (default 704)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    ap.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"),
                    help="transformers attention implementation (default sdpa)")
    ap.add_argument("--backends", default="sharc,gloo",
                    help="the two backends compared (default sharc,gloo; gloo,gloo shows the "
                         "noise floor)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads per rank (default: cores / ranks, at least 1)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per launch")
    ap.add_argument("--start-method", choices=("fork", "spawn"), default="fork")
    ap.add_argument("--json", metavar="FILE", help="write the raw numbers here")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny and quick (CI): " + ", ".join(f"{k} {v}" for k, v in SMOKE.items())
                    + "; options given explicitly still win")
    args = ap.parse_args(argv)
    if args.smoke:
        given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        for opt, value in SMOKE.items():
            if "--" + opt not in given:
                setattr(args, opt, value)
    backends = [x.strip() for x in args.backends.split(",")]
    if len(backends) != 2 or not all(backends):
        ap.error("--backends takes two names, e.g. sharc,gloo")
    if backends[0] == backends[1]:  # labels; the launches use the name before the "#"
        backends = [backends[0] + "#1", backends[1] + "#2"]
    if args.world < 2 or args.launches < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("need --world >= 2, --launches >= 1, --steps >= 1, --warmup >= 0")
    if args.hidden % args.heads:
        ap.error(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")

    setup_environment()
    import torch  # noqa: E402  after setup_environment (PYTHONPATH for the ranks)
    # FSDP2 on CPU records events on torch.cpu.Stream, which torch 2.6 lacks (AttributeError
    # in foreach_all_gather); tests/torch/test_fsdp2.py skips on the same condition.
    if not hasattr(torch.cpu.Stream, "record_event"):
        sys.exit(f"torch_bench_fsdp2: FSDP2 on CPU needs torch.cpu.Stream.record_event, "
                 f"missing in torch {torch.__version__}; use a newer torch (e.g. the venv's)")
    try:
        import transformers
        # Loaded here once: forked ranks inherit the modules (transformers imports lazily).
        from transformers import LlamaConfig, LlamaForCausalLM  # noqa: F401
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
        _fully_shard()
    except ImportError:
        sys.exit("torch_bench_fsdp2: needs transformers (pip install transformers); "
                 "none in this Python")
    cfg = {k: getattr(args, k) for k in ("hidden", "intermediate", "layers", "heads", "vocab",
                                         "seq", "batch", "steps", "warmup", "attn")}
    command = command_line()
    say("# FSDP2 Llama step time, sharc vs gloo")
    say()
    say(f"Command: `{command}`")
    say(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{os.cpu_count()} cores, {datetime.datetime.now().isoformat(timespec='seconds')}")
    say()

    started = time.time()
    launches = []
    for backend in alternating(backends[0], backends[1], args.launches):
        t0 = time.time()
        per_rank = run_ranks(args.world, _worker, cfg, backend=backend.split("#")[0],
                             num_threads=threads_per_rank(args.threads, args.world),
                             timeout=args.timeout, start_method=args.start_method)
        launches.append((backend, per_rank))
        step = max(statistics.median(r["times_s"]) for r in per_rank)
        print(f"[{backend}: {step * 1e3:.0f} ms/step; launch {time.time() - t0:.0f} s"
              f"{phases()}]", file=sys.stderr, flush=True)
    s = _summarise(launches, backends)
    a, b = backends

    def ms(x):
        return f"{x * 1e3:.0f}"

    say(f"{args.world} ranks, LlamaForCausalLM hidden {args.hidden}, MLP {args.intermediate}, "
        f"{args.layers} layers, {args.heads} heads, vocabulary {args.vocab}: "
        f"{s['params'] / 1e6:.2f} M parameters, float32, {args.attn} attention; batch "
        f"{args.batch}x{args.seq} tokens per rank; fully_shard per decoder layer + root, "
        f"AdamW. Step time: median of {args.steps} steps after {args.warmup} warm-up, max over "
        f"ranks; median over {args.launches} launch(es) per backend ordered "
        f"{' '.join(alternating(a, b, min(args.launches, 2)))} ...")
    say()
    say(f"| ranks | params | {a} ms/step | {b} ms/step | {b}/{a} | {b}/{a} per launch pair "
        f"(min–median–max) | {a} launches ms | {b} launches ms | CPU ms/step per rank, main "
        f"thread + others, {a} / {b} |")
    say("|---:|---:|---:|---:|---:|---|---|---|---:|")
    pr = sorted(s["pair_ratios"])
    spread = (f"{pr[0]:.2f}–{statistics.median(pr):.2f}–{pr[-1]:.2f}" if pr else "–")
    say(f"| {args.world} | {s['params'] / 1e6:.2f} M | {ms(s['step_s'][a])} | "
        f"{ms(s['step_s'][b])} | {s['ratio']:.2f}x | {spread} | "
        f"{', '.join(ms(x) for x in s['launch_step_s'][a])} | "
        f"{', '.join(ms(x) for x in s['launch_step_s'][b])} | "
        f"{ms(s['main_thread_cpu_s'][a])} + {ms(s['other_threads_cpu_s'][a])} / "
        f"{ms(s['main_thread_cpu_s'][b])} + {ms(s['other_threads_cpu_s'][b])} |")
    say()
    say(f"Losses and parameter checksums agree between launches and backends (rtol {RTOL:g}): "
        f"{'yes' if s['agree'] else 'NO'} (max relative difference: losses "
        f"{s['max_rel_loss_diff']:.1e}, checksum {s['max_rel_checksum_diff']:.1e}).")
    say(f"Total {time.time() - started:.0f} s.")
    if args.json:
        report = {"command": command, "torch": torch.__version__,
                  "transformers": transformers.__version__, "cores": os.cpu_count(),
                  "config": vars(args), "summary": s,
                  "launches": [{"backend": bk, "per_rank": per_rank}
                               for bk, per_rank in launches],
                  "phases": LAUNCHES}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        say(f"Raw numbers: {args.json}")
    if not s["agree"]:
        print("torch_bench_fsdp2: FAILED: the backends' losses or parameters differ",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
