"""weave for PyTorch: a team over a torch.distributed process group, and gemm_rs as registered custom
ops (weave_tp::gemm_rs, weave_tp::gemm_rs_out) with fake implementations and a backward, so torch.compile
and CUDA graphs see one op. The arithmetic is libweave's; this file checks tensors, caches plans and
hands weave the pointers and torch's current stream.
"""

import atexit
import ctypes
import os
import sys
import threading
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from ._capi import (
    INT_MAX,
    AgGemmOptions,
    GemmRsOptions,
    LibraryNotFoundError,
    Plan,
    PlanInfo,
    Result,
    Team,
    WeaveAbortedError,
    WeaveError,
    WeaveTimeoutError,
    ag_gemm_options,
    gemm_rs_options,
    get_unique_id,
    row_split,
    rows_of,
)

_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_FP8_OUT_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}  # what gemm_rs_scaled writes


class _Entry:
    """A team and the process group it was made over (the backward gathers over that group)."""

    def __init__(self, team: Team, group: Optional[dist.ProcessGroup]) -> None:
        self.team, self.group = team, group
        self.watchdog: Optional[Watchdog] = None


class Watchdog:
    """Polls a team's device error record (Team.poll, weave_team_poll) every `interval` seconds on a
    daemon thread. When a kernel's wait has expired or a rank has aborted, it raises that error
    (WeaveTimeoutError or WeaveAbortedError, as weave_tp.sync would) in the thread that made it, at
    that thread's next Python instruction (a thread inside a C call, e.g. torch.cuda.synchronize, gets
    it when the call returns), keeps it in `failure`, and stops; every later weave_tp call on the team
    but abort, sync and finalize raises it too. The bound: the team's timeout plus one interval.
    weave_tp.init(watchdog=interval) makes one; finalize stops it."""

    def __init__(self, team: object, interval: float, thread_id: Optional[int] = None) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise ValueError(f"weave_tp watchdog: interval must be a number of seconds > 0 (got {interval!r})")
        self.team, self.interval = team, float(interval)
        self.thread_id = threading.get_ident() if thread_id is None else thread_id
        self.failure: Optional[WeaveError] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weave_tp watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            code, message = self.team.poll()
            if code in (Result.TIMEOUT, Result.ABORTED):
                base = WeaveAbortedError if code == Result.ABORTED else WeaveTimeoutError
                self.failure = base(int(code), "weave_tp watchdog", message)
                failure = self.failure

                class WeaveWatchdogError(base):  # raised asynchronously: made without arguments
                    def __init__(self) -> None:
                        base.__init__(self, int(failure.code), failure.call, failure.detail)

                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread_id),
                                                           ctypes.py_object(WeaveWatchdogError))
                return


class _State:
    def __init__(self) -> None:
        self.teams: Dict[int, _Entry] = {}  # by id, the ops' `team` argument; in creation order
        self.default: Optional[int] = None  # the first team made: the one calls without group= use
        self.next_id = 0
        self.pid = 0  # the process that made the teams (a forked child must not finalize them)


_state = _State()


# ---- the teams -------------------------------------------------------------------------------------
def _group_or_world(group: Optional[dist.ProcessGroup]) -> dist.ProcessGroup:
    return group if group is not None else dist.group.WORLD


def _same_group(a: object, b: object) -> bool:
    """One process group: the same object, or the same name (a DeviceMesh may hand out another handle)."""
    if a is b:
        return True
    name_a, name_b = getattr(a, "group_name", None), getattr(b, "group_name", None)
    return isinstance(name_a, str) and name_a == name_b


def _team_id(call: str, group: Optional[dist.ProcessGroup]) -> int:
    """The id of the team made over `group` (None: the default team, the first one made)."""
    if group is None:
        if _state.default is None:
            raise RuntimeError(f"{call}: no weave team: call weave_tp.init() first")
        return _state.default
    for team_id, entry in _state.teams.items():
        if _same_group(entry.group, group):
            return team_id
    raise RuntimeError(f"{call}: no weave team over this process group: call weave_tp.init(group) first")


def _team(call: str, team_id: int, failed_ok: bool = False) -> Team:
    entry = _state.teams.get(team_id)
    if entry is None:
        raise RuntimeError(f"{call}: weave team {team_id} does not exist (finalized?): a graph traced before "
                           "weave_tp.finalize() cannot run after it")
    if not failed_ok and entry.watchdog is not None and entry.watchdog.failure is not None:
        raise entry.watchdog.failure  # what the watchdog saw, for every call after it (as NCCL's)
    return entry.team


def init(group: Optional[dist.ProcessGroup] = None, *, watchdog: Optional[float] = None) -> Team:
    """Creates a weave team over the ranks of `group` (default: the world group of torch.distributed,
    which must be initialized). Collective over the group: group rank 0 makes a unique id, the group
    broadcasts it (a CUDA tensor for nccl, a CPU tensor otherwise), and every process joins on
    torch.cuda.current_device() (set it first, e.g. to LOCAL_RANK % device_count). A process may make
    one team for each of several groups (e.g. one per dimension of a DeviceMesh); calls take the
    first one made unless they name a group. watchdog: seconds between polls of the team's error
    record by a Watchdog, which raises a failed wait or an abort in this thread (None: no watchdog;
    the errors then show at weave_tp.sync())."""
    if watchdog is not None and (isinstance(watchdog, bool) or not isinstance(watchdog, (int, float)) or
                                 not watchdog > 0):
        raise ValueError(f"weave_tp.init: watchdog must be None or seconds > 0 (got {watchdog!r})")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("weave_tp.init: torch.distributed is not initialized: call "
                           "torch.distributed.init_process_group() first")
    group = _group_or_world(group)
    if any(_same_group(entry.group, group) for entry in _state.teams.values()):
        raise RuntimeError("weave_tp.init: this process already has a team over this group; call "
                           "weave_tp.finalize(group) first")
    if not torch.cuda.is_available():
        raise RuntimeError("weave_tp.init: torch sees no CUDA device")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("weave_tp.init: this process is not a member of group")
    world = dist.get_world_size(group)
    device = torch.cuda.current_device()

    # [status, id]: status 1 tells the others that rank 0 could not make an id (instead of a hang).
    buf = torch.zeros(129, dtype=torch.uint8)
    failure: Optional[Exception] = None
    if rank == 0:
        try:
            buf[1:] = torch.frombuffer(bytearray(get_unique_id()), dtype=torch.uint8)
        except (WeaveError, LibraryNotFoundError) as e:  # (the first use of libweave: it may not load)
            failure = e
            buf[0] = 1
    on = torch.device("cuda", device) if dist.get_backend(group) == "nccl" else torch.device("cpu")
    buf = buf.to(on)
    dist.broadcast(buf, src=dist.get_global_rank(group, 0), group=group)
    buf = buf.cpu()
    if failure is not None:
        raise failure
    if buf[0].item():
        raise RuntimeError("weave_tp.init: group rank 0 could not create a unique id (its error says why)")
    team = Team(bytes(buf[1:].tolist()), world, rank, device)
    team_id = _register(team, group)
    if watchdog is not None:
        _state.teams[team_id].watchdog = Watchdog(team, watchdog).start()
    return team


