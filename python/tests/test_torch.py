"""weave's PyTorch face without a GPU: argument errors naming the argument, the ops' registration and
fake implementations (this rank's rows), torch.compile(fullgraph=True) tracing a two-layer model with
its backward and dynamic shapes (on meta tensors), and the backward's arithmetic over a gloo group of
three CPU processes. A stand-in team (world, rank, device: all the checks and fake kernels read)
takes the place of weave_tp.init, which needs a GPU."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, List

import pytest

from conftest import PYTHON_DIR, needs_library

torch = pytest.importorskip("torch")

import weave_tp  # noqa: E402
from weave_tp import _torch  # noqa: E402

dist = torch.distributed

pytestmark = needs_library


def use_team(monkeypatch: pytest.MonkeyPatch, world: int, rank: int, group: object = None) -> SimpleNamespace:
    """A stand-in team (world, rank, cuda:0), as the checks and fake kernels see one, made the default."""
    stand_in = SimpleNamespace(world=world, rank=rank, device=0)
    monkeypatch.setattr(_torch._state, "teams", {7: _torch._Entry(stand_in, group)})
    monkeypatch.setattr(_torch._state, "default", 7)
    return stand_in


@pytest.fixture
def team(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Rank 1 of 4 on cuda:0."""
    return use_team(monkeypatch, 4, 1)


def meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=dtype)


def test_without_a_team() -> None:
    with pytest.raises(RuntimeError, match=r"weave_tp.gemm_rs: no weave team: call weave_tp.init\(\) first"):
        weave_tp.gemm_rs(meta(4, 8), meta(8, 6))
    with pytest.raises(RuntimeError, match="weave_tp.init"):
        weave_tp.nn.RowParallelLinear(8, 6)
    with pytest.raises(RuntimeError, match=r"weave_tp.abort: no weave team"):
        weave_tp.abort()
    assert not weave_tp.is_initialized()


def test_init_needs_torch_distributed() -> None:
    with pytest.raises(RuntimeError, match="init_process_group"):
        weave_tp.init()


def test_init_tells_the_peers_when_rank_0_has_no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """Group rank 0 makes the unique id, its first use of libweave. When the library does not load
    there, the broadcast still goes out, with status 1, so that the other ranks fail instead of waiting
    in it until the process group's timeout. torch.distributed and CUDA stubbed: rank 0 of 2."""
    sent: List[torch.Tensor] = []
    for name, fn in (("is_initialized", lambda: True), ("get_rank", lambda group=None: 0),
                     ("get_world_size", lambda group=None: 2), ("get_backend", lambda group=None: "gloo"),
                     ("get_global_rank", lambda group, rank: rank),
                     ("broadcast", lambda buf, src, group=None: sent.append(buf.clone()))):
        monkeypatch.setattr(_torch.dist, name, fn)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def no_library() -> bytes:
        raise weave_tp.LibraryNotFoundError("weave: libweave.so not found")

    monkeypatch.setattr(_torch, "get_unique_id", no_library)
    with pytest.raises(weave_tp.LibraryNotFoundError, match="not found"):
        weave_tp.init()
    assert len(sent) == 1 and sent[0][0].item() == 1
    assert not weave_tp.is_initialized()


A, B = (10, 8), (8, 6)


@pytest.mark.parametrize("change, error, words", [
    (dict(a=[1.0]), TypeError, "a must be a torch.Tensor (got list)"),
    (dict(b=None), TypeError, "b must be a torch.Tensor (got NoneType)"),
    (dict(bias="x"), TypeError, "bias must be a torch.Tensor or None (got str)"),
    (dict(out=1), TypeError, "out must be a torch.Tensor or None (got int)"),
    (dict(b_layout=None), TypeError, "b_layout must be a str"),
    (dict(strategy=1), TypeError, "strategy must be a str"),
    (dict(fp32_slots=1), TypeError, "fp32_slots must be a bool"),
    (dict(alpha="2"), TypeError, "alpha must be a float"),
    (dict(a=meta(*A, dtype=torch.int32)), TypeError, "a is torch.int32; weave takes torch.bfloat16, torch.float16"),
    (dict(a=meta(*A, dtype=torch.float64)), TypeError, "a is torch.float64"),
    (dict(b=meta(*B, dtype=torch.float16)), TypeError, "b is torch.float16 but a is torch.bfloat16"),
    (dict(bias=meta(6, dtype=torch.float32)), TypeError, "bias is torch.float32 but a is torch.bfloat16"),
    (dict(a=torch.zeros(A, dtype=torch.bfloat16)), ValueError, "a is on cpu; it must be on cuda:0"),
    (dict(b=torch.zeros(B, dtype=torch.bfloat16)), ValueError, "b is on cpu; it must be on cuda:0"),
    (dict(a=meta(8)), ValueError, "a must be [*, K_local], at least 2-D (got shape (8,))"),
    (dict(a=meta(8, 10).t()), ValueError, "a must be contiguous"),
    (dict(a=meta(10, 2, 8).transpose(0, 1)), ValueError, "a must be contiguous"),
    (dict(b=meta(8, 12)[:, ::2]), ValueError, "b must be contiguous"),
    (dict(b=meta(6, 8).t(), b_layout="col"), ValueError,
     "b has shape (8, 6); b_layout='col' wants [N, K_local] with K_local = a.shape[1] = 8"),
    (dict(b=meta(9, 6)), ValueError,
     "b has shape (9, 6); b_layout='row' wants [K_local, N] with K_local = a.shape[1] = 8"),
    (dict(b_layout="col"), ValueError, "b has shape (8, 6); b_layout='col' wants [N, K_local]"),
    (dict(b_layout="column"), ValueError, "b_layout must be one of 'row', 'col' (got 'column')"),
    (dict(strategy="fast"), ValueError, "strategy must be one of 'auto', 'fused', 'bulk', 'baseline'"),
    (dict(reduce="sum"), ValueError, "reduce must be one of 'deterministic', 'atomic'"),
    (dict(a=meta(0, 8)), ValueError, "must not be empty"),
    (dict(bias=meta(5)), ValueError, "bias has shape (5,); it must be [N] = [6]"),
    (dict(bias=meta(1, 6)), ValueError, "bias must be 1-D"),
    (dict(out=meta(10, 6)), ValueError, "out has shape (10, 6); this rank's rows are [3, 6]"),
    (dict(out=meta(3, 6, dtype=torch.float16)), TypeError, "out is torch.float16 but a is torch.bfloat16"),
    # C ints: ctypes would pass 2**32 + 10 rows as 10 (a plan, and [3, 6] rows, of M = 10)
    (dict(a=meta(2**32 + 10, 8)), ValueError, "M, N and K_local must each be at most 2147483647"),
    (dict(b=meta(8, 2**32 + 6)), ValueError, "M, N and K_local must each be at most 2147483647"),
])
def test_argument_errors_name_the_argument(team: SimpleNamespace, change: dict, error: type, words: str) -> None:
    args = dict(a=meta(*A), b=meta(*B), bias=None, out=None, b_layout="row", strategy="auto", reduce="deterministic",
                fp32_slots=False, alpha=1.0)
    args.update(change)
    with pytest.raises(error) as e:
        weave_tp.gemm_rs(args.pop("a"), args.pop("b"), args.pop("bias"), **args)
    assert words in str(e.value)
    assert str(e.value).startswith("weave_tp.gemm_rs: ")


