#!/usr/bin/env python3
"""weave from PyTorch, end to end: a tensor-parallel row-parallel linear layer on every rank
(weave_tp.nn.RowParallelLinear), its output checked against torch.matmul on the full inputs summed over
the ranks (fp64 on the CPU, every rank's shards gathered through gloo), then timed per call (CUDA
events after a warm-up, the median; the slowest rank's) for weave's fused kernel, weave's "auto"
choice, and F.linear + dist.reduce_scatter_tensor where NCCL can run.

    torchrun --nproc-per-node 4 examples/row_parallel_linear.py [--tokens 4096] [--in-features 8192]
        [--out-features 8192] [--dtype bf16|fp16|fp32] [--iters 50] [--warmup 10]

Each rank takes GPU LOCAL_RANK % (visible GPUs). Ranks that share a GPU run side by side only under
CUDA MPS (`scripts/launch.sh -n 1 --mps env -u CUDA_MODULE_LOADING torchrun ...` starts a private
daemon; docs/python.md), and NCCL refuses two ranks on one GPU: the process group is then gloo and
the torch baseline prints n/a.
Exit status 0 when the check passes. Needs weave's Python package on the path (pip install ./python,
or PYTHONPATH=python) and its library (docs/python.md).
"""

import argparse
import math
import os
import statistics
import sys
from typing import Callable, Dict, List, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weave_tp

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
EPS = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -20}
CHECKED_ROWS = 64  # per rank, evenly spaced over its rows (fp64 on the CPU is slow)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=4096, help="rows of the input (M)")
    p.add_argument("--in-features", type=int, default=8192, help="split over the ranks (K)")
    p.add_argument("--out-features", type=int, default=8192, help="N")
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--iters", type=int, default=50, help="timed calls")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before them")
    return p.parse_args()


def median_us(fn: Callable[[], object], iters: int, warmup: int) -> float:
    """Median time of one call in microseconds, every call between its own pair of CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    dist.barrier()  # every rank starts together: the calls of one wait for the others'
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events) * 1e3


def check(layer: weave_tp.nn.RowParallelLinear, x: torch.Tensor, y: torch.Tensor, tokens: int) -> str:
    """This rank's output rows (a sample) against fp64 on the CPU: every rank's x and weight shards
    are gathered through gloo (as float32, exact for every dtype), the bias is everyone's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    xs: List[torch.Tensor] = [torch.empty(x.shape) for _ in range(world)]
    ws: List[torch.Tensor] = [torch.empty(layer.weight.shape) for _ in range(world)]
    dist.all_gather(xs, x.float().cpu())
    dist.all_gather(ws, layer.weight.detach().float().cpu())
    begin, rows = weave_tp.row_split(tokens, world, rank)
    picked = (torch.linspace(0, rows - 1, min(rows, CHECKED_ROWS)).round().long().unique() if rows
              else torch.empty(0, dtype=torch.long))
    want = sum(xs[r][begin + picked].double() @ ws[r].double().t() for r in range(world))
    want = want + layer.bias.detach().double().cpu()
    got = y[picked.to(y.device)].double().cpu()
    # weave's test tolerance: output rounding plus accumulation growing like sqrt(K), values in [-1, 1)
    dtype = x.dtype
    atol, rtol = 4 * EPS[dtype] * math.sqrt(layer.in_features / 3 + 1), 2 * EPS[dtype]
    err = (got - want).abs()
    wrong = torch.tensor([0 if rows == 0 or bool((err <= atol + rtol * want.abs()).all()) else 1])
    worst = torch.tensor([err.max().item() if rows else 0.0])
    dist.all_reduce(wrong)  # gloo, on the CPU: every rank learns the verdict
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return (f"{'OK' if wrong.item() == 0 else 'FAILED'}: up to {CHECKED_ROWS} rows a rank against fp64 on the CPU, "
            f"max |error| {worst.item():.3g} (bound {atol:.3g} + {rtol:.3g} |ref|), {wrong.item()} rank(s) wrong")


