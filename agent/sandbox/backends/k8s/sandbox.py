"""One sandbox on Kubernetes: a claimed pod (K8sPod, the Host under a ServedSandbox) whose command server is
reached over a plain socket, and the exec stream used where pod IPs are not reachable (kubectl_exec,
EXEC_SERVER)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from typing import Callable, Optional

from agent.sandbox.backends.k8s.manifests import CONTAINER

# The same server over an exec stream (the fallback): the container's environment comes again with exec.
EXEC_SERVER = (
    "import os\nfor k in ('HARNESS_PORT', 'HARNESS_TOKEN', 'HARNESS_LAUNCHER'): os.environ.pop(k, None)\n"
    "exec(os.environ.pop('HARNESS_SERVER'))"
)


class K8sPod:
    """The Kubernetes backend's Host (agent/sandbox/served.py): a claimed pod whose command server is reached
    over a plain socket (TCP to the pod IP, or the local end of an exec stream `helper`)."""

    multiplexed = False  # the server's stdout alone, not Docker's attach stream

    def __init__(
        self,
        on_kill: Callable[[], None],
        pod_status: Callable[[], Optional[dict]],
        helper: Optional[subprocess.Popen] = None,
    ):
        self._on_kill, self._pod_status, self.helper = on_kill, pod_status, helper

    def died_of_oom(self, wait: float = 5.0) -> bool:
        end = time.monotonic() + wait
        while True:
            try:
                pod = self._pod_status() or {}
            except Exception:
                return False
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
                    "terminated"
                )
                if term:
                    return term.get("reason") == "OOMKilled"
            if time.monotonic() >= end:
                return False
            time.sleep(0.2)

    def remove(self):
        """Ends the exec stream and deletes the claim (the controller deletes the pod); safe to call twice."""
        if self.helper is not None:
            with contextlib.suppress(Exception):
                self.helper.kill()
                self.helper.wait(timeout=5)
        on_kill, self._on_kill = self._on_kill, None
        if on_kill is not None:
            with contextlib.suppress(Exception):
                on_kill()


def kubectl_exec(namespace: str, pod: str) -> list[str]:
    return [
        "kubectl",
        "exec",
        "-i",
        "-n",
        namespace,
        pod,
        "-c",
        CONTAINER,
        "--",
        "python3",
        "-u",
        "-I",
        "-c",
        EXEC_SERVER,
    ]