def test_out_does_not_take_autograd(team: SimpleNamespace) -> None:
    a = meta(*A).requires_grad_()
    with pytest.raises(RuntimeError, match="out= does not support autograd"):
        weave_tp.gemm_rs(a, meta(*B), b_layout="row", out=meta(3, 6))
    with torch.no_grad():
        out = meta(3, 6)
        assert weave_tp.gemm_rs(a, meta(*B), b_layout="row", out=out) is out


def test_out_sharing_memory_with_an_input_is_refused(team: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """out= overlapping a, b or bias is refused before weave is called: the call reads them while it
    writes out (the fused kernel's GEMM blocks and its reduction at once). CPU tensors through the
    real op, with what needs a GPU stubbed: the device check (the tensors' own device passes), the
    plan (rank 1 of 4, M = 10: 3 rows) and its execute, and torch's stream."""
    calls: list = []
    monkeypatch.setattr(_torch, "_plan", lambda *args: SimpleNamespace(info=SimpleNamespace(rows=3),
                                                                       execute=lambda *a: calls.append(a)))
    check_tensor = _torch._check_tensor
    monkeypatch.setattr(_torch, "_check_tensor", lambda call, name, t, ndim, dtype, device, meta_ok, exact=None:
                        check_tensor(call, name, t, ndim, dtype, t.device, meta_ok, exact))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=0))

    def call(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
        weave_tp.gemm_rs(a, b, bias, b_layout="row", out=out)

    mem = torch.zeros(80 + 48 + 6 + 18, dtype=torch.bfloat16)
    a, b, bias, out = mem[:80].view(10, 8), mem[80:128].view(8, 6), mem[128:134], mem[134:].view(3, 6)
    call(a, b, bias, out)  # one storage, no byte shared: taken
    assert len(calls) == 1
    for name, alias in (("a", mem[70:88].view(3, 6)), ("a", a.view(-1)[:18].view(3, 6)), ("b", mem[120:138].view(3, 6)),
                        ("bias", mem[133:151].view(3, 6))):
        with pytest.raises(ValueError, match=f"weave_tp.gemm_rs: out shares memory with {name}, which the call reads"):
            call(a, b, bias, alias)
    assert len(calls) == 1


@pytest.mark.parametrize("world", [1, 2, 4, 5])
def test_output_is_this_ranks_rows(monkeypatch: pytest.MonkeyPatch, world: int) -> None:
    for rank in range(world):
        use_team(monkeypatch, world, rank)
        for M in (1, 3, 4, 10, 23):
            rows = weave_tp.row_split(M, world, rank)[1]
            assert weave_tp.gemm_rs(meta(M, 8), meta(8, 6), b_layout="row").shape == (rows, 6)
            assert weave_tp.gemm_rs(meta(M, 8), meta(6, 8), meta(6)).shape == (rows, 6)


def test_eager_backward_shapes(team: SimpleNamespace) -> None:
    """The autograd registration in eager mode: gradients of a's, b's and bias's shapes (the gather of
    the gradient rows runs its fake kernel on meta tensors)."""
    a, b, bias = (meta(*s).requires_grad_() for s in ((10, 8), (6, 8), (6,)))
    weave_tp.gemm_rs(a, b, bias, b_layout="col", alpha=0.5).sum().backward()
    assert (a.grad.shape, b.grad.shape, bias.grad.shape) == ((10, 8), (6, 8), (6,))
    a.grad = None
    weave_tp.gemm_rs(a, meta(8, 6), b_layout="row").sum().backward()
    assert a.grad.shape == (10, 8)
    # through a transposed view of the weight and 3-D tokens: the gradients keep the callers' shapes
    a3, w = meta(2, 5, 8).requires_grad_(), meta(8, 6).requires_grad_()
    weave_tp.gemm_rs(a3, w.t()).sum().backward()
    assert (a3.grad.shape, w.grad.shape) == ((2, 5, 8), (8, 6))


@pytest.mark.parametrize("world", [1, 2, 4, 5])
def test_torch_row_split(monkeypatch: pytest.MonkeyPatch, world: int) -> None:
    """row_split="torch": rows as torch.chunk / Shard(0) give them (ceil(M / world) each, the last
    ranks fewer or none), the tokens padded to a multiple of the world where M % world != 0 (the
    plan is then of the padded M); "weave" keeps weave_row_split; out= takes torch's rows too."""
    for rank in range(world):
        use_team(monkeypatch, world, rank)
        for M in (1, 3, 4, 10, 23):
            chunks = torch.arange(M).chunk(world)
            want = chunks[rank].numel() if rank < len(chunks) else 0
            assert weave_tp.gemm_rs(meta(M, 8), meta(6, 8), row_split="torch").shape == (want, 6)
            assert weave_tp.gemm_rs(meta(M, 8), meta(6, 8), row_split="weave").shape == \
                (weave_tp.row_split(M, world, rank)[1], 6)
            with torch.no_grad():
                out = meta(want, 6)
                assert weave_tp.gemm_rs(meta(M, 8), meta(6, 8), row_split="torch", out=out) is out
    use_team(monkeypatch, 4, 3)
    with pytest.raises(ValueError, match="row_split must be one of 'weave', 'torch'"):
        weave_tp.gemm_rs(meta(10, 8), meta(6, 8), row_split="chunk")
    with pytest.raises(TypeError, match="row_split must be a str"):
        weave_tp.gemm_rs(meta(10, 8), meta(6, 8), row_split=None)
    with torch.no_grad(), pytest.raises(ValueError, match=r"out has shape \(3, 6\); this rank's rows are \[1, 6\]"):
        weave_tp.gemm_rs(meta(10, 8), meta(6, 8), row_split="torch", out=meta(3, 6))
    a = meta(10, 8).requires_grad_()
    weave_tp.gemm_rs(a, meta(6, 8), row_split="torch").sum().backward()  # through the padding
    assert a.grad.shape == (10, 8)


def test_default_layout_is_f_linear(team: SimpleNamespace) -> None:
    """b is an nn.Linear weight [N, K_local] unless b_layout="row" says [K_local, N]; where N == K_local
    both shapes fit, so the default decides: it is F.linear's."""
    options, M, N, K = _torch._check("t", team, meta(10, 8), meta(6, 8), None, "col", "auto", "deterministic", False,
                                     1.0, meta_ok=True)
    assert (M, N, K, options.b_layout) == (10, 6, 8, 1)
    assert weave_tp.gemm_rs(meta(10, 8), meta(6, 8)).shape == (3, 6)
    with pytest.raises(ValueError, match=r"b has shape \(8, 6\); b_layout='col' wants \[N, K_local\]"):
        weave_tp.gemm_rs(meta(10, 8), meta(8, 6))


def test_transposed_views_are_the_other_layout(team: SimpleNamespace) -> None:
    """A transposed view of a contiguous matrix is planned as that matrix's layout (no copy): w.t()
    with b_layout="row" is w with "col", and the other way round."""
    def options(b: torch.Tensor, layout: str) -> tuple:  # (the options, M, N, K)
        o, M, N, K = _torch._check("t", team, meta(10, 8), b, None, layout, "auto", "deterministic", False, 1.0,
                                   meta_ok=True)
        return o, M, N, K

    w = meta(6, 8)  # [N, K]
    assert options(w.t(), "row") == options(w, "col")
    v = meta(8, 6)  # [K, N]
    assert options(v.t(), "col") == options(v, "row")
    assert weave_tp.gemm_rs(meta(10, 8), w.t(), b_layout="row").shape == (3, 6)


def test_leading_dimensions_are_tokens(team: SimpleNamespace) -> None:
    """a [*, K_local] as nn.Linear's input: the leading dimensions are flattened into M tokens, and the
    result is this rank's rows of them (rank 1 of 4: M = 2 * 5 = 10 gives 3 rows)."""
    assert weave_tp.gemm_rs(meta(2, 5, 8), meta(6, 8)).shape == (3, 6)
    assert weave_tp.gemm_rs(meta(1, 2, 5, 8), meta(6, 8), meta(6)).shape == (3, 6)
    with torch.no_grad():
        out = meta(3, 6)
        assert weave_tp.gemm_rs(meta(2, 5, 8), meta(6, 8), out=out) is out


def test_ops_are_registered() -> None:
    assert str(torch.ops.weave_tp.gemm_rs.default._schema) == (
        "weave_tp::gemm_rs(Tensor a, Tensor b, Tensor? bias, str b_layout, str strategy, str reduce, bool fp32_slots, "
        "float alpha, SymInt world, SymInt rank, SymInt team_id) -> Tensor")
    assert "Tensor(a3!) out" in str(torch.ops.weave_tp.gemm_rs_out.default._schema)
    assert str(torch.ops.weave_tp.all_gather_rows.default._schema) == (
        "weave_tp::all_gather_rows(Tensor rows, SymInt M, SymInt team_id) -> Tensor")
    assert str(torch.ops.weave_tp.gemm_rs_scaled.default._schema) == (
        "weave_tp::gemm_rs_scaled(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, "
        "ScalarType out_dtype, "
        "bool use_fast_accum, str strategy, str reduce, bool fp32_slots, float alpha, SymInt world, SymInt rank, "
        "SymInt team_id) -> Tensor")


def test_several_teams(monkeypatch: pytest.MonkeyPatch) -> None:
    """One team per group (e.g. per DeviceMesh dimension): calls take the first unless they name a group;
    the ops carry the team's id, so a traced graph keeps to its team; finalize(group) frees one."""
    tp, dp = object(), object()  # stand-ins for two process groups
    first, second = (SimpleNamespace(world=w, rank=1, device=0, destroy=lambda: None) for w in (4, 2))
    monkeypatch.setattr(_torch._state, "teams", {})
    monkeypatch.setattr(_torch._state, "default", None)
    assert (_torch._register(first, tp), _torch._register(second, dp)) == (_torch._state.next_id - 2,
                                                                           _torch._state.next_id - 1)
    assert weave_tp.get_team() is first and weave_tp.get_team(group=dp) is second
    assert weave_tp.is_initialized(tp) and weave_tp.is_initialized(dp) and not weave_tp.is_initialized(object())
    assert weave_tp.gemm_rs(meta(10, 8), meta(6, 8)).shape == (3, 6)  # rank 1 of 4
    assert weave_tp.gemm_rs(meta(10, 8), meta(6, 8), group=dp).shape == (5, 6)  # rank 1 of 2
    assert weave_tp.gemm_rs_scaled(f8(10, 32), f8(6, 32), f32(1), f32(1), group=dp).shape == (5, 6)
    layer = weave_tp.nn.RowParallelLinear(16, 6, device="meta", dtype=torch.bfloat16, group=dp)
    assert layer.weight.shape == (6, 8) and layer(meta(10, 8)).shape == (5, 6)
    with pytest.raises(RuntimeError, match=r"weave_tp.gemm_rs: no weave team over this process group"):
        weave_tp.gemm_rs(meta(10, 8), meta(6, 8), group=object())
    with pytest.raises(ValueError, match="world 2 and rank 1 are not the team's"):  # another team's id
        torch.ops.weave_tp.gemm_rs(meta(10, 8), meta(6, 8), None, "col", "auto", "deterministic", False, 1.0, 2, 1,
                                   _torch._team_id("t", tp))
    weave_tp.finalize(tp)
    assert weave_tp.get_team() is second and not weave_tp.is_initialized(tp)
    with pytest.raises(RuntimeError, match="weave team .* does not exist"):
        layer_first_id = _torch._state.next_id - 2
        torch.ops.weave_tp.gemm_rs(meta(10, 8), meta(6, 8), None, "col", "auto", "deterministic", False, 1.0, 4, 1,
                                   layer_first_id)
    weave_tp.finalize()
    assert not weave_tp.is_initialized()


def f8(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=torch.float8_e4m3fn)


def f32(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=torch.float32)


@pytest.mark.parametrize("change, error, words", [
    (dict(a=[1.0]), TypeError, "a must be a torch.Tensor (got list)"),
    (dict(scale_b=2.0), TypeError, "scale_b must be a torch.Tensor (got float)"),
    (dict(bias="x"), TypeError, "bias must be a torch.Tensor or None (got str)"),
    (dict(a=meta(10, 16)), TypeError, "a is torch.bfloat16; it must be torch.float8_e4m3fn"),
    (dict(b=f8(6, 16).to(torch.float8_e5m2)), TypeError, "b is torch.float8_e5m2; it must be torch.float8_e4m3fn"),
    (dict(scale_a=meta(1)), TypeError, "scale_a is torch.bfloat16; it must be torch.float32"),
    (dict(out_dtype=torch.float32), TypeError, "out_dtype must be torch.bfloat16 or torch.float16"),
    (dict(out_dtype="bf16"), TypeError, "out_dtype must be torch.bfloat16 or torch.float16"),
    (dict(use_fast_accum=1), TypeError, "use_fast_accum must be a bool"),
    (dict(strategy=1), TypeError, "strategy must be a str"),
    (dict(alpha="2"), TypeError, "alpha must be a float"),
    (dict(a=torch.zeros((10, 16)).to(torch.float8_e4m3fn)), ValueError, "a is on cpu; it must be on cuda:0"),
    (dict(b=f8(6, 32)[:, ::2]), ValueError, "b must be contiguous"),
    # torch._scaled_mm's b (a weight's .t()): not "call .contiguous()", which gives the weight's transpose
    (dict(b=f8(6, 16).t()), ValueError, "b (16, 6) is a transposed view; weave reads b as [N, K_local] row-major"),
    (dict(a=f8(16, 16), b=f8(16, 16).t()), ValueError, "for torch._scaled_mm's b (a weight's .t()) pass the weight"),
    (dict(a=f8(2, 10, 16)), ValueError, "a and b must be 2-D"),
    (dict(b=f8(16, 6)), ValueError, "b has shape (16, 6); it must be [N, K_local] with K_local = a.shape[1] = 16"),
    (dict(a=f8(0, 16)), ValueError, "must not be empty"),
    (dict(a=f8(10, 24), b=f8(6, 24)), ValueError, "K_local = a.shape[1] = 24 must be a multiple of 16"),
    (dict(a=f8(2**32 + 10, 16)), ValueError, "M, N and K_local must each be at most 2147483647"),
    (dict(scale_a=f32(10, 1)), ValueError, "scale_a (10, 1) and scale_b (1,) must be one element each"),
    (dict(scale_a=f32(10, 1), scale_b=f32(6, 1)), ValueError, "[1, N] = [1, 6]"),
    (dict(bias=meta(6, dtype=torch.float16)), TypeError, "bias is torch.float16; it must be torch.bfloat16"),
    (dict(bias=meta(5)), ValueError, "bias has shape (5,); it must be [N] = [6]"),
    (dict(strategy="fast"), ValueError, "strategy must be one of 'auto', 'fused', 'bulk', 'baseline'"),
])
def test_scaled_argument_errors_name_the_argument(team: SimpleNamespace, change: dict, error: type, words: str) -> None:
    args = dict(a=f8(10, 16), b=f8(6, 16), scale_a=f32(1), scale_b=f32(1), bias=None, out_dtype=torch.bfloat16,
                use_fast_accum=False, strategy="auto", reduce="deterministic", fp32_slots=False, alpha=1.0)
    args.update(change)
    with pytest.raises(error) as e:
        weave_tp.gemm_rs_scaled(args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b"),
                                args.pop("bias"), **args)
    assert words in str(e.value)
    assert str(e.value).startswith("weave_tp.gemm_rs_scaled: ")


@pytest.mark.parametrize("world", [1, 4, 5])
def test_scaled_output_is_this_ranks_rows(monkeypatch: pytest.MonkeyPatch, world: int) -> None:
    for rank in range(world):
        use_team(monkeypatch, world, rank)
        for M in (1, 3, 23):
            rows = weave_tp.row_split(M, world, rank)[1]
            y = weave_tp.gemm_rs_scaled(f8(M, 32), f8(6, 32), f32(1), f32(1))
            assert (y.shape, y.dtype) == ((rows, 6), torch.bfloat16)
            y = weave_tp.gemm_rs_scaled(f8(M, 32), f8(6, 32), f32(M, 1), f32(1, 6), meta(6, dtype=torch.float16),
                                     out_dtype=torch.float16, use_fast_accum=True)
            assert (y.shape, y.dtype) == ((rows, 6), torch.float16)


@pytest.mark.parametrize("sa, sb, fast, out, want", [
    ((1,), (1,), False, torch.bfloat16, (1, 0, 0)),    # per tensor, fp32 accumulation, bf16 (scale, accum, out)
    ((), (1, 1), True, torch.float16, (1, 1, 1)),      # one element each, any shape
    ((10, 1), (1, 6), False, torch.bfloat16, (2, 0, 0)),  # per row of a and column of the output
    ((10,), (6,), True, torch.float16, (2, 1, 1)),
])
def test_scaled_options(team: SimpleNamespace, sa: tuple, sb: tuple, fast: bool, out: torch.dtype, want: tuple) -> None:
    """The plan's desc: fp8 inputs, B [N, K], the scale mode from the scales' shapes, the accumulation
    and the output type."""
    options, M, N, K = _torch._check_scaled("t", team, f8(10, 16), f8(6, 16), f32(*sa), f32(*sb), None, out, fast,
                                            "auto", "deterministic", False, 1.0, meta_ok=True)
    d = options.desc()
    assert (M, N, K, d.dtype, d.b_layout) == (10, 6, 16, 3, 1)
    assert (d.scale_mode, d.fp8_accum, d.out_dtype) == want


@pytest.mark.parametrize("world", [1, 4, 5])
def test_ag_scaled_shapes(monkeypatch: pytest.MonkeyPatch, world: int) -> None:
    """ag_gemm_scaled's output: every row [M, N] of out_dtype, whatever this rank holds; the gathered
    A [M, K] e4m3 with return_gathered."""
    for rank in range(world):
        use_team(monkeypatch, world, rank)
        for M in (1, 3, 23):
            rows = weave_tp.row_split(M, world, rank)[1]
            y = weave_tp.ag_gemm_scaled(f8(rows, 32), f8(6, 32), f32(1), f32(1), M=M)
            assert (y.shape, y.dtype) == ((M, 6), torch.bfloat16)
            y, g = weave_tp.ag_gemm_scaled(f8(rows, 32), f8(6, 32), f32(rows, 1), f32(1, 6),
                                           meta(6, dtype=torch.float16), M=M, out_dtype=torch.float16,
                                           use_fast_accum=True, return_gathered=True)
            assert (y.shape, y.dtype, g.shape, g.dtype) == ((M, 6), torch.float16, (M, 32), torch.float8_e4m3fn)


@pytest.mark.parametrize("change, error, words", [
    (dict(a=meta(10, 16)), TypeError, "a is torch.bfloat16; it must be torch.float8_e4m3fn"),
    (dict(scale_a=meta(1)), TypeError, "scale_a is torch.bfloat16; it must be torch.float32"),
    (dict(out_dtype=torch.float32), TypeError, "out_dtype must be torch.bfloat16 or torch.float16"),
    (dict(M=True), TypeError, "M must be an int or None"),
    (dict(M=44), ValueError, "a has 10 rows but rank 1 of 4 holds 11 of M = 44"),
    (dict(b=f8(6, 32)), ValueError, "b has shape (6, 32); it must be [N, K] with K = a.shape[1] = 16"),
    (dict(a=f8(10, 24), b=f8(6, 24)), ValueError, "K = a.shape[1] = 24 must be a multiple of 16"),
    (dict(scale_a=f32(40, 1), scale_b=f32(1, 6)), ValueError, "[rows, 1] = [10, 1] (this rank's rows)"),
    (dict(bias=meta(5)), ValueError, "bias has shape (5,); it must be [N] = [6]"),
    (dict(strategy="fast"), ValueError, "strategy must be one of 'auto', 'fused', 'bulk', 'baseline'"),
])
def test_ag_scaled_argument_errors_name_the_argument(team: SimpleNamespace, change: dict, error: type,
                                                     words: str) -> None:
    args = dict(a=f8(10, 16), b=f8(6, 16), scale_a=f32(1), scale_b=f32(1), bias=None, M=40, out_dtype=torch.bfloat16,
                use_fast_accum=False, strategy="auto", alpha=1.0)
    args.update(change)
    with pytest.raises(error) as e:
        weave_tp.ag_gemm_scaled(args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b"),
                                args.pop("bias"), **args)
    assert words in str(e.value)
    assert str(e.value).startswith("weave_tp.ag_gemm_scaled: ")


@pytest.mark.parametrize("sa, sb, fast, out, want", [
    ((1,), (1,), False, torch.bfloat16, (1, 0, 0)),
    ((10, 1), (1, 6), True, torch.float16, (2, 1, 1)),
])
def test_ag_scaled_options(team: SimpleNamespace, sa: tuple, sb: tuple, fast: bool, out: torch.dtype,
                           want: tuple) -> None:
    """The AllGather + GEMM plan's desc: fp8, B [N, K], the scale mode from the scales' shapes, the
    accumulation and the output type."""
    options, N, K = _torch._check_ag_scaled("t", team, f8(10, 16), f8(6, 16), f32(*sa), f32(*sb), None, out, fast,
                                            "auto", 1.0, 40, meta_ok=True)
    d = options.desc()
    assert (N, K, d.dtype, d.b_layout) == (6, 16, 3, 1)
    assert (d.scale_mode, d.fp8_accum, d.out_dtype) == want


class TwoLayers(torch.nn.Module):
    """A tensor-parallel MLP: a column-parallel nn.Linear (the input replicated, this rank's hidden
    units), gelu, then weave's RowParallelLinear (this rank's rows of the output)."""

    def __init__(self, world: int, device: str) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32 // world, device=device)
        self.down = weave_tp.nn.RowParallelLinear(32, 12, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def test_compile_fullgraph_traces_forward_and_backward(team: SimpleNamespace) -> None:
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs: List[str] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    model = TwoLayers(team.world, "meta")
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True)
    for tokens in (10, 23, 37):  # the second size recompiles with a symbolic token count
        y = compiled(torch.empty(tokens, 16, device="meta"))
        assert y.shape == (weave_tp.row_split(tokens, 4, 1)[1], 12)
        y.sum().backward()
    assert model.down.weight.grad.shape == (12, 8) and model.down.bias.grad.shape == (12,)
    assert model.up.weight.grad.shape == (8, 16)
    assert any("weave_tp.gemm_rs.default" in g for g in graphs)
    assert any("weave_tp.all_gather_rows.default" in g for g in graphs)


def test_compiled_graph_depends_on_the_world(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same local shapes at world 1 and at world 2 (as a tensor-parallel model has when hidden
    grows with the world) must trace to different graphs: the output's rows differ, and inductor's
    on-disk cache keys compiled code by the graph (the H200 once ran world 1's graph at world 2)."""
    graphs: List[str] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append(gm.code)
        return gm.forward

    def call(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return weave_tp.gemm_rs(x, w, b_layout="col")

    rows = []
    for world in (1, 2):
        use_team(monkeypatch, world, 0)
        torch._dynamo.reset()
        compiled = torch.compile(call, backend=keep, fullgraph=True)
        rows.append(compiled(meta(512, 16), meta(12, 16)).shape[0])
    assert rows == [512, 256]
    assert len(graphs) == 2 and graphs[0] != graphs[1]


def test_compile_torch_row_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """row_split="torch" under torch.compile(fullgraph=True): the padding and the cut trace, an even
    and an uneven token count alike (rank 3 of 4: 128 rows of 512; 1 of 301)."""
    use_team(monkeypatch, 4, 3)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: weave_tp.gemm_rs(x, w, row_split="torch"), backend="eager", fullgraph=True)
    assert compiled(meta(512, 16), meta(12, 16)).shape == (128, 12)
    assert compiled(meta(301, 16), meta(12, 16)).shape == (301 - 3 * 76, 12)


def test_row_parallel_linear_arguments(team: SimpleNamespace) -> None:
    with pytest.raises(ValueError, match="in_features 30 must be a multiple of the team's world 4"):
        weave_tp.nn.RowParallelLinear(30, 6)
    layer = weave_tp.nn.RowParallelLinear(32, 6, device="meta")
    assert layer.weight.shape == (6, 8) and layer.bias.shape == (6,)
    assert "in_features=32, out_features=6, bias=True, strategy='auto', row_split='weave'" in repr(layer)
    assert weave_tp.nn.RowParallelLinear(32, 6, bias=False, device="meta").bias is None
    with pytest.raises(ValueError, match=r"x must be this rank's shard \[\*, 8\]"):
        layer(meta(10, 32, dtype=torch.float32))
    assert layer(meta(2, 5, 8, dtype=torch.float32)).shape == (3, 6)
    with pytest.raises(TypeError, match="x is torch.bfloat16 but the weight is torch.float32"):
        layer(meta(10, 8))
    assert layer(meta(10, 8, dtype=torch.float32)).shape == (3, 6)


def test_backward_over_gloo() -> None:
    """Three CPU processes (torchrun, gloo): the gradient rows gathered with padding and the backward
    formulas, against autograd of the whole product in fp64."""
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
           str(PYTHON_DIR / "tests" / "cpu_backward_worker.py")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("backward ok") == 3, out.stdout


def test_rowwise_parallel_style(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """parallelize_module with weave_tp.parallel.RowwiseParallel on a DeviceMesh: the nn.Linear keeps
    its rank's columns and the whole bias, its forward is gemm_rs over the mesh's group's team (here a
    stand-in, rank 1 of 2, registered for the mesh's group: a real one needs a GPU), with torch's row
    split unless the style says row_split="weave"."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        monkeypatch.setattr(_torch._state, "teams", {})
        monkeypatch.setattr(_torch._state, "default", None)
        _torch._register(SimpleNamespace(world=2, rank=1, device=0), mesh.get_group())
        model = torch.nn.Sequential(torch.nn.Linear(8, 6, dtype=torch.bfloat16), torch.nn.ReLU())
        weight, bias = model[0].weight.detach().clone(), model[0].bias.detach().clone()
        parallelize_module(model, mesh, {"0": weave_tp.parallel.RowwiseParallel()})
        assert torch.equal(model[0].weight, weight[:, 4:]) and torch.equal(model[0].bias, bias)
        assert model[0].weight.is_contiguous() and isinstance(model[0].weight, torch.nn.Parameter)
        seen = []
        monkeypatch.setattr(weave_tp.parallel, "gemm_rs", lambda *a, **k: seen.append((a, k)) or a[0])
        model[0](torch.zeros(2, 3, 4, dtype=torch.bfloat16))
        (x, w, b), options = seen[0]
        assert w is model[0].weight and b is model[0].bias and options["group"] is mesh.get_group()
        assert options["row_split"] == "torch"  # torch's Shard(0), the default
        weave_split = torch.nn.Linear(8, 6)
        parallelize_module(weave_split, mesh, weave_tp.parallel.RowwiseParallel(row_split="weave"))
        weave_split(torch.zeros(5, 4))
        assert seen[-1][1]["row_split"] == "weave"
        with pytest.raises(ValueError, match="row_split must be one of 'weave', 'torch'"):
            weave_tp.parallel.RowwiseParallel(row_split="even")
        with pytest.raises(ValueError, match="in_features 7 must be a multiple of the mesh's size 2"):
            parallelize_module(torch.nn.Linear(7, 6), mesh, weave_tp.parallel.RowwiseParallel())
        with pytest.raises(TypeError, match="applies to nn.Linear"):
            parallelize_module(torch.nn.ReLU(), mesh, weave_tp.parallel.RowwiseParallel())
    finally:
        dist.destroy_process_group()


# ---- AllGather + GEMM -------------------------------------------------------------------------------
def test_ag_gemm_op_is_registered() -> None:
    assert str(torch.ops.weave_tp.ag_gemm.default._schema) == (
        "weave_tp::ag_gemm(Tensor a, Tensor b, Tensor? bias, str b_layout, str strategy, float alpha, SymInt M, "
        "bool gather, SymInt world, SymInt rank, SymInt team_id) -> (Tensor, Tensor)")


def test_ag_gemm_shapes(team: SimpleNamespace) -> None:
    """Rank 1 of 4 holds its rows of A (weave's split of M); C has all M rows, this rank's N columns."""
    assert weave_tp.ag_gemm(meta(3, 8), meta(6, 8)).shape == (12, 6)  # M = 3 x 4 by default
    assert weave_tp.ag_gemm(meta(3, 8), meta(6, 8), M=10).shape == (10, 6)  # 3, 3, 2, 2
    assert weave_tp.ag_gemm(meta(1, 3, 8), meta(8, 6), meta(6), b_layout="row").shape == (12, 6)
    assert weave_tp.ag_gemm(meta(3, 8), meta(8, 6).t()).shape == (12, 6)  # [N, K] as a view of a [K, N] matrix
    c, g = weave_tp.ag_gemm(meta(3, 8), meta(6, 8), M=10, return_gathered=True)
    assert c.shape == (10, 6) and g.shape == (10, 8)


def test_ag_gemm_argument_errors(team: SimpleNamespace) -> None:
    with pytest.raises(ValueError, match=r"a has 3 rows but rank 1 of 4 holds 2 of M = 9"):
        weave_tp.ag_gemm(meta(3, 8), meta(6, 8), M=9)
    with pytest.raises(ValueError, match=r"b has shape \(6, 7\); b_layout='col' wants \[N, K\] with K = a.shape"):
        weave_tp.ag_gemm(meta(3, 8), meta(6, 7))
    with pytest.raises(ValueError, match=r"bias has shape \(5,\); it must be \[N\] = \[6\]"):
        weave_tp.ag_gemm(meta(3, 8), meta(6, 8), meta(5))
    with pytest.raises(ValueError, match="b_layout must be one of"):
        weave_tp.ag_gemm(meta(3, 8), meta(6, 8), b_layout="diag")
    with pytest.raises(TypeError, match="M must be an int or None"):
        weave_tp.ag_gemm(meta(3, 8), meta(6, 8), M=12.0)
    with pytest.raises(TypeError, match="but a is torch.bfloat16"):
        weave_tp.ag_gemm(meta(3, 8), meta(6, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match="M = 0"):
        torch.ops.weave_tp.ag_gemm(meta(0, 8), meta(6, 8), None, "col", "auto", 1.0, 0, False, 4, 1, 7)


def test_ag_gemm_backward_shapes(team: SimpleNamespace) -> None:
    """The backward on meta tensors: the input's gradient through gemm_rs (this rank's rows), the weight's
    from the gathered input, the bias's its column sums."""
    a, b, bias = meta(3, 8).requires_grad_(), meta(6, 8).requires_grad_(), meta(6).requires_grad_()
    weave_tp.ag_gemm(a, b, bias, M=10).sum().backward()
    assert a.grad.shape == (3, 8) and b.grad.shape == (6, 8) and bias.grad.shape == (6,)
    a2, b2 = meta(3, 8).requires_grad_(), meta(8, 6).requires_grad_()
    weave_tp.ag_gemm(a2, b2, b_layout="row", alpha=0.5).sum().backward()
    assert a2.grad.shape == (3, 8) and b2.grad.shape == (8, 6)


def test_column_parallel_linear(team: SimpleNamespace) -> None:
    layer = weave_tp.nn.ColumnParallelLinear(8, 24, device="meta", dtype=torch.bfloat16)
    assert layer.weight.shape == (6, 8) and layer.bias.shape == (6,)  # 24 / 4 out_features each
    assert layer(meta(3, 8)).shape == (12, 6) and layer(meta(3, 8), tokens=10).shape == (10, 6)
    with pytest.raises(ValueError, match="out_features 22 must be a multiple of the team's world 4"):
        weave_tp.nn.ColumnParallelLinear(8, 22, device="meta")
    with pytest.raises(ValueError, match=r"x must be this rank's tokens \[\*, 8\]"):
        layer(meta(3, 7))
    # the sequence-parallel MLP: column-parallel up, row-parallel down, this rank's tokens in and out
    down = weave_tp.nn.RowParallelLinear(24, 8, device="meta", dtype=torch.bfloat16)
    assert down(layer(meta(3, 8))).shape == (3, 8)


# ---- the watchdog ---------------------------------------------------------------------------------
class _PollingTeam:
    """A stand-in for a team's poll(): quiet for `quiet` polls, then `code` and `message`."""

    def __init__(self, quiet: int, code: int, message: str) -> None:
        self.polls, self.quiet, self.code, self.message = 0, quiet, code, message

    def poll(self):  # noqa: ANN201
        self.polls += 1
        return (self.code, self.message) if self.polls > self.quiet else (0, "")


def _wait_for_watchdog(seconds: float) -> float:
    """Python instructions in a loop (where an asynchronous exception lands) for at most `seconds`."""
    import time
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        time.sleep(0.001)
    return time.monotonic() - start


def test_watchdog_raises_in_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed wait seen by the watchdog's poll is raised in the thread that made it, within a few
    intervals, and stays: later calls on the team raise it, abort and sync still reach the team."""
    message = "rank 1 timed out after 50 ms waiting for rank 2 on item 3"
    dog = _torch.Watchdog(_PollingTeam(3, int(weave_tp.Result.TIMEOUT), message), 0.01)
    with pytest.raises(weave_tp.WeaveTimeoutError, match="waiting for rank 2 on item 3"):
        dog.start()
        _wait_for_watchdog(5.0)
    dog.stop()
    assert isinstance(dog.failure, weave_tp.WeaveTimeoutError) and dog.team.polls == 4
    stand_in = use_team(monkeypatch, 4, 1)
    _torch._state.teams[7].watchdog = dog
    with pytest.raises(weave_tp.WeaveTimeoutError, match="watchdog.*waiting for rank 2"):
        weave_tp.gemm_rs(meta(10, 8), meta(6, 8))
    with pytest.raises(weave_tp.WeaveTimeoutError):
        weave_tp.ag_gemm(meta(3, 8), meta(6, 8))
    assert weave_tp.get_team(failed_ok=True) is stand_in


def test_watchdog_abort_and_quiet() -> None:
    dog = _torch.Watchdog(_PollingTeam(0, int(weave_tp.Result.ABORTED), "rank 0 aborted the team"), 0.01)
    with pytest.raises(weave_tp.WeaveAbortedError, match="rank 0 aborted"):
        dog.start()
        _wait_for_watchdog(5.0)
    dog.stop()
    quiet = _torch.Watchdog(_PollingTeam(10**9, 0, ""), 0.005).start()
    assert _wait_for_watchdog(0.1) >= 0.1 and quiet.failure is None
    quiet.stop()
    assert quiet.team.polls >= 5
    for bad in (0, -1.0, True, "1"):
        with pytest.raises(ValueError, match="interval must be"):
            _torch.Watchdog(quiet.team, bad)


def test_init_watchdog_argument() -> None:
    for bad in (0, -2, True, "5"):
        with pytest.raises(ValueError, match="watchdog must be None or seconds > 0"):
            weave_tp.init(watchdog=bad)


def test_colwise_parallel_style(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """parallelize_module with weave_tp.parallel.ColwiseParallel: the nn.Linear keeps its rank's rows of
    the weight and bias, its forward is ag_gemm over the mesh's group's team (a stand-in, rank 1 of 2)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        monkeypatch.setattr(_torch._state, "teams", {})
        monkeypatch.setattr(_torch._state, "default", None)
        _torch._register(SimpleNamespace(world=2, rank=1, device=0), mesh.get_group())
        model = torch.nn.Sequential(torch.nn.Linear(8, 6, dtype=torch.bfloat16), torch.nn.ReLU())
        weight, bias = model[0].weight.detach().clone(), model[0].bias.detach().clone()
        parallelize_module(model, mesh, {"0": weave_tp.parallel.ColwiseParallel(strategy="bulk")})
        assert torch.equal(model[0].weight, weight[3:]) and torch.equal(model[0].bias, bias[3:])
        assert model[0].weight.is_contiguous() and isinstance(model[0].bias, torch.nn.Parameter)
        seen = []
        monkeypatch.setattr(weave_tp.parallel, "ag_gemm", lambda *a, **k: seen.append((a, k)) or a[0])
        model[0](torch.zeros(2, 3, 8, dtype=torch.bfloat16))
        model[0](torch.zeros(5, 8, dtype=torch.bfloat16), tokens=9)
        (x, w, b), options = seen[0]
        assert w is model[0].weight and b is model[0].bias and options["group"] is mesh.get_group()
        assert options["strategy"] == "bulk" and options["M"] is None and seen[1][1]["M"] == 9
        with pytest.raises(ValueError, match=r"x must be this rank's tokens \[\*, 8\]"):
            model[0](torch.zeros(5, 7, dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="out_features 7 must be a multiple of the mesh's size 2"):
            parallelize_module(torch.nn.Linear(8, 7), mesh, weave_tp.parallel.ColwiseParallel())
        with pytest.raises(TypeError, match="applies to nn.Linear"):
            parallelize_module(torch.nn.ReLU(), mesh, weave_tp.parallel.ColwiseParallel())
    finally:
        dist.destroy_process_group()


def test_ag_plan_info(monkeypatch: pytest.MonkeyPatch) -> None:
    """ag_plan_info looks the plan up by the call's shape and options (None before the first call) and
    checks the arguments as ag_gemm does."""
    asked = []
    stand_in = use_team(monkeypatch, 4, 1)
    stand_in.find_plan = lambda *key: asked.append(key)
    assert weave_tp.ag_plan_info(meta(3, 8), meta(6, 8), M=10, strategy="bulk") is None
    (M, N, K, options), = asked
    assert (M, N, K) == (10, 6, 8) and options == _torch.ag_gemm_options("bf16", strategy="bulk")
    with pytest.raises(ValueError, match="a has 3 rows but rank 1 of 4 holds 2 of M = 9"):
        weave_tp.ag_plan_info(meta(3, 8), meta(6, 8), M=9)


def test_abort_stops_this_ranks_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    """weave_tp.abort() stops the team's watchdog before it aborts: the abort is this rank's own, and its
    record (which the watchdog would poll next) must not come back as an exception in this thread."""
    stand_in = use_team(monkeypatch, 4, 1)
    order = []
    dog = _torch.Watchdog(_PollingTeam(10**9, 0, ""), 0.005).start()
    stand_in.abort = lambda: order.append(("abort", dog._thread.is_alive()))
    _torch._state.teams[7].watchdog = dog
    weave_tp.abort()
    assert order == [("abort", False)] and dog.failure is None
