#!/usr/bin/env python3
"""A sequence-parallel transformer MLP on weave, both halves of tensor parallelism: each rank holds its
rows of the tokens; weave_tp.nn.ColumnParallelLinear (AllGather + GEMM) makes every token's share of the
hidden units, GELU, weave_tp.nn.RowParallelLinear (GEMM + ReduceScatter) brings the rank's rows of the
output back. Forward and backward are checked against the whole MLP in float64 on the CPU (every
rank's tokens, weights and output gradients gathered through gloo), then the forward is timed (CUDA
events after a warm-up, the median; the slowest rank's) against torch: all_gather_into_tensor,
F.linear, GELU, F.linear, reduce_scatter_tensor, where NCCL can run.

    torchrun --nproc-per-node 4 examples/tp_mlp.py [--tokens 2048] [--hidden 1024] [--ffn 4096]
        [--dtype bf16|fp16] [--iters 30] [--warmup 5]

Each rank takes GPU LOCAL_RANK % (visible GPUs); ranks sharing a GPU need CUDA MPS (as
examples/row_parallel_linear.py says) and then have no torch baseline (NCCL refuses them). tokens and
ffn must be multiples of the world. Exit status 0 when the check passes.
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

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
EPS = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=2048, help="all ranks' tokens together (a multiple of the world)")
    p.add_argument("--hidden", type=int, default=1024, help="the model's width")
    p.add_argument("--ffn", type=int, default=4096, help="the MLP's hidden units (a multiple of the world)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--iters", type=int, default=30, help="timed calls")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before them")
    return p.parse_args()


def median_us(fn: Callable[[], object], iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events) * 1e3


def gathered(t: torch.Tensor) -> List[torch.Tensor]:
    """Every rank's t (as float64 on the CPU, through gloo: the shapes may differ by a row)."""
    world = dist.get_world_size()
    shapes: List[object] = [None] * world
    dist.all_gather_object(shapes, tuple(t.shape))
    out = [torch.empty(s, dtype=torch.float64) for s in shapes]
    dist.all_gather(out, t.detach().double().cpu())
    return out


def close(name: str, got: torch.Tensor, want: torch.Tensor, k: int, dtype: torch.dtype) -> str:
    """'' when got is within 4x weave's test tolerance of want for a k-term sum (the MLP rounds its
    hidden activations and gradients to dtype between the GEMMs, the float64 reference does not),
    else what is wrong."""
    atol, rtol = 16 * EPS[dtype] * math.sqrt(k / 3 + 1), 8 * EPS[dtype]
    err = (got.double().cpu() - want).abs()
    bad = ~(err <= atol + rtol * want.abs())
    return f"{name}: {int(bad.sum())} of {err.numel()} wrong (max {err.max().item():.3g}); " if bad.any() else ""


def main() -> int:
    args = parse_args()
    count = torch.cuda.device_count()
    if count == 0:
        print("tp_mlp: no CUDA device", file=sys.stderr)
        return 1
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % count)
    shared = count < int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    dist.init_process_group("gloo" if shared else "cpu:gloo,cuda:nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.tokens % world or args.ffn % world:
        print(f"tp_mlp: --tokens {args.tokens} and --ffn {args.ffn} must be multiples of the world {world}",
              file=sys.stderr)
        return 2
    weave_tp.init()
    dtype, T = DTYPES[args.dtype], args.tokens
    up = weave_tp.nn.ColumnParallelLinear(args.hidden, args.ffn, dtype=dtype)
    down = weave_tp.nn.RowParallelLinear(args.ffn, args.hidden, dtype=dtype, row_split="weave")
    gen = torch.Generator(device="cuda").manual_seed(2000 + rank)
    same = torch.Generator(device="cuda").manual_seed(1999)
    with torch.no_grad():
        for p in (up.weight, up.bias, down.weight):
            p.copy_((torch.rand(p.shape, generator=gen, device="cuda") * 2 - 1) / math.sqrt(p.shape[-1]))
        down.bias.copy_(torch.rand(down.bias.shape, generator=same, device="cuda") * 2 - 1)
    begin, rows = weave_tp.row_split(T, world, rank)
    x = (torch.rand((rows, args.hidden), generator=gen, device="cuda") * 2 - 1).to(dtype).requires_grad_()
    g = (torch.rand((rows, args.hidden), generator=gen, device="cuda") * 2 - 1).to(dtype)

    def mlp(inp: torch.Tensor) -> torch.Tensor:
        return down(F.gelu(up(inp, tokens=T)))

    y = mlp(x)
    y.backward(g)
    weave_tp.sync()

    # the whole MLP in float64 on the CPU, with every rank's pieces
    X = torch.cat(gathered(x)).requires_grad_()
    Wu, Bu, Wd = torch.cat(gathered(up.weight)), torch.cat(gathered(up.bias)), torch.cat(gathered(down.weight), 1)
    Wu.requires_grad_()
    Wd.requires_grad_()
    Y = F.gelu(X @ Wu.t() + Bu) @ Wd.t() + down.bias.detach().double().cpu()
    Y.backward(torch.cat(gathered(g)))
    h = args.ffn // world
    wrong = (close("y", y, Y.detach()[begin:begin + rows], args.ffn, dtype) +
             close("dx", x.grad, X.grad[begin:begin + rows], args.ffn, dtype) +
             close("d up.weight", up.weight.grad, Wu.grad[rank * h:(rank + 1) * h], T, dtype) +
             close("d down.weight", down.weight.grad, Wd.grad[:, rank * h:(rank + 1) * h], T, dtype))
    verdicts: List[object] = [None] * world
    dist.all_gather_object(verdicts, wrong)
    failures = " ".join(f"rank {r}: {v}" for r, v in enumerate(verdicts) if v)
    verdict = "FAILED: " + failures if failures else "OK"

    times: Dict[str, Union[float, str]] = {}
    with torch.no_grad():
        times["weave MLP forward (ColumnParallelLinear, GELU, RowParallelLinear)"] = median_us(
            lambda: mlp(x), args.iters, args.warmup)
        name = "torch: all_gather, F.linear, GELU, F.linear, reduce_scatter (NCCL)"
        if shared:
            times[name] = "n/a: ranks share a GPU, and NCCL refuses two ranks on one GPU"
        else:
            full = torch.empty((T, args.hidden), dtype=dtype, device="cuda")
            out = torch.empty((rows, args.hidden), dtype=dtype, device="cuda")

            def torch_mlp() -> None:
                dist.all_gather_into_tensor(full, x)
                dist.reduce_scatter_tensor(out, F.linear(F.gelu(F.linear(full, up.weight, up.bias)), down.weight))
                out.add_(down.bias)

            times[name] = median_us(torch_mlp, args.iters, args.warmup)
    weave_tp.sync()
    every: List[Dict[str, Union[float, str]]] = [{} for _ in range(world)]
    dist.all_gather_object(every, times)
    if rank == 0:
        print(f"# weave tp_mlp: {world} ranks on {count} GPU(s) ({torch.cuda.get_device_name()}), tokens {T}, "
              f"hidden {args.hidden}, ffn {args.ffn} ({h} a rank), {args.dtype}")
        print(f"# check (forward and backward against float64 on the CPU): {verdict}")
        print(f"# time per forward: median of {args.iters} after {args.warmup} warm-up, the slowest rank")
        for key, value in times.items():
            slowest = max(t[key] for t in every) if isinstance(value, float) else value
            print(f"{key:<72} {slowest:>10.1f} us" if isinstance(slowest, float) else f"{key:<72} {slowest}")
    weave_tp.finalize()
    dist.destroy_process_group()
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
