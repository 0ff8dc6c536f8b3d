"""libweave.so through ctypes: finding and loading it, the prototypes, result codes as exceptions, the
names of the enums, and thin objects over the team and the plan.

Nothing here imports torch, so everything below (library lookup, version, error mapping, the checks
of option names) runs and is tested without it. The structs mirror include/weave.h; the ones whose
size weave checks (weave_gemm_rs_desc_t.struct_size) would be refused if they drifted.
"""

from __future__ import annotations

import ctypes
import enum
import os
import threading
from ctypes import POINTER, byref, c_char, c_char_p, c_double, c_float, c_int, c_size_t, c_void_p
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ._version import __version__

_PACKAGE_DIR = Path(__file__).resolve().parent
_MAJOR, _MINOR = (int(v) for v in __version__.split(".")[:2])
SONAME = f"libweave.so.{_MAJOR}.{_MINOR}"


# ---- results and exceptions ----------------------------------------------------------------------
class Result(enum.IntEnum):
    """weave_result_t."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    NO_DEVICE = 2
    UNSUPPORTED_DEVICE = 3
    CUDA = 4
    OUT_OF_MEMORY = 5
    TIMEOUT = 6
    MISMATCH = 7
    UNSUPPORTED = 8
    BOOTSTRAP = 9
    ENV = 10
    INTERNAL = 11
    ABORTED = 12


class WeaveError(RuntimeError):
    """A weave call failed. `code` is its Result, `call` the C function, `detail` weave's last-error
    message for it."""

    def __init__(self, code: int, call: str, detail: str) -> None:
        self.code = Result(code) if code in Result._value2member_map_ else code
        self.call = call
        self.detail = detail
        # weave's message reads "<result>: <what failed>" and mostly names the call already
        if not detail:
            detail = lib().weave_get_error_string(int(code)).decode()
        super().__init__(detail if call in detail else f"{call}: {detail}")

    def __reduce__(self):  # noqa: ANN204 (pickle: args holds the message alone, __init__ takes three)
        # the message as detail: unpickling needs no libweave (the state then restores detail itself)
        return type(self), (int(self.code), self.call, self.detail or str(self)), self.__dict__


class WeaveArgumentError(WeaveError, ValueError):
    """Result.INVALID_ARGUMENT: also a ValueError."""


class WeaveTimeoutError(WeaveError, TimeoutError):
    """Result.TIMEOUT (a bounded wait expired; the message names the ranks): also a TimeoutError."""


class WeaveAbortedError(WeaveError):
    """Result.ABORTED: a rank aborted the team (Team.abort, weave_tp.abort); the message names it. The team
    is of no further use: finalize (destroy) it on every rank."""


class LibraryNotFoundError(ImportError):
    """libweave.so was not found, would not load, or is of another version."""


_ERROR_CLASSES: Dict[int, type] = {Result.INVALID_ARGUMENT: WeaveArgumentError, Result.TIMEOUT: WeaveTimeoutError,
                                   Result.ABORTED: WeaveAbortedError}


def _error(code: int, call: str, detail: str) -> WeaveError:
    cls = _ERROR_CLASSES.get(int(code), WeaveError)
    return cls(code, call, detail)


def _last_error(team: Optional[int]) -> str:
    """weave's message of the last failure on `team` (None: of the calling thread, for calls that have
    no team yet). Read at once: the next call on that team or thread replaces it."""
    return lib().weave_get_last_error(team).decode(errors="replace")


def _raise(code: int, call: str, team: Optional[int] = None) -> None:
    raise _error(code, call, _last_error(team))


# ---- structs of weave.h --------------------------------------------------------------------------
class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", c_char * 128)]


class _Desc(ctypes.Structure):  # weave_gemm_rs_desc_t
    _fields_ = [("struct_size", c_size_t), ("dtype", c_int), ("b_layout", c_int), ("strategy", c_int),
                ("reduce", c_int), ("fp32_slots", c_int), ("tile_order", c_int), ("alpha", c_float),
                ("has_bias", c_int), ("gemm_blocks", c_int), ("comm_blocks", c_int), ("trace", c_int),
                ("out_dtype", c_int), ("scale_mode", c_int), ("fp8_accum", c_int)]


class _Info(ctypes.Structure):  # weave_gemm_rs_info_t
    _fields_ = [("strategy", c_int), ("row_begin", c_int), ("rows", c_int), ("tile_m", c_int), ("tile_n", c_int),
                ("tiles_total", c_int), ("tiles_owned", c_int), ("gemm_blocks", c_int), ("comm_blocks", c_int),
                ("heap_bytes", c_size_t), ("bytes_sent", c_size_t),
                ("chosen_by", c_int), ("choose_ms", c_double), ("why", c_char * 320),  # since 0.4
                ("cta_pairs", c_int)]


class _AgDesc(ctypes.Structure):  # weave_ag_gemm_desc_t
    _fields_ = [("struct_size", c_size_t), ("dtype", c_int), ("b_layout", c_int), ("strategy", c_int),
                ("alpha", c_float), ("has_bias", c_int), ("gemm_blocks", c_int), ("comm_blocks", c_int),
                ("out_dtype", c_int), ("scale_mode", c_int), ("fp8_accum", c_int)]


class _AgInfo(ctypes.Structure):  # weave_ag_gemm_info_t
    _fields_ = [("strategy", c_int), ("row_begin", c_int), ("rows", c_int), ("gemm_blocks", c_int),
                ("comm_blocks", c_int), ("heap_bytes", c_size_t), ("bytes_sent", c_size_t), ("chosen_by", c_int),
                ("why", c_char * 160), ("choose_ms", c_double), ("cta_pairs", c_int)]


# weave_choice_t (weave_gemm_rs_info_t.chosen_by) by value: how an AUTO plan came to its strategy
CHOSEN_BY_NAMES: Tuple[str, ...] = ("caller", "cache", "measurement", "model")


class _DeviceInfo(ctypes.Structure):  # weave_device_info_t
    _fields_ = [("name", c_char * 256), ("device", c_int), ("sm_count", c_int), ("cc_major", c_int),
                ("cc_minor", c_int), ("smem_per_block_optin", c_size_t), ("l2_bytes", c_size_t),
                ("ranks_on_device", c_int)]


_P = POINTER
_PROTOTYPES = {
    "weave_get_version": (None, [_P(c_int), _P(c_int), _P(c_int)]),
    "weave_get_error_string": (c_char_p, [c_int]),
    "weave_get_last_error": (c_char_p, [c_void_p]),
    "weave_dtype_name": (c_char_p, [c_int]),
    "weave_strategy_name": (c_char_p, [c_int]),
    "weave_row_split": (c_int, [c_int, c_int, c_int, _P(c_int), _P(c_int)]),
    "weave_get_unique_id": (c_int, [_P(_UniqueId)]),
    "weave_bootstrap_create_uid": (c_int, [_P(_UniqueId), c_int, c_int, _P(c_void_p)]),
    "weave_bootstrap_destroy": (c_int, [c_void_p]),
    "weave_team_create": (c_int, [c_void_p, c_int, c_int, c_void_p, _P(c_void_p)]),
    "weave_team_destroy": (c_int, [c_void_p]),
    "weave_team_device_info": (c_int, [c_void_p, _P(_DeviceInfo)]),
    "weave_team_sync": (c_int, [c_void_p, c_void_p]),
    "weave_team_poll": (c_int, [c_void_p, c_char_p, c_size_t]),
    "weave_team_abort": (c_int, [c_void_p]),
    "weave_gemm_rs_plan_create": (c_int, [c_void_p, c_int, c_int, c_int, _P(_Desc), _P(c_void_p)]),
    "weave_gemm_rs_plan_info": (c_int, [c_void_p, _P(_Info)]),
    "weave_gemm_rs_execute": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]),
    "weave_gemm_rs_execute_scaled": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                             c_void_p]),
    "weave_gemm_rs_plan_destroy": (c_int, [c_void_p]),
    "weave_ag_gemm_plan_create": (c_int, [c_void_p, c_int, c_int, c_int, _P(_AgDesc), _P(c_void_p)]),
    "weave_ag_gemm_plan_info": (c_int, [c_void_p, _P(_AgInfo)]),
    "weave_ag_gemm_execute": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]),
    "weave_ag_gemm_execute_scaled": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                             c_void_p, c_void_p]),
    "weave_ag_gemm_plan_destroy": (c_int, [c_void_p]),
}


# ---- finding and loading the library -------------------------------------------------------------
def library_candidates() -> List[Tuple[str, str]]:
    """Where libweave is looked for, in order, as (where, path). WEAVE_LIBRARY, when set, is the only
    place: a library named explicitly is never replaced by another one silently."""
    env = os.environ.get("WEAVE_LIBRARY")
    if env:
        return [("WEAVE_LIBRARY", env)]
    return [
        ("copy made at install", str(_PACKAGE_DIR / "_lib" / "libweave.so")),
        ("build tree", str(_PACKAGE_DIR.parent.parent / "build" / "libweave.so")),
        ("dynamic loader", SONAME),  # LD_LIBRARY_PATH, ldconfig: e.g. after cmake --install
    ]


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path = ""


def _open() -> Tuple[ctypes.CDLL, str]:
    tried = []
    for where, path in library_candidates():
        is_file = os.sep in path
        if is_file and not os.path.isfile(path):
            tried.append(f"{where}: {path} (no such file)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            if is_file:  # it is there but does not load: say so rather than take another one
                raise LibraryNotFoundError(f"weave: {where} {path} does not load: {e}") from e
            tried.append(f"{where}: {path} ({e})")
    raise LibraryNotFoundError("weave: libweave.so not found; looked at\n  " + "\n  ".join(tried) +
                               "\nBuild it (cmake -S . -B build && cmake --build build) and set WEAVE_LIBRARY "
                               "to build/libweave.so, or reinstall this package after building.")


def lib() -> ctypes.CDLL:
    """The loaded libweave (loaded on first use, with its prototypes set and its version checked)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            handle, path = _open()
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(handle, name)
                fn.restype, fn.argtypes = restype, argtypes
            v = [c_int(), c_int(), c_int()]
            handle.weave_get_version(*(byref(x) for x in v))
            have = tuple(x.value for x in v)
            if have[:2] != (_MAJOR, _MINOR):
                raise LibraryNotFoundError(f"weave: {path} is libweave {'.'.join(map(str, have))}; this package "
                                           f"({__version__}) needs {_MAJOR}.{_MINOR}.x")
            _lib_path = os.path.realpath(path) if os.sep in path else path
            _lib = handle
    return _lib