def _register(team: Team, group: Optional[dist.ProcessGroup]) -> int:
    team_id = _state.next_id
    _state.next_id += 1
    _state.teams[team_id] = _Entry(team, group)
    if _state.default is None:
        _state.default = team_id
    _state.pid = os.getpid()
    return team_id


def finalize(group: Optional[dist.ProcessGroup] = None) -> None:
    """Frees a team and its plans (collective: every rank of that team calls it): the one over `group`,
    or with no group every team this process made, newest first (every rank then frees the same teams
    in the same order). Also run at exit."""
    if group is None:
        ids = sorted(_state.teams, reverse=True)
    else:
        ids = [team_id for team_id, entry in _state.teams.items() if _same_group(entry.group, _group_or_world(group))]
    for team_id in ids:
        entry = _state.teams.pop(team_id)
        if _state.default == team_id:
            _state.default = min(_state.teams) if _state.teams else None
        if entry.watchdog is not None:
            entry.watchdog.stop()
        entry.team.destroy()


def _finalize_at_exit() -> None:
    if _state.teams and _state.pid not in (0, os.getpid()):
        return  # a forked child: the teams are its parent's
    try:
        finalize()
    except Exception as e:  # at exit there is nobody to raise to; the waits are bounded, so no hang
        print(f"weave_tp: finalize at exit: {e}", file=sys.stderr)


atexit.register(_finalize_at_exit)


def is_initialized(group: Optional[dist.ProcessGroup] = None) -> bool:
    """Whether this process has a team (over `group`, when given)."""
    if group is None:
        return _state.default is not None
    return any(_same_group(entry.group, group) for entry in _state.teams.values())


def get_team(call: str = "weave_tp", group: Optional[dist.ProcessGroup] = None, failed_ok: bool = False) -> Team:
    """The team over `group` (weave_tp.init(group)'s), by default the first one made; once its watchdog
    has seen a failure, that error instead (unless failed_ok)."""
    return _team(call, _team_id(call, group), failed_ok)


def abort(group: Optional[dist.ProcessGroup] = None) -> None:
    """This rank gives up on a team (weave_team_abort), e.g. where it fails alone while the others may
    wait for it in a weave call: their waits stop at once instead of running out WEAVE_TIMEOUT_MS, and
    their weave_tp.sync() raises WeaveAbortedError naming this rank. Then call weave_tp.finalize() on every
    rank (and weave_tp.init() to go on). The team's watchdog on this rank stops first: the abort is this
    rank's own doing, not news to raise in its thread."""
    team_id = _team_id("weave_tp.abort", group)
    entry = _state.teams[team_id]
    if entry.watchdog is not None:
        entry.watchdog.stop()
    _team("weave_tp.abort", team_id, failed_ok=True).abort()


def sync(group: Optional[dist.ProcessGroup] = None) -> None:
    """Waits for torch's current stream, then raises WeaveTimeoutError if a weave kernel's bounded wait
    expired since the last sync (weave_team_sync: such a kernel's output is wrong, and only this tells),
    WeaveAbortedError once a rank has aborted the team (weave_tp.abort)."""
    team = get_team("weave_tp.sync", group, failed_ok=True)
    team.sync(torch.cuda.current_stream(torch.device("cuda", team.device)).cuda_stream)


# ---- checks ----------------------------------------------------------------------------------------
def _check_types(call: str, tensors: dict, maybe_tensors: dict, strings: dict, fp32_slots: object,
                 alpha: object) -> None:
    """The Python types of a public call's arguments (before torch's dispatcher casts them), by name."""
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{call}: {name} must be a torch.Tensor (got {type(t).__name__})")
    for name, maybe in maybe_tensors.items():
        if maybe is not None and not isinstance(maybe, Tensor):
            raise TypeError(f"{call}: {name} must be a torch.Tensor or None (got {type(maybe).__name__})")
    for name, s in strings.items():
        if not isinstance(s, str):
            raise TypeError(f"{call}: {name} must be a str (got {type(s).__name__})")
    if not isinstance(fp32_slots, bool):
        raise TypeError(f"{call}: fp32_slots must be a bool (got {type(fp32_slots).__name__})")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"{call}: alpha must be a float (got {type(alpha).__name__})")


def _check_fp8_options(call: str, out_dtype: object, use_fast_accum: object) -> None:
    if not isinstance(out_dtype, torch.dtype) or out_dtype not in _FP8_OUT_NAMES:
        raise TypeError(f"{call}: out_dtype must be torch.bfloat16 or torch.float16 (got {out_dtype!r})")
    if not isinstance(use_fast_accum, bool):
        raise TypeError(f"{call}: use_fast_accum must be a bool (got {type(use_fast_accum).__name__})")


