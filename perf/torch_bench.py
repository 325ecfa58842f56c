#!/usr/bin/env python3
"""sharc vs gloo through torch.distributed (CPU tensors), in one invocation.

    bash tools/torch-env.sh -- python3 perf/torch_bench.py [--world-sizes 2,4] [--sizes 1,4,16,64]
                                                           [--skip-fsdp] [--json FILE] [--smoke]
    .venv/bin/python perf/torch_bench.py ...          (the same with the venv's newer torch)

--smoke runs every part once on 2 ranks at small sizes (under a minute; CI) and, like a full
run, exits with status 1 when a collective's result or the FSDP losses are wrong. The FSDP2
step-time benchmark on a Hugging Face Llama is perf/torch_bench_fsdp2.py; the launcher shared
by both is perf/torch_bench_common.py; perf/plot_torch_bench.py plots --json files.

1. Collectives. For each world size, one launch of that many local ranks with the default group
   on backend "sharc" and `dist.new_group(backend="gloo")` over the same ranks. For each
   collective and size it times dist.all_gather_into_tensor, dist.reduce_scatter_tensor and
   dist.all_reduce (float32, blocking) on both backends, in blocks ordered gloo sharc sharc
   gloo (half the iterations each; one untimed call on switching backend) so that both see
   the same machine noise. Each timed iteration is preceded by a barrier on a third (gloo) group
   used only for synchronising. Time per collective = median over the iterations on each rank,
   then the maximum over the ranks.
   Sizes follow the nccl-tests convention: the full output buffer for all_gather (each rank
   contributes size/n), the full input buffer for reduce_scatter (each rank keeps size/n), the
   buffer for all_reduce. algbw = size / time; busbw = algbw * (n-1)/n for all_gather and
   reduce_scatter, algbw * 2(n-1)/n for all_reduce (GB/s = 1e9 B/s). The ratio is
   sharc busbw / gloo busbw (> 1: sharc is faster).
2. Backend overhead. In the same launch: the median time of a 1-element float32 dist.all_reduce
   through the sharc backend, and sharc._C._engine_allreduce_us (the same all-reduce issued
   straight to the engine, bypassing torch); their difference is the torch -> engine overhead
   per call. Short rounds of each, back to back in alternating order; the overhead is the
   median over rounds of the paired difference of the round medians, then the maximum over
   the ranks. gloo's 1-element all_reduce is reported alongside.
3. FSDP (FSDP1, FullyShardedDataParallel). A small transformer (tests/torch/models.py's
   TinyTransformer, sized by the --fsdp-* options) wrapped in FSDP FULL_SHARD
   (device_id=cpu, one FSDP unit per block) on --fsdp-world ranks, trained with SGD; per-step
   time = median over --fsdp-steps steps after warm-up (barrier before each step), maximum over
   the ranks. Launches with the default group on sharc and on gloo, ordered sharc gloo gloo
   sharc ... (--fsdp-repeats per backend); each backend's step time is its best launch's
   (the machine's other load shifts whole launches); the ratio is gloo time / sharc time
   (> 1: sharc is faster).

The machine this was written for has 2 cores and is shared, so every number is a median and
sharc and gloo are always compared within the same run.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench_common import (KEEPALIVE, LAUNCHES, MIB, TESTS_TORCH, alternating,  # noqa: E402
                                command_line, fmt_size, fmt_us, parse_size, phases, run_ranks,
                                say, setup_environment, threads_per_rank)


# --smoke: every part once, small, in well under a minute on 2 cores (the import of torch
# and each launch's init dominate).
SMOKE = {"world_sizes": "2", "sizes": "64K,1", "iters": 3, "min_iters": 2, "warmup": 1,
         "overhead_iters": 10, "overhead_rounds": 3, "fsdp_world": 2, "fsdp_steps": 2,
         "fsdp_warmup": 1, "fsdp_repeats": 1}
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
BUSBW_FACTOR = {
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_reduce": lambda n: 2 * (n - 1) / n,
}



# ---------------------------------------------------------------------------------------------
# Part 1 and 2: collectives and backend overhead (runs in the ranks)
# ---------------------------------------------------------------------------------------------

def _iters_for(size_bytes, cfg):
    """--iters up to 8 MiB, then fewer in proportion to the size, never under --min-iters."""
    scaled = int(cfg["iters"] * 8 * MIB / max(size_bytes, 1))
    return max(cfg["min_iters"], min(cfg["iters"], scaled))


def _make_op(coll, numel, n, rank, group):
    """(run, check, reset) for one collective of `numel` float32 elements (nccl-tests sizes)."""
    import torch
    import torch.distributed as dist

    if coll == "all_gather":
        inp = torch.full((numel // n,), float(rank + 1))
        out = torch.empty(numel)

        def run():
            dist.all_gather_into_tensor(out, inp, group=group)

        def check():
            expect = torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(numel // n)
            return torch.equal(out, expect)

        def reset():
            pass
    elif coll == "reduce_scatter":
        inp = torch.full((numel,), float(rank + 1))
        out = torch.empty(numel // n)

        def run():
            dist.reduce_scatter_tensor(out, inp, group=group)

        def check():
            return bool((out == n * (n + 1) / 2).all())

        def reset():
            pass
    elif coll == "all_reduce":
        buf = torch.full((numel,), float(rank + 1))

        def run():
            dist.all_reduce(buf, group=group)

        def check():
            return bool((buf == n * (n + 1) / 2).all())

        def reset():
            buf.zero_()  # in place: keep repeated sums finite
    else:
        raise ValueError(coll)
    return run, check, reset


def _collectives_worker(rank, n, cfg):
    import torch
    import torch.distributed as dist

    import sharc._C

    gloo = dist.new_group(backend="gloo")
    sync = dist.new_group(backend="gloo")  # barriers only, so neither measured group is touched
    groups = {"sharc": None, "gloo": gloo}  # None: the default group, on sharc
    out = {"collectives": {}, "overhead": {},
           "provider": sharc._C._provider(dist.group.WORLD._get_backend(torch.device("cpu")))}
    perf = time.perf_counter

    for coll in cfg["collectives"]:
        for size in cfg["sizes"]:
            numel = max(size // 4 // n, 1) * n
            iters = _iters_for(numel * 4, cfg)
            ops = {b: _make_op(coll, numel, n, rank, g) for b, g in groups.items()}
            checks = {}
            for b, (run, check, reset) in ops.items():
                sync.barrier()
                run()
                checks[b] = check()
                reset()
            # The checked call above is the first warm-up call: the first calls on a buffer
            # are slow (registration, first touch), so warm-up calls are not timed.
            for _ in range(cfg["warmup"] - 1):
                for b in groups:
                    sync.barrier()
                    ops[b][0]()
            # Blocks in the order gloo sharc sharc gloo (half the iterations each), so that a
            # drift in the machine's load hits both alike. A block that follows the other
            # backend's calls starts with one untimed call: the first call after the other
            # backend's is slower (caches and pages the other backend left), and that
            # carry-over is not what is being measured. (The calls above end with gloo's.)
            times = {b: [] for b in groups}
            first = (iters + 1) // 2
            last = "gloo"
            for b, k in (("gloo", first), ("sharc", first), ("sharc", iters - first),
                         ("gloo", iters - first)):
                if k == 0:
                    continue
                run = ops[b][0]
                if b != last:
                    sync.barrier()
                    run()
                    last = b
                for _ in range(k):
                    sync.barrier()
                    t0 = perf()
                    run()
                    times[b].append(perf() - t0)
            out["collectives"][f"{coll}/{numel * 4}"] = {
                "coll": coll, "bytes": numel * 4, "iters": iters, "times_s": times,
                "correct": checks}
            KEEPALIVE.append(ops["gloo"])  # see KEEPALIVE
            del ops

    # Part 2: torch -> engine overhead on a 1-element all_reduce.
    if cfg["overhead_iters"] > 0:
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        numel = cfg["overhead_numel"]
        t = torch.zeros(numel)
        KEEPALIVE.append(t)
        k = cfg["overhead_iters"]

        def torch_round(group):
            us = []
            for _ in range(k):
                t0 = perf()
                dist.all_reduce(t, group=group)
                us.append((perf() - t0) * 1e6)
            return statistics.median(us)

        torch_r, engine_r, gloo_r = [], [], []
        torch_round(None)  # warm-up
        torch_round(gloo)
        sharc._C._engine_allreduce_us(backend, numel, k)
        # Short rounds, torch and engine back to back in alternating order, so that a change
        # in the machine's load hits both sides of each pair; the overhead is the median of
        # the per-round differences.
        for i in range(cfg["overhead_rounds"]):
            for what in (("torch", "engine") if i % 2 == 0 else ("engine", "torch")):
                sync.barrier()
                if what == "torch":
                    torch_r.append(torch_round(None))
                else:
                    engine_r.append(sharc._C._engine_allreduce_us(backend, numel, k))
            sync.barrier()
            gloo_r.append(torch_round(gloo))
        out["overhead"] = {
            "numel": numel,
            "torch_sharc_us": statistics.median(torch_r),
            "engine_us": statistics.median(engine_r),
            "overhead_us": statistics.median([a - b for a, b in zip(torch_r, engine_r)]),
            "torch_sharc_round_us": torch_r,
            "engine_round_us": engine_r,
            "torch_gloo_us": statistics.median(gloo_r),
            "quietest": {"torch_sharc_us": min(torch_r), "engine_us": min(engine_r)},
            "calls": k * len(torch_r),
        }
    sync.barrier()
    return out


# ---------------------------------------------------------------------------------------------
# Part 3: FSDP step time (runs in the ranks)
# ---------------------------------------------------------------------------------------------

def _model_module():
    """tests/torch/models.py: the model the training tests use."""
    if TESTS_TORCH not in sys.path:
        sys.path.insert(0, TESTS_TORCH)
    import models

    return models


def _fsdp_worker(rank, n, cfg):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    models = _model_module()
    sync = dist.new_group(backend="gloo")
    torch.manual_seed(0)  # same initial parameters on every rank and for both backends
    model = models.TinyTransformer(vocab=cfg["vocab"], dim=cfg["dim"], heads=cfg["heads"],
                                   layers=cfg["layers"], seq=cfg["seq"])
    n_params = sum(p.numel() for p in model.parameters())
    model = FSDP(model, device_id=torch.device("cpu"),
                 sharding_strategy=ShardingStrategy.FULL_SHARD,
                 auto_wrap_policy=ModuleWrapPolicy({models.Block}), use_orig_params=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    KEEPALIVE.extend([model, opt])
    gen = torch.Generator().manual_seed(100 + rank)
    steps = cfg["warmup"] + cfg["steps"]
    data = [torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=gen)
            for _ in range(steps)]
    times, losses = [], []
    for i, tokens in enumerate(data):
        sync.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= cfg["warmup"]:
            times.append(dt)
        losses.append(float(loss.detach()))
    sync.barrier()
    return {"times_s": times, "losses": losses, "params": n_params}



def _collective_rows(n, per_rank):
    rows = []
    for key in per_rank[0]["collectives"]:
        recs = [r["collectives"][key] for r in per_rank]
        coll, nbytes, iters = recs[0]["coll"], recs[0]["bytes"], recs[0]["iters"]
        row = {"world_size": n, "collective": coll, "bytes": nbytes, "iters": iters}
        for b in ("sharc", "gloo"):
            rank_medians = [statistics.median(r["times_s"][b]) for r in recs]
            t = max(rank_medians)
            algbw = nbytes / t / 1e9
            row[b] = {
                "time_s": t,
                "rank_median_s": rank_medians,
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * BUSBW_FACTOR[coll](n),
                "correct": all(r["correct"][b] for r in recs),
                "times_s": [r["times_s"][b] for r in recs],
            }
        row["ratio_sharc_over_gloo"] = row["sharc"]["busbw_GBps"] / row["gloo"]["busbw_GBps"]
        rows.append(row)
    return rows


def _overhead(n, per_rank):
    recs = [r["overhead"] for r in per_rank]
    if not recs[0]:
        return None
    torch_us = max(r["torch_sharc_us"] for r in recs)
    engine_us = max(r["engine_us"] for r in recs)
    return {
        "world_size": n,
        "numel": recs[0]["numel"],
        "calls_per_rank": recs[0]["calls"],
        "torch_sharc_us": torch_us,
        "engine_us": engine_us,
        "overhead_us": max(r["overhead_us"] for r in recs),
        "overhead_us_per_rank": [r["overhead_us"] for r in recs],
        "torch_gloo_us": max(r["torch_gloo_us"] for r in recs),
        "quietest_torch_sharc_us": max(r["quietest"]["torch_sharc_us"] for r in recs),
        "quietest_engine_us": max(r["quietest"]["engine_us"] for r in recs),
        "per_rank": recs,
    }


def _fsdp_summary(runs):
    out = {}
    for b in ("sharc", "gloo"):
        meds = []
        for per_rank in runs[b]:
            meds.append(max(statistics.median(r["times_s"]) for r in per_rank))
        out[b] = {"step_s": min(meds), "launch_step_s": meds,
                  "params": runs[b][0][0]["params"],
                  "losses_rank0": [pr[0]["losses"] for pr in runs[b]],
                  "times_s": [[r["times_s"] for r in pr] for pr in runs[b]]}
    out["ratio_gloo_over_sharc"] = out["gloo"]["step_s"] / out["sharc"]["step_s"]
    return out



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world-sizes", default="2,4",
                    help="comma-separated (default 2,4); empty: skip parts 1 and 2")
    ap.add_argument("--sizes", default="1,4,16,64",
                    help="comma-separated sizes, MiB unless suffixed K/M/G/B (default 1,4,16,64)")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES),
                    help="subset of " + ",".join(COLLECTIVES))
    ap.add_argument("--iters", type=int, default=20,
                    help="timed iterations per backend up to 8 MiB; fewer above (default 20)")
    ap.add_argument("--min-iters", type=int, default=5,
                    help="timed iterations at the largest sizes (default 5)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="untimed calls per backend before timing, the first checked for "
                         "correctness (default 2)")
    ap.add_argument("--overhead-iters", type=int, default=100,
                    help="1-element all_reduces per round for the overhead (0: skip)")
    ap.add_argument("--overhead-rounds", type=int, default=11)
    ap.add_argument("--overhead-numel", type=int, default=1)
    ap.add_argument("--skip-fsdp", action="store_true")
    ap.add_argument("--fsdp-world", type=int, default=4)
    ap.add_argument("--fsdp-steps", type=int, default=10)
    ap.add_argument("--fsdp-warmup", type=int, default=3)
    ap.add_argument("--fsdp-repeats", type=int, default=2,
                    help="launches per backend, in the order sharc gloo gloo sharc ... "
                         "(default 2); step time = the best launch's (other machine load "
                         "moves whole launches)")
    ap.add_argument("--fsdp-dim", type=int, default=128)
    ap.add_argument("--fsdp-heads", type=int, default=4)
    ap.add_argument("--fsdp-layers", type=int, default=4)
    ap.add_argument("--fsdp-seq", type=int, default=32)
    ap.add_argument("--fsdp-vocab", type=int, default=512)
    ap.add_argument("--fsdp-batch", type=int, default=2, help="sequences per rank per step")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads per rank (default: cores / ranks, at least 1)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds per launch before the ranks' stacks are dumped and they are "
                         "killed (default 600)")
    ap.add_argument("--start-method", choices=("fork", "spawn"), default="fork",
                    help="how ranks are started (default fork: the parent has torch loaded "
                         "but nothing distributed initialised, and each launch saves the "
                         "ranks' imports)")
    ap.add_argument("--json", metavar="FILE", help="write the raw numbers here")
    ap.add_argument("--smoke", action="store_true",
                    help="a quick check that everything runs and agrees (CI): 2 ranks, "
                         "64 KiB and 1 MiB, few iterations, FSDP on 2 ranks once per backend; "
                         "options given explicitly still win")
    args = ap.parse_args(argv)
    if args.smoke:
        given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        for opt, value in SMOKE.items():
            if "--" + opt.replace("_", "-") not in given:
                setattr(args, opt, value)

    world_sizes = [int(x) for x in args.world_sizes.split(",") if x.strip()]
    sizes = [parse_size(x) for x in args.sizes.split(",") if x.strip()]
    colls = [c.strip() for c in args.collectives.split(",") if c.strip()]
    for c in colls:
        if c not in COLLECTIVES:
            ap.error(f"unknown collective {c!r} (choose from {', '.join(COLLECTIVES)})")
    if any(n < 2 for n in world_sizes):
        ap.error("world sizes must be at least 2")

    setup_environment()  # ranks run this interpreter; sharc and tests/torch importable
    cores = os.cpu_count() or 1

    def threads(n):
        return threads_per_rank(args.threads, n)

    command = command_line()
    started = time.time()
    say("# sharc vs gloo through torch.distributed")
    say()
    say(f"Command: `{command}` (torch 2.6 root: `bash tools/torch-env.sh -- {command}`; "
        f"the venv's torch: `.venv/bin/python {command.split(' ', 1)[1]}`)")
    import torch  # noqa: E402  (after PYTHONPATH, for the version line only)
    say(f"torch {torch.__version__}, {cores} cores, "
        f"{datetime.datetime.now().isoformat(timespec='seconds')}")
    say()

    problems = []  # wrong results: the exit status is 1 if any
    report = {"command": command, "torch": torch.__version__, "cores": cores,
              "config": vars(args), "collectives": [], "overhead": [], "fsdp": None}

    cfg = {"sizes": sizes, "collectives": colls, "iters": args.iters,
           "min_iters": args.min_iters, "warmup": args.warmup,
           "overhead_iters": args.overhead_iters, "overhead_rounds": args.overhead_rounds,
           "overhead_numel": args.overhead_numel}
    for n in world_sizes:
        t0 = time.time()
        per_rank = run_ranks(n, _collectives_worker, cfg, backend="sharc",
                             num_threads=threads(n), timeout=args.timeout,
                             start_method=args.start_method)
        report["collectives"] += _collective_rows(n, per_rank)
        report["provider"] = per_rank[0]["provider"]
        oh = _overhead(n, per_rank)
        if oh:
            report["overhead"].append(oh)
        print(f"[world size {n}: {time.time() - t0:.0f} s{phases()}]", file=sys.stderr,
              flush=True)

    if report["collectives"]:
        say("## Collectives (float32, blocking; nccl-tests sizes and busbw; "
            "time = max over ranks of the median)")
        say()
        say(f"sharc's libfabric provider: {report['provider']}; ratio > 1: sharc faster.")
        say()
        say("| ranks | collective | size | iters | sharc µs | sharc algbw GB/s | "
            "sharc busbw GB/s | gloo µs | gloo algbw GB/s | gloo busbw GB/s | "
            "sharc/gloo busbw |")
        say("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        slower = []
        for row in report["collectives"]:
            s, g = row["sharc"], row["gloo"]
            flag = "" if s["correct"] and g["correct"] else " (WRONG RESULT)"
            if flag:
                problems.append(f"{row['collective']} {fmt_size(row['bytes'])} on "
                                f"{row['world_size']} ranks: wrong result")
            say(f"| {row['world_size']} | {row['collective']} | {fmt_size(row['bytes'])} | "
                f"{row['iters']} | {fmt_us(s['time_s'])} | {s['algbw_GBps']:.2f} | "
                f"{s['busbw_GBps']:.2f} | {fmt_us(g['time_s'])} | {g['algbw_GBps']:.2f} | "
                f"{g['busbw_GBps']:.2f} | {row['ratio_sharc_over_gloo']:.2f}x{flag} |")
            if row["ratio_sharc_over_gloo"] < 1.0:
                slower.append(f"{row['collective']} {fmt_size(row['bytes'])} on "
                              f"{row['world_size']} ranks ({row['ratio_sharc_over_gloo']:.2f}x)")
        say()
        say("sharc slower than gloo: " + ("; ".join(slower) if slower else "nowhere") + ".")
        say()

    if report["overhead"]:
        say(f"## Backend overhead ({args.overhead_numel}-element float32 all_reduce, "
            f"{args.overhead_rounds} rounds of {args.overhead_iters} calls per side; "
            f"overhead = median over rounds of the paired difference of round medians; "
            f"max over ranks)")
        say()
        for oh in report["overhead"]:
            say(f"- {oh['world_size']} ranks: dist.all_reduce via sharc "
                f"{oh['torch_sharc_us']:.1f} µs, engine direct "
                f"(sharc._C._engine_allreduce_us) {oh['engine_us']:.1f} µs -> "
                f"torch->engine overhead {oh['overhead_us']:.1f} µs/call "
                f"(per rank: {', '.join(f'{x:.1f}' for x in oh['overhead_us_per_rank'])}); "
                f"gloo dist.all_reduce {oh['torch_gloo_us']:.1f} µs. Quietest round: "
                f"sharc {oh['quietest_torch_sharc_us']:.1f} µs vs engine "
                f"{oh['quietest_engine_us']:.1f} µs")
        say()

    if not args.skip_fsdp:
        fcfg = {"dim": args.fsdp_dim, "heads": args.fsdp_heads, "layers": args.fsdp_layers,
                "seq": args.fsdp_seq, "vocab": args.fsdp_vocab, "batch": args.fsdp_batch,
                "steps": args.fsdp_steps, "warmup": args.fsdp_warmup}
        runs = {"sharc": [], "gloo": []}
        for b in alternating("sharc", "gloo", args.fsdp_repeats):
            t0 = time.time()
            runs[b].append(run_ranks(args.fsdp_world, _fsdp_worker, fcfg, backend=b,
                                     num_threads=threads(args.fsdp_world),
                                     timeout=args.timeout, start_method=args.start_method))
            print(f"[fsdp {b}: {time.time() - t0:.0f} s{phases()}]", file=sys.stderr,
                  flush=True)
        fs = _fsdp_summary(runs)
        fs["config"] = fcfg
        fs["world_size"] = args.fsdp_world
        report["fsdp"] = fs
        mode = "models.TinyTransformer"
        say(f"## FSDP FULL_SHARD step ({args.fsdp_world} ranks, {mode}: dim {args.fsdp_dim}, "
            f"{args.fsdp_layers} layers, {fs['sharc']['params'] / 1e6:.2f} M params, "
            f"batch {args.fsdp_batch}x{args.fsdp_seq} per rank, SGD; median of "
            f"{args.fsdp_steps} steps after {args.fsdp_warmup} warm-up, max over ranks; best of "
            f"{args.fsdp_repeats} launch(es) per backend, ordered sharc gloo gloo sharc ...)")
        say()
        say(f"- sharc {fs['sharc']['step_s'] * 1e3:.1f} ms/step, gloo "
            f"{fs['gloo']['step_s'] * 1e3:.1f} ms/step -> gloo/sharc "
            f"{fs['ratio_gloo_over_sharc']:.2f}x (> 1: sharc faster); per launch: sharc "
            f"{', '.join(f'{x * 1e3:.0f}' for x in fs['sharc']['launch_step_s'])} ms, gloo "
            f"{', '.join(f'{x * 1e3:.0f}' for x in fs['gloo']['launch_step_s'])} ms")
        same = all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in
                   zip(fs["sharc"]["losses_rank0"][0], fs["gloo"]["losses_rank0"][0]))
        say(f"- rank-0 losses agree between backends: {'yes' if same else 'NO'}")
        if not same:
            problems.append("FSDP: sharc's and gloo's losses differ")
        if fs["ratio_gloo_over_sharc"] < 1.0:
            say(f"- sharc slower than gloo here ({fs['ratio_gloo_over_sharc']:.2f}x)")
        say()

    say(f"Total {time.time() - started:.0f} s.")
    report["launches"] = LAUNCHES
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        say(f"Raw numbers: {args.json}")
    for p in problems:
        print(f"torch_bench: FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