def library_path() -> str:
    """The file libweave was loaded from (its soname when the dynamic loader found it)."""
    lib()
    return _lib_path


def library_version() -> Tuple[int, int, int]:
    v = [c_int(), c_int(), c_int()]
    lib().weave_get_version(*(byref(x) for x in v))
    return (v[0].value, v[1].value, v[2].value)


# ---- names of the enums --------------------------------------------------------------------------
def _names_from_c(fn_name: str) -> Dict[str, int]:
    """Every value of an enum weave names (weave_dtype_name, weave_strategy_name: "?" past the last)."""
    fn = getattr(lib(), fn_name)
    names: Dict[str, int] = {}
    for value in range(64):
        name = fn(value).decode()
        if name == "?":
            break
        names[name] = value
    return names


_names_cache: Dict[str, Dict[str, int]] = {}


def dtype_names() -> Dict[str, int]:
    """{"bf16": WEAVE_BF16, "fp16": ..., "fp32": ...}, from the library."""
    if "dtype" not in _names_cache:
        _names_cache["dtype"] = _names_from_c("weave_dtype_name")
    return _names_cache["dtype"]


def strategy_names() -> Dict[str, int]:
    """{"auto": ..., "fused": ..., "bulk": ..., "baseline": ...}, from the library."""
    if "strategy" not in _names_cache:
        _names_cache["strategy"] = _names_from_c("weave_strategy_name")
    return _names_cache["strategy"]


