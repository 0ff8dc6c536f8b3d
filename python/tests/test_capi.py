"""The library layer without torch: lookup and loading, version, result codes as exceptions, the C
structs' layout, enum names, the row split, unique ids and the bootstrap."""

import ctypes
import dataclasses
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import zipfile
from pathlib import Path

import pytest

import weave_tp
from conftest import PYTHON_DIR, REPO, needs_library
from weave_tp import _capi

pytestmark = needs_library


def _has_gpu() -> bool:
    """Whether weave sees a device: a team of one rank either forms or fails with NO_DEVICE."""
    try:
        team = weave_tp.Team(weave_tp.get_unique_id(), 1, 0, 0)
    except weave_tp.WeaveError as e:
        if e.code in (weave_tp.Result.NO_DEVICE, weave_tp.Result.UNSUPPORTED_DEVICE):
            return False
        raise
    team.destroy()
    return True


def test_versions_agree() -> None:
    cmake = re.search(r"project\(weave VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    pyproject = re.search(r'^version = "([^"]+)"', (PYTHON_DIR / "pyproject.toml").read_text(), re.M).group(1)
    assert weave_tp.__version__ == cmake == pyproject, "bump python/weave_tp/_version.py and python/pyproject.toml too"
    assert weave_tp.library_version() == tuple(int(v) for v in cmake.split("."))
    assert os.path.isfile(weave_tp.library_path())


def _import_with(env_library: str) -> subprocess.CompletedProcess:
    code = ("import sys\nsys.modules['torch'] = None  # (not needed here, and slow to import)\nimport weave_tp\n"
            "try:\n    weave_tp.library_path()\nexcept weave_tp.LibraryNotFoundError as e:\n    print(e)\n")
    env = dict(os.environ, WEAVE_LIBRARY=env_library, PYTHONPATH=str(PYTHON_DIR))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_weave_library_is_the_only_place_when_set(tmp_path: Path) -> None:
    out = _import_with(str(tmp_path / "missing.so")).stdout
    assert "WEAVE_LIBRARY" in out and "missing.so (no such file)" in out
    assert "build tree" not in out  # an explicit choice never falls back to another library
    junk = tmp_path / "libweave.so"
    junk.write_text("not a library")
    assert "does not load" in _import_with(str(junk)).stdout


def test_lookup_order_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEAVE_LIBRARY", raising=False)
    where = [w for w, _ in _capi.library_candidates()]
    assert where == ["copy made at install", "build tree", "dynamic loader"]
    assert _capi.library_candidates()[-1][1] == f"libweave.so.{weave_tp.__version__.rsplit('.', 1)[0]}"


def test_results_map_to_exceptions() -> None:
    L = _capi.lib()
    for code in weave_tp.Result:
        assert L.weave_get_error_string(int(code)) != b"unknown result code", code
    assert L.weave_get_error_string(len(weave_tp.Result)) == b"unknown result code"  # WEAVE_NUM_RESULTS
    with pytest.raises(ValueError) as e:
        weave_tp.row_split(-1, 4, 0)
    assert isinstance(e.value, weave_tp.WeaveArgumentError) and e.value.code == weave_tp.Result.INVALID_ARGUMENT
    assert "M -1" in str(e.value) and e.value.call == "weave_row_split"
    err = _capi._error(int(weave_tp.Result.TIMEOUT), "weave_team_sync", "timeout: rank 1 waited for rank 2")
    assert isinstance(err, TimeoutError) and "rank 2" in str(err)
    aborted = _capi._error(int(weave_tp.Result.ABORTED), "weave_team_sync",
                           "rank 3 aborted the team (weave_team_abort)")
    assert isinstance(aborted, weave_tp.WeaveAbortedError) and not isinstance(aborted, TimeoutError)
    assert "rank 3" in str(aborted)
    assert str(_capi._error(int(weave_tp.Result.CUDA), "weave_x", "")) == "weave_x: CUDA error"
    # through pickle (multiprocessing, concurrent.futures): the same class, message and fields
    for err in (err, _capi._error(int(weave_tp.Result.CUDA), "weave_x", ""), _capi._error(99, "weave_y", "odd")):
        back = pickle.loads(pickle.dumps(err))
        assert (type(back), str(back), back.code, back.call, back.detail) == (type(err), str(err), err.code, err.call,
                                                                                 err.detail)


def test_row_split_and_its_closed_form() -> None:
    for world in range(1, 10):
        for M in range(0, 3 * world + 2):
            begin = 0
            for rank in range(world):
                b, rows = weave_tp.row_split(M, world, rank)
                assert (b, rows) == (begin, _capi.rows_of(M, world, rank)), (M, world, rank)
                begin += rows
            assert begin == M
    with pytest.raises(ValueError, match="rank 4"):
        weave_tp.row_split(8, 4, 4)
    with pytest.raises(ValueError, match="M 4294967301 does not fit the C int"):  # not wrapped to M = 5
        weave_tp.row_split(2**32 + 5, 4, 0)


def test_option_names_come_from_the_library() -> None:
    assert _capi.dtype_names() == {"bf16": 0, "fp16": 1, "fp32": 2, "fp8_e4m3": 3}
    assert _capi.strategy_names() == {"auto": 0, "fused": 1, "bulk": 2, "baseline": 3}
    opts = _capi.gemm_rs_options("fp16", b_layout="col", strategy="fused", reduce="atomic", fp32_slots=True,
                                 alpha=2, has_bias=True)
    d = opts.desc()
    assert (d.dtype, d.b_layout, d.strategy, d.reduce, d.fp32_slots, d.alpha, d.has_bias) == (1, 1, 1, 1, 1, 2.0, 1)
    assert hash(opts) == hash(_capi.gemm_rs_options("fp16", b_layout="col", strategy="fused", reduce="atomic",
                                                    fp32_slots=True, alpha=2.0, has_bias=True))
    assert (d.out_dtype, d.scale_mode, d.fp8_accum) == (-1, 0, 0)  # AUTO, no scales, fp32 accumulation
    d = _capi.gemm_rs_options("fp8_e4m3", b_layout="col", out_dtype="fp16", scales="row", fp8_accum="fast").desc()
    assert (d.dtype, d.out_dtype, d.scale_mode, d.fp8_accum) == (3, 1, 2, 1)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"b_layout": "rows"}, ValueError, ["b_layout", "'row', 'col'", "'rows'"]),
    ({"b_layout": 1}, TypeError, ["b_layout", "str"]),
    ({"strategy": "fsued"}, ValueError, ["strategy", "'auto', 'fused', 'bulk', 'baseline'"]),
    ({"reduce": "sum"}, ValueError, ["reduce", "'deterministic', 'atomic'"]),
    ({"fp32_slots": 1}, TypeError, ["fp32_slots", "bool"]),
    ({"alpha": "1"}, TypeError, ["alpha", "float"]),
    ({"alpha": True}, TypeError, ["alpha"]),
    ({"out_dtype": "fp64"}, ValueError, ["out_dtype", "'bf16', 'fp16'"]),
    ({"scales": "column"}, ValueError, ["scales", "'none', 'tensor', 'row'"]),
    ({"fp8_accum": "exact"}, ValueError, ["fp8_accum", "'fp32', 'fast'"]),
])
def test_option_errors_name_the_argument(kwargs: dict, error: type, words: list) -> None:
    with pytest.raises(error) as e:
        _capi.gemm_rs_options("bf16", **kwargs)
    for w in words:
        assert w in str(e.value)
    with pytest.raises(ValueError, match="dtype must be one of 'bf16', 'fp16', 'fp32'"):
        _capi.gemm_rs_options("fp8")


