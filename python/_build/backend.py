"""In-tree PEP 517 build backend of the weave-tp package (see pyproject.toml): wheels of weave_tp/ plus a
copy of libweave.so (WEAVE_LIBRARY if set, else ../build/libweave.so; a wheel without either is refused
unless WEAVE_LIBRARY=none: the package then looks for an installed libweave at run time), editable
installs pointing at this folder, and sdists. Standard library only."""

import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent.parent  # python/
PYPROJECT = (HERE / "pyproject.toml").read_text()
VERSION = re.search(r'^version = "([^"]+)"', PYPROJECT, re.M).group(1)
DIST = f"weave_tp-{VERSION}"  # the distribution weave-tp, normalized for file names
SUMMARY = re.search(r'^description = "([^"]+)"', PYPROJECT, re.M).group(1)
METADATA = (f"Metadata-Version: 2.1\nName: weave-tp\nVersion: {VERSION}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.9\nProvides-Extra: test\nRequires-Dist: pytest; extra == \"test\"\n")


def _library() -> Optional[Path]:
    env = os.environ.get("WEAVE_LIBRARY")
    if env == "none":
        return None
    if env:
        if not Path(env).is_file():
            raise SystemExit(f"weave: WEAVE_LIBRARY={env} is not a file")
        return Path(env).resolve()
    built = HERE.parent / "build" / "libweave.so"
    if not built.is_file():
        raise SystemExit(f"weave-tp: no libweave.so to package: {built} does not exist. Build the library first "
                         "(cmake -S . -B build && cmake --build build, from the repository's root), or set "
                         "WEAVE_LIBRARY to a libweave.so, or WEAVE_LIBRARY=none for a package that finds an installed "
                         "libweave at run time")
    return built.resolve()


def _sources() -> List[Tuple[str, bytes]]:
    return [(p.relative_to(HERE).as_posix(), p.read_bytes()) for p in sorted((HERE / "weave_tp").rglob("*"))
            if p.is_file() and p.suffix in (".py", ".typed")]


def _package_files() -> List[Tuple[str, bytes]]:
    files = _sources()
    lib = _library()
    if lib is None:
        print("weave-tp: WEAVE_LIBRARY=none: no libweave.so packaged; it is looked for at run time")
    else:
        print(f"weave-tp: packaging {lib} as weave_tp/_lib/libweave.so")
        files.append(("weave_tp/_lib/libweave.so", lib.read_bytes()))
    return files


def _write_wheel(directory: str, files: List[Tuple[str, bytes]], tag: str) -> str:
    info = f"{DIST}.dist-info"
    files = files + [(f"{info}/METADATA", METADATA.encode()),
                     (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: weave-tp\nRoot-Is-Purelib: "
                                       f"{'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n".encode())]
    record = io.StringIO()
    name = f"{DIST}-{tag}.whl"
    with zipfile.ZipFile(Path(directory) / name, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            z.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.write(f"{arcname},sha256={digest},{len(data)}\n")
        record.write(f"{info}/RECORD,,\n")
        z.writestr(f"{info}/RECORD", record.getvalue())
    return name


def build_wheel(wheel_directory: str, config_settings: Optional[Dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    files = _package_files()
    has_lib = any(arcname.endswith(".so") for arcname, _ in files)
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return _write_wheel(wheel_directory, files, f"py3-none-{platform}" if has_lib else "py3-none-any")


def build_editable(wheel_directory: str, config_settings: Optional[Dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    # the source folder on sys.path: the package then finds the build tree's library (../build)
    return _write_wheel(wheel_directory, [("weave_tp_editable.pth", f"{HERE}\n".encode())], "py3-none-any")


def build_sdist(sdist_directory: str, config_settings: Optional[Dict] = None) -> str:
    name = f"{DIST}.tar.gz"
    with tarfile.open(Path(sdist_directory) / name, "w:gz") as t:
        for rel in ["pyproject.toml", "_build/backend.py"] + [a for a, _ in _sources()]:
            t.add(HERE / rel, f"{DIST}/{rel}")
        pkg_info = METADATA.encode()
        ti = tarfile.TarInfo(f"{DIST}/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name


def get_requires_for_build_wheel(config_settings: Optional[Dict] = None) -> List[str]:
    return []


get_requires_for_build_editable = get_requires_for_build_sdist = get_requires_for_build_wheel