# weave.h names no string for these enums; the values are weave_layout_t's, weave_reduce_t's,
# weave_scale_mode_t's and weave_fp8_accum_t's.
B_LAYOUTS: Dict[str, int] = {"row": 0, "col": 1}
REDUCES: Dict[str, int] = {"deterministic": 0, "atomic": 1}
SCALE_MODES: Dict[str, int] = {"none": 0, "tensor": 1, "row": 2}
FP8_ACCUMS: Dict[str, int] = {"fp32": 0, "fast": 1}
DTYPE_AUTO = -1  # WEAVE_DTYPE_AUTO


INT_MAX = 2**31 - 1  # weave's sizes, ranks and devices are C ints; ctypes wraps a larger int silently


def _check_c_ints(call: str, **values: int) -> None:
    for name, v in values.items():
        if not -INT_MAX - 1 <= v <= INT_MAX:
            raise ValueError(f"{call}: {name} {v} does not fit the C int weave takes ([{-INT_MAX - 1}, {INT_MAX}])")


def _pick(call: str, arg: str, value: object, names: Dict[str, int]) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    choices = ", ".join(repr(n) for n in names)
    if not isinstance(value, str):
        raise TypeError(f"{call}: {arg} must be a str, one of {choices} (got {type(value).__name__})")
    raise ValueError(f"{call}: {arg} must be one of {choices} (got {value!r})")


