"""weave's PyTorch face on the GPU: gpu_worker.py's cases at 1, 2 and 4 ranks and the example at 4, each
a torchrun job (one process a rank; on one GPU all processes share it, side by side under a private
MPS daemon that scripts/launch.sh starts when none runs). Skipped without torch or a GPU.
WEAVE_GPU_TEST_WORLDS="1 2 4" picks the worlds; WEAVE_GPU_TEST_CASES the worker's cases."""

import os
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, REPO, needs_library

torch = pytest.importorskip("torch")

pytestmark = [needs_library, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

WORLDS = [int(w) for w in os.environ.get("WEAVE_GPU_TEST_WORLDS", "1 2 4").split()]


def torchrun(world: int, script: str, *args: str, timeout: int = 420) -> str:
    """Runs `script` as a torchrun job of `world` processes under scripts/launch.sh's MPS daemon (the
    launcher's own rank variables are cleared: torchrun sets the workers'; so is its
    CUDA_MODULE_LOADING=EAGER, meant for ranks that are threads, and slow for torch)."""
    cmd = [str(REPO / "scripts" / "launch.sh"), "-n", "1", "--mps", "--",
           "env", "-u", "RANK", "-u", "LOCAL_RANK", "-u", "WORLD_SIZE", "-u", "LOCAL_WORLD_SIZE",
           "-u", "MASTER_ADDR", "-u", "MASTER_PORT", "-u", "CUDA_MODULE_LOADING",
           sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world), script, *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PYTHON_DIR), os.environ.get("PYTHONPATH")])))
    # Each rank compiles (torch.compile) on its own, and the first compiled call waits for the slowest
    # rank's compilation: a wider bound than weave's default 10 s
    env.setdefault("WEAVE_TIMEOUT_MS", "120000")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    print(out.stdout)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-4000:]}\n{out.stderr[-8000:]}"
    return out.stdout


@pytest.mark.parametrize("world", WORLDS)
def test_worker(world: int) -> None:
    cases = os.environ.get("WEAVE_GPU_TEST_CASES", "").split()
    out = torchrun(world, str(PYTHON_DIR / "tests" / "gpu_worker.py"), *cases)
    assert "gpu_worker: all cases passed" in out


def test_example() -> None:
    out = torchrun(4, str(REPO / "examples" / "row_parallel_linear.py"), "--tokens", "2000", "--in-features", "4096",
                   "--out-features", "2048", "--iters", "20", "--warmup", "5")
    assert "# check: OK" in out
    assert "weave fused (plan: fused" in out and "F.linear + dist.reduce_scatter_tensor" in out


@pytest.mark.parametrize("world", [max(WORLDS)])
def test_tp_mlp_example(world: int) -> None:
    out = torchrun(world, str(REPO / "examples" / "tp_mlp.py"), "--tokens", "1024", "--hidden", "1024",
                   "--ffn", "2048", "--iters", "10", "--warmup", "3")
    assert "# check (forward and backward against float64 on the CPU): OK" in out


@pytest.mark.parametrize("world", [max(WORLDS)])
def test_parallelize_block_example(world: int) -> None:
    out = torchrun(world, str(REPO / "examples" / "parallelize_block.py"), "--tokens", "256", "--hidden", "256",
                   "--heads", "8")
    assert "# check (forward, input and parameter gradients against the unparallelized block): OK" in out