def _check_tensor(call: str, name: str, t: Tensor, ndim: Optional[int], dtype: Optional[torch.dtype],
                  device: torch.device, meta_ok: bool, exact: Optional[Tuple[torch.dtype, str]] = None) -> None:
    """A tensor argument: one of weave's 16/32-bit dtypes and, when given, a's `dtype`; or with
    `exact`, (that dtype, what it is for); on the team's device; `ndim` dimensions unless None;
    contiguous."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{call}: {name} must be a torch.Tensor (got {type(t).__name__})")
    if exact is not None:
        if t.dtype != exact[0]:
            raise TypeError(f"{call}: {name} is {t.dtype}; it must be {exact[0]} ({exact[1]})")
    elif t.dtype not in _DTYPE_NAMES:
        raise TypeError(f"{call}: {name} is {t.dtype}; weave takes torch.bfloat16, torch.float16 or torch.float32")
    elif dtype is not None and t.dtype != dtype:
        raise TypeError(f"{call}: {name} is {t.dtype} but a is {dtype}: all tensors must have a's dtype")
    if t.device != device and not (meta_ok and t.device.type == "meta"):
        raise ValueError(f"{call}: {name} is on {t.device}; it must be on {device}, the device of this process's "
                         "weave team")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{call}: {name} must be {ndim}-D (got shape {tuple(t.shape)})")
    if not t.is_contiguous():
        raise ValueError(f"{call}: {name} must be contiguous (call .contiguous())")


def _exact_checker(call: str, device: torch.device, meta_ok: bool) -> Callable[[str, Tensor, torch.dtype, str], None]:
    """_check_tensor of one dtype exactly (fp8 calls): tensor(name, t, dtype, what) names `what` when
    t is not a `dtype` tensor on `device`."""

    def tensor(name: str, t: Tensor, dtype: torch.dtype, what: str) -> None:
        _check_tensor(call, name, t, None, None, device, meta_ok, exact=(dtype, what))

    return tensor


def _check(call: str, team: Team, a: Tensor, b: Tensor, bias: Optional[Tensor], b_layout: str, strategy: str,
           reduce: str, fp32_slots: bool, alpha: float, meta_ok: bool) -> Tuple[GemmRsOptions, int, int, int]:
    """The options and (M, N, K_local) of a call, or the error naming the bad argument."""
    device = torch.device("cuda", team.device)
    _check_tensor(call, "a", a, 2, None, device, meta_ok)
    gemm_rs_options(_DTYPE_NAMES[a.dtype], b_layout=b_layout, strategy=strategy, reduce=reduce,
                    fp32_slots=fp32_slots, alpha=alpha, has_bias=bias is not None, call=call)  # names a bad option
    # a transposed view of a contiguous matrix is that matrix in the other layout: no copy
    _check_weight(call, b, a, device, meta_ok)
    options = gemm_rs_options(_DTYPE_NAMES[a.dtype], b_layout=_storage_layout(b, b_layout), strategy=strategy,
                              reduce=reduce, fp32_slots=fp32_slots, alpha=alpha, has_bias=bias is not None, call=call)
    M, K = a.shape
    N, Kb = (b.shape[1], b.shape[0]) if b_layout == "row" else (b.shape[0], b.shape[1])
    if Kb != K:
        want = "[K_local, N]" if b_layout == "row" else "[N, K_local]"
        raise ValueError(f"{call}: b has shape {tuple(b.shape)}; b_layout={b_layout!r} wants {want} with "
                         f"K_local = a.shape[1] = {K}")
    if M < 1 or N < 1 or K < 1:
        raise ValueError(f"{call}: a {tuple(a.shape)} and b {tuple(b.shape)} must not be empty (M, N, K_local >= 1)")
    _check_int_sizes(call, a, b, M, N, K)
    if bias is not None:
        _check_tensor(call, "bias", bias, 1, a.dtype, device, meta_ok)
        if bias.shape[0] != N:
            raise ValueError(f"{call}: bias has shape {tuple(bias.shape)}; it must be [N] = [{N}]")
    return options, M, N, K


def _check_weight(call: str, b: Tensor, a: Tensor, device: torch.device, meta_ok: bool) -> None:
    """b as _check_tensor wants it, 2-D of a's dtype, where a transposed view of a contiguous matrix
    counts as contiguous (it is that matrix in the other layout: _storage_layout, no copy)."""
    view = isinstance(b, Tensor) and b.dim() == 2 and not b.is_contiguous() and b.t().is_contiguous()
    _check_tensor(call, "b", b.t() if view else b, 2, a.dtype, device, meta_ok)


def _storage_layout(b: Tensor, b_layout: str) -> str:
    """The layout of b's memory: b_layout, or the other one where b is a transposed view."""
    if b.is_contiguous():
        return b_layout
    return "col" if b_layout == "row" else "row"


def _tokens(call: str, a: Tensor) -> Tensor:
    """a as [tokens, K_local]: nn.Linear's [*, in] with the leading dimensions flattened (a view)."""
    if isinstance(a, Tensor) and a.dim() != 2:
        if a.dim() < 2:
            raise ValueError(f"{call}: a must be [*, K_local], at least 2-D (got shape {tuple(a.shape)})")
        if not a.is_contiguous():
            raise ValueError(f"{call}: a must be contiguous (call .contiguous())")
        a = a.flatten(0, -2)
    return a


def _check_int_sizes(call: str, a: Tensor, b: Tensor, M: int, N: int, K: int) -> None:
    """weave takes M, N and K_local as C ints: ctypes would pass a larger one wrapped (2**32 + 10 rows as
    10), a plan of another shape."""
    if M > INT_MAX or N > INT_MAX or K > INT_MAX:
        raise ValueError(f"{call}: a {tuple(a.shape)} and b {tuple(b.shape)}: M, N and K_local must each be at "
                         f"most {INT_MAX} (weave's sizes are C ints)")


def _check_out(call: str, team: Team, out: Tensor, a: Tensor, rows: int, N: int, meta_ok: bool) -> None:
    _check_tensor(call, "out", out, 2, a.dtype, torch.device("cuda", team.device), meta_ok)
    if out.shape[0] != rows or out.shape[1] != N:
        raise ValueError(f"{call}: out has shape {tuple(out.shape)}; this rank's rows are [{rows}, {N}]")


def _check_out_overlap(call: str, out: Tensor, inputs: dict) -> None:
    """out= shares no memory with an input (all contiguous: each is one byte range). The call reads a, b
    and bias while it writes out (the fused kernel's GEMM blocks and its reduction run at once), so an
    overlap would give wrong rows; torch's out= functions refuse it too. Real tensors only (meta ones
    have no addresses)."""
    if out.numel() == 0:
        return
    lo, hi = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
    for name, t in inputs.items():
        if t is not None and t.numel() and t.data_ptr() < hi and lo < t.data_ptr() + t.numel() * t.element_size():
            raise ValueError(f"{call}: out shares memory with {name}, which the call reads while it writes out: "
                             "pass an out of its own")


def _rows(M: int, world: int, rank: int) -> int:
    """Rank `rank`'s rows of C. M is symbolic when torch.compile traces with dynamic shapes: C cannot
    take a symbol, so rows_of (weave_row_split's rule in closed form, checked against it) does."""
    return row_split(M, world, rank)[1] if isinstance(M, int) else rows_of(M, world, rank)


def _check_team(call: str, team: Team, world: int, rank: int) -> None:
    """The ops take the team's world and rank as arguments: the output's shape depends on them, so
    they must be in the traced graph (a graph compiled for another world, e.g. from inductor's cache,
    must not be reused). They must be this process's."""
    if (world, rank) != (team.world, team.rank):
        raise ValueError(f"{call}: world {world} and rank {rank} are not the team's ({team.world}, {team.rank})")


# ---- the call ----------------------------------------------------------------------------------------
def _plan(call: str, team: Team, M: int, N: int, K: int, options: object) -> Plan:
    plan = team.find_plan(M, N, K, options)
    capturing = torch.cuda.is_current_stream_capturing()
    if plan is not None and (plan.called or not capturing):
        return plan
    if capturing:  # weave.h: a plan is captured after its first call
        raise RuntimeError(
            f"{call}: no plan for M={M}, N={N}, K_local={K} with these dtype and options has made a call yet "
            "(making a plan synchronizes the device, which CUDA graph capture forbids, and a plan is captured after "
            "its first call): run one call with the same shapes, dtype and options (on every rank) before capturing")
    if isinstance(options, AgGemmOptions):
        return team.create_ag_plan(M, N, K, options)  # collective
    return team.create_plan(M, N, K, options)  # collective


def _run(a: Tensor, b: Tensor, bias: Optional[Tensor], out: Optional[Tensor], b_layout: str, strategy: str,
         reduce: str, fp32_slots: bool, alpha: float, world: int, rank: int, team_id: int) -> Tensor:
    call = "weave_tp.gemm_rs"
    team = _team(call, team_id)
    _check_team(call, team, world, rank)
    options, M, N, K = _check(call, team, a, b, bias, b_layout, strategy, reduce, fp32_slots, alpha, meta_ok=False)
    plan = _plan(call, team, M, N, K, options)
    rows = plan.info.rows
    if out is None:
        out = a.new_empty((rows, N))
    else:
        _check_out(call, team, out, a, rows, N, meta_ok=False)
        _check_out_overlap(call, out, dict(a=a, b=b, bias=bias))
    plan.execute(a.data_ptr(), b.data_ptr(), 0 if bias is None else bias.data_ptr(), out.data_ptr() if rows else 0,
                 torch.cuda.current_stream(a.device).cuda_stream)
    return out


