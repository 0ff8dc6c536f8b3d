"""Run by test_torch.py::test_backward_over_gloo under torchrun, 3 processes, gloo, no GPU: weave's
backward of gemm_rs (weave_tp::all_gather_rows and the gradient formulas) on CPU tensors, against
autograd of C = alpha * sum_r A_r B_r + bias over all rows in fp64. A stand-in team holds what the
backward reads of one (world, rank); every rank builds every rank's inputs from one seed."""

import os
from types import SimpleNamespace

import torch
import torch.distributed as dist

import weave_tp
from weave_tp import _torch

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
TEAM = _torch._register(SimpleNamespace(world=world, rank=rank, device=0, destroy=lambda: None), dist.group.WORLD)


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), f"{what}: max error {(got - want).abs().max()}"


# The gather alone: rows split like weave's output (some ranks may own none), padded to the first's.
for M in (1, 2, 3, 6, 7, 11):
    full = torch.arange(M * 2, dtype=torch.float64).reshape(M, 2)
    begin, rows = weave_tp.row_split(M, world, rank)
    close(torch.ops.weave_tp.all_gather_rows(full[begin:begin + rows], M, TEAM), full, f"all_gather_rows M={M}")

for M, N, K in ((7, 5, 4), (2, 3, 6)):
    g = torch.Generator().manual_seed(M)
    As = [torch.rand(M, K, generator=g, dtype=torch.float64) for _ in range(world)]
    Bs = [torch.rand(K, N, generator=g, dtype=torch.float64) for _ in range(world)]
    bias, G = torch.rand(N, generator=g, dtype=torch.float64), torch.rand(M, N, generator=g, dtype=torch.float64)
    for layout in ("row", "col"):
        for alpha in (1.0, 0.5):
            A = [x.clone().requires_grad_() for x in As]
            B = [x.clone().requires_grad_() for x in Bs]
            b = bias.clone().requires_grad_()
            C = alpha * sum(a @ bb for a, bb in zip(A, B)) + b
            (C * G).sum().backward()

            begin, rows = weave_tp.row_split(M, world, rank)
            b_arg = Bs[rank] if layout == "row" else Bs[rank].t().contiguous()  # "col": B stored [N, K]
            ctx = SimpleNamespace(saved_tensors=(As[rank], b_arg), b_layout=layout, alpha=alpha, M=M, world=world,
                                  team_id=TEAM, needs_input_grad=(True, True, True))
            ga, gb, gbias, *rest = _torch._backward(ctx, G[begin:begin + rows])
            what = f"M={M} N={N} K={K} {layout} alpha={alpha}"
            close(ga, A[rank].grad, f"{what}: grad a")
            close(gb, B[rank].grad if layout == "row" else B[rank].grad.t(), f"{what}: grad b")
            close(gbias, b.grad, f"{what}: grad bias")  # the whole gradient on every rank
            assert rest == [None] * 8  # b_layout, strategy, reduce, fp32_slots, alpha, world, rank, team_id
print(f"rank {rank}: backward ok", flush=True)
_torch.finalize()  # a stand-in, not a team: nothing for weave to free
dist.barrier()
dist.destroy_process_group()
# Leave without the interpreter's teardown: gloo's threads at that point aborted one CI run
# ("terminate called without an active exception", rank 0, after every check had passed).
os._exit(0)
