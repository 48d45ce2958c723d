"""Sandboxes as Kubernetes pods through kubernetes-sigs/agent-sandbox (`eval --sandbox k8s`).

Per (image, limits) the pool makes one SandboxTemplate (the hardened pod, and the NetworkPolicy the
controller applies) and one SandboxWarmPool of started pods; each sandbox is a SandboxClaim on that
warm pool, with lifecycle.shutdownTime as a hard TTL (shutdownPolicy Delete), so nothing outlives a
harness that died. A sandbox is used once: releasing it deletes its claim (and so its pod).

The pod's main process is a small launcher: it listens on SERVER_PORT, takes exactly one connection
that presents the run's token, then becomes agent/sandbox/server.py with that connection as its
stdin/stdout. So the harness reaches the same command server as on Docker, by pod IP (the fast
path). Where pod IPs are not reachable (a driver outside the cluster) each sandbox gets one
persistent exec stream instead (`kubectl exec -i`), running the same server over the stream.

The Kubernetes API is called over plain HTTPS with `requests` (credentials from KUBECONFIG, or the
pod's service account): five REST calls do not justify the `kubernetes` client, which would also
upgrade python-dateutil under pandas.

One concept per module:
    manifests.py  the objects: the hardened pod and its launcher, the NetworkPolicy, the SandboxTemplate,
                  SandboxWarmPool and SandboxClaim (render_*), the API group and the server's port
    api.py        K8sApi: the REST calls, with credentials from a kubeconfig or a service account
    sandbox.py    K8sPod: the Host of a claimed pod's ServedSandbox (a socket); the exec stream (kubectl_exec)
    pool.py       K8sSandboxPool: claims, connecting (pod IP or exec), warm sandboxes, close(); and the
                  runner's entry points k8s_images() and k8s_pool()
    cleanup.py    prune_k8s(): what a harness that died left in the namespace
"""

from agent.sandbox.k8s.api import K8sApi
from agent.sandbox.k8s.cleanup import prune_k8s
from agent.sandbox.k8s.manifests import (
    CONTAINER,
    EXTENSIONS_API,
    LAUNCHER,
    SANDBOX_API,
    SERVER_PORT,
    network_policy,
    pod_spec,
    render_claim,
    render_template,
    render_warm_pool,
)
from agent.sandbox.k8s.pool import K8sSandboxPool, k8s_images, k8s_pool
from agent.sandbox.k8s.sandbox import EXEC_SERVER, K8sPod, kubectl_exec

__all__ = [
    "CONTAINER",
    "EXEC_SERVER",
    "EXTENSIONS_API",
    "LAUNCHER",
    "SANDBOX_API",
    "SERVER_PORT",
    "K8sApi",
    "K8sPod",
    "K8sSandboxPool",
    "k8s_images",
    "k8s_pool",
    "kubectl_exec",
    "network_policy",
    "pod_spec",
    "prune_k8s",
    "render_claim",
    "render_template",
    "render_warm_pool",
]
