"""weave from Python: fused GEMM + ReduceScatter (tensor-parallel row-parallel linear) and AllGather +
GEMM (column-parallel) over libweave.

Without PyTorch only the library layer is here (loading, version, errors, row split, unique ids,
teams and plans by raw pointer); with it also init / finalize / gemm_rs / ag_gemm, weave_tp.nn and
weave_tp.parallel (a style for torch's parallelize_module). See
docs/python.md.
"""

from ._capi import (
    LibraryNotFoundError,
    PlanInfo,
    Result,
    Team,
    WeaveAbortedError,
    WeaveArgumentError,
    WeaveError,
    WeaveTimeoutError,
    get_unique_id,
    library_path,
    library_version,
    row_split,
)
from ._version import __version__

try:
    import torch  # noqa: F401
except ModuleNotFoundError:
    _NEEDS_TORCH = ("abort", "ag_gemm", "ag_gemm_scaled", "ag_plan_info", "init", "finalize", "is_initialized",
                    "get_team", "gemm_rs", "gemm_rs_scaled", "plan_info", "sync", "nn", "parallel")

    def __getattr__(name: str) -> object:
        if name in _NEEDS_TORCH:
            raise ImportError(f"weave_tp.{name} needs PyTorch, which is not installed "
                              "(the library layer works without)")
        raise AttributeError(f"module 'weave_tp' has no attribute {name!r}")
else:
    from . import nn, parallel
    from ._torch import (
        abort,
        ag_gemm,
        ag_gemm_scaled,
        ag_plan_info,
        finalize,
        gemm_rs,
        gemm_rs_scaled,
        get_team,
        init,
        is_initialized,
        plan_info,
        sync,
    )

__all__ = [
    "LibraryNotFoundError", "PlanInfo", "Result", "Team", "WeaveAbortedError", "WeaveArgumentError", "WeaveError",
    "WeaveTimeoutError", "__version__", "abort", "ag_gemm", "ag_gemm_scaled", "ag_plan_info", "finalize", "gemm_rs",
    "gemm_rs_scaled", "get_team", "get_unique_id", "init", "is_initialized", "library_path", "library_version", "nn",
    "parallel", "plan_info", "row_split", "sync",
]
if "_NEEDS_TORCH" in globals():  # without torch: `from weave_tp import *` takes the library layer (not an ImportError)
    __all__ = [name for name in __all__ if name not in _NEEDS_TORCH]
