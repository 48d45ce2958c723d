"""How `make test` runs the suite on xdist workers (tests/conftest.py): tests that share a module fixture run
on one worker (the fixture is made once), and every worker runs torch on one thread, as do the processes it
starts (several workers with a thread per core each spin-wait on each other on a 2-core machine)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

PROBE = "HARNESS_TEST_WORKER_PROBE"  # the folder the probes write to; set only by the tests below
probing = pytest.mark.skipif(not os.environ.get(PROBE), reason="run by the tests below, on xdist workers")


@pytest.fixture(scope="module")
def made_once():
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def note(name: str, made_once: str) -> None:
    Path(os.environ[PROBE], name).write_text(f"{os.environ.get('PYTEST_XDIST_WORKER')} {made_once}")


@probing
@pytest.mark.parametrize("n", range(4))
def test_probe_shares_a_fixture(n, made_once):
    note(f"shared{n}", made_once)


@probing
def test_probe_threads():
    import torch

    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == 1
    child = "import torch; print(torch.get_num_threads())"
    assert subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip() == "1"


def probe(tmp_path: Path, name: str, workers: int) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env[PROBE] = str(tmp_path)
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--dist", "loadgroup"]
    cmd += ["-p", "no:cacheprovider", "-k", name, __file__]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout + done.stderr


def test_xdist_workers_use_one_torch_thread(tmp_path):
    probe(tmp_path, "test_probe_threads", 1)


def test_tests_sharing_a_module_fixture_run_on_one_worker(tmp_path):
    """xdist's loadgroup renames items from the groups' markers; with pytest 9.2 the rename is lost and every
    module fixture (a loaded model, an imported suite) was made on each worker (pyproject: pytest<9.2)."""
    probe(tmp_path, "test_probe_shares_a_fixture", 3)
    seen = {(tmp_path / f"shared{n}").read_text() for n in range(4)}
    assert len(seen) == 1, seen  # one worker, which made the fixture itself
    worker, maker = seen.pop().split()
    assert worker == maker
