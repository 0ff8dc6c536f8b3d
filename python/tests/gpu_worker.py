"""One rank of test_gpu.py's runs, under torchrun (one process a rank on cuda:LOCAL_RANK % device
count; processes that share a GPU run side by side only under MPS). Every rank builds every rank's
inputs from one seed (WEAVE_TEST_SEED), so each checks its own rows against an fp64 reference:

  gemm_rs       bf16 / fp16 / fp32, b [K, N] and [N, K], bias, every strategy, atomic reduction,
                fp32 slots, alpha; 3000 tokens x 777 per rank x 1000 outputs (tails everywhere), an
                aligned shape (the TMA GEMM), 1 token and M < world (ranks without rows), out=,
                calls on inputs changed in place, the plan cache not growing on repeated shapes
  scaled        gemm_rs_scaled: fp8 e4m3 a and b [N, K], per-tensor and per-row scales (each rank its
                own), bf16 and fp16 output, fp32 and fast accumulation, every strategy, bias, alpha,
                atomic reduction, fp32 slots; 3000 x 784 per rank x 1000 and an aligned shape, 1 token
                and M < world (scale_a [M, 1] on ranks without rows), a and scales changed between
                calls of one plan, the plan cache not growing; against fp64 of the dequantized inputs
  nn            RowParallelLinear forward and backward against autograd of the whole layer; gemm_rs's
                backward (the input's gradient by ag_gemm) with b [K, N] and alpha, and b [N, K]
  parallel      parallelize_module with weave_tp.parallel.RowwiseParallel on a 1-D DeviceMesh, 3-D input
  ag            ag_gemm, every strategy, both layouts, even and uneven rows; ColumnParallelLinear forward
                and backward; ag_gemm_scaled (fp8) with per-tensor scales that differ by rank and per-row
                scales, fp32 and fast accumulation
  compile       a two-layer tensor-parallel MLP under torch.compile(fullgraph=True), forward and
                backward, at two token counts (the second traced with a symbolic count); a compiled
                gemm_rs_scaled call (per-row scales, bias, alpha) the same way, against the reference
  graph         capture before any call is refused with the clear error; after one call, a captured
                call replayed 1,000 times on new inputs copied into its static input, each checked:
                fused and auto, with out= given (every pointer seen before capture), then out=None
                (the output a new pointer from the graph's pool); gemm_rs_scaled the same with out=None
                (fused and auto, 200 replays), its per-row scales static too, new values every replay
  opcheck       torch.library.opcheck of weave_tp::gemm_rs (schema, fake, autograd, aot dispatch) and
                of weave_tp::gemm_rs_scaled (fake, autograd, aot dispatch; its schema test, which torch
                cannot run on fp8 inputs, by hand: inputs unchanged, output no input's storage)
  abort         (2+ ranks) the last rank calls weave_tp.abort() instead of gemm_rs: the others' calls
                end within 5 s (test_gpu.py's WEAVE_TIMEOUT_MS: 120 s), weave_tp.sync() raises WeaveAbortedError naming
                it, gemm_rs then refuses on every rank; finalize, init again, one call
  watchdog      (2+ ranks) weave_tp.init(watchdog=0.05); the last rank aborts: the others, which never
                call sync, get WeaveAbortedError naming it in their own thread within 5 s
  lifecycle     finalize, init again, one call, and exit without finalize (atexit tears down)

Rank 0 prints a line per case. A failure raises, and torchrun stops every rank.
Usage: torchrun --nproc-per-node N python/tests/gpu_worker.py [case ...]   (default: all cases)
"""

import math
import os
import sys
import time
import zlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weave_tp

SEED = int(os.environ.get("WEAVE_TEST_SEED", "20261204")) % (1 << 31)
EPS = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -20}
F8 = torch.float8_e4m3fn  # gemm_rs_scaled's a and b
DEVICE = torch.device("cuda")  # this rank's device (set in main)