def main() -> int:
    args = parse_args()
    count = torch.cuda.device_count()
    if count == 0:
        print("row_parallel_linear: no CUDA device", file=sys.stderr)
        return 1
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % count)
    shared = count < int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    dist.init_process_group("gloo" if shared else "cpu:gloo,cuda:nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.in_features % world:
        print(f"row_parallel_linear: --in-features {args.in_features} must be a multiple of the world {world}",
              file=sys.stderr)
        return 2
    weave_tp.init()
    dtype = DTYPES[args.dtype]

    layer = weave_tp.nn.RowParallelLinear(args.in_features, args.out_features, dtype=dtype)
    gen = torch.Generator(device="cuda").manual_seed(1000 + rank)  # this rank's shards
    same = torch.Generator(device="cuda").manual_seed(999)  # the bias: the same on every rank
    with torch.no_grad():
        layer.weight.copy_(torch.rand(layer.weight.shape, generator=gen, device="cuda") * 2 - 1)
        layer.bias.copy_(torch.rand(layer.bias.shape, generator=same, device="cuda") * 2 - 1)
    x = (torch.rand((args.tokens, args.in_features // world), generator=gen, device="cuda") * 2 - 1).to(dtype)

    with torch.no_grad():
        y = layer(x)
        verdict = check(layer, x, y, args.tokens)

        times: Dict[str, Union[float, str]] = {}
        for strategy in ("fused", "auto"):
            def call(strategy: str = strategy) -> torch.Tensor:
                return weave_tp.gemm_rs(x, layer.weight, layer.bias, b_layout="col", strategy=strategy)

            call()  # makes the plan (collective), outside the timing
            info = weave_tp.plan_info(x, layer.weight, layer.bias, b_layout="col", strategy=strategy)
            blocks = f", {info.gemm_blocks} GEMM + {info.comm_blocks} comm blocks" if info.strategy == "fused" else ""
            times[f"weave {strategy} (plan: {info.strategy}{blocks})"] = median_us(call, args.iters, args.warmup)

        baseline = "F.linear + dist.reduce_scatter_tensor (NCCL)"
        if shared:
            times[baseline] = "n/a: ranks share a GPU, and NCCL refuses two ranks on one GPU"
        elif args.tokens % world:
            times[baseline] = f"n/a: reduce_scatter_tensor wants tokens ({args.tokens}) divisible by world ({world})"
        else:
            rows_out = torch.empty((args.tokens // world, args.out_features), dtype=dtype, device="cuda")

            def torch_call() -> None:
                dist.reduce_scatter_tensor(rows_out, F.linear(x, layer.weight))
                rows_out.add_(layer.bias)

            times[baseline] = median_us(torch_call, args.iters, args.warmup)
        times["F.linear alone (this rank's partial product, no communication)"] = median_us(
            lambda: F.linear(x, layer.weight, layer.bias), args.iters, args.warmup)

    weave_tp.sync()  # raises if a weave kernel's bounded wait expired (its output would be wrong)
    every: List[Dict[str, Union[float, str]]] = [{} for _ in range(world)]
    dist.all_gather_object(every, times)
    if rank == 0:
        where = f"{count} GPU(s) ({torch.cuda.get_device_name()})"
        print(f"# weave row_parallel_linear: {world} ranks on {where}, tokens {args.tokens}, in_features "
              f"{args.in_features} ({args.in_features // world} a rank), out_features {args.out_features}, "
              f"{args.dtype}")
        print(f"# check: {verdict}")
        print(f"# time per call: median of {args.iters} after {args.warmup} warm-up, the slowest rank")
        for name, value in times.items():
            slowest = max(t[name] for t in every) if isinstance(value, float) else value
            print(f"{name:<66} {slowest:>10.1f} us" if isinstance(slowest, float) else f"{name:<66} {slowest}")
    failed = verdict.startswith("FAILED")
    weave_tp.finalize()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