def test_structs_match_the_header(tmp_path: Path) -> None:
    """Every field's offset and every struct's size as the C compiler sees weave.h."""
    cc = shutil.which("cc")
    lib_dir = Path(weave_tp.library_path()).parent
    if cc is None or not (lib_dir / "include" / "weave_version.h").is_file():
        pytest.skip("needs cc and the build tree of the loaded libweave (for weave_version.h)")
    structs = {"weave_gemm_rs_desc_t": _capi._Desc, "weave_gemm_rs_info_t": _capi._Info,
               "weave_ag_gemm_desc_t": _capi._AgDesc, "weave_ag_gemm_info_t": _capi._AgInfo,
               "weave_device_info_t": _capi._DeviceInfo, "weave_unique_id_t": _capi._UniqueId}
    lines = []
    for c_name, py in structs.items():
        lines.append(f'printf("{c_name} size %zu\\n", sizeof({c_name}));')
        for field, _ in py._fields_:
            lines.append(f'printf("{c_name}.{field} %zu\\n", offsetof({c_name}, {field}));')
    src = tmp_path / "layout.c"
    src.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <weave.h>\nint main(void) {\n" +
                   textwrap.indent("\n".join(lines), "  ") + "\n  return 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", f"-I{REPO / 'include'}", f"-I{lib_dir / 'include'}", str(src), "-o", str(exe)],
                   check=True)
    seen = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                               check=True).stdout.splitlines())
    for c_name, py in structs.items():
        assert int(seen[f"{c_name} size"]) == ctypes.sizeof(py), c_name
        for field, _ in py._fields_:
            assert int(seen[f"{c_name}.{field}"]) == getattr(py, field).offset, f"{c_name}.{field}"


