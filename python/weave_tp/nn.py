"""weave_tp.nn: the two linear layers of tensor parallelism: RowParallelLinear on weave_tp.gemm_rs, and
ColumnParallelLinear (sequence parallel: its input rows split over the ranks) on weave_tp.ag_gemm."""

import math
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ._torch import ag_gemm, gemm_rs, get_team


def _check_shard(call: str, x: object, k: int) -> None:
    """x is a rank's shard of a row-parallel layer's input: [*, k], k = in_features / world."""
    if not isinstance(x, Tensor) or x.dim() < 2 or x.shape[-1] != k:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{call}: x must be this rank's shard [*, {k}] (in_features / world), got {got}")


class RowParallelLinear(nn.Module):
    """y = x W^T + b with x's and W's in_features split over the ranks of the weave team and y's rows
    split too: rank r holds columns [r * in/world, (r+1) * in/world) of x and W, and gets its rows
    of y (weave_row_split of the tokens: the first tokens % world ranks one row more).

    forward(x): x is this rank's shard [*, in_features / world], its leading dimensions the tokens; returns
    [rows, out_features], this rank's rows of the tokens' output summed over all ranks. weight is
    [out_features, in_features / world], held like nn.Linear's (weave's b_layout "col"). bias is
    [out_features] and replicated: every rank must hold the same values; it starts at zero (as in Megatron)
    and its gradient is the full one on every rank, so the copies stay equal. Backward gathers the output
    gradient's rows over the team's process group. group: whose team (weave_tp.init(group)); by default the
    first team made. row_split: whose split of the tokens the output follows, "weave" or "torch"
    (torch.chunk / DTensor Shard(0); weave_tp.gemm_rs says how).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, strategy: str = "auto",
                 device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 group: Optional[dist.ProcessGroup] = None, row_split: str = "weave") -> None:
        super().__init__()
        team = get_team("weave_tp.nn.RowParallelLinear", group)
        if row_split not in ("weave", "torch"):
            raise ValueError("weave_tp.nn.RowParallelLinear: row_split must be one of 'weave', 'torch' "
                             f"(got {row_split!r})")
        self.group, self.row_split = group, row_split
        if in_features < 1 or out_features < 1:
            raise ValueError(f"weave_tp.nn.RowParallelLinear: in_features {in_features} and out_features "
                             f"{out_features} must be >= 1")
        if in_features % team.world:
            raise ValueError(f"weave_tp.nn.RowParallelLinear: in_features {in_features} must be a multiple of the "
                             f"team's world {team.world} (each rank holds in_features / world columns)")
        self.in_features, self.out_features, self.strategy = in_features, out_features, strategy
        where = device if device is not None else torch.device("cuda", team.device)
        self.weight = nn.Parameter(torch.empty((out_features, in_features // team.world), device=where, dtype=dtype))
        self.bias: Optional[nn.Parameter] = (nn.Parameter(torch.empty(out_features, device=where, dtype=dtype))
                                             if bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation of the whole layer (bound 1/sqrt(in_features)) for this shard of
        the weight; the bias at zero, the same on every rank."""
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        _check_shard("weave_tp.nn.RowParallelLinear", x, self.weight.shape[1])
        if x.dtype != self.weight.dtype:
            raise TypeError(f"weave_tp.nn.RowParallelLinear: x is {x.dtype} but the weight is {self.weight.dtype}")
        return gemm_rs(x, self.weight, self.bias, strategy=self.strategy, group=self.group, row_split=self.row_split)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, strategy={self.strategy!r}, row_split={self.row_split!r}")


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with x's tokens split over the ranks of the weave team (sequence parallelism) and W's
    and y's out_features split: rank r holds its rows of x (weave_row_split of the tokens, as
    RowParallelLinear's output) with all in_features, and rows [r * out/world, (r+1) * out/world) of W
    and b; it gets y for all tokens, its out_features / world columns.

    forward(x, tokens=None): x is this rank's tokens [*, in_features]; returns [tokens, out_features /
    world]. tokens: of all ranks together, by default x's tokens x world (give it when the ranks hold
    different counts). weight [out_features / world, in_features] as nn.Linear's; bias [out_features /
    world], this rank's own. Backward: the input's gradient by gemm_rs (GEMM + ReduceScatter of the output
    gradient), the weight's from the gathered input. group: whose team; by default the first made.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, strategy: str = "auto",
                 device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 group: Optional[dist.ProcessGroup] = None) -> None:
        super().__init__()
        call = "weave_tp.nn.ColumnParallelLinear"
        team = get_team(call, group)
        if in_features < 1 or out_features < 1:
            raise ValueError(f"{call}: in_features {in_features} and out_features {out_features} must be >= 1")
        if out_features % team.world:
            raise ValueError(f"{call}: out_features {out_features} must be a multiple of the team's world "
                             f"{team.world} (each rank holds out_features / world of them)")
        self.group, self.in_features, self.out_features, self.strategy = group, in_features, out_features, strategy
        where = device if device is not None else torch.device("cuda", team.device)
        local = out_features // team.world
        self.weight = nn.Parameter(torch.empty((local, in_features), device=where, dtype=dtype))
        self.bias: Optional[nn.Parameter] = (nn.Parameter(torch.empty(local, device=where, dtype=dtype))
                                             if bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation (bound 1/sqrt(in_features)) for this shard of the weight and bias."""
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor, tokens: Optional[int] = None) -> Tensor:
        call = "weave_tp.nn.ColumnParallelLinear"
        if not isinstance(x, Tensor) or x.dim() < 2 or x.shape[-1] != self.in_features:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{call}: x must be this rank's tokens [*, {self.in_features}], got {got}")
        if x.dtype != self.weight.dtype:
            raise TypeError(f"{call}: x is {x.dtype} but the weight is {self.weight.dtype}")
        return ag_gemm(x, self.weight, self.bias, M=tokens, strategy=self.strategy, group=self.group)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, strategy={self.strategy!r}")
