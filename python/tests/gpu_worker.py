"""One rank of test_gpu.py's runs, under torchrun (one process a rank on cuda:LOCAL_RANK % device
count; processes that share a GPU run side by side only under MPS). Every rank builds every rank's
inputs from one seed (WEAVE_TEST_SEED), so each checks its own rows against an fp64 reference:

  gemm_rs       bf16 / fp16 / fp32, b [K, N] and [N, K], bias, every strategy, atomic reduction,
                fp32 slots, alpha; 3000 tokens x 777 per rank x 1000 outputs (tails everywhere), an
                aligned shape (the TMA GEMM), 1 token and M < world (ranks without rows), out=,
                calls on inputs changed in place, the plan cache not growing on repeated shapes
  scaled        gemm_rs_scaled: fp8 e4m3 a and b [N, K], per-tensor and per-row scales (each rank its
                own), bf16 and fp16 output, fp32 and fast accumulation, every strategy, bias, alpha,
                scales changed between calls of one plan; against fp64 of the dequantized inputs
  nn            RowParallelLinear forward and backward against autograd of the whole layer
  compile       a two-layer tensor-parallel MLP under torch.compile(fullgraph=True), forward and
                backward, at two token counts (the second traced with a symbolic count)
  graph         capture before any call is refused with the clear error; after one call, a captured
                call replayed 1,000 times on new inputs copied into its static input, each checked:
                fused and auto, with out= given (every pointer seen before capture), then out=None
                (the output a new pointer from the graph's pool)
  opcheck       torch.library.opcheck of weave::gemm_rs (schema, fake, autograd, aot dispatch)
  lifecycle     finalize, init again, one call, and exit without finalize (atexit tears down)

Rank 0 prints a line per case. A failure raises, and torchrun stops every rank.
Usage: torchrun --nproc-per-node N python/tests/gpu_worker.py [case ...]   (default: all cases)
"""

import math
import os
import sys
import time
import zlib
from typing import Callable, Dict, List

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weave

SEED = int(os.environ.get("WEAVE_TEST_SEED", "20261204")) % (1 << 31)
EPS = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -20}
DEVICE = torch.device("cuda")  # this rank's device (set in main)