@dataclass(frozen=True)
class GemmRsOptions:
    """A plan's desc, by enum value (hashable: the plan cache's key with the shape)."""

    dtype: int
    b_layout: int
    strategy: int
    reduce: int
    fp32_slots: bool
    alpha: float
    has_bias: bool
    out_dtype: int = DTYPE_AUTO  # fp8 inputs: bf16 or fp16 (AUTO: bf16)
    scale_mode: int = 0          # fp8 inputs: SCALE_MODES
    fp8_accum: int = 0           # fp8 inputs: FP8_ACCUMS

    def desc(self) -> _Desc:
        return _Desc(ctypes.sizeof(_Desc), self.dtype, self.b_layout, self.strategy, self.reduce,
                     int(self.fp32_slots), 0, self.alpha, int(self.has_bias), 0, 0, 0, self.out_dtype,
                     self.scale_mode, self.fp8_accum)


def gemm_rs_options(dtype: str, *, b_layout: str = "row", strategy: str = "auto", reduce: str = "deterministic",
                    fp32_slots: bool = False, alpha: float = 1.0, has_bias: bool = False, out_dtype: str = "auto",
                    scales: str = "none", fp8_accum: str = "fp32", call: str = "weave_tp.gemm_rs") -> GemmRsOptions:
    """Checks the options by name (errors name the argument) and turns them into enum values. Ranges
    and combinations that weave checks itself (alpha finite, scales and out_dtype for fp8 inputs
    only, ...) are left to it."""
    if not isinstance(fp32_slots, bool):
        raise TypeError(f"{call}: fp32_slots must be a bool (got {type(fp32_slots).__name__})")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"{call}: alpha must be a float (got {type(alpha).__name__})")
    out = DTYPE_AUTO if out_dtype == "auto" else _pick(call, "out_dtype", out_dtype, dtype_names())
    return GemmRsOptions(_pick(call, "dtype", dtype, dtype_names()), _pick(call, "b_layout", b_layout, B_LAYOUTS),
                         _pick(call, "strategy", strategy, strategy_names()), _pick(call, "reduce", reduce, REDUCES),
                         fp32_slots, float(alpha), bool(has_bias), out, _pick(call, "scales", scales, SCALE_MODES),
                         _pick(call, "fp8_accum", fp8_accum, FP8_ACCUMS))


