"""The suite's xdist workers run torch on one thread, and so do the processes they start (tests/conftest.py:
several workers with a thread per core each spin-wait on each other on a 2-core machine)."""

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

PROBE = "HARNESS_TEST_WORKER_PROBE"


@pytest.mark.skipif(not os.environ.get(PROBE), reason="run by test_xdist_workers_use_one_torch_thread")
def test_probe():
    import torch

    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == 1
    child = "import torch; print(torch.get_num_threads())"
    assert subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip() == "1"


def test_xdist_workers_use_one_torch_thread():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env[PROBE] = "1"
    probe = f"{__file__}::test_probe"
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider", probe]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