def _header_fields(c_name: str) -> list:
    """The field names of `typedef struct {...} c_name;` in include/weave.h, in order."""
    header = re.sub(r"/\*.*?\*/", "", (REPO / "include" / "weave.h").read_text(), flags=re.S)
    body = re.search(r"typedef struct \{([^{}]*)\}\s*" + c_name + r"\s*;", header).group(1)
    names = []
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        declarators = decl.split(",")
        declarators[0] = declarators[0].split()[-1]  # drop the type
        names += [re.match(r"\**\s*(\w+)", d.strip()).group(1) for d in declarators]
    return names


def test_struct_fields_are_the_headers() -> None:
    """The ctypes mirrors list every field of weave.h, in order (no compiler needed)."""
    for c_name, py in (("weave_gemm_rs_desc_t", _capi._Desc), ("weave_gemm_rs_info_t", _capi._Info),
                       ("weave_ag_gemm_desc_t", _capi._AgDesc), ("weave_ag_gemm_info_t", _capi._AgInfo),
                       ("weave_device_info_t", _capi._DeviceInfo), ("weave_unique_id_t", _capi._UniqueId)):
        assert [field for field, _ in py._fields_] == _header_fields(c_name), c_name


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_size_t) != 8 or ctypes.sizeof(ctypes.c_int) != 4
                    or ctypes.alignment(ctypes.c_double) != 8, reason="the sizes below are LP64's (x86-64, aarch64)")
def test_info_layout_by_hand() -> None:
    """weave_gemm_rs_info_t on LP64, worked out by hand (libweave writes sizeof of it: a shorter mirror
    would be overrun). strategy + 8 ints: 9 * 4 = 36, padded to 40 for the size_t; heap_bytes at 40,
    bytes_sent at 48; chosen_by (enum, int) at 56, padded to 64 for the double; choose_ms at 64;
    why[320] at 72, ending at 392; cta_pairs at 392, padded to 400 (the struct's alignment, 8)."""
    info = _capi._Info
    assert (info.heap_bytes.offset, info.bytes_sent.offset) == (40, 48)
    assert (info.chosen_by.offset, info.choose_ms.offset, info.why.offset, info.why.size) == (56, 64, 72, 320)
    assert info.cta_pairs.offset == 392
    assert ctypes.sizeof(info) == 400 and ctypes.alignment(info) == 8