@torch.library.custom_op("weave_tp::gemm_rs", mutates_args=())
def _gemm_rs_op(a: Tensor, b: Tensor, bias: Optional[Tensor], b_layout: str, strategy: str, reduce: str,
                fp32_slots: bool, alpha: float, world: int, rank: int, team_id: int) -> Tensor:
    return _run(a, b, bias, None, b_layout, strategy, reduce, fp32_slots, alpha, world, rank, team_id)


@_gemm_rs_op.register_fake
def _gemm_rs_fake(a: Tensor, b: Tensor, bias: Optional[Tensor], b_layout: str, strategy: str, reduce: str,
                  fp32_slots: bool, alpha: float, world: int, rank: int, team_id: int) -> Tensor:
    team = _team("weave_tp.gemm_rs", team_id)
    _check_team("weave_tp.gemm_rs", team, world, rank)
    _, M, N, _ = _check("weave_tp.gemm_rs", team, a, b, bias, b_layout, strategy, reduce, fp32_slots, alpha,
                        meta_ok=True)
    return a.new_empty((_rows(M, world, rank), N))


@torch.library.custom_op("weave_tp::gemm_rs_out", mutates_args=("out",))
def _gemm_rs_out_op(a: Tensor, b: Tensor, bias: Optional[Tensor], out: Tensor, b_layout: str, strategy: str,
                    reduce: str, fp32_slots: bool, alpha: float, world: int, rank: int, team_id: int) -> None:
    _run(a, b, bias, out, b_layout, strategy, reduce, fp32_slots, alpha, world, rank, team_id)


@_gemm_rs_out_op.register_fake
def _gemm_rs_out_fake(a: Tensor, b: Tensor, bias: Optional[Tensor], out: Tensor, b_layout: str, strategy: str,
                      reduce: str, fp32_slots: bool, alpha: float, world: int, rank: int, team_id: int) -> None:
    team = _team("weave_tp.gemm_rs", team_id)
    _check_team("weave_tp.gemm_rs", team, world, rank)
    _, M, N, _ = _check("weave_tp.gemm_rs", team, a, b, bias, b_layout, strategy, reduce, fp32_slots, alpha,
                        meta_ok=True)
    _check_out("weave_tp.gemm_rs", team, out, a, _rows(M, world, rank), N, meta_ok=True)


# ---- fp8: gemm_rs_scaled --------------------------------------------------------------------------
def _check_fp8_scales_bias(call: str, tensor: Callable[[str, Tensor, torch.dtype, str], None], scale_a: Tensor,
                           scale_b: Tensor, bias: Optional[Tensor], out_dtype: torch.dtype, rows: int, rows_what: str,
                           N: int) -> str:
    """The scale mode an fp8 call's scales make ("tensor": one element each; "row": one a row of a's
    `rows` and one a column of the output), or the error naming them (rows_what: a's rows as the
    message shows them); then the bias, [N] of out_dtype. tensor: the call's tensor check."""
    tensor("scale_a", scale_a, torch.float32, "the dequantization scale of a")
    tensor("scale_b", scale_b, torch.float32, "the dequantization scale of b")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        scales = "tensor"
    elif tuple(scale_a.shape) in ((rows, 1), (rows,)) and tuple(scale_b.shape) in ((1, N), (N,)):
        scales = "row"
    else:
        raise ValueError(f"{call}: scale_a {tuple(scale_a.shape)} and scale_b {tuple(scale_b.shape)} must be one "
                         f"element each (per tensor) or {rows_what} and [1, N] = [1, {N}] (per row of a and column "
                         "of the output)")
    if bias is not None:
        tensor("bias", bias, out_dtype, "out_dtype")
        if bias.dim() != 1 or bias.shape[0] != N:
            raise ValueError(f"{call}: bias has shape {tuple(bias.shape)}; it must be [N] = [{N}]")
    return scales


def _check_scaled(call: str, team: Team, a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                  bias: Optional[Tensor], out_dtype: torch.dtype, use_fast_accum: bool, strategy: str, reduce: str,
                  fp32_slots: bool, alpha: float, meta_ok: bool) -> Tuple[GemmRsOptions, int, int, int]:
    """The options and (M, N, K_local) of an fp8 call, or the error naming the bad argument."""
    tensor = _exact_checker(call, torch.device("cuda", team.device), meta_ok)
    _check_fp8_options(call, out_dtype, use_fast_accum)
    fp8 = torch.float8_e4m3fn
    tensor("a", a, fp8, "[M, K_local] e4m3")
    if b.dtype == fp8 and b.dim() == 2 and not b.is_contiguous() and b.t().is_contiguous():
        # not the generic advice, .contiguous(): it turns torch._scaled_mm's b, w.t(), into w's transpose,
        # which the shape check refuses, or where N == K_local takes silently (a @ w instead of a @ w.T)
        raise ValueError(f"{call}: b {tuple(b.shape)} is a transposed view; weave reads b as [N, K_local] row-major "
                         "and computes a @ b.T: for torch._scaled_mm's b (a weight's .t()) pass the weight itself, "
                         "else b.contiguous()")
    tensor("b", b, fp8, "[N, K_local] e4m3, an nn.Linear weight's layout")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"{call}: a and b must be 2-D (got shapes {tuple(a.shape)} and {tuple(b.shape)})")
    (M, K), (N, Kb) = a.shape, b.shape
    if Kb != K:
        raise ValueError(f"{call}: b has shape {tuple(b.shape)}; it must be [N, K_local] with K_local = a.shape[1] "
                         f"= {K}")
    if M < 1 or N < 1 or K < 1:
        raise ValueError(f"{call}: a {tuple(a.shape)} and b {tuple(b.shape)} must not be empty (M, N, K_local >= 1)")
    _check_int_sizes(call, a, b, M, N, K)
    if K % 16:  # libweave's rule too; here also for the fake implementation, which torch.compile runs
        raise ValueError(f"{call}: K_local = a.shape[1] = {K} must be a multiple of 16 (fp8 rows of a and b are "
                         "16-byte multiples for the TMA loads)")
    scales = _check_fp8_scales_bias(call, tensor, scale_a, scale_b, bias, out_dtype, M, f"[M, 1] = [{M}, 1]", N)
    options = gemm_rs_options("fp8_e4m3", b_layout="col", strategy=strategy, reduce=reduce, fp32_slots=fp32_slots,
                              alpha=alpha, has_bias=bias is not None, out_dtype=_FP8_OUT_NAMES[out_dtype],
                              scales=scales, fp8_accum="fast" if use_fast_accum else "fp32", call=call)
    return options, M, N, K


