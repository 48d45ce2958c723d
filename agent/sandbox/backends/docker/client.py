"""The Docker engine: one shared client, and bounded retries of its transient errors."""

from __future__ import annotations

import threading
from typing import Optional

import docker
import docker.errors
import requests
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from results.errors import UserError


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        return True
    if isinstance(exc, docker.errors.APIError) and not isinstance(exc, docker.errors.NotFound):
        code = exc.status_code or 0
        return code >= 500 or code == 409
    return False


docker_retry = retry(
    retry=retry_if_exception(_transient),
    stop=stop_after_attempt(4),
    wait=wait_random_exponential(multiplier=0.2, max=3),
    reraise=True,
)

_client: Optional[docker.DockerClient] = None
_client_lock = threading.Lock()


def docker_client() -> docker.DockerClient:
    """One shared client. A missing engine is a user error with the fix."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                client = docker.from_env(timeout=120, max_pool_size=64)
                client.ping()
            except docker.errors.DockerException as e:
                raise UserError(
                    f"no Docker engine answers ({str(e).splitlines()[0][:120]}): start one "
                    "(`make setup` installs and starts it as root, or `sudo dockerd &`)"
                ) from None
            _client = client
        return _client
