"""The Kubernetes backend (`--sandbox k8s`): sandboxes as pods through kubernetes-sigs/agent-sandbox.

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

This package defines only what the registry reads (K8sOptions, BACKEND: no capability of
agent/sandbox/registry.py; it names its images, the base image in a registry) and imports nothing heavy.

One concept per module:
    manifests.py  the objects: the hardened pod and its launcher, the NetworkPolicy, the SandboxTemplate,
                  SandboxWarmPool and SandboxClaim (render_*), the API group and the server's port
    api.py        K8sApi: the REST calls, with credentials from a kubeconfig or a service account
    sandbox.py    K8sPod: the Host of a claimed pod's ServedSandbox (a socket); the exec stream (kubectl_exec)
    pool.py       K8sSandboxPool: claims, connecting (pod IP or exec), warm sandboxes, close(); and the
                  backend's k8s_images() and k8s_pool()
    cleanup.py    prune_k8s() and the backend's prune(): what a harness that died left in the namespace
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from agent.sandbox.registry import Backend


@dataclass(frozen=True)
class K8sOptions:
    """`--sandbox k8s`'s settings, given as --k8s-NAME."""

    image: Optional[str] = field(
        default=None,
        metadata={"help": "with --sandbox k8s: the base image in a registry the cluster pulls from"},
    )
    namespace: Optional[str] = field(
        default=None, metadata={"help": "with --sandbox k8s (default: the kubeconfig context's)"}
    )
    runtime_class: Optional[str] = field(
        default=None, metadata={"help": "with --sandbox k8s: e.g. gvisor or kata-qemu"}
    )
    connect: str = field(
        default="auto",
        metadata={
            "help": "with --sandbox k8s: reach sandboxes by pod IP, or by one kubectl exec stream each",
            "choices": ["auto", "pod-ip", "exec"],
        },
    )


def _pool(options: K8sOptions):
    from agent.sandbox.backends.k8s.pool import k8s_pool

    return k8s_pool(options)


def _images(tasks: list, options: K8sOptions) -> dict[str, str]:
    from agent.sandbox.backends.k8s.pool import k8s_images

    return k8s_images(tasks, options)


def _prune(options: K8sOptions, orphans_only: bool) -> str:
    from agent.sandbox.backends.k8s.cleanup import prune

    return prune(options, orphans_only)


BACKEND = Backend("k8s", make_pool=_pool, options=K8sOptions, name_images=_images, clean=_prune)