@torch.library.custom_op("weave_tp::gemm_rs_scaled", mutates_args=())
def _gemm_rs_scaled_op(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor],
                       out_dtype: torch.dtype, use_fast_accum: bool, strategy: str, reduce: str, fp32_slots: bool,
                       alpha: float, world: int, rank: int, team_id: int) -> Tensor:
    call = "weave_tp.gemm_rs_scaled"
    team = _team(call, team_id)
    _check_team(call, team, world, rank)
    options, M, N, K = _check_scaled(call, team, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, strategy,
                                     reduce, fp32_slots, alpha, meta_ok=False)
    plan = _plan(call, team, M, N, K, options)
    rows = plan.info.rows
    out = torch.empty((rows, N), dtype=out_dtype, device=a.device)
    plan.execute(a.data_ptr(), b.data_ptr(), 0 if bias is None else bias.data_ptr(), out.data_ptr() if rows else 0,
                 torch.cuda.current_stream(a.device).cuda_stream, scale_a.data_ptr(), scale_b.data_ptr())
    return out


@_gemm_rs_scaled_op.register_fake
def _gemm_rs_scaled_fake(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor],
                         out_dtype: torch.dtype, use_fast_accum: bool, strategy: str, reduce: str, fp32_slots: bool,
                         alpha: float, world: int, rank: int, team_id: int) -> Tensor:
    team = _team("weave_tp.gemm_rs_scaled", team_id)
    _check_team("weave_tp.gemm_rs_scaled", team, world, rank)
    _, M, N, _ = _check_scaled("weave_tp.gemm_rs_scaled", team, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum,
                               strategy, reduce, fp32_slots, alpha, meta_ok=True)
    return a.new_empty((_rows(M, world, rank), N), dtype=out_dtype)


def gemm_rs_scaled(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None, *,
                   out_dtype: torch.dtype = torch.bfloat16, use_fast_accum: bool = False, strategy: str = "auto",
                   reduce: str = "deterministic", fp32_slots: bool = False, alpha: float = 1.0,
                   group: Optional[dist.ProcessGroup] = None) -> Tensor:
    """fp8 inputs, as torch._scaled_mm: this rank's rows of C = alpha * sum over ranks of
    (a_r @ b_r.T) * scale_a_r * scale_b_r (+ bias), as [rows, N] of out_dtype.

    a: this rank's [M, K_local] and b: its [N, K_local] row-major (an nn.Linear weight's layout; the
    tensor whose .t() torch._scaled_mm takes as its b), both torch.float8_e4m3fn, K_local a multiple
    of 16; scale_a, scale_b: this rank's float32 dequantization scales on the device, one element
    each (per tensor) or [M, 1] and [1, N] (per row of a, all M rows on every rank, and per column of
    the output, i.e. per row of b); bias: [N] of out_dtype (bf16 or fp16). use_fast_accum: the
    tensor cores' own accumulation over all of K (faster, less exact), else fp32 accumulation. Scales
    may change between calls without a new plan. No autograd. Everything else as gemm_rs."""
    call = "weave_tp.gemm_rs_scaled"
    _check_types(call, dict(a=a, b=b, scale_a=scale_a, scale_b=scale_b), dict(bias=bias),
                 dict(strategy=strategy, reduce=reduce), fp32_slots, alpha)
    _check_fp8_options(call, out_dtype, use_fast_accum)
    team_id = _team_id(call, group)
    team = _team(call, team_id)
    return torch.ops.weave_tp.gemm_rs_scaled(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, strategy, reduce,
                                             fp32_slots, float(alpha), team.world, team.rank, team_id)


# ---- backward -----------------------------------------------------------------------------------------
@torch.library.custom_op("weave_tp::all_gather_rows", mutates_args=())
def _all_gather_rows_op(rows: Tensor, M: int, team_id: int) -> Tensor:
    """Every rank's rows of an [M, N] matrix split like weave's output, gathered in rank order over the
    team's process group (all_gather_into_tensor on chunks padded to the largest, the first rank's)."""
    team = _team("weave_tp.gemm_rs backward", team_id)
    counts = [row_split(M, team.world, r)[1] for r in range(team.world)]
    if rows.shape[0] != counts[team.rank]:
        raise ValueError(f"weave_tp.gemm_rs backward: the gradient has {rows.shape[0]} rows; rank {team.rank} "
                         f"owns {counts[team.rank]} of M = {M}")
    cap = counts[0]
    send = rows.contiguous()
    if send.shape[0] < cap:
        send = torch.cat([send, send.new_zeros((cap - send.shape[0],) + tuple(send.shape[1:]))])
    gathered = send.new_empty((team.world * cap,) + tuple(send.shape[1:]))
    dist.all_gather_into_tensor(gathered, send, group=_state.teams[team_id].group)
    if cap * team.world == M:
        return gathered
    return torch.cat([gathered[r * cap:r * cap + n] for r, n in enumerate(counts)])


@_all_gather_rows_op.register_fake
def _all_gather_rows_fake(rows: Tensor, M: int, team_id: int) -> Tensor:
    return rows.new_empty((M,) + tuple(rows.shape[1:]))


def _setup_context(ctx, inputs, output) -> None:  # noqa: ANN001 (torch's ctx)
    a, b, bias, b_layout, _strategy, _reduce, _fp32_slots, alpha, world, rank, team_id = inputs
    ctx.save_for_backward(a, b)
    ctx.b_layout, ctx.alpha, ctx.M, ctx.world, ctx.rank, ctx.team_id = b_layout, alpha, a.shape[0], world, rank, team_id


def _backward(ctx, grad: Tensor):  # noqa: ANN001, ANN201
    """C_rows = alpha * (sum_r A_r B_r)[my rows] + bias. With G the gradient of all M rows (gathered):
    dA = alpha G B^T, dB = alpha A^T G (B [K, N]; for B [N, K] its transpose, alpha G^T A) and
    dbias = sum of G over all rows: the bias is one parameter replicated on the ranks, every rank's
    copy gets the whole gradient, so the copies stay equal without an all-reduce.
    On CUDA with several ranks dA is one AllGather + GEMM (weave_tp's ag_gemm, which also hands back
    the gathered G for dB and dbias); elsewhere (CPU tensors of a stand-in team in the tests) G is
    gathered over the process group and multiplied by torch."""
    a, b = ctx.saved_tensors
    g = grad.contiguous()
    need_a, need_b, need_bias = ctx.needs_input_grad[:3]
    ga = gb = gbias = None
    if need_a and ctx.world > 1 and g.is_cuda:
        other = "col" if ctx.b_layout == "row" else "row"  # B^T as ag_gemm's b: the same memory
        ga, gathered = torch.ops.weave_tp.ag_gemm(g, b, None, other, "auto", float(ctx.alpha), ctx.M,
                                                  need_b or need_bias, ctx.world, ctx.rank, ctx.team_id)
        g = gathered if gathered.shape[0] else g
    else:
        if ctx.world > 1:
            g = torch.ops.weave_tp.all_gather_rows(g, ctx.M, ctx.team_id)
        if need_a:
            ga = g @ (b.t() if ctx.b_layout == "row" else b)
            ga = ga * ctx.alpha if ctx.alpha != 1.0 else ga
    if need_b:
        gb = a.t() @ g if ctx.b_layout == "row" else g.t() @ a
        gb = gb * ctx.alpha if ctx.alpha != 1.0 else gb
    if need_bias:
        gbias = g.sum(0)
    return ga, gb, gbias, None, None, None, None, None, None, None, None