@dataclass(frozen=True)
class AgGemmOptions:
    """An AllGather + GEMM plan's desc, by enum value (hashable: the plan cache's key with the shape)."""

    dtype: int
    b_layout: int
    strategy: int
    alpha: float
    has_bias: bool
    out_dtype: int = DTYPE_AUTO  # fp8 inputs: bf16 or fp16 (AUTO: bf16)
    scale_mode: int = 0          # fp8 inputs: SCALE_MODES
    fp8_accum: int = 0           # fp8 inputs: FP8_ACCUMS

    def desc(self) -> _AgDesc:
        return _AgDesc(ctypes.sizeof(_AgDesc), self.dtype, self.b_layout, self.strategy, self.alpha,
                       int(self.has_bias), 0, 0, self.out_dtype, self.scale_mode, self.fp8_accum)


def ag_gemm_options(dtype: str, *, b_layout: str = "col", strategy: str = "auto", alpha: float = 1.0,
                    has_bias: bool = False, out_dtype: str = "auto", scales: str = "none", fp8_accum: str = "fp32",
                    call: str = "weave_tp.ag_gemm") -> AgGemmOptions:
    """The options by name (errors name the argument) as enum values; weave checks the rest."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"{call}: alpha must be a float (got {type(alpha).__name__})")
    out = DTYPE_AUTO if out_dtype == "auto" else _pick(call, "out_dtype", out_dtype, dtype_names())
    return AgGemmOptions(_pick(call, "dtype", dtype, dtype_names()), _pick(call, "b_layout", b_layout, B_LAYOUTS),
                         _pick(call, "strategy", strategy, strategy_names()), float(alpha), bool(has_bias), out,
                         _pick(call, "scales", scales, SCALE_MODES), _pick(call, "fp8_accum", fp8_accum, FP8_ACCUMS))


# ---- functions without a team --------------------------------------------------------------------
def row_split(M: int, world: int, rank: int) -> Tuple[int, int]:
    """(row_begin, rows) of `rank`: weave_row_split (whole rows, the first M % world ranks one more)."""
    _check_c_ints("weave_row_split", M=M, world=world, rank=rank)
    begin, rows = c_int(), c_int()
    rc = lib().weave_row_split(M, world, rank, byref(begin), byref(rows))
    if rc:
        _raise(rc, "weave_row_split")
    return begin.value, rows.value


def rows_of(M, world: int, rank: int):  # noqa: ANN001, ANN201 (M: int or torch.SymInt)
    """weave_row_split's row count in closed form, ceil((M - rank) / world): the first M % world ranks
    get one row more. Only for what C cannot take (a symbolic M while torch.compile traces);
    test_capi.py checks it against weave_row_split."""
    return (M + world - 1 - rank) // world


def get_unique_id() -> bytes:
    """A new 128-byte unique id (weave_get_unique_id). The process that made it must create one of
    the ranks of the bootstrap it serves: it is that bootstrap's hub."""
    uid = _UniqueId()
    rc = lib().weave_get_unique_id(byref(uid))
    if rc:
        _raise(rc, "weave_get_unique_id")
    return bytes(bytearray(uid))


# ---- plans and teams -----------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanInfo:
    """weave_gemm_rs_info_t, with the strategy and chosen_by by name.

    chosen_by says how the strategy was chosen: "caller" (not "auto"), "cache" (the tuning cache's
    entry), "measurement" (the candidates timed at this plan's creation) or "model" (the cost model);
    choose_ms is the host time plan creation spent choosing, why the choice in words; cta_pairs: the
    fused kernel runs 2-CTA clusters sharing A's loads."""

    strategy: str
    row_begin: int
    rows: int
    tile_m: int
    tile_n: int
    tiles_total: int
    tiles_owned: int
    gemm_blocks: int
    comm_blocks: int
    heap_bytes: int
    bytes_sent: int
    chosen_by: str
    choose_ms: float
    why: str
    cta_pairs: bool = False


