"""The one sandbox API: the Sandbox and SandboxPool contract (contract.py), its one implementation over a
command server (served.py), and the backends that make sandboxes, chosen by name (backends.py): Docker (a
hardened, single-use container; a warm pool of them) and Kubernetes (k8s/).

Each sandbox's main process is agent/sandbox/server.py (a ~1 ms command runner on the
attached stdin/stdout), so commands need neither `docker exec` nor a network. Every sandbox is
used for one attempt only, then destroyed: nothing written in one attempt is seen by the next.

    pool = DockerPool(run_id="r1")        # the Docker backend's pool (DockerPool)
    async with pool.sandbox(image, SandboxSpec()) as sb:
        await sb.put_files({"a.txt": b"hi"})
        r = await sb.exec("cat a.txt", timeout=10)

One concept per module:
    contract.py   the contract: Sandbox, SandboxPool, ExecResult and Stream (typed command results)
    backends.py   the backends by name ("docker", "k8s"): a new one is a module and a line there
    served.py     ServedSandbox, the one Sandbox implementation: a command server on a Host (the backend's)
    client.py     the Docker client, and retries of the engine's transient errors
    labels.py     the labels on what we make (run, pool, process, task), for cleanup
    transport.py  CommandChannel: request/reply with the command server, framing, the watchdog, SandboxDied
    changes.py    Changes, and change capture (agent/sandbox/capture.py inside, the diff outside)
    container.py  SandboxSpec, container creation and hardening, the Docker Host (DockerContainer)
    pool.py       DockerPool: warm containers per (image, limits), bounded, single use
    network.py    per-pool networks of networked tasks, and their firewall rule
    cleanup.py    prune(): containers, networks and images of a run, a pool or a dead process
    images.py     the sandbox images (base, task, prebuilt), and what every image provides (uid, paths)
    native.py     sandboxes for any image: the static helper (helper.c), Harbor's contract
    k8s/          the same sandboxes as Kubernetes pods (agent-sandbox), one module per concept
    server.py, capture.py, helper.c   run inside the container
"""

from agent.sandbox.backends import BACKENDS, Backend, sandbox_backend
from agent.sandbox.changes import CAPTURE_SOURCE, CaptureError, Changes
from agent.sandbox.cleanup import prune
from agent.sandbox.client import docker_client, docker_retry
from agent.sandbox.container import SandboxSpec, create_sandbox
from agent.sandbox.contract import ExecResult, Sandbox, SandboxPool, Stream
from agent.sandbox.images import AGENT_UID, PATH, WORKSPACE, content_hash
from agent.sandbox.labels import LABEL_PID, LABEL_POOL, LABEL_RUN, LABEL_TASK
from agent.sandbox.network import create_network, remove_network
from agent.sandbox.pool import DockerPool
from agent.sandbox.served import FilesNotWritten, ServedSandbox
from agent.sandbox.transport import SERVER_SOURCE, SandboxDied, SandboxUnresponsive

__all__ = [
    "AGENT_UID",
    "BACKENDS",
    "Backend",
    "DockerPool",
    "ServedSandbox",
    "Stream",
    "sandbox_backend",
    "CAPTURE_SOURCE",
    "LABEL_PID",
    "LABEL_POOL",
    "LABEL_RUN",
    "LABEL_TASK",
    "PATH",
    "SERVER_SOURCE",
    "WORKSPACE",
    "CaptureError",
    "Changes",
    "ExecResult",
    "FilesNotWritten",
    "SandboxSpec",
    "Sandbox",
    "SandboxDied",
    "SandboxPool",
    "SandboxUnresponsive",
    "content_hash",
    "create_network",
    "create_sandbox",
    "docker_client",
    "docker_retry",
    "prune",
    "remove_network",
]