_gemm_rs_op.register_autograd(_backward, setup_context=_setup_context)


# ---- the public functions -----------------------------------------------------------------------------
def plan_info(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, *, b_layout: str = "col",
              strategy: str = "auto", reduce: str = "deterministic", fp32_slots: bool = False,
              alpha: float = 1.0, group: Optional[dist.ProcessGroup] = None,
              row_split: str = "weave") -> Optional[PlanInfo]:
    """The plan a gemm_rs call with these arguments uses (its resolved strategy, this rank's rows, the
    blocks, ...), or None before the first such call has made it."""
    call = "weave_tp.plan_info"
    team = get_team(call, group)
    _check_types(call, dict(a=a, b=b), dict(bias=bias),
                 dict(b_layout=b_layout, strategy=strategy, reduce=reduce, row_split=row_split), fp32_slots, alpha)
    a, _ = _torch_split(call, _tokens(call, a), row_split, team.world, team.rank)
    options, M, N, K = _check(call, team, a, b, bias, b_layout, strategy, reduce, fp32_slots, alpha, meta_ok=False)
    plan = team.find_plan(M, N, K, options)
    return None if plan is None else plan.info


def gemm_rs(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, *, b_layout: str = "col",
            out: Optional[Tensor] = None, strategy: str = "auto", reduce: str = "deterministic",
            fp32_slots: bool = False, alpha: float = 1.0, group: Optional[dist.ProcessGroup] = None,
            row_split: str = "weave") -> Tensor:
    """This rank's rows of C = alpha * sum over ranks of a_r @ b_r^T (+ bias), as [rows, N]: F.linear
    summed over the ranks, each keeping its rows.

    a: this rank's [*, K_local], the leading dimensions flattened into M tokens (as nn.Linear's
    input); b: [N, K_local], an nn.Linear weight (b_layout "col", the default), or [K_local, N] with
    b_layout="row" (then C = sum of a_r @ b_r); a transposed view of either is taken as the other
    layout, without a copy. bias: [N]. One dtype (bf16, fp16, fp32), CUDA on the team's device,
    contiguous. The result is [rows, N] whatever a's rank; rows by row_split: "weave"
    (weave_row_split: the first M % world ranks one more, 0 when M < world and rank >= M) or
    "torch" (torch.chunk and DTensor's Shard(0): ceil(M / world) each, the last ranks fewer or none;
    where M % world != 0 the tokens are padded to a multiple of the world first, a copy of a). Runs
    on torch's current stream. The first call of each (shape, dtype, options) makes a plan,
    collectively: every rank makes the same calls in the same order, and not during CUDA graph
    capture. strategy: "auto" | "fused" | "bulk" | "baseline"; reduce: "deterministic" | "atomic";
    fp32_slots: partials in fp32. With out= the result is written there (no autograd); else a new
    tensor (with autograd). group: the process group whose team runs it (weave_tp.init(group)); by
    default the first team."""
    call = "weave_tp.gemm_rs"
    _check_types(call, dict(a=a, b=b), dict(bias=bias, out=out),
                 dict(b_layout=b_layout, strategy=strategy, reduce=reduce, row_split=row_split), fp32_slots, alpha)
    a = _tokens(call, a)
    team_id = _team_id(call, group)
    team = _team(call, team_id)
    a, keep = _torch_split(call, a, row_split, team.world, team.rank)
    if out is not None and torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (a, b, bias)):
        raise RuntimeError(f"{call}: out= does not support autograd (as torch's out= functions); "
                           "leave out=None, or call it under torch.no_grad()")
    if out is None or keep is not None:
        y = torch.ops.weave_tp.gemm_rs(a, b, bias, b_layout, strategy, reduce, fp32_slots, float(alpha), team.world,
                                       team.rank, team_id)
        if keep is not None:
            y = y[:keep]
        if out is None:
            return y
        _check_out(call, team, out, y, keep, y.shape[1], meta_ok=y.device.type == "meta")
        return out.copy_(y)
    torch.ops.weave_tp.gemm_rs_out(a, b, bias, out, b_layout, strategy, reduce, fp32_slots, float(alpha), team.world,
                                   team.rank, team_id)
    return out


# ---- AllGather + GEMM ---------------------------------------------------------------------------------
def _check_ag(call: str, team: Team, a: Tensor, b: Tensor, bias: Optional[Tensor], b_layout: str, strategy: str,
              alpha: float, M: int, meta_ok: bool) -> Tuple[AgGemmOptions, int, int]:
    """The options and (N, K) of an ag_gemm call, or the error naming the bad argument: a is this rank's
    rows [rows(M), K], b [N, K] ("col") or [K, N] ("row") or a transposed view of either, bias [N]."""
    device = torch.device("cuda", team.device)
    _check_tensor(call, "a", a, 2, None, device, meta_ok)
    ag_gemm_options(_DTYPE_NAMES[a.dtype], b_layout=b_layout, strategy=strategy, alpha=alpha,
                    has_bias=bias is not None, call=call)  # names a bad option
    _check_weight(call, b, a, device, meta_ok)
    options = ag_gemm_options(_DTYPE_NAMES[a.dtype], b_layout=_storage_layout(b, b_layout), strategy=strategy,
                              alpha=alpha, has_bias=bias is not None, call=call)
    rows, K = a.shape
    N, Kb = (b.shape[1], b.shape[0]) if b_layout == "row" else (b.shape[0], b.shape[1])
    if Kb != K:
        want = "[K, N]" if b_layout == "row" else "[N, K]"
        raise ValueError(f"{call}: b has shape {tuple(b.shape)}; b_layout={b_layout!r} wants {want} with K = "
                         f"a.shape[1] = {K}")
    if isinstance(M, int) and M < 1:
        raise ValueError(f"{call}: M = {M}: the rows of all ranks together must be >= 1")
    if N < 1 or K < 1:
        raise ValueError(f"{call}: a {tuple(a.shape)} and b {tuple(b.shape)} must not be empty (N, K >= 1)")
    if isinstance(M, int) and isinstance(rows, int) and rows != _rows(M, team.world, team.rank):
        raise ValueError(f"{call}: a has {rows} rows but rank {team.rank} of {team.world} holds "
                         f"{_rows(M, team.world, team.rank)} of M = {M} (weave_row_split: the first M % world ranks "
                         "one more): pass M, the rows of all ranks together")
    _check_int_sizes(call, a, b, M if isinstance(M, int) else 0, N, K)
    if bias is not None:
        _check_tensor(call, "bias", bias, 1, a.dtype, device, meta_ok)
        if bias.shape[0] != N:
            raise ValueError(f"{call}: bias has shape {tuple(bias.shape)}; it must be [N] = [{N}]")
    return options, N, K


