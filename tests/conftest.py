"""Shared fixtures. Docker tests use the real engine and the real base image.

Every test that uses the `image` fixture (or is marked `docker`) needs a Docker engine: it gets the `docker`
marker, and it is skipped with one clear reason when no engine answers.
"""

import asyncio
import functools
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


def pytest_configure(config):
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


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "image" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)


def pytest_runtest_setup(item):
    if item.get_closest_marker("docker") and docker_problem():
        pytest.skip(docker_problem())


@pytest.fixture(scope="session")
def image() -> str:
    """The base sandbox image id (built by `make test`'s setup; built here if missing)."""
    from agent.sandbox.images import ensure_base_image

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