def rand(shape: tuple, *key: object, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Uniform in [-1, 1), rounded to dtype: the same numbers on every rank for the same key."""
    g = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(repr((SEED,) + key).encode()))
    return (torch.rand(shape, generator=g, device=DEVICE) * 2 - 1).to(dtype)


def tolerance(k_total: int, dtype: torch.dtype, slack: float = 1.0) -> Tuple[float, float]:
    """weave's test tolerance (tools/support/reference.c), (atol, rtol): output and partial rounding,
    which grow like sqrt(K) for values in [-1, 1), plus fp32 accumulation's own, which grows like K
    (it counts for fp32 outputs alone); slack scales both, as the C checks scale atol by alpha."""
    atol = 4 * EPS[dtype] * math.sqrt(k_total / 3 + 1) + k_total * 2.0 ** -24
    return atol * slack, 2 * EPS[dtype] * slack


def scaled_slack(fast: bool) -> float:
    """tolerance's slack for gemm_rs_scaled with scales(): a product of two scales stays below 2, twice
    the tolerance of inputs in [-1, 1); fast accumulation drops the low bits of each product at every
    k32 step (docs/hopper_gemm.md): 8 times."""
    return 8.0 if fast else 2.0


def check(what: str, got: torch.Tensor, want: torch.Tensor, k_total: int, dtype: torch.dtype,
          slack: float = 1.0) -> None:
    """got within tolerance(k_total, dtype, slack) of want, element by element; NaN fails."""
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    if got.numel() == 0:
        return
    atol, rtol = tolerance(k_total, dtype, slack)
    err = (got.double() - want.double()).abs()
    bad = ~(err <= atol + rtol * want.double().abs())  # NaN counts as bad
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.numel()} wrong, first at {i}: got "
                             f"{got.flatten()[i].item()}, want {want.flatten()[i].item()} (atol {atol:.3g})")


def say(text: str) -> None:
    if dist.get_rank() == 0:
        print(text, flush=True)


def reference(A: Sequence[torch.Tensor], B: Sequence[torch.Tensor], begin: int, rows: int, layout: str = "col",
              alpha: float = 1.0, bias: Optional[torch.Tensor] = None, SA: Optional[Sequence[torch.Tensor]] = None,
              SB: Optional[Sequence[torch.Tensor]] = None) -> torch.Tensor:
    """This rank's rows [begin, begin + rows) of alpha * sum over ranks r of A_r @ B_r (+ bias), in fp64,
    from every rank's inputs: B_r [K, N] (layout "row") or [N, K] ("col"). With scales (gemm_rs_scaled,
    B_r [N, K]) A_r and B_r are dequantized first: SA_r ([M, 1], all M rows, or one element) scales the
    rows of A_r, SB_r ([1, N] or one element) the output's columns, i.e. the rows of B_r."""
    want = 0
    for r in range(len(A)):
        a, b = A[r].double(), B[r].double()
        if SA is not None:  # and SB
            a, b = a * SA[r].double(), b * SB[r].double().reshape(-1, 1)
        want = want + a[begin:begin + rows] @ (b if layout == "row" else b.t())
    want = want * alpha
    return want if bias is None else want + bias.double()


def scales(per_row: bool, M: int, N: int, *key: object) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
    """Every rank's float32 dequantization scales for gemm_rs_scaled, each in [0.25, 1.25) (a product
    below 2: scaled_slack): per row scale_a [M, 1] and scale_b [1, N], else one element each."""
    world = weave_tp.get_team().world
    sa, sb = ((M, 1), (1, N)) if per_row else ((1,), (1,))
    return ([rand(sa, *key, "sa", r, dtype=torch.float32).abs() + 0.25 for r in range(world)],
            [rand(sb, *key, "sb", r, dtype=torch.float32).abs() + 0.25 for r in range(world)])


