"""Sandbox backends by name (`harness eval --sandbox NAME`): where the sandboxes of a run are made.

A backend is one module that defines BACKEND (a Backend: its pool, and the images its sandboxes run) and one
line in BACKENDS below; its sandboxes and pool implement agent/sandbox/contract.py, and
tests/agent/sandbox/test_sandbox_contract.py runs the contract's behaviours against it. Modules are
imported on first use, so a backend's client (Kubernetes' REST calls, ...) costs nothing to a run that
does not choose it.

Harbor-native sandboxes (native.py: any image, the static helper) are not a backend of their own: a task's
SandboxSpec carry a NativeSpec and the Docker backend makes them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional

from results.errors import UserError

BACKENDS: dict[str, str] = {  # name -> the module that defines BACKEND
    "docker": "agent.sandbox.pool",
    "k8s": "agent.sandbox.k8s.pool",
}


@dataclass(frozen=True)
class Backend:
    name: str
    # From the run's sandbox options (e.g. --k8s-namespace): a factory of pools, called as
    # Pool(run_id=, warm=, max_containers=). Bad settings (a kubeconfig, ...) fail here, before a run folder.
    pool: Callable[[dict], Callable[..., object]]
    # (tasks, options) -> task id -> the image its sandboxes run. None: each task's own image, built on this
    # host's Docker engine (evaluators/run/task_images.py).
    images: Optional[Callable[[list, dict], dict[str, str]]] = None
    with_cluster: bool = True  # combines with `--cluster` (a Ray cluster of Docker hosts)


def sandbox_backend(name: str) -> Backend:
    """The backend registered as `name`; a UserError naming the choices for any other."""
    module = BACKENDS.get(name)
    if module is None:
        raise UserError(f"sandbox backend {name!r}: choose one of {', '.join(sorted(BACKENDS))}")
    backend = importlib.import_module(module).BACKEND
    assert backend.name == name, f"{module} registers {backend.name!r}, not {name!r}"
    return backend