def rand(shape: tuple, *key: object, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Uniform in [-1, 1), rounded to dtype: the same numbers on every rank for the same key."""
    g = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(repr((SEED,) + key).encode()))
    return (torch.rand(shape, generator=g, device=DEVICE) * 2 - 1).to(dtype)


def check(what: str, got: torch.Tensor, want: torch.Tensor, k_total: int, dtype: torch.dtype,
          slack: float = 1.0) -> None:
    """weave's test tolerance (tests/support/reference.c): output rounding plus accumulation that grows
    like sqrt(K) for values in [-1, 1)."""
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    if got.numel() == 0:
        return
    atol = 4 * EPS[dtype] * math.sqrt(k_total / 3 + 1) * slack
    rtol = 2 * EPS[dtype] * slack
    err = (got.double() - want.double()).abs()
    bad = ~(err <= atol + rtol * want.double().abs())  # NaN counts as bad
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.numel()} wrong, first at {i}: got "
                             f"{got.flatten()[i].item()}, want {want.flatten()[i].item()} (atol {atol:.3g})")


def say(text: str) -> None:
    if dist.get_rank() == 0:
        print(text, flush=True)


# ---- gemm_rs --------------------------------------------------------------------------------------
def gemm_case(name: str, M: int, N: int, K: int, dtype: torch.dtype = torch.bfloat16, layout: str = "row",
              bias: bool = False, calls: int = 1, use_out: bool = False, **options: object) -> None:
    team = weave.get_team()
    world, rank = team.world, team.rank
    begin, rows = weave.row_split(M, world, rank)
    a_in = torch.empty((M, K), dtype=dtype, device=DEVICE)  # one buffer, new values before every call
    for call in range(calls):
        A = [rand((M, K), name, call, "A", r, dtype=dtype) for r in range(world)]
        B = [rand((K, N) if layout == "row" else (N, K), name, call, "B", r, dtype=dtype) for r in range(world)]
        b = rand((N,), name, call, "bias", dtype=dtype) if bias else None
        a_in.copy_(A[rank])
        alpha = float(options.get("alpha", 1.0))
        want = sum(A[r][begin:begin + rows].double() @ (B[r].double() if layout == "row" else B[r].double().t())
                   for r in range(world)) * alpha
        if b is not None:
            want = want + b.double()
        if use_out:
            out = torch.full((rows, N), float("nan"), dtype=dtype, device=DEVICE)
            got = weave.gemm_rs(a_in, B[rank], b, b_layout=layout, out=out, **options)
            assert got is out
        else:
            got = weave.gemm_rs(a_in, B[rank], b, b_layout=layout, **options)
        check(f"{name} call {call}", got, want, K * world, dtype)


def case_gemm_rs() -> None:
    team = weave.get_team()
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
    n += 7
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


# ---- RowParallelLinear ------------------------------------------------------------------------------
def linear_case(tokens: int, in_features: int, out_features: int, dtype: torch.dtype) -> None:
    team = weave.get_team()
    world, rank = team.world, team.rank
    k = in_features // world
    cols = slice(rank * k, (rank + 1) * k)
    key = (tokens, in_features, out_features, str(dtype))
    X, W = rand((tokens, in_features), key, "X", dtype=dtype), rand((out_features, in_features), key, "W", dtype=dtype)
    b, G = rand((out_features,), key, "b", dtype=dtype), rand((tokens, out_features), key, "G", dtype=dtype)

    layer = weave.nn.RowParallelLinear(in_features, out_features, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(W[:, cols])
        layer.bias.copy_(b)
    x = X[:, cols].clone().requires_grad_()
    y = layer(x)
    begin, rows = weave.row_split(tokens, world, rank)
    y.backward(G[begin:begin + rows])

    Xd, Wd, bd = (t.double().requires_grad_() for t in (X, W, b))
    Yd = Xd @ Wd.t() + bd
    (Yd * G.double()).sum().backward()
    what = f"RowParallelLinear {tokens}x{in_features}->{out_features} {dtype}"
    check(f"{what} forward", y, Yd[begin:begin + rows].detach(), in_features, dtype)
    check(f"{what} grad x", x.grad, Xd.grad[:, cols], out_features, dtype)
    check(f"{what} grad weight", layer.weight.grad, Wd.grad[:, cols], tokens, dtype)
    check(f"{what} grad bias", layer.bias.grad, bd.grad, tokens, dtype)


def case_nn() -> None:
    world = weave.get_team().world
    for dtype in (torch.bfloat16, torch.float16):
        linear_case(3000, 777 * world, 1000, dtype)
        linear_case(1, 777 * world, 1000, dtype)
    say("  RowParallelLinear: forward and backward, bf16 and fp16, 3000 and 1 tokens")


# ---- torch.compile ------------------------------------------------------------------------------------
class MLP(torch.nn.Module):
    """Column-parallel nn.Linear (input replicated, this rank's hidden units), gelu, RowParallelLinear."""

    def __init__(self, d_in: int, hidden: int, d_out: int, dtype: torch.dtype) -> None:
        super().__init__()
        team = weave.get_team()
        h = hidden // team.world
        self.up = torch.nn.Linear(d_in, h, device=DEVICE, dtype=dtype)
        self.down = weave.nn.RowParallelLinear(hidden, d_out, device=DEVICE, dtype=dtype)
        with torch.no_grad():  # shards of one model, the same on every world size
            mine = slice(team.rank * h, (team.rank + 1) * h)
            self.up.weight.copy_(rand((hidden, d_in), "up.weight", dtype=dtype)[mine])
            self.up.bias.copy_(rand((hidden,), "up.bias", dtype=dtype)[mine])
            self.down.weight.copy_(rand((d_out, hidden), "down.weight", dtype=dtype)[:, mine])
            self.down.bias.copy_(rand((d_out,), "down.bias", dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def case_compile() -> None:
    world = weave.get_team().world
    dtype = torch.bfloat16
    model = MLP(192, 256 * world, 320, dtype)
    compiled = torch.compile(model, fullgraph=True)
    for tokens in (512, 300):
        x = rand((tokens, 192), "x", tokens, dtype=dtype)
        g = rand((tokens, 320), "g", tokens, dtype=dtype)
        begin, rows = weave.row_split(tokens, world, weave.get_team().rank)
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


# ---- CUDA graphs --------------------------------------------------------------------------------------
def graph_case(strategy: str, use_out: bool, replays: int) -> None:
    """out=None: the captured call's output comes from the graph's pool, a pointer weave has not seen
    before capture; use_out: every pointer was seen by the call that made the plan."""
    team = weave.get_team()
    world, rank = team.world, team.rank
    M, N, K = 256 + world - 1 + 2 * use_out, 384, 128  # M not a multiple of world: uneven rows; a plan each
    W = [rand((N, K), "graph W", strategy, r) for r in range(world)]
    b = rand((N,), "graph bias", strategy)
    begin, rows = weave.row_split(M, world, rank)
    a_static = rand((M, K), "graph A", strategy, rank)  # the captured call's input: new values copied in
    out = torch.empty((rows, N), dtype=torch.bfloat16, device=DEVICE) if use_out else None

    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            weave.gemm_rs(a_static, W[rank], b, b_layout="col", strategy=strategy)
    except RuntimeError as e:
        assert "before capturing" in str(e), e
    else:
        raise AssertionError("a capture that would make a plan was not refused")

    side = torch.cuda.Stream()  # the first call (the plan) outside capture, as torch recommends
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        weave.gemm_rs(a_static, W[rank], b, b_layout="col", strategy=strategy, out=out)
    torch.cuda.current_stream().wait_stream(side)
    plans = len(team.plans)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y_static = weave.gemm_rs(a_static, W[rank], b, b_layout="col", strategy=strategy, out=out)
    assert len(team.plans) == plans

    atol, rtol = 4 * EPS[torch.bfloat16] * math.sqrt(K * world / 3 + 1), 2 * EPS[torch.bfloat16]
    excess = torch.zeros(replays, device=DEVICE)  # per replay: max(|error| - tolerance), <= 0 when right
    Wt = [w.float().t() for w in W]
    for i in range(replays):
        A = [rand((M, K), "graph replay", strategy, i, r) for r in range(world)]
        a_static.copy_(A[rank])
        g.replay()
        if rows:
            want = sum(A[r][begin:begin + rows].float() @ Wt[r] for r in range(world)) + b.float()
            excess[i] = ((y_static.float() - want).abs() - (atol + rtol * want.abs())).max()
    torch.cuda.synchronize()
    bad = (excess > 0).nonzero()
    if len(bad):
        raise AssertionError(f"graph {strategy} out={'given' if use_out else 'None'}: {len(bad)} of {replays} "
                             f"replays wrong, first replay {int(bad[0])}")
    info = weave.plan_info(a_static, W[rank], b, b_layout="col", strategy=strategy)
    say(f"  CUDA graph {strategy} (plan {info.strategy}), out={'given' if use_out else 'None'}: capture before "
        f"a plan refused; {replays} replays, new inputs each, all right")


def case_graph() -> None:
    for use_out in (True, False):  # out= first: its capture needs no new pointer checked
        for strategy in ("fused", "auto"):
            graph_case(strategy, use_out, 1000)


def case_opcheck() -> None:
    a = rand((300, 96), "opcheck a").requires_grad_()
    b = rand((160, 96), "opcheck b", weave.get_team().rank).requires_grad_()
    bias = rand((160,), "opcheck bias").requires_grad_()
    team = weave.get_team()
    torch.library.opcheck(torch.ops.weave.gemm_rs.default,
                          (a, b, bias, "col", "fused", "deterministic", False, 1.0, team.world, team.rank))
    say("  torch.library.opcheck(weave::gemm_rs): schema, fake, autograd registration, aot dispatch")


def case_lifecycle() -> None:
    world = weave.get_team().world
    weave.finalize()
    assert not weave.is_initialized()
    weave.finalize()  # twice: nothing to do
    team = weave.init()
    assert (team.world, team.rank) == (world, dist.get_rank())
    gemm_case("after init again", 100, 64, 32, strategy="fused")
    say("  finalize, init again, one call; exit without finalize (atexit)")


def scaled_case(name: str, M: int, N: int, K: int, per_row: bool, out_dtype: torch.dtype, fast: bool,
                bias: bool = False, calls: int = 1, **options: object) -> None:
    team = weave.get_team()
    world, rank = team.world, team.rank
    begin, rows = weave.row_split(M, world, rank)
    f8 = torch.float8_e4m3fn
    A = [rand((M, K), name, "A", r).to(f8) for r in range(world)]
    B = [rand((N, K), name, "B", r).to(f8) for r in range(world)]
    b = rand((N,), name, "bias", dtype=out_dtype) if bias else None
    for call in range(calls):  # new scales every call, same plan
        if per_row:
            SA = [rand((M, 1), name, call, "sa", r, dtype=torch.float32).abs() + 0.25 for r in range(world)]
            SB = [rand((1, N), name, call, "sb", r, dtype=torch.float32).abs() + 0.25 for r in range(world)]
        else:
            SA = [torch.full((1,), 0.5 + 0.25 * ((r + call) % 4), device=DEVICE) for r in range(world)]
            SB = [torch.full((1,), 1.5 - 0.125 * ((r + 2 * call) % 5), device=DEVICE) for r in range(world)]
        alpha = float(options.get("alpha", 1.0))
        # scale_b scales the output's columns, i.e. the rows of b [N, K]
        want = sum((A[r].double() * SA[r].double())[begin:begin + rows] @
                   (B[r].double() * SB[r].double().reshape(-1, 1)).t() for r in range(world)) * alpha
        if b is not None:
            want = want + b.double()
        got = weave.gemm_rs_scaled(A[rank], B[rank], SA[rank], SB[rank], b, out_dtype=out_dtype,
                                   use_fast_accum=fast, **options)
        assert got.dtype == out_dtype, got.dtype
        # the scales reach 2 per product: twice the tolerance of inputs in [-1, 1); fast accumulation
        # drops the low bits of each product at every k32 step (docs/hopper_gemm.md): 8 times
        check(f"{name} call {call}", got, want, K * world, out_dtype, slack=8 if fast else 2)


def case_scaled() -> None:
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
    say(f"  {n + 2} cases")


CASES: Dict[str, Callable[[], None]] = {"gemm_rs": case_gemm_rs, "scaled": case_scaled, "nn": case_nn,
                                        "compile": case_compile,
                                        "graph": case_graph, "opcheck": case_opcheck, "lifecycle": case_lifecycle}


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
    team = weave.init()
    say(f"gpu_worker: world {team.world} on {count} GPU(s) ({torch.cuda.get_device_name(DEVICE)}), "
        f"process group {dist.get_backend()}, seed {SEED}, libweave {weave.library_path()}")
    for name in argv or list(CASES):
        t0 = time.perf_counter()
        CASES[name]()
        weave.sync()  # a kernel whose bounded wait expired would have left wrong rows: raises then
        say(f"{name}: ok ({time.perf_counter() - t0:.1f} s)")
    dist.barrier()
    say("gpu_worker: all cases passed")
    dist.destroy_process_group()
    return 0  # the team is left to weave's atexit finalize


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
