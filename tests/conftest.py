"""Shared fixtures. Docker tests use the real engine and the real base image."""
import asyncio
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def image() -> str:
    """The base sandbox image id (built by `make test`'s setup; built here if missing)."""
    from agent.images import ensure_base_image
    return ensure_base_image(log=lambda m: None)


def run(coro):
    """Runs a coroutine to completion (tests are plain functions; no asyncio plugin)."""
    return asyncio.run(coro)
