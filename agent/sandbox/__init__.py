"""The one sandbox API: a hardened, single-use Docker container, and a warm pool of them.

Each container's main process is agent/sandbox/server.py (a ~1 ms command runner on the
attached stdin/stdout), so commands need neither `docker exec` nor a network. Every container is
used for one attempt only, then destroyed: nothing written in one attempt is seen by the next.

    pool = SandboxPool(run_id="r1")
    async with pool.sandbox(image, Limits()) as sb:
        await sb.put_files({"a.txt": b"hi"})
        r = await sb.exec("cat a.txt", timeout=10)

One concept per module:
    client.py     the Docker client, and retries of the engine's transient errors
    labels.py     the labels on what we make (run, pool, process, task), for cleanup
    transport.py  request/reply with the command server: framing, ids, the watchdog, SandboxDied
    changes.py    Changes, and change capture (agent/sandbox/capture.py inside, the diff outside)
    container.py  Limits, container creation and hardening, the Sandbox API (exec, files, kill)
    pool.py       SandboxPool: warm containers per (image, limits), bounded, single use
    network.py    per-pool networks of networked tasks, and their firewall rule
    cleanup.py    prune(): containers, networks and images of a run, a pool or a dead process
    images.py     the sandbox images (base, task, Harbor), and what every image provides (uid, paths)
    native.py     sandboxes for any image: the static helper (helper.c), Harbor's contract
    k8s/          the same sandboxes as Kubernetes pods (agent-sandbox), one module per concept
    server.py, capture.py, helper.c   run inside the container
"""

from agent.sandbox.changes import CAPTURE_SOURCE, CaptureError, Changes
from agent.sandbox.cleanup import prune
from agent.sandbox.client import docker_client, docker_retry
from agent.sandbox.container import ExecResult, FilesNotWritten, Limits, Sandbox, create_sandbox
from agent.sandbox.images import AGENT_UID, PATH, WORKSPACE, content_hash
from agent.sandbox.labels import LABEL_PID, LABEL_POOL, LABEL_RUN, LABEL_TASK
from agent.sandbox.network import create_network, remove_network
from agent.sandbox.pool import SandboxPool
from agent.sandbox.transport import SERVER_SOURCE, SandboxDied, SandboxUnresponsive

__all__ = [
    "AGENT_UID",
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
    "Limits",
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