def _plan_info(info: _Info) -> PlanInfo:
    """The PlanInfo of what weave_gemm_rs_plan_info wrote (enums by name; an unknown value as its number)."""
    strategies = {v: k for k, v in strategy_names().items()}
    chosen_by = CHOSEN_BY_NAMES[info.chosen_by] if 0 <= info.chosen_by < len(CHOSEN_BY_NAMES) else str(info.chosen_by)
    return PlanInfo(strategies.get(info.strategy, str(info.strategy)), info.row_begin, info.rows, info.tile_m,
                    info.tile_n, info.tiles_total, info.tiles_owned, info.gemm_blocks, info.comm_blocks,
                    info.heap_bytes, info.bytes_sent, chosen_by, info.choose_ms, info.why.decode(errors="replace"),
                    bool(info.cta_pairs))


class Plan:
    """One weave_gemm_rs_plan_t: made by Team.create_plan, freed by Team.destroy."""

    def __init__(self, team: "Team", M: int, N: int, K_local: int, options: GemmRsOptions) -> None:
        _check_c_ints("weave_gemm_rs_plan_create", M=M, N=N, K_local=K_local)
        handle = c_void_p()
        desc = options.desc()
        rc = lib().weave_gemm_rs_plan_create(team.handle, M, N, K_local, byref(desc), byref(handle))
        if rc:
            _raise(rc, "weave_gemm_rs_plan_create", team.handle)
        self.handle: Optional[int] = handle.value
        self.team, self.shape, self.options = team, (M, N, K_local), options
        info = _Info()
        rc = lib().weave_gemm_rs_plan_info(self.handle, byref(info))
        if rc:
            _raise(rc, "weave_gemm_rs_plan_info", team.handle)
        self.info = _plan_info(info)
        self._execute = lib().weave_gemm_rs_execute
        self._execute_scaled = lib().weave_gemm_rs_execute_scaled
        self.called = False  # a call went through: the plan may be captured (weave.h)

    def execute(self, a: int, b: int, bias: int, c_out: int, stream: int, scale_a: int = 0, scale_b: int = 0) -> None:
        """Enqueues one call on `stream` (device pointers as ints; 0 for no bias / no rows; the scales'
        for a plan with scales, weave_gemm_rs_execute_scaled)."""
        if self.options.scale_mode:
            rc = self._execute_scaled(self.handle, a, b, scale_a or None, scale_b or None, bias or None,
                                      c_out or None, stream or None)
            call = "weave_gemm_rs_execute_scaled"
        else:
            rc = self._execute(self.handle, a, b, bias or None, c_out or None, stream or None)
            call = "weave_gemm_rs_execute"
        if rc:
            _raise(rc, call, self.team.handle)
        self.called = True

    def _destroy(self) -> None:
        handle, self.handle = self.handle, None
        if handle:
            rc = lib().weave_gemm_rs_plan_destroy(handle)
            if rc:
                _raise(rc, "weave_gemm_rs_plan_destroy", self.team.handle)


@dataclass(frozen=True)
class AgPlanInfo:
    """weave_ag_gemm_info_t, with the strategy and chosen_by by name ("caller", "cache", "measurement" or
    "model"); cta_pairs: the fused kernel runs 2-CTA clusters sharing A's loads."""

    strategy: str
    row_begin: int
    rows: int
    gemm_blocks: int
    comm_blocks: int
    heap_bytes: int
    bytes_sent: int
    chosen_by: str
    why: str
    choose_ms: float = 0.0
    cta_pairs: bool = False