@torch.library.custom_op("weave_tp::ag_gemm", mutates_args=())
def _ag_gemm_op(a: Tensor, b: Tensor, bias: Optional[Tensor], b_layout: str, strategy: str, alpha: float, M: int,
                gather: bool, world: int, rank: int, team_id: int) -> Tuple[Tensor, Tensor]:
    call = "weave_tp.ag_gemm"
    team = _team(call, team_id)
    _check_team(call, team, world, rank)
    options, N, K = _check_ag(call, team, a, b, bias, b_layout, strategy, alpha, M, meta_ok=False)
    plan = _plan(call, team, M, N, K, options)
    c = a.new_empty((M, N))
    g = a.new_empty((M if gather else 0, K))
    plan.execute(a.data_ptr() if a.shape[0] else 0, b.data_ptr(), 0 if bias is None else bias.data_ptr(),
                 c.data_ptr(), g.data_ptr() if gather else 0, torch.cuda.current_stream(a.device).cuda_stream)
    return c, g


@_ag_gemm_op.register_fake
def _ag_gemm_fake(a: Tensor, b: Tensor, bias: Optional[Tensor], b_layout: str, strategy: str, alpha: float, M: int,
                  gather: bool, world: int, rank: int, team_id: int) -> Tuple[Tensor, Tensor]:
    call = "weave_tp.ag_gemm"
    team = _team(call, team_id)
    _check_team(call, team, world, rank)
    _, N, K = _check_ag(call, team, a, b, bias, b_layout, strategy, alpha, M, meta_ok=True)
    return a.new_empty((M, N)), a.new_empty((M if gather else 0, K))


def _ag_setup_context(ctx, inputs, output) -> None:  # noqa: ANN001 (torch's ctx)
    a, b, bias, b_layout, _strategy, alpha, M, _gather, world, rank, team_id = inputs
    ctx.save_for_backward(b, output[1])
    ctx.b_layout, ctx.alpha, ctx.M, ctx.world, ctx.rank, ctx.team_id = b_layout, alpha, M, world, rank, team_id


def _ag_backward(ctx, grad_c: Tensor, grad_g: Optional[Tensor]):  # noqa: ANN001, ANN201
    """C = alpha * A_all . B_r (B [K, N]; for B [N, K] its transpose) + bias_r on every rank r. dA of this
    rank's rows = alpha * (sum over ranks of G_r . B_r^T)[its rows]: GEMM + ReduceScatter of the output
    gradients, weave_tp's gemm_rs; dB = alpha A_all^T G (the gathered A the forward kept; for B [N, K]
    its transpose) and dbias = the column sums of G, this rank's own. A gradient of the gathered A
    output adds its rows of this rank."""
    b, gathered = ctx.saved_tensors
    g = grad_c.contiguous()
    need_a, need_b, need_bias = ctx.needs_input_grad[:3]
    ga = gb = gbias = None
    if need_a:
        other = "row" if ctx.b_layout == "col" else "col"  # B_r^T as gemm_rs's b: the same memory
        ga = torch.ops.weave_tp.gemm_rs(g, b, None, other, "auto", "deterministic", False, float(ctx.alpha), ctx.world,
                                        ctx.rank, ctx.team_id)
        if grad_g is not None and grad_g.shape[0]:
            begin = ctx.M - sum(_rows(ctx.M, ctx.world, r) for r in range(ctx.rank, ctx.world))
            ga = ga + grad_g[begin:begin + ga.shape[0]]
    if need_b:
        if gathered.shape[0] == 0:
            raise RuntimeError("weave_tp.ag_gemm backward: b needs a gradient but the forward kept no gathered a "
                               "(call weave_tp.ag_gemm with autograd enabled)")
        gb = g.t() @ gathered if ctx.b_layout == "col" else gathered.t() @ g
        if ctx.alpha != 1.0:
            gb = gb * ctx.alpha
    if need_bias:
        gbias = g.sum(0)
    return ga, gb, gbias, None, None, None, None, None, None, None, None


_ag_gemm_op.register_autograd(_ag_backward, setup_context=_ag_setup_context)


def ag_plan_info(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, *, M: Optional[int] = None,
                 b_layout: str = "col", strategy: str = "auto", alpha: float = 1.0,
                 group: Optional[dist.ProcessGroup] = None):  # noqa: ANN201 (AgPlanInfo or None)
    """The plan an ag_gemm call with these arguments uses (its resolved strategy and why, this rank's
    rows, the blocks, the heap it holds), or None before the first such call has made it."""
    call = "weave_tp.ag_plan_info"
    _check_types(call, dict(a=a, b=b), dict(bias=bias), dict(b_layout=b_layout, strategy=strategy), False, alpha)
    a = _tokens(call, a)
    team = get_team(call, group)
    M = a.shape[0] * team.world if M is None else M
    options, N, K = _check_ag(call, team, a, b, bias, b_layout, strategy, alpha, M, meta_ok=True)
    plan = team.find_plan(M, N, K, options)
    return None if plan is None else plan.info


def ag_gemm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, *, M: Optional[int] = None, b_layout: str = "col",
            strategy: str = "auto", alpha: float = 1.0, group: Optional[dist.ProcessGroup] = None,
            return_gathered: bool = False):  # noqa: ANN201 (Tensor, or (Tensor, Tensor))
    """AllGather + GEMM: C = alpha * A @ b^T (+ bias) over all M rows of A, where this rank holds its rows
    of A (weave_row_split: the first M % world ranks one more; a RowParallelLinear's output rows) and its
    own b: F.linear of the gathered input with this rank's weight shard, the column-parallel linear of
    sequence parallelism. a: [*, K], the leading dimensions this rank's tokens; b: [N, K] (b_layout "col",
    an nn.Linear weight) or [K, N] ("row"), or a transposed view of either; bias: [N]. Returns C [M, N]
    (and with return_gathered the gathered A [M, K] too). M: the tokens of all ranks together; by
    default rows x world (even splits; give M when the ranks hold different counts). Differentiable:
    the input's gradient is gemm_rs of the output's, the weight's uses the gathered A. Runs on torch's
    current stream; plans as gemm_rs (collective on first use of a shape and options)."""
    call = "weave_tp.ag_gemm"
    _check_types(call, dict(a=a, b=b), dict(bias=bias), dict(b_layout=b_layout, strategy=strategy), False, alpha)
    if M is not None and (isinstance(M, bool) or not isinstance(M, int)):
        raise TypeError(f"{call}: M must be an int or None (got {type(M).__name__})")
    if not isinstance(return_gathered, bool):
        raise TypeError(f"{call}: return_gathered must be a bool (got {type(return_gathered).__name__})")
    a = _tokens(call, a)
    team_id = _team_id(call, group)
    team = _team(call, team_id)
    if M is None:
        M = a.shape[0] * team.world
    gather = return_gathered or (torch.is_grad_enabled() and b.requires_grad)
    c, g = torch.ops.weave_tp.ag_gemm(a, b, bias, b_layout, strategy, float(alpha), M, gather, team.world, team.rank,
                                      team_id)
    return (c, g) if return_gathered else c