# ---- gemm_rs --------------------------------------------------------------------------------------
def gemm_case(name: str, M: int, N: int, K: int, dtype: torch.dtype = torch.bfloat16, layout: str = "row",
              bias: bool = False, calls: int = 1, use_out: bool = False, views: bool = False,
              row_split: str = "weave", **options: object) -> None:
    """views: a passed as [2, M / 2, K] (nn.Linear's leading dimensions) and b as the transposed view
    of a copy in the other layout (the same values, which weave plans as that layout, uncopied)."""
    team = weave_tp.get_team()
    world, rank = team.world, team.rank
    begin, rows = weave_tp.row_split(M, world, rank)
    if row_split == "torch":  # torch.chunk's rows
        chunk = -(-M // world)
        begin, rows = min(rank * chunk, M), max(0, min(chunk, M - rank * chunk))
    a_in = torch.empty((M, K), dtype=dtype, device=DEVICE)  # one buffer, new values before every call
    for call in range(calls):
        A = [rand((M, K), name, call, "A", r, dtype=dtype) for r in range(world)]
        B = [rand((K, N) if layout == "row" else (N, K), name, call, "B", r, dtype=dtype) for r in range(world)]
        b = rand((N,), name, call, "bias", dtype=dtype) if bias else None
        a_in.copy_(A[rank])
        want = reference(A, B, begin, rows, layout, float(options.get("alpha", 1.0)), b)
        a_arg, b_arg = a_in, B[rank]
        if views:
            a_arg, b_arg = a_in.view(2, M // 2, K), B[rank].t().contiguous().t()
            assert not b_arg.is_contiguous()
        if use_out:
            out = torch.full((rows, N), float("nan"), dtype=dtype, device=DEVICE)
            got = weave_tp.gemm_rs(a_arg, b_arg, b, b_layout=layout, out=out, row_split=row_split, **options)
            assert got is out
        else:
            got = weave_tp.gemm_rs(a_arg, b_arg, b, b_layout=layout, row_split=row_split, **options)
        check(f"{name} call {call}", got, want, K * world, dtype)


def case_gemm_rs() -> None:
    team = weave_tp.get_team()
    world = team.world
    odd = (3000, 1000, 777)  # tokens, out features, in features per rank: tails in every dimension
    n = 0
    for dtype in (torch.bfloat16, torch.float16):
        for layout in ("row", "col"):
            for bias in (False, True):
                gemm_case(f"auto {dtype} {layout} bias={bias}", *odd, dtype=dtype, layout=layout, bias=bias)
                n += 1
        gemm_case(f"fused {dtype} col bias", *odd, dtype=dtype, layout="col", bias=True, strategy="fused")
        gemm_case(f"fused {dtype} row", *odd, dtype=dtype, strategy="fused")
        # aligned rows: the fused kernel's TMA GEMM
        gemm_case(f"fused {dtype} aligned col", 2048, 4096, 1024, dtype=dtype, layout="col", bias=True,
                  strategy="fused")
        gemm_case(f"fused {dtype} aligned row", 2048, 4096, 1024, dtype=dtype, strategy="fused")
        n += 4
    gemm_case("auto fp32 row bias", *odd, dtype=torch.float32, bias=True)
    gemm_case("fused fp32 col", *odd, dtype=torch.float32, layout="col", strategy="fused")
    gemm_case("bulk bf16 col bias", *odd, layout="col", bias=True, strategy="bulk")
    gemm_case("baseline bf16 row", *odd, strategy="baseline")
    gemm_case("fused atomic bf16 col", *odd, layout="col", strategy="fused", reduce="atomic")
    gemm_case("fused fp32 slots fp16 row", *odd, dtype=torch.float16, strategy="fused", fp32_slots=True)
    gemm_case("fused alpha 0.5 bf16 col bias", *odd, layout="col", bias=True, strategy="fused", alpha=0.5)
    gemm_case("fused bf16 col, 3-D a, transposed view of b", *odd, layout="col", bias=True, strategy="fused",
              views=True)
    gemm_case("auto bf16 row, 3-D a, transposed view of b", *odd, layout="row", views=True)
    gemm_case("fused bf16 col, torch's row split", 3001, 1000, 777, layout="col", bias=True, strategy="fused",
              row_split="torch")
    gemm_case("out= auto, torch's row split", 3001, 1000, 777, layout="col", use_out=True, row_split="torch")
    n += 11
    for strategy in ("auto", "fused", "bulk"):  # one token: only rank 0 owns a row
        gemm_case(f"1 token {strategy}", 1, 1000, 777, layout="col", bias=True, strategy=strategy)
        n += 1
    if world > 2:
        gemm_case("M = world - 1 fused", world - 1, 1000, 777, layout="col", strategy="fused")
        n += 1
    gemm_case("out= fused", *odd, layout="col", bias=True, strategy="fused", use_out=True)
    gemm_case("out= 1 token", 1, 1000, 777, layout="col", strategy="fused", use_out=True)
    gemm_case("5 calls fused", 1000, 520, 328, calls=5, strategy="fused")
    gemm_case("5 calls auto", 1000, 520, 328, calls=5)
    n += 4
    plans = len(team.plans)
    gemm_case("fused bf16 col bias", *odd, layout="col", bias=True, strategy="fused")
    gemm_case("5 calls fused", 1000, 520, 328, calls=5, strategy="fused")
    assert len(team.plans) == plans, f"the plan cache grew from {plans} to {len(team.plans)} on repeated shapes"
    say(f"  gemm_rs: {n + 2} cases, {plans} plans ({', '.join(sorted({p.info.strategy for p in team.plans}))})")


# ---- gemm_rs_scaled (fp8) ------------------------------------------------------------------------------
def scaled_case(name: str, M: int, N: int, K: int, per_row: bool, out_dtype: torch.dtype, fast: bool,
                bias: bool = False, calls: int = 1, **options: object) -> None:
    """gemm_case for gemm_rs_scaled: fp8 a and b [N, K], every rank its own scales (per row or per
    tensor: scales()), new values every call (a in one buffer, the scales new tensors), one plan."""
    team = weave_tp.get_team()
    world, rank = team.world, team.rank
    begin, rows = weave_tp.row_split(M, world, rank)
    a_in = torch.empty((M, K), dtype=F8, device=DEVICE)  # one buffer, new values before every call
    for call in range(calls):
        A = [rand((M, K), name, call, "A", r, dtype=F8) for r in range(world)]
        B = [rand((N, K), name, call, "B", r, dtype=F8) for r in range(world)]
        b = rand((N,), name, call, "bias", dtype=out_dtype) if bias else None
        SA, SB = scales(per_row, M, N, name, call)
        a_in.copy_(A[rank])
        want = reference(A, B, begin, rows, "col", float(options.get("alpha", 1.0)), b, SA, SB)
        got = weave_tp.gemm_rs_scaled(a_in, B[rank], SA[rank], SB[rank], b, out_dtype=out_dtype, use_fast_accum=fast,
                                   **options)
        assert got.dtype == out_dtype, got.dtype
        check(f"{name} call {call}", got, want, K * world, out_dtype, slack=scaled_slack(fast))


def case_scaled() -> None:
    team = weave_tp.get_team()
    world = team.world
    odd = (3000, 1000, 784)  # tokens, out features, in features per rank (a multiple of 16)
    n = 0
    for per_row in (False, True):
        for fast in (False, True):
            out_dtype = torch.float16 if per_row else torch.bfloat16
            for strategy in ("auto", "fused", "bulk", "baseline"):
                scaled_case(f"{strategy} row={per_row} fast={fast}", *odd, per_row, out_dtype, fast,
                            bias=strategy != "bulk", strategy=strategy)
                n += 1
    scaled_case("fused atomic alpha 0.5, 3 calls", *odd, True, torch.bfloat16, False, bias=True, calls=3,
                strategy="fused", reduce="atomic", alpha=0.5)
    scaled_case("fused fp32 slots aligned", 2048, 4096, 1024, False, torch.bfloat16, False, strategy="fused",
                fp32_slots=True)
    n += 2
    for strategy in ("auto", "fused", "bulk"):  # one token: only rank 0 owns a row; scale_a [1, 1]
        scaled_case(f"1 token {strategy}", 1, 1000, 784, True, torch.bfloat16, False, bias=True, strategy=strategy)
        n += 1
    if world > 2:  # scale_a [M, 1] holds every row, also on the rank that owns none
        scaled_case("M = world - 1 fused", world - 1, 1000, 784, True, torch.float16, False, strategy="fused")
        n += 1
    plans = len(team.plans)
    scaled_case("fused row=True fast=False", *odd, True, torch.float16, False, bias=True, strategy="fused")
    scaled_case("fused atomic alpha 0.5, 3 calls", *odd, True, torch.bfloat16, False, bias=True, calls=3,
                strategy="fused", reduce="atomic", alpha=0.5)
    assert len(team.plans) == plans, f"the plan cache grew from {plans} to {len(team.plans)} on repeated shapes"
    fp8 = [p for p in team.plans if p.options.scale_mode]
    say(f"  gemm_rs_scaled: {n + 2} cases, {len(fp8)} fp8 plans ({', '.join(sorted({p.info.strategy for p in fp8}))})")


# ---- RowParallelLinear ------------------------------------------------------------------------------
def linear_case(tokens: int, in_features: int, out_features: int, dtype: torch.dtype) -> None:
    team = weave_tp.get_team()
    world, rank = team.world, team.rank
    k = in_features // world
    cols = slice(rank * k, (rank + 1) * k)
    key = (tokens, in_features, out_features, str(dtype))
    X, W = rand((tokens, in_features), key, "X", dtype=dtype), rand((out_features, in_features), key, "W", dtype=dtype)
    b, G = rand((out_features,), key, "b", dtype=dtype), rand((tokens, out_features), key, "G", dtype=dtype)

    layer = weave_tp.nn.RowParallelLinear(in_features, out_features, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(W[:, cols])
        layer.bias.copy_(b)
    x = X[:, cols].clone().requires_grad_()
    y = layer(x)
    begin, rows = weave_tp.row_split(tokens, world, rank)
    y.backward(G[begin:begin + rows])

    Xd, Wd, bd = (t.double().requires_grad_() for t in (X, W, b))
    Yd = Xd @ Wd.t() + bd
    (Yd * G.double()).sum().backward()
    what = f"RowParallelLinear {tokens}x{in_features}->{out_features} {dtype}"
    check(f"{what} forward", y, Yd[begin:begin + rows].detach(), in_features, dtype)
    check(f"{what} grad x", x.grad, Xd.grad[:, cols], out_features, dtype)
    check(f"{what} grad weight", layer.weight.grad, Wd.grad[:, cols], tokens, dtype)
    check(f"{what} grad bias", layer.bias.grad, bd.grad, tokens, dtype)


def gemm_rs_backward_case(tokens: int, k_local: int, n: int, layout: str, alpha: float) -> None:
    """weave_tp.gemm_rs with autograd, b as [K, N] ("row") or [N, K], alpha: the gradients of a (one
    AllGather + GEMM of the output gradient with several ranks), b and bias against fp64 autograd of the
    whole sum."""
    team = weave_tp.get_team()
    world, rank = team.world, team.rank
    dtype, key = torch.bfloat16, ("gemm_rs backward", tokens, k_local, n, layout)
    As = [rand((tokens, k_local), key, "A", r, dtype=dtype) for r in range(world)]
    Bs = [rand((k_local, n) if layout == "row" else (n, k_local), key, "B", r, dtype=dtype) for r in range(world)]
    bias, G = rand((n,), key, "bias", dtype=dtype), rand((tokens, n), key, "G", dtype=dtype)
    a, b, bb = (t.clone().requires_grad_() for t in (As[rank], Bs[rank], bias))
    y = weave_tp.gemm_rs(a, b, bb, b_layout=layout, alpha=alpha)
    begin, rows = weave_tp.row_split(tokens, world, rank)
    y.backward(G[begin:begin + rows])

    Ad, Bd = [t.double().requires_grad_() for t in As], [t.double().requires_grad_() for t in Bs]
    bd = bias.double().requires_grad_()
    Yd = alpha * sum(x @ (w if layout == "row" else w.t()) for x, w in zip(Ad, Bd)) + bd
    (Yd * G.double()).sum().backward()
    what = f"gemm_rs backward {tokens}x{k_local}x{n} b {layout} alpha {alpha}"
    check(f"{what} forward", y, Yd[begin:begin + rows].detach(), k_local * world, dtype)
    check(f"{what} grad a", a.grad, Ad[rank].grad, n, dtype)
    check(f"{what} grad b", b.grad, Bd[rank].grad, tokens, dtype)
    check(f"{what} grad bias", bb.grad, bd.grad, tokens, dtype)


def case_nn() -> None:
    world = weave_tp.get_team().world
    for dtype in (torch.bfloat16, torch.float16):
        linear_case(3000, 777 * world, 1000, dtype)
        linear_case(1, 777 * world, 1000, dtype)
    say("  RowParallelLinear: forward and backward, bf16 and fp16, 3000 and 1 tokens")
    for layout, alpha in (("row", 0.5), ("col", 1.0)):
        gemm_rs_backward_case(1001, 320, 264, layout, alpha)
    say("  gemm_rs backward (a by AllGather + GEMM): b [K, N] alpha 0.5 and [N, K], 1001 tokens")


def case_parallel() -> None:
    """parallelize_module(model, mesh, {"1": weave_tp.parallel.RowwiseParallel()}) on a 1-D DeviceMesh of
    every rank: the style keeps this rank's columns; the output rows match the whole model's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    team = weave_tp.get_team()
    world, rank = team.world, team.rank
    d_in, d_out, tokens, dtype = 96 * world, 200, 64 * world, torch.bfloat16
    mesh = init_device_mesh("cuda", (world,))
    model = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Linear(d_in, d_out, device=DEVICE, dtype=dtype))
    with torch.no_grad():
        model[1].weight.copy_(rand((d_out, d_in), "parallel.weight", dtype=dtype))
        model[1].bias.copy_(rand((d_out,), "parallel.bias", dtype=dtype))
    x = rand((2, tokens // 2, d_in), "parallel.x", dtype=dtype)
    want_all = x.reshape(-1, d_in).double() @ model[1].weight.double().t() + model[1].bias.double()
    parallelize_module(model, mesh, {"1": weave_tp.parallel.RowwiseParallel()})
    k = d_in // world
    got = model(x[..., rank * k:(rank + 1) * k].contiguous())
    begin, rows = weave_tp.row_split(tokens, world, rank)
    check("RowwiseParallel", got, want_all[begin:begin + rows], d_in, dtype)
    say(f"  parallelize_module with weave_tp.parallel.RowwiseParallel: {tokens} tokens as [2, {tokens // 2}, "
        f"{d_in} / {world}]")


def case_ag() -> None:
    """weave_tp.ag_gemm (every strategy, both layouts, bias, alpha, even and uneven rows) against F.linear of
    the whole input; ColumnParallelLinear forward and backward against autograd over the whole layer
    (every rank builds every rank's weight and output gradient from the same seeds)."""
    team = weave_tp.get_team()
    world, rank = team.world, team.rank
    for M, N, K, dtype, layout in ((1000 * world, 384, 512, torch.bfloat16, "col"), (1003, 264, 200, torch.float16,
                                                                                      "row")):
        A = rand((M, K), "ag.a", M, dtype=dtype)
        W = rand((N, K) if layout == "col" else (K, N), "ag.w", M, rank, dtype=dtype)
        bias = rand((N,), "ag.bias", M, rank, dtype=dtype)
        begin, rows = weave_tp.row_split(M, world, rank)
        Wd = W.double() if layout == "col" else W.double().t()
        want = 0.75 * (A.double() @ Wd.t()) + bias.double()
        for strategy in ("fused", "bulk", "baseline", "auto"):
            if strategy == "fused" and (K % 8 or (layout == "row" and N % 8)):
                continue
            c, g = weave_tp.ag_gemm(A[begin:begin + rows], W, bias, M=M, b_layout=layout, strategy=strategy,
                                    alpha=0.75, return_gathered=True)
            check(f"ag_gemm {strategy} {layout} M={M}", c, want, K, dtype)
            assert torch.equal(g, A), f"ag_gemm {strategy}: the gathered a differs from every rank's rows"
    # ColumnParallelLinear: forward and backward
    tokens, d_in, d_out, dtype = 512 * world, 256, 192 * world, torch.bfloat16
    X = rand((tokens, d_in), "col.x", dtype=dtype)
    Ws = [rand((d_out // world, d_in), "col.w", r, dtype=dtype) for r in range(world)]
    Bs = [rand((d_out // world,), "col.b", r, dtype=dtype) for r in range(world)]
    Gs = [rand((tokens, d_out // world), "col.g", r, dtype=dtype) for r in range(world)]
    layer = weave_tp.nn.ColumnParallelLinear(d_in, d_out, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(Ws[rank])
        layer.bias.copy_(Bs[rank])
    begin, rows = weave_tp.row_split(tokens, world, rank)
    x = X[begin:begin + rows].clone().requires_grad_()
    y = layer(x)
    y.backward(Gs[rank])
    Xd = X.double()
    check("ColumnParallelLinear forward", y, Xd @ Ws[rank].double().t() + Bs[rank].double(), d_in, dtype)
    dX = sum(Gs[r].double() @ Ws[r].double() for r in range(world))
    check("ColumnParallelLinear dx", x.grad, dX[begin:begin + rows], d_out, dtype)
    check("ColumnParallelLinear dW", layer.weight.grad, Gs[rank].double().t() @ Xd, tokens, dtype)
    check("ColumnParallelLinear db", layer.bias.grad, Gs[rank].double().sum(0), tokens, dtype)
    say(f"  ag_gemm: every strategy, both layouts, M {1000 * world} and 1003; ColumnParallelLinear forward and "
        f"backward, {tokens} tokens")
    # fp8: ag_gemm_scaled, every strategy, per-tensor scales that differ by rank and per-row scales
    M, N, K = 1003, 264, 320
    A = rand((M, K), "ag8.a", dtype=F8)
    W = rand((N, K), "ag8.w", rank, dtype=F8)
    bias = rand((N,), "ag8.bias", rank, dtype=torch.bfloat16)
    begin, rows = weave_tp.row_split(M, world, rank)
    # every scale below 1, so that the products stay within scaled_slack's bound
    owner = torch.tensor([r for r in range(world) for _ in range(weave_tp.row_split(M, world, r)[1])], device=DEVICE)
    for per_row in (False, True):
        if per_row:
            sa_all = 0.5 + 0.5 * torch.rand((M, 1), generator=torch.Generator(device=DEVICE).manual_seed(5),
                                            device=DEVICE)
            sa, sb = sa_all[begin:begin + rows].contiguous(), torch.linspace(0.5, 1.0, N, device=DEVICE)[None, :]
        else:
            sa_all = (0.5 + 0.0625 * owner.float())[:, None]
            sa, sb = torch.tensor([0.5 + 0.0625 * rank], device=DEVICE), torch.tensor([0.75 + rank / 32], device=DEVICE)
        want = 0.5 * (A.double() @ W.double().t()) * sa_all.double() * sb.double() + bias.double()
        for strategy in ("fused", "bulk", "baseline", "auto"):
            for fast in (False, True):
                c, g = weave_tp.ag_gemm_scaled(A[begin:begin + rows], W, sa, sb, bias, M=M, use_fast_accum=fast,
                                               strategy=strategy, alpha=0.5, return_gathered=True)
                check(f"ag_gemm_scaled {strategy} row={per_row} fast={fast}", c, want, K, torch.bfloat16,
                      slack=scaled_slack(fast))
                assert torch.equal(g.view(torch.uint8), A.view(torch.uint8)), "ag_gemm_scaled: the gathered a differs"
    say("  ag_gemm_scaled: every strategy, per-tensor scales that differ by rank and per-row scales, fp32 and fast")


# ---- torch.compile ------------------------------------------------------------------------------------
class MLP(torch.nn.Module):
    """Column-parallel nn.Linear (input replicated, this rank's hidden units), gelu, RowParallelLinear."""

    def __init__(self, d_in: int, hidden: int, d_out: int, dtype: torch.dtype) -> None:
        super().__init__()
        team = weave_tp.get_team()
        h = hidden // team.world
        self.up = torch.nn.Linear(d_in, h, device=DEVICE, dtype=dtype)
        self.down = weave_tp.nn.RowParallelLinear(hidden, d_out, device=DEVICE, dtype=dtype)
        with torch.no_grad():  # shards of one model, the same on every world size
            mine = slice(team.rank * h, (team.rank + 1) * h)
            self.up.weight.copy_(rand((hidden, d_in), "up.weight", dtype=dtype)[mine])
            self.up.bias.copy_(rand((hidden,), "up.bias", dtype=dtype)[mine])
            self.down.weight.copy_(rand((d_out, hidden), "down.weight", dtype=dtype)[:, mine])
            self.down.bias.copy_(rand((d_out,), "down.bias", dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def scaled_call(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
    """What case_compile compiles of gemm_rs_scaled: weave's Python wrapper with keyword options."""
    return weave_tp.gemm_rs_scaled(a, b, scale_a, scale_b, bias, out_dtype=torch.float16, alpha=0.5)


def case_compile() -> None:
    world, rank = weave_tp.get_team().world, weave_tp.get_team().rank
    dtype = torch.bfloat16
    model = MLP(192, 256 * world, 320, dtype)
    compiled = torch.compile(model, fullgraph=True)
    for tokens in (512, 300):
        x = rand((tokens, 192), "x", tokens, dtype=dtype)
        g = rand((tokens, 320), "g", tokens, dtype=dtype)
        begin, rows = weave_tp.row_split(tokens, world, weave_tp.get_team().rank)
        grads: List[Dict[str, torch.Tensor]] = []
        outs = []
        for fn in (model, compiled):
            model.zero_grad(set_to_none=True)
            y = fn(x)
            y.backward(g[begin:begin + rows])
            outs.append(y.detach())
            grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        # both run in bf16; they differ only by rounding (inductor fuses the gelu differently)
        check(f"compile {tokens} tokens forward", outs[1], outs[0], 256 * world, dtype, slack=2)
        for n in grads[0]:
            check(f"compile {tokens} tokens grad {n}", grads[1][n], grads[0][n], max(tokens, 320), dtype, slack=4)
    say("  torch.compile(fullgraph=True): two-layer MLP, forward and backward, 512 then 300 tokens")

    compiled_scaled = torch.compile(scaled_call, fullgraph=True)
    for tokens in (512, 300):  # the second traced with a symbolic count, in scale_a [tokens, 1] too
        begin, rows = weave_tp.row_split(tokens, world, rank)
        A = [rand((tokens, 192), "fp8 x", tokens, r, dtype=F8) for r in range(world)]
        B = [rand((320, 192), "fp8 w", r, dtype=F8) for r in range(world)]
        SA, SB = scales(True, tokens, 320, "fp8 compile", tokens)
        b = rand((320,), "fp8 bias", dtype=torch.float16)
        got = compiled_scaled(A[rank], B[rank], SA[rank], SB[rank], b)
        assert got.dtype == torch.float16, got.dtype
        check(f"compile gemm_rs_scaled {tokens} tokens", got, reference(A, B, begin, rows, "col", 0.5, b, SA, SB),
              192 * world, torch.float16, slack=scaled_slack(False))
    say("  torch.compile(fullgraph=True): gemm_rs_scaled (per-row scales, bias, alpha), 512 then 300 tokens")


# ---- CUDA graphs --------------------------------------------------------------------------------------
def graph_case(strategy: str, use_out: bool, replays: int, fp8: bool = False) -> None:
    """out=None: the captured call's output comes from the graph's pool, a pointer weave has not seen
    before capture; use_out: every pointer was seen by the call that made the plan. fp8:
    gemm_rs_scaled (no out=; bf16 output) with per-row scales, static buffers as a is."""
    team = weave_tp.get_team()
    world, rank = team.world, team.rank
    M, N, K = 256 + world - 1 + 2 * use_out, 384, 128  # M not a multiple of world: uneven rows; a plan each
    tag, dtype = (f"fp8 {strategy}", F8) if fp8 else (strategy, torch.bfloat16)
    W = [rand((N, K), "graph W", tag, r, dtype=dtype) for r in range(world)]
    b = rand((N,), "graph bias", tag)
    begin, rows = weave_tp.row_split(M, world, rank)
    # the captured call's inputs: new values copied in before every replay
    a_static = rand((M, K), "graph A", tag, rank, dtype=dtype)
    sa_static, sb_static = (s[rank] for s in scales(True, M, N, "graph scales", tag)) if fp8 else (None, None)
    out = torch.empty((rows, N), dtype=torch.bfloat16, device=DEVICE) if use_out else None

    def call(into: Optional[torch.Tensor]) -> torch.Tensor:
        if fp8:
            return weave_tp.gemm_rs_scaled(a_static, W[rank], sa_static, sb_static, b, strategy=strategy)
        return weave_tp.gemm_rs(a_static, W[rank], b, b_layout="col", strategy=strategy, out=into)

    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            call(None)
    except RuntimeError as e:
        assert "before capturing" in str(e), e
    else:
        raise AssertionError("a capture that would make a plan was not refused")

    side = torch.cuda.Stream()  # the first call (the plan) outside capture, as torch recommends
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(out)
    torch.cuda.current_stream().wait_stream(side)
    plans = len(team.plans)
    plan = team.plans[-1]  # the one the call made: the capture before it was refused, so there was none
    assert plan.shape == (M, N, K), plan.shape
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y_static = call(out)
    assert len(team.plans) == plans

    atol, rtol = tolerance(K * world, torch.bfloat16, scaled_slack(False) if fp8 else 1.0)
    excess = torch.zeros(replays, device=DEVICE)  # per replay: max(|error| - tolerance), <= 0 when right
    SA = SB = None
    for i in range(replays):
        A = [rand((M, K), "graph replay", tag, i, r, dtype=dtype) for r in range(world)]
        a_static.copy_(A[rank])
        if fp8:
            SA, SB = scales(True, M, N, "graph replay scales", tag, i)
            sa_static.copy_(SA[rank])
            sb_static.copy_(SB[rank])
        g.replay()
        if rows:
            want = reference(A, W, begin, rows, "col", 1.0, b, SA, SB)
            excess[i] = ((y_static.double() - want).abs() - (atol + rtol * want.abs())).max()
    torch.cuda.synchronize()
    what = f"graph {'gemm_rs_scaled ' if fp8 else ''}{strategy} out={'given' if use_out else 'None'}"
    bad = (~(excess <= 0)).nonzero()  # NaN counts as bad (max propagates it)
    if len(bad):
        raise AssertionError(f"{what}: {len(bad)} of {replays} replays wrong, first replay {int(bad[0])}")
    if not fp8:  # weave_tp.plan_info is gemm_rs's
        assert weave_tp.plan_info(a_static, W[rank], b, b_layout="col", strategy=strategy) is plan.info
    say(f"  CUDA {what} (plan {plan.info.strategy}): capture before a plan refused; {replays} replays, new "
        f"inputs{' and scales' if fp8 else ''} each, all right")


def case_graph() -> None:
    for use_out in (True, False):  # out= first: its capture needs no new pointer checked
        for strategy in ("fused", "auto"):
            graph_case(strategy, use_out, 1000)
    for strategy in ("fused", "auto"):  # gemm_rs_scaled has no out=
        graph_case(strategy, False, 200, fp8=True)


def case_opcheck() -> None:
    a = rand((300, 96), "opcheck a").requires_grad_()
    b = rand((160, 96), "opcheck b", weave_tp.get_team().rank).requires_grad_()
    bias = rand((160,), "opcheck bias").requires_grad_()
    team = weave_tp.get_team()
    team_id = weave_tp._torch._team_id("opcheck", None)  # the default team's id: the ops' last argument
    torch.library.opcheck(torch.ops.weave_tp.gemm_rs.default,
                          (a, b, bias, "col", "fused", "deterministic", False, 1.0, team.world, team.rank, team_id))
    say("  torch.library.opcheck(weave_tp::gemm_rs): schema, fake, autograd registration, aot dispatch")

    # fp8 (no autograd: nothing requires grad), this rank's own a, b and per-row scales
    SA, SB = scales(True, 300, 160, "opcheck")
    args = (rand((300, 96), "opcheck a8", team.rank, dtype=F8), rand((160, 96), "opcheck b8", team.rank, dtype=F8),
            SA[team.rank], SB[team.rank], rand((160,), "opcheck bias8"), torch.bfloat16, False, "fused",
            "deterministic", False, 1.0, team.world, team.rank, team_id)
    torch.library.opcheck(torch.ops.weave_tp.gemm_rs_scaled.default, args,
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    # test_schema: torch's SchemaCheckMode compares each input before and after with torch.allclose, which
    # has no fp8 kernel (torch 2.11: NotImplementedError for Float8_e4m3fn, on any op). Its checks by hand:
    # the inputs' bytes unchanged (mutates_args=()), the output aliasing none of them
    inputs = [t for t in args if isinstance(t, torch.Tensor)]
    before = [t.clone() for t in inputs]
    y = torch.ops.weave_tp.gemm_rs_scaled.default(*args)
    for t, t0 in zip(inputs, before):
        assert torch.equal(t.view(torch.uint8), t0.view(torch.uint8)), "weave_tp::gemm_rs_scaled changed an input"
    assert all(y.untyped_storage().data_ptr() != t.untyped_storage().data_ptr() for t in inputs), \
        "weave_tp::gemm_rs_scaled returned an input's storage"
    say("  torch.library.opcheck(weave_tp::gemm_rs_scaled): fake, autograd registration, aot dispatch (its schema test "
        "by hand: torch.allclose has no fp8)")


def case_abort() -> None:
    team = weave_tp.get_team()
    if team.world < 2:
        say("  (one rank: nothing to abort against)")
        return
    a, b = rand((256, 64), "abort a", team.rank), rand((64, 128), "abort b", team.rank)
    aborting = team.world - 1
    # the plan, made by every rank (plans are collective, host-side)
    weave_tp.gemm_rs(a, b, b_layout="row", strategy="fused")
    weave_tp.sync()
    dist.barrier()  # every rank's sync above done before the abort: else a slow rank's sync would raise there
    if team.rank == aborting:
        weave_tp.abort()
    else:
        t0 = time.perf_counter()
        weave_tp.gemm_rs(a, b, b_layout="row", strategy="fused")
        try:
            weave_tp.sync()
            raise AssertionError("weave_tp.sync() after a peer's abort did not raise")
        except weave_tp.WeaveAbortedError as e:
            waited = time.perf_counter() - t0
            assert f"rank {aborting} aborted the team" in str(e), str(e)
            assert waited < 5.0, f"the abort stopped the call after {waited:.1f} s"
    try:
        weave_tp.gemm_rs(a, b, b_layout="row", strategy="fused")
        raise AssertionError("gemm_rs on an aborted team did not raise")
    except weave_tp.WeaveAbortedError as e:
        assert f"rank {aborting} aborted the team" in str(e), str(e)
    weave_tp.finalize()
    weave_tp.init()
    gemm_case("after an abort and init again", 100, 64, 32, strategy="fused")
    say(f"  rank {aborting} aborted: the others stopped and raised WeaveAbortedError; finalize, init, one call")


def case_watchdog() -> None:
    team = weave_tp.get_team()
    if team.world < 2:
        say("  (one rank: nothing to abort against)")
        return
    aborting = team.world - 1
    a, b = rand((256, 64), "watchdog a", team.rank), rand((64, 128), "watchdog b", team.rank)
    weave_tp.finalize()
    team = weave_tp.init(watchdog=0.05)
    weave_tp.gemm_rs(a, b, b_layout="row", strategy="fused")  # the plan, made by every rank
    weave_tp.sync()
    dist.barrier()
    if team.rank == aborting:
        weave_tp.abort()
    else:
        t0 = time.perf_counter()
        try:
            # the call's kernel stops at the abort; ranks sharing a GPU return from it only then. No
            # sync: the watchdog raises in this thread, during the call's return or the loop below
            weave_tp.gemm_rs(a, b, b_layout="row", strategy="fused")
            while time.perf_counter() - t0 < 10.0:
                time.sleep(0.001)
            raise AssertionError("the watchdog did not raise within 10 s of a peer's abort")
        except weave_tp.WeaveAbortedError as e:
            waited = time.perf_counter() - t0
            assert f"rank {aborting} aborted the team" in str(e), str(e)
            assert waited < 5.0, f"the watchdog raised {waited:.1f} s after the call"
    weave_tp.finalize()
    weave_tp.init()
    gemm_case("after the watchdog's abort and init again", 100, 64, 32, strategy="fused")
    say(f"  rank {aborting} aborted: the watchdog raised WeaveAbortedError in the others' threads without a sync")


def case_lifecycle() -> None:
    world = weave_tp.get_team().world
    weave_tp.finalize()
    assert not weave_tp.is_initialized()
    weave_tp.finalize()  # twice: nothing to do
    team = weave_tp.init()
    assert (team.world, team.rank) == (world, dist.get_rank())
    gemm_case("after init again", 100, 64, 32, strategy="fused")
    say("  finalize, init again, one call; exit without finalize (atexit)")


CASES: Dict[str, Callable[[], None]] = {"gemm_rs": case_gemm_rs, "scaled": case_scaled, "nn": case_nn,
                                        "parallel": case_parallel, "ag": case_ag, "compile": case_compile,
                                        "graph": case_graph, "opcheck": case_opcheck, "abort": case_abort,
                                        "watchdog": case_watchdog, "lifecycle": case_lifecycle}


def main(argv: List[str]) -> int:
    global DEVICE
    unknown = [c for c in argv if c not in CASES]
    if unknown:
        print(f"gpu_worker: unknown case(s) {unknown}; cases: {' '.join(CASES)}", file=sys.stderr)
        return 2
    count = torch.cuda.device_count()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    DEVICE = torch.device("cuda", local % count)
    torch.cuda.set_device(DEVICE)
    torch.backends.cuda.matmul.allow_tf32 = False
    shared = count < int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    # NCCL refuses two ranks on one GPU: there gloo carries the unique id and the backward's gather
    dist.init_process_group("gloo" if shared else "cpu:gloo,cuda:nccl")
    team = weave_tp.init()
    say(f"gpu_worker: world {team.world} on {count} GPU(s) ({torch.cuda.get_device_name(DEVICE)}), "
        f"process group {dist.get_backend()}, seed {SEED}, libweave {weave_tp.library_path()}")
    for name in argv or list(CASES):
        t0 = time.perf_counter()
        CASES[name]()
        weave_tp.sync()  # a kernel whose bounded wait expired would have left wrong rows: raises then
        say(f"{name}: ok ({time.perf_counter() - t0:.1f} s)")
    dist.barrier()
    say("gpu_worker: all cases passed")
    dist.destroy_process_group()
    return 0  # the team is left to weave's atexit finalize


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