class AgPlan:
    """One weave_ag_gemm_plan_t: made by Team.create_ag_plan, freed by Team.destroy."""

    def __init__(self, team: "Team", M: int, N: int, K: int, options: AgGemmOptions) -> None:
        _check_c_ints("weave_ag_gemm_plan_create", M=M, N=N, K=K)
        handle = c_void_p()
        desc = options.desc()
        rc = lib().weave_ag_gemm_plan_create(team.handle, M, N, K, byref(desc), byref(handle))
        if rc:
            _raise(rc, "weave_ag_gemm_plan_create", team.handle)
        self.handle: Optional[int] = handle.value
        self.team, self.shape, self.options = team, (M, N, K), options
        info = _AgInfo()
        rc = lib().weave_ag_gemm_plan_info(self.handle, byref(info))
        if rc:
            _raise(rc, "weave_ag_gemm_plan_info", team.handle)
        strategies = {v: k for k, v in strategy_names().items()}
        chosen = CHOSEN_BY_NAMES[info.chosen_by] if 0 <= info.chosen_by < len(CHOSEN_BY_NAMES) else str(info.chosen_by)
        self.info = AgPlanInfo(strategies.get(info.strategy, str(info.strategy)), info.row_begin, info.rows,
                               info.gemm_blocks, info.comm_blocks, info.heap_bytes, info.bytes_sent, chosen,
                               info.why.decode(errors="replace"), info.choose_ms, bool(info.cta_pairs))
        self._execute = lib().weave_ag_gemm_execute
        self._execute_scaled = lib().weave_ag_gemm_execute_scaled
        self.called = False

    def execute(self, a: int, b: int, bias: int, c: int, a_gathered: int, stream: int, scale_a: int = 0,
                scale_b: int = 0) -> None:
        """Enqueues one call on `stream` (device pointers as ints; 0 for no rows / no bias / no gathered A;
        the scales of an fp8 plan with scales: weave_ag_gemm_execute_scaled)."""
        if self.options.scale_mode:
            name = "weave_ag_gemm_execute_scaled"
            rc = self._execute_scaled(self.handle, a or None, b, scale_a or None, scale_b or None, bias or None, c,
                                      a_gathered or None, stream or None)
        else:
            name = "weave_ag_gemm_execute"
            rc = self._execute(self.handle, a or None, b, bias or None, c, a_gathered or None, stream or None)
        if rc:
            _raise(rc, name, self.team.handle)
        self.called = True

    def _destroy(self) -> None:
        handle, self.handle = self.handle, None
        if handle:
            rc = lib().weave_ag_gemm_plan_destroy(handle)
            if rc:
                _raise(rc, "weave_ag_gemm_plan_destroy", self.team.handle)


PlanKey = Tuple[int, int, int, object]  # the shape and GemmRsOptions or AgGemmOptions