# ---- fp8: ag_gemm_scaled ---------------------------------------------------------------------------
def _check_ag_scaled(call: str, team: Team, a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                     bias: Optional[Tensor], out_dtype: torch.dtype, use_fast_accum: bool, strategy: str, alpha: float,
                     M: int, meta_ok: bool) -> Tuple[AgGemmOptions, int, int]:
    """The options and (N, K) of an fp8 ag_gemm call, or the error naming the bad argument."""
    tensor = _exact_checker(call, torch.device("cuda", team.device), meta_ok)
    _check_fp8_options(call, out_dtype, use_fast_accum)
    fp8 = torch.float8_e4m3fn
    tensor("a", a, fp8, "this rank's rows [rows, K] e4m3")
    tensor("b", b, fp8, "[N, K] e4m3, an nn.Linear weight's layout")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"{call}: a and b must be 2-D (got shapes {tuple(a.shape)} and {tuple(b.shape)})")
    (rows, K), (N, Kb) = a.shape, b.shape
    if Kb != K:
        raise ValueError(f"{call}: b has shape {tuple(b.shape)}; it must be [N, K] with K = a.shape[1] = {K}")
    if M < 1 or N < 1 or K < 1:
        raise ValueError(f"{call}: M = {M}, a {tuple(a.shape)} and b {tuple(b.shape)} must not be empty")
    if rows != _rows(M, team.world, team.rank):
        raise ValueError(f"{call}: a has {rows} rows but rank {team.rank} of {team.world} holds "
                         f"{_rows(M, team.world, team.rank)} of M = {M} (weave_row_split): pass M")
    _check_int_sizes(call, a, b, M, N, K)
    if K % 16:
        raise ValueError(f"{call}: K = a.shape[1] = {K} must be a multiple of 16 (fp8 rows of a and b are 16-byte "
                         "multiples for the TMA loads)")
    scales = _check_fp8_scales_bias(call, tensor, scale_a, scale_b, bias, out_dtype, rows,
                                    f"[rows, 1] = [{rows}, 1] (this rank's rows)", N)
    options = ag_gemm_options("fp8_e4m3", b_layout="col", strategy=strategy, alpha=alpha, has_bias=bias is not None,
                              out_dtype=_FP8_OUT_NAMES[out_dtype], scales=scales,
                              fp8_accum="fast" if use_fast_accum else "fp32", call=call)
    return options, N, K


@torch.library.custom_op("weave_tp::ag_gemm_scaled", mutates_args=())
def _ag_gemm_scaled_op(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor],
                       out_dtype: torch.dtype, use_fast_accum: bool, strategy: str, alpha: float, M: int, gather: bool,
                       world: int, rank: int, team_id: int) -> Tuple[Tensor, Tensor]:
    call = "weave_tp.ag_gemm_scaled"
    team = _team(call, team_id)
    _check_team(call, team, world, rank)
    options, N, K = _check_ag_scaled(call, team, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, strategy,
                                     alpha, M, meta_ok=False)
    plan = _plan(call, team, M, N, K, options)
    c = a.new_empty((M, N), dtype=out_dtype)
    g = a.new_empty((M if gather else 0, K))
    plan.execute(a.data_ptr() if a.shape[0] else 0, b.data_ptr(), 0 if bias is None else bias.data_ptr(),
                 c.data_ptr(), g.data_ptr() if gather else 0, torch.cuda.current_stream(a.device).cuda_stream,
                 scale_a.data_ptr(), scale_b.data_ptr())
    return c, g


@_ag_gemm_scaled_op.register_fake
def _ag_gemm_scaled_fake(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor],
                         out_dtype: torch.dtype, use_fast_accum: bool, strategy: str, alpha: float, M: int,
                         gather: bool, world: int, rank: int, team_id: int) -> Tuple[Tensor, Tensor]:
    call = "weave_tp.ag_gemm_scaled"
    team = _team(call, team_id)
    _check_team(call, team, world, rank)
    _, N, K = _check_ag_scaled(call, team, a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, strategy, alpha, M,
                               meta_ok=True)
    return a.new_empty((M, N), dtype=out_dtype), a.new_empty((M if gather else 0, K))


def ag_gemm_scaled(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None, *,
                   M: Optional[int] = None, out_dtype: torch.dtype = torch.bfloat16, use_fast_accum: bool = False,
                   strategy: str = "auto", alpha: float = 1.0, group: Optional[dist.ProcessGroup] = None,
                   return_gathered: bool = False):  # noqa: ANN201 (Tensor, or (Tensor, Tensor))
    """fp8 AllGather + GEMM, as torch._scaled_mm of the gathered rows: C = alpha * (A @ b.T) * sa * sb
    (+ bias) over all M rows of A, [M, N] of out_dtype. a: this rank's rows [rows, K] and b: its [N, K]
    (an nn.Linear weight's layout), both torch.float8_e4m3fn, K a multiple of 16; scale_a, scale_b:
    float32 on the device, one element each (per tensor: this rank's rows' scale, which may differ
    from the other ranks', and its b's) or [rows, 1] and [1, N] (per row of this rank's a and per
    column of the output). The scales travel with the rows. bias: [N] of out_dtype (bf16 or fp16).
    M: the rows of all ranks (default rows x world); use_fast_accum: the tensor cores' own
    accumulation (faster, less exact), else fp32. return_gathered: also the gathered A [M, K] (e4m3).
    No autograd. Plans as ag_gemm."""
    call = "weave_tp.ag_gemm_scaled"
    _check_types(call, dict(a=a, b=b, scale_a=scale_a, scale_b=scale_b), dict(bias=bias), dict(strategy=strategy),
                 False, alpha)
    _check_fp8_options(call, out_dtype, use_fast_accum)
    if M is not None and (isinstance(M, bool) or not isinstance(M, int)):
        raise TypeError(f"{call}: M must be an int or None (got {type(M).__name__})")
    if not isinstance(return_gathered, bool):
        raise TypeError(f"{call}: return_gathered must be a bool (got {type(return_gathered).__name__})")
    team_id = _team_id(call, group)
    team = _team(call, team_id)
    if M is None:
        M = a.shape[0] * team.world
    c, g = torch.ops.weave_tp.ag_gemm_scaled(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, strategy,
                                             float(alpha), M, return_gathered, team.world, team.rank, team_id)
    return (c, g) if return_gathered else c


def _torch_split(call: str, a: Tensor, row_split: str, world: int, rank: int) -> Tuple[Tensor, Optional[int]]:
    """row_split="torch" where it differs from weave's (M % world != 0): a padded with zero rows to a
    multiple of the world, where weave's split is torch's, and this rank's row count under torch's
    split (ceil(M / world) each, the last ranks fewer), to cut the result to. Else a and None."""
    if row_split not in ("weave", "torch"):
        raise ValueError(f"{call}: row_split must be one of 'weave', 'torch' (got {row_split!r})")
    M = a.shape[0]
    pad = (world - M % world) % world
    if row_split == "weave" or pad == 0:
        return a, None
    chunk = (M + pad) // world
    keep = max(0, min(chunk, M - rank * chunk))
    return torch.nn.functional.pad(a, (0, 0, 0, pad)), keep
