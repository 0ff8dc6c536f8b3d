"""Tests of the weave package. They import weave_tp from this source tree (python/), whatever is
installed. libweave comes from WEAVE_LIBRARY, else ../../build/libweave.so (scripts/test.sh sets
WEAVE_LIBRARY to its build). Three kinds, each skipping cleanly when what it needs is missing:
  test_capi.py      the library layer, without torch (runs in CI)
  test_torch.py     argument checks, fake tensors and torch.compile tracing, without a GPU (needs torch)
  test_gpu.py       every rank's results on the GPU, through torchrun (needs torch and a GPU)
"""

import os
import sys
import tempfile
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR))
os.environ.setdefault("WEAVE_DEBUG", "NONE")  # the failures these tests provoke on purpose stay quiet
# AUTO plans cache what they measure: in a folder of this run's, not the user's ~/.cache
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="weave-pytest-cache-")
os.environ.pop("WEAVE_TUNE_FILE", None)


def library_built() -> bool:
    """Whether there is a libweave to test: WEAVE_LIBRARY (then it must load), or the build tree's."""
    return bool(os.environ.get("WEAVE_LIBRARY")) or (REPO / "build" / "libweave.so").is_file()


needs_library = pytest.mark.skipif(not library_built(), reason="no libweave.so (built only with the CUDA toolkit); "
                                   "set WEAVE_LIBRARY or build into build/")