def test_plan_info_from_the_struct() -> None:
    """PlanInfo keeps the fields of 0.3 first, in order (positional users), then the choice's three and
    cta_pairs."""
    names = [f.name for f in dataclasses.fields(_capi.PlanInfo)]
    assert names == ["strategy", "row_begin", "rows", "tile_m", "tile_n", "tiles_total", "tiles_owned", "gemm_blocks",
                     "comm_blocks", "heap_bytes", "bytes_sent", "chosen_by", "choose_ms", "why", "cta_pairs"]
    raw = _capi._Info(strategy=2, row_begin=8, rows=8, tile_m=128, tile_n=128, tiles_total=4, tiles_owned=2,
                      gemm_blocks=100, comm_blocks=32, heap_bytes=1 << 20, bytes_sent=4096, chosen_by=2,
                      choose_ms=12.5, why=b"measured: bulk 0.10 ms, baseline 0.12 ms")
    info = _capi._plan_info(raw)
    assert (info.strategy, info.rows, info.bytes_sent) == ("bulk", 8, 4096)
    assert (info.chosen_by, info.choose_ms, info.why) == ("measurement", 12.5,
                                                          "measured: bulk 0.10 ms, baseline 0.12 ms")
    assert [_capi._plan_info(_capi._Info(chosen_by=v)).chosen_by for v in range(5)] == \
        ["caller", "cache", "measurement", "model", "4"]
    raw.why = b"x" * 319  # the C side NUL-terminates within the 320 bytes
    assert _capi._plan_info(raw).why == "x" * 319
    assert not info.cta_pairs and _capi._plan_info(_capi._Info(cta_pairs=1)).cta_pairs is True


def test_team_argument_errors() -> None:
    uid = weave_tp.get_unique_id()
    assert len(uid) == 128 and uid != weave_tp.get_unique_id()
    with pytest.raises(ValueError, match="unique_id"):
        weave_tp.Team(b"short", 1, 0, 0)
    with pytest.raises(TypeError, match="world"):
        weave_tp.Team(uid, 1.0, 0, 0)
    with pytest.raises(ValueError, match="rank 4294967296 does not fit"):  # not wrapped to rank 0
        weave_tp.Team(uid, 1, 2**32, 0)
    with pytest.raises(weave_tp.WeaveArgumentError):
        weave_tp.Team(uid, 2, 2, 0)  # rank outside the world: the bootstrap refuses it


def test_team_of_one_rank() -> None:
    """A team forms on a GPU and is destroyed; without one, the bootstrap forms and team creation
    fails with NO_DEVICE (and leaves nothing behind: the next one can form)."""
    for _ in range(2):
        try:
            team = weave_tp.Team(weave_tp.get_unique_id(), 1, 0, 0)
        except weave_tp.WeaveError as e:
            assert e.code == weave_tp.Result.NO_DEVICE and "device" in str(e)
            continue
        assert (team.world, team.rank) == (1, 0) and team.device_info()["sm_count"] > 0
        team.destroy()
        team.destroy()  # a second destroy does nothing


def test_bootstrap_of_two_threads() -> None:
    """Two ranks join one unique id from two threads (the GIL is released in the calls): both reach team
    creation, which needs a device."""
    if _has_gpu():
        pytest.skip("with a GPU the process tests (test_gpu.py) cover teams of several ranks")
    uid, codes = weave_tp.get_unique_id(), {}

    def rank_main(rank: int) -> None:
        try:
            weave_tp.Team(uid, 2, rank, 0)
        except weave_tp.WeaveError as e:
            codes[rank] = e.code

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert codes == {0: weave_tp.Result.NO_DEVICE, 1: weave_tp.Result.NO_DEVICE}


