"""The one sandbox API, backend-neutral: the Sandbox and SandboxPool contract and its types (contract.py), its
one implementation over a command server (served.py), and the registry of the backends that make sandboxes
(registry.py), each one folder under backends/: docker/ (hardened, single-use containers through the Docker
SDK), k8s/ (Kubernetes pods), and the others registry.py registers.

Each sandbox's main process is agent/sandbox/server.py (a ~1 ms command runner on the attached
stdin/stdout), so commands need neither `docker exec` nor a network. Every sandbox is used for one attempt
only, then destroyed: nothing written in one attempt is seen by the next.

    backend = sandbox_backend("docker")                 # registry.py: by name, plugin or module:BACKEND
    async with backend.pool()(run_id="r1") as pool:      # the backend's SandboxPool
        async with pool.sandbox(image, SandboxSpec()) as sb:
            await sb.put_files({"a.txt": b"hi"})
            r = await sb.exec("cat a.txt", timeout=10)

This package imports no backend: what is Docker's is imported from agent.sandbox.backends.docker.<module>.

One concept per module:
    contract.py   the contract: Sandbox, SandboxPool, SandboxSpec and NativeSpec (what a sandbox is made
                  with), ExecResult, Stream and Changes (typed results), what every image provides
    registry.py   the backends by name, their options and capabilities (Backend); plugins; a new backend is
                  a folder under backends/ and a line there
    served.py     ServedSandbox, the one Sandbox implementation: a command server on a Host (the backend's)
    transport.py  CommandChannel: request/reply with the command server, framing, the watchdog, SandboxDied
    changes.py    change capture (agent/sandbox/capture.py inside, the comparison outside)
    warm.py       WarmPool: warm sandboxes per (image, limits), bounded, single use, pruned at exit
    labels.py     the labels on what a backend makes (run, pool, process, task), for prune; content_hash
    firewall.py   the host's firewall rule for a pool's own bridge network
    backends/     one folder per backend (registry.py lists them), one module per concept inside
    server.py, capture.py, helper.c   run inside the sandbox
"""

from agent.sandbox.changes import CAPTURE_SOURCE, CaptureError
from agent.sandbox.contract import (
    AGENT_UID,
    PATH,
    WORKSPACE,
    Changes,
    ExecResult,
    NativeSpec,
    Sandbox,
    SandboxPool,
    SandboxSpec,
    Stream,
)
from agent.sandbox.labels import LABEL_PID, LABEL_POOL, LABEL_RUN, LABEL_TASK, content_hash
from agent.sandbox.registry import CAPABILITIES, DEFAULT, Backend, sandbox_backend
from agent.sandbox.served import FilesNotWritten, ServedSandbox
from agent.sandbox.transport import SERVER_SOURCE, SandboxDied, SandboxUnresponsive

__all__ = [
    "AGENT_UID",
    "CAPABILITIES",
    "CAPTURE_SOURCE",
    "DEFAULT",
    "LABEL_PID",
    "LABEL_POOL",
    "LABEL_RUN",
    "LABEL_TASK",
    "PATH",
    "SERVER_SOURCE",
    "WORKSPACE",
    "Backend",
    "CaptureError",
    "Changes",
    "ExecResult",
    "FilesNotWritten",
    "NativeSpec",
    "Sandbox",
    "SandboxDied",
    "SandboxPool",
    "SandboxSpec",
    "SandboxUnresponsive",
    "ServedSandbox",
    "Stream",
    "content_hash",
    "sandbox_backend",
]