class Team:
    """One rank of a weave team, with the bootstrap it was made from and its plans.

    Made from a unique id that every rank got by its own means: weave_bootstrap_create_uid, then
    weave_team_create on `device` (a CUDA ordinal). Both collective; so is everything that makes or
    frees a plan, and destroy()."""

    def __init__(self, unique_id: bytes, world: int, rank: int, device: int) -> None:
        for name, v in (("world", world), ("rank", rank), ("device", device)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"weave_tp.Team: {name} must be an int (got {type(v).__name__})")
        _check_c_ints("weave_tp.Team", world=world, rank=rank, device=device)
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != ctypes.sizeof(_UniqueId):
            raise ValueError(f"weave_tp.Team: unique_id must be the {ctypes.sizeof(_UniqueId)} bytes of "
                             "get_unique_id()")
        L = lib()
        uid = _UniqueId.from_buffer_copy(bytes(unique_id))
        bootstrap, team = c_void_p(), c_void_p()
        rc = L.weave_bootstrap_create_uid(byref(uid), world, rank, byref(bootstrap))
        if rc:
            _raise(rc, "weave_bootstrap_create_uid")
        rc = L.weave_team_create(bootstrap, rank, device, None, byref(team))
        if rc:
            detail = _last_error(None)
            L.weave_bootstrap_destroy(bootstrap)
            raise _error(rc, "weave_team_create", detail)
        self.handle: Optional[int] = team.value
        self._bootstrap: Optional[int] = bootstrap.value
        self.world, self.rank, self.device = world, rank, device
        self._plans: Dict[PlanKey, object] = {}  # Plan and AgPlan

    def device_info(self) -> Dict[str, object]:
        info = _DeviceInfo()
        rc = lib().weave_team_device_info(self.handle, byref(info))
        if rc:
            _raise(rc, "weave_team_device_info", self.handle)
        names = [field[0] for field in _DeviceInfo._fields_]
        return {name: (info.name.decode() if name == "name" else getattr(info, name)) for name in names}

    def find_plan(self, M: int, N: int, K_local: int, options: GemmRsOptions) -> Optional[Plan]:
        return self._plans.get((M, N, K_local, options))

    def create_plan(self, M: int, N: int, K_local: int, options: GemmRsOptions) -> Plan:
        """Collective: every rank creates the same plans in the same order. Kept until destroy()."""
        self._check_alive()
        plan = Plan(self, M, N, K_local, options)
        self._plans[(M, N, K_local, options)] = plan
        return plan

    def find_ag_plan(self, M: int, N: int, K: int, options: AgGemmOptions) -> Optional[AgPlan]:
        return self._plans.get((M, N, K, options))  # type: ignore[return-value]

    def create_ag_plan(self, M: int, N: int, K: int, options: AgGemmOptions) -> AgPlan:
        """Collective, as create_plan: an AllGather + GEMM plan, kept until destroy()."""
        self._check_alive()
        plan = AgPlan(self, M, N, K, options)
        self._plans[(M, N, K, options)] = plan
        return plan

    @property
    def plans(self) -> Tuple[Plan, ...]:
        """The cached plans, in creation order."""
        return tuple(self._plans.values())

    def sync(self, stream: int) -> None:
        """weave_team_sync: waits for `stream`, then raises WeaveTimeoutError if a kernel's wait expired,
        WeaveAbortedError once a rank has aborted the team."""
        self._check_alive()
        rc = lib().weave_team_sync(self.handle, stream or None)
        if rc:
            _raise(rc, "weave_team_sync", self.handle)

    def poll(self) -> Tuple[int, str]:
        """weave_team_poll: (0, "") while no kernel's wait has failed and no rank has aborted, else (the
        Result, what happened). Waits for no stream and changes nothing; safe from another thread than
        the rank's (the watchdog's) while calls run."""
        handle = self.handle
        if handle is None:
            return 0, ""
        msg = ctypes.create_string_buffer(512)
        rc = lib().weave_team_poll(handle, msg, len(msg))
        return rc, msg.value.decode(errors="replace")

    def abort(self) -> None:
        """weave_team_abort: this rank gives up on the team. Every rank's waits on it, in kernels now or
        later, stop at once instead of running out the timeout; their sync() then raises
        WeaveAbortedError naming this rank. Not collective. Afterwards only destroy() is of use, on
        every rank."""
        self._check_alive()
        rc = lib().weave_team_abort(self.handle)
        if rc:
            _raise(rc, "weave_team_abort", self.handle)

    def destroy(self) -> None:
        """Collective: frees the plans (in creation order, the same on every rank), the team and the
        bootstrap. Everything is freed even when a step fails; the first failure is raised after."""
        if self.handle is None:
            return
        first: Optional[BaseException] = None
        plans, self._plans = list(self._plans.values()), {}
        for plan in plans:
            try:
                plan._destroy()
            except WeaveError as e:
                first = first or e
        L = lib()
        handle, self.handle = self.handle, None
        rc = L.weave_team_destroy(handle)
        if rc and first is None:  # (the team, and so its last error, is gone)
            first = _error(rc, "weave_team_destroy", "a peer did not reach weave_team_destroy")
        L.weave_bootstrap_destroy(self._bootstrap)
        self._bootstrap = None
        if first is not None:
            raise first

    def _check_alive(self) -> None:
        if self.handle is None:
            raise RuntimeError("weave: this team was destroyed")
