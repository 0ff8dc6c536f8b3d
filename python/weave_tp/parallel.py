"""weave_tp.parallel: torch.distributed.tensor.parallel styles that run a model's nn.Linear layers on
weave, for parallelize_module on a DeviceMesh: RowwiseParallel (GEMM + ReduceScatter) and, for
sequence parallelism, ColwiseParallel (AllGather + GEMM)."""

import types
from typing import Optional, Tuple

import torch
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ParallelStyle

from ._torch import ag_gemm, gemm_rs, get_team, init, is_initialized
from .nn import _check_shard


def _team_of(call: str, module: nn.Module, device_mesh: DeviceMesh) -> Tuple[object, int, int]:
    """A style's checks of the module and mesh, and the mesh's group with its weave team's world and
    rank (the team made on first use: collectively, every rank parallelizes the same modules in the
    same order)."""
    if not isinstance(module, nn.Linear):
        raise TypeError(f"{call}: applies to nn.Linear (got {type(module).__name__})")
    if device_mesh.ndim != 1:
        raise ValueError(f"{call}: needs the 1-D tensor-parallel mesh (e.g. mesh['tp']), got {device_mesh.ndim}-D")
    if type(module.weight.data) is not torch.Tensor:  # a DTensor: parallelized already
        raise TypeError(f"{call}: the weight is already distributed ({type(module.weight.data).__name__})")
    group = device_mesh.get_group()
    if not is_initialized(group):
        init(group)
    team = get_team(call, group)
    return group, team.world, team.rank


class RowwiseParallel(ParallelStyle):
    """parallelize_module(model, tp_mesh, {"mlp.down_proj": weave_tp.parallel.RowwiseParallel()}): the
    nn.Linear keeps this rank's columns of its weight ([out, in / world]; in_features split evenly
    over the mesh's ranks) and its whole bias (replicated), and its forward becomes weave_tp.gemm_rs
    over the mesh's process group, whose weave team is made on first use (collectively: every rank
    parallelizes the same modules in the same order).

    Input: this rank's shard of the features, [*, in / world] (torch's RowwiseParallel with
    input_layouts=Shard(-1)), a plain tensor. Output: this rank's rows of the tokens, [rows, out],
    a plain tensor, split as torch's Shard(0) and torch.chunk split (row_split="torch", the
    default: ceil(tokens / world) each, the last ranks fewer; uneven token counts are padded to a
    multiple of the world, a copy of the input) or as weave_row_split (row_split="weave": the
    first tokens % world ranks one more, no copy). The backward computes the input's gradient by
    AllGather + GEMM (weave_tp.ag_gemm) of the output gradient's rows.
    """

    def __init__(self, *, strategy: str = "auto", row_split: str = "torch") -> None:
        super().__init__()
        if row_split not in ("weave", "torch"):
            raise ValueError(f"weave_tp.parallel.RowwiseParallel: row_split must be one of 'weave', 'torch' "
                             f"(got {row_split!r})")
        self.strategy, self.row_split = strategy, row_split

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        call = "weave_tp.parallel.RowwiseParallel"
        group, world, rank = _team_of(call, module, device_mesh)
        if module.in_features % world:
            raise ValueError(f"{call}: in_features {module.in_features} must be a multiple of the mesh's size {world}")
        k = module.in_features // world
        with torch.no_grad():
            shard = module.weight[:, rank * k:(rank + 1) * k].contiguous()
        module.weight = nn.Parameter(shard, requires_grad=module.weight.requires_grad)
        module._weave_group, module._weave_strategy, module._weave_row_split = group, self.strategy, self.row_split
        module.forward = types.MethodType(_rowwise_forward, module)
        return module


def _rowwise_forward(self: nn.Linear, x: Tensor) -> Tensor:
    _check_shard("weave_tp.parallel.RowwiseParallel", x, self.weight.shape[1])
    return gemm_rs(x, self.weight, self.bias, strategy=self._weave_strategy, group=self._weave_group,
                   row_split=self._weave_row_split)


class ColwiseParallel(ParallelStyle):
    """parallelize_module(model, tp_mesh, {"mlp.up_proj": weave_tp.parallel.ColwiseParallel()}): the
    nn.Linear keeps this rank's rows of its weight and bias ([out / world, in] and [out / world];
    out_features split evenly over the mesh's ranks), and its forward becomes weave_tp.ag_gemm over the
    mesh's process group (its weave team made on first use, collectively).

    Input: this rank's tokens, [*, in] (sequence parallelism: torch's ColwiseParallel with
    input_layouts=Shard(0)), split as weave_row_split splits them (the first tokens % world ranks one
    more; where the tokens divide evenly that is torch's Shard(0) too), a plain tensor; the tokens of
    all ranks are this rank's x world unless the forward is given tokens=. Output: every token's
    [tokens, out / world], a plain tensor (Shard(-1)). The backward reduce-scatters the input's
    gradient with gemm_rs; the weight's uses the gathered input.
    """

    def __init__(self, *, strategy: str = "auto") -> None:
        super().__init__()
        self.strategy = strategy

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        call = "weave_tp.parallel.ColwiseParallel"
        group, world, rank = _team_of(call, module, device_mesh)
        if module.out_features % world:
            raise ValueError(f"{call}: out_features {module.out_features} must be a multiple of the mesh's size "
                             f"{world}")
        n = module.out_features // world
        with torch.no_grad():
            weight = module.weight[rank * n:(rank + 1) * n].contiguous()
            bias = None if module.bias is None else module.bias[rank * n:(rank + 1) * n].contiguous()
        module.weight = nn.Parameter(weight, requires_grad=module.weight.requires_grad)
        if bias is not None:
            module.bias = nn.Parameter(bias, requires_grad=module.bias.requires_grad)
        module._weave_group, module._weave_strategy = group, self.strategy
        module.forward = types.MethodType(_colwise_forward, module)
        return module


def _colwise_forward(self: nn.Linear, x: Tensor, tokens: Optional[int] = None) -> Tensor:
    if not isinstance(x, Tensor) or x.dim() < 2 or x.shape[-1] != self.weight.shape[1]:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError("weave_tp.parallel.ColwiseParallel: x must be this rank's tokens "
                         f"[*, {self.weight.shape[1]}], got {got}")
    return ag_gemm(x, self.weight, self.bias, M=tokens, strategy=self._weave_strategy, group=self._weave_group)
