"""Shared fixtures. Docker tests use the real engine and the real base image.

Every test that uses the `image` fixture (or is marked `docker`) needs a Docker engine: it gets the `docker`
marker, and it is skipped with one clear reason when no engine answers.

`make test` runs the suite on several pytest-xdist workers (`-n 3 --dist loadgroup`); `xdist_groups` below
says which tests must share one worker. Everything else is written to run beside other harness runs on one
machine anyway: containers, networks and snapshot images carry their run's id, `prune` takes a run id (or only
dead processes' orphans), and images and the model cache are built by atomic rename or by content hash.
"""

import asyncio
import functools
import os
import signal
import sys
from pathlib import Path

import pytest

# Task fixtures carry their own hidden tests (Terminal-Bench test_outputs.py, ...): data, not our suite.
collect_ignore_glob = ["fixtures/*"]

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@functools.lru_cache(maxsize=1)
def docker_problem() -> str:
    """ "" when a Docker engine answers, else why not (asked once per session)."""
    try:
        import docker

        docker.from_env(timeout=10).ping()
        return ""
    except Exception as e:  # any failure to reach the engine: no engine for these tests
        return (
            f"no Docker engine answers ({type(e).__name__}): start one (sudo dockerd &) to run Docker tests"
        )


def _terminated(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def one_torch_thread() -> None:
    """Several workers on 2 cores, each with torch's default of one OpenMP thread per core, spin-wait on each
    other: measured beside a busy machine, bench/hint_forms.py --smoke took 181 s with the default threads and
    39 s with one. The environment reaches the benches, `harness` runs and Ray nodes the tests start."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # already imported (by a plugin): it read the variable before we set it
        sys.modules["torch"].set_num_threads(1)


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker: one CPU thread for torch, here and in children
        one_torch_thread()
    # A stopped test run (`timeout make test`, a CI cancel: SIGTERM) ends as Ctrl-C does, so that fixtures and
    # `finally` blocks stop the servers and clusters they started (tests/ray_cluster.py also has a reaper).
    signal.signal(signal.SIGTERM, _terminated)
    # Registered here, not in pyproject.toml: a change there makes `make` reinstall the environment.
    config.addinivalue_line(
        "markers",
        "docker: needs a Docker engine (skipped when none answers); "
        "given to every test that uses the `image` fixture",
    )
    config.addinivalue_line(
        "markers",
        "suite: checks a whole task suite (every oracle and null agent); left out of `make test-fast`",
    )


# Tests that start a local Ray cluster (tests/ray_cluster.py) run one at a time on one worker: each cluster is
# a head and a worker node of its own, and test_cluster.py's is a module fixture (made once: the group keeps
# the module on one worker).
RAY_MODULES = ("tests/evaluators/run/test_cluster.py", "tests/test_teardown.py")
# Modules whose module fixture is cheap to make again on each worker, and whose tests are too many and too
# slow for one: the self-test's catalogue (its runner caches only one honest control run per task kind).
SPREAD_MODULES = ("tests/adversarial/test_adversarial_cases.py",)


def xdist_group(item) -> str:
    """The worker group a test must run in under `-n`, or "" where any worker will do."""
    module = item.nodeid.split("::")[0]
    if module in RAY_MODULES:
        return "ray"
    if module in SPREAD_MODULES:
        return ""
    # A module- or session-scoped fixture of a test module (a model loaded, a server or receiver started, a
    # suite imported) is made once per worker: its module's tests that use it share one worker, so it is made
    # once, as in a serial run. The conftest's own (`image`) are cheap lookups and need no group.
    info = getattr(item, "_fixtureinfo", None)  # pytest's record of the fixtures a test function uses
    for defs in info.name2fixturedefs.values() if info else ():
        if defs[-1].scope in ("module", "session") and defs[-1].baseid.endswith(".py"):
            return defs[-1].baseid
    return ""


# tryfirst: xdist's own hook turns the xdist_group markers into worker groups, and a conftest hook runs after
# it otherwise (it is registered first), so no group was ever made: module fixtures (a model, a suite) were
# made on each worker and the Ray tests ran side by side.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "image" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
        group = xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_runtest_setup(item):
    if item.get_closest_marker("docker") and docker_problem():
        pytest.skip(docker_problem())


@pytest.fixture(scope="session")
def image() -> str:
    """The base sandbox image id (built by `make test`'s setup; built here if missing)."""
    from agent.sandbox.backends.docker.images import ensure_base_image

    return ensure_base_image(log=lambda m: None)


def run(coro):
    """Runs a coroutine to completion (tests are plain functions; no asyncio plugin)."""
    return asyncio.run(coro)


@pytest.fixture
def flaky():
    """Makes misbehaving HTTP servers (tests.helpers.FlakyServer) and closes them after the test."""
    from tests.helpers import FlakyServer

    servers = []

    def make(script):
        servers.append(FlakyServer(script))
        return servers[-1]

    yield make
    for s in servers:
        s.close()
