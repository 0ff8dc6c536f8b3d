#!/usr/bin/env python3
"""A transformer block (pre-norm attention and MLP) parallelized by torch's parallelize_module with weave's
ParallelStyles, sequence parallel: each rank holds its rows of the tokens; ColwiseParallel (AllGather +
GEMM) on the q, k, v and up projections gives every token's share of the heads and hidden units,
RowwiseParallel (GEMM + ReduceScatter) on the attention output and down projections brings the rank's
rows back; layer norms and residuals run on the rank's rows.

Checked against the unparallelized block: every rank runs the same block, its parameters taken before
parallelize_module, in float64 on the CPU (the reference) and in the run's dtype on its GPU (torch alone);
the parallel block's forward and its gradients (input, every parameter) must be within twice torch's
own error against the reference, plus one unit of the dtype's rounding of the reference's largest
value. Layer-norm parameters are replicated: each rank's gradient covers its rows, summed over the
ranks here before the check (what a sequence-parallel trainer all-reduces).

    torchrun --nproc-per-node 4 examples/parallelize_block.py [--tokens 512] [--hidden 512] [--heads 8]
        [--dtype bf16|fp16]

Each rank takes GPU LOCAL_RANK % (visible GPUs); ranks sharing a GPU need CUDA MPS (as
examples/row_parallel_linear.py says). tokens, heads and 4 x hidden must be multiples of the world.
Exit status 0 when the check passes.
"""

import argparse
import copy
import os
import sys
from typing import Dict, List

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

import weave_tp
from weave_tp.parallel import ColwiseParallel, RowwiseParallel

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Attention(nn.Module):
    """Causal self-attention over one sequence; the heads it runs are those its projections produce (all
    of them, or this rank's after ColwiseParallel)."""

    def __init__(self, hidden: int, heads: int, **kw: object) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        self.q, self.k, self.v = (nn.Linear(hidden, hidden, **kw) for _ in range(3))
        self.out = nn.Linear(hidden, hidden, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        tokens, heads = q.shape[0], q.shape[-1] // self.head_dim
        q, k, v = (t.reshape(tokens, heads, self.head_dim).transpose(0, 1) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(0, 1).reshape(tokens, heads * self.head_dim))


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, **kw: object) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(hidden, **kw), nn.LayerNorm(hidden, **kw)
        self.attn = Attention(hidden, heads, **kw)
        self.up, self.down = nn.Linear(hidden, 4 * hidden, **kw), nn.Linear(4 * hidden, hidden, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


PLAN = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
        "attn.out": RowwiseParallel(), "up": ColwiseParallel(), "down": RowwiseParallel()}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=512, help="the sequence's tokens (a multiple of the world)")
    p.add_argument("--hidden", type=int, default=512, help="the model's width")
    p.add_argument("--heads", type=int, default=8, help="attention heads (a multiple of the world)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    return p.parse_args()


def shard_of(name: str, full: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """This rank's piece of an unparallelized parameter (or its gradient) under PLAN."""
    module, _, kind = name.rpartition(".")
    style = PLAN.get(module)
    if isinstance(style, ColwiseParallel):
        n = full.shape[0] // world
        return full[rank * n:(rank + 1) * n]
    if isinstance(style, RowwiseParallel) and kind == "weight":
        n = full.shape[1] // world
        return full[:, rank * n:(rank + 1) * n]
    return full


def main() -> int:
    args = parse_args()
    count = torch.cuda.device_count()
    if count == 0:
        print("parallelize_block: no CUDA device", file=sys.stderr)
        return 1
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % count)
    shared = count < int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    dist.init_process_group("gloo" if shared else "cpu:gloo,cuda:nccl")  # NCCL refuses ranks sharing a GPU
    rank, world = dist.get_rank(), dist.get_world_size()
    T, H = args.tokens, args.hidden
    if T % world or args.heads % world or H % args.heads:
        print(f"parallelize_block: --tokens {T} and --heads {args.heads} must be multiples of the world {world}, "
              f"--hidden {H} a multiple of --heads", file=sys.stderr)
        return 2
    dtype = DTYPES[args.dtype]
    torch.manual_seed(1234)  # the same block and data on every rank
    block = Block(H, args.heads, device="cuda", dtype=dtype)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 1 else p.shape[-1] ** -0.5))
    X = torch.randn((T, H), device="cuda", dtype=dtype)
    G = torch.randn((T, H), device="cuda", dtype=dtype)

    # the unparallelized block: in float64 on the CPU (the reference), and in dtype on the GPU (torch)
    results: Dict[str, Dict[str, torch.Tensor]] = {}
    for name, model, x in (("reference", copy.deepcopy(block).double().cpu(), X.double().cpu()),
                           ("torch", copy.deepcopy(block), X)):
        x = x.clone().requires_grad_()
        y = model(x)
        y.backward(G.to(y))
        results[name] = {"y": y.detach(), "dx": x.grad,
                         **{f"d {n}": p.grad for n, p in model.named_parameters()}}

    mesh = init_device_mesh("cuda", (world,))
    parallelize_module(block, mesh, PLAN)
    begin, rows = weave_tp.row_split(T, world, rank)
    x = X[begin:begin + rows].clone().requires_grad_()
    y = block(x)
    y.backward(G[begin:begin + rows])
    weave_tp.sync()
    got = {"y": y.detach(), "dx": x.grad, **{f"d {n}": p.grad for n, p in block.named_parameters()}}

    wrong = []
    for key, value in got.items():
        value = value.detach().double().cpu()
        if key.startswith("d ln"):  # replicated, each rank's rows only: summed as a sequence-parallel
            dist.all_reduce(value)  # trainer does (on the CPU: gloo wherever the GPU's backend is not)
        want = results["reference"][key]
        alone = results["torch"][key].double().cpu()
        if key in ("y", "dx"):
            want, alone = want[begin:begin + rows], alone[begin:begin + rows]
        else:
            name = key[2:]
            want, alone = shard_of(name, want, world, rank), shard_of(name, alone, world, rank)
        err = (value - want).abs().max().item()
        bound = 2 * (alone - want).abs().max().item() + torch.finfo(dtype).eps * want.abs().max().item()
        if not err <= bound:  # NaN fails
            wrong.append(f"{key}: error {err:.3g} > bound {bound:.3g}")
    verdicts: List[object] = [None] * world
    dist.all_gather_object(verdicts, wrong)
    failures = "; ".join(f"rank {r}: {', '.join(v)}" for r, v in enumerate(verdicts) if v)
    if rank == 0:
        print(f"# weave parallelize_block: {world} ranks on {count} GPU(s) ({torch.cuda.get_device_name()}), "
              f"tokens {T}, hidden {H}, heads {args.heads}, {args.dtype}; styles: "
              + ", ".join(f"{m} {type(s).__name__}" for m, s in PLAN.items()))
        print(f"# check (forward, input and parameter gradients against the unparallelized block): "
              f"{'FAILED: ' + failures if failures else 'OK'}")
    weave_tp.finalize()
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