def test_without_torch_the_torch_names_say_so() -> None:
    code = ("import sys; sys.modules['torch'] = None\nimport weave_tp\ntry:\n    weave_tp.gemm_rs\n"
            "except ImportError as e:\n    print(e)\nfrom weave_tp import *\nprint(row_split(5, 2, 1))\n")
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == ["weave_tp.gemm_rs needs PyTorch, which is not installed (the library layer "
                                       "works without)", "(3, 2)"], out.stderr


def test_pip_install_records_the_library(tmp_path: Path) -> None:
    """`pip install ./python` (the in-tree backend: nothing from the network) copies the library it was
    built against into the package, and the installed package loads that copy."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("no pip for this interpreter")
    env = dict(os.environ, WEAVE_LIBRARY=weave_tp.library_path(), PIP_NO_INDEX="1")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path / "site"),
                    str(PYTHON_DIR)], env=env, check=True, capture_output=True, timeout=300)
    copy = tmp_path / "site" / "weave_tp" / "_lib" / "libweave.so"
    assert copy.read_bytes() == Path(weave_tp.library_path()).read_bytes()
    env = {k: v for k, v in os.environ.items() if k not in ("WEAVE_LIBRARY", "PYTHONPATH")}
    code = "import sys; sys.modules['torch'] = None\nimport weave_tp\nprint(weave_tp.__file__, weave_tp.library_path())"
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=str(tmp_path / "site")), cwd=tmp_path,
                         capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert out == [str(tmp_path / "site" / "weave_tp" / "__init__.py"), str(copy)]


def test_wheel_without_a_library_is_refused(tmp_path: Path) -> None:
    """A wheel built where no libweave.so can be found fails, saying how to go on, instead of making a
    package that cannot run; WEAVE_LIBRARY=none asks for one that looks for the library at run time."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("no pip for this interpreter")
    src = tmp_path / "src" / "python"  # no ../build/libweave.so beside this copy
    shutil.copytree(PYTHON_DIR, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "_lib"))
    env = {k: v for k, v in os.environ.items() if k != "WEAVE_LIBRARY"}
    env["PIP_NO_INDEX"] = "1"
    wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "out"), str(src)]
    out = subprocess.run(wheel, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "no libweave.so to package" in out.stdout + out.stderr, out.stdout + out.stderr
    assert not list(tmp_path.glob("out/*.whl"))
    out = subprocess.run(wheel, env=dict(env, WEAVE_LIBRARY="none"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    [whl] = (tmp_path / "out").glob("*.whl")
    assert whl.name == f"weave_tp-{weave_tp.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        assert "weave_tp/__init__.py" in names and not any(n.endswith(".so") for n in names), names
        assert "Name: weave-tp\n" in z.read(f"weave_tp-{weave_tp.__version__}.dist-info/METADATA").decode()


def test_ag_gemm_options() -> None:
    """AllGather + GEMM's options by name: enum values, errors naming the argument, hashable keys."""
    o = _capi.ag_gemm_options("bf16", b_layout="row", strategy="fused", alpha=0.5, has_bias=True)
    assert (o.dtype, o.b_layout, o.strategy, o.alpha, o.has_bias) == (0, 0, 1, 0.5, True)
    d = o.desc()
    assert d.struct_size == ctypes.sizeof(_capi._AgDesc) and (d.gemm_blocks, d.comm_blocks) == (0, 0)
    assert hash(o) == hash(_capi.ag_gemm_options("bf16", b_layout="row", strategy="fused", alpha=0.5, has_bias=True))
    with pytest.raises(ValueError, match="b_layout"):
        _capi.ag_gemm_options("bf16", b_layout="diag")
    with pytest.raises(ValueError, match="strategy"):
        _capi.ag_gemm_options("fp16", strategy="fastest")
    with pytest.raises(TypeError, match="alpha"):
        _capi.ag_gemm_options("fp32", alpha="1")
