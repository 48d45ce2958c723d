"""The agent-sandbox objects a pool makes, as plain dicts: the hardened pod (pod_spec) with its launcher,
its NetworkPolicy, and the SandboxTemplate, SandboxWarmPool and SandboxClaim around them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from agent.sandbox.contract import AGENT_UID, PATH, WORKSPACE, SandboxSpec
from agent.sandbox.transport import SERVER_SOURCE

SANDBOX_API = ("agents.x-k8s.io", "v1beta1")
EXTENSIONS_API = ("extensions.agents.x-k8s.io", "v1beta1")
SERVER_PORT = 7071
CONTAINER = "sandbox"

# The pod's main process (root, with only SETUID/SETGID/KILL): one authenticated connection, then the
# command server on it. The environment it was given is popped, so commands never see the token.
LAUNCHER = r"""
import hmac, os, socket
port = int(os.environ.pop("HARNESS_PORT")); token = os.environ.pop("HARNESS_TOKEN").encode()
source = os.environ.pop("HARNESS_SERVER")
for path, mode in (("/grader", 0o700), ("/tmp", 0o1777), ("/workspace", 0o777)):
    try:
        os.chmod(path, mode)  # emptyDir volumes start 0777 and root-owned: /grader is root's alone
    except OSError:
        pass
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", port)); ls.listen(8)
while True:
    conn, _ = ls.accept()
    conn.settimeout(10)
    try:
        line = b""
        while not line.endswith(b"\n") and len(line) < 256:
            chunk = conn.recv(1)
            if not chunk:
                break
            line += chunk
    except OSError:
        line = b""
    if hmac.compare_digest(line.strip(), token):
        break
    conn.close()
ls.close()  # one client for the pod's life
conn.settimeout(None)
os.dup2(conn.fileno(), 0); os.dup2(conn.fileno(), 1)
exec(compile(source, "sandbox_server", "exec"), {"__name__": "__main__"})
"""


def pod_spec(
    image: str, limits: SandboxSpec, token: str, runtime_class: Optional[str] = None
) -> dict[str, Any]:
    """The hardened pod: what create_sandbox does on Docker, in Kubernetes terms. Commands run as uid
    AGENT_UID (the server drops to it); the server keeps only SETUID/SETGID/KILL/DAC_OVERRIDE; no privilege
    escalation, read-only root, size-limited memory-backed /workspace, /tmp and /grader, CPU and
    memory limits, no service-account token, no service links."""
    cpu = f"{int(limits.cpus * 1000)}m"
    memory = f"{limits.memory_mb}Mi"
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",  # the server exits when its client leaves: the pod is done
        "terminationGracePeriodSeconds": 0,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": [
                    "python3",
                    "-u",
                    "-I",
                    "-c",
                    "import os; exec(os.environ.pop('HARNESS_LAUNCHER'))",
                ],
                "workingDir": WORKSPACE,
                "env": [
                    {"name": "HARNESS_LAUNCHER", "value": LAUNCHER},
                    {"name": "HARNESS_SERVER", "value": SERVER_SOURCE},
                    {"name": "HARNESS_TOKEN", "value": token},
                    {"name": "HARNESS_PORT", "value": str(SERVER_PORT)},
                    {"name": "HARNESS_UID", "value": str(AGENT_UID)},
                    {"name": "HOME", "value": "/tmp"},
                    {"name": "PATH", "value": PATH},
                    {"name": "LANG", "value": "C.UTF-8"},
                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                ],
                "ports": [{"containerPort": SERVER_PORT, "protocol": "TCP"}],
                "readinessProbe": {"tcpSocket": {"port": SERVER_PORT}, "periodSeconds": 1},
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory},
                    "limits": {
                        "cpu": cpu,
                        "memory": memory,
                        "ephemeral-storage": f"{limits.workspace_mb + limits.tmp_mb + 64}Mi",
                    },
                },
                "securityContext": {
                    "runAsUser": 0,
                    "runAsGroup": 0,
                    "runAsNonRoot": False,  # the server; commands: AGENT_UID
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "readOnlyRootFilesystem": limits.read_only,
                    # as on Docker (backends/docker/sandbox.py create_sandbox): for the server and the
                    # harness's own root commands (capture, the grader's runner); a command of the sandbox
                    # user gets none
                    "capabilities": {"drop": ["ALL"], "add": ["SETUID", "SETGID", "KILL", "DAC_OVERRIDE"]},
                },
                "volumeMounts": [
                    {"name": "workspace", "mountPath": WORKSPACE},
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "grader", "mountPath": "/grader"},
                ],
            }
        ],
        "volumes": [
            {"name": "workspace", "emptyDir": {"medium": "Memory", "sizeLimit": f"{limits.workspace_mb}Mi"}},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": f"{limits.tmp_mb}Mi"}},
            {"name": "grader", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        ],
    }
    if runtime_class or limits.runtime:
        spec["runtimeClassName"] = runtime_class or limits.runtime  # gVisor / Kata
    return spec


def network_policy(limits: SandboxSpec) -> dict[str, Any]:
    """Ingress: the command server's port only. Egress: none, unless the task allows the internet."""
    egress = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}] if limits.network else []
    return {"ingress": [{"ports": [{"protocol": "TCP", "port": SERVER_PORT}]}], "egress": egress}


def _meta(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def render_template(
    name: str,
    namespace: str,
    image: str,
    limits: SandboxSpec,
    token: str,
    labels: dict[str, str],
    runtime_class: Optional[str] = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "/".join(EXTENSIONS_API),
        "kind": "SandboxTemplate",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "podTemplate": {
                "metadata": {"labels": dict(labels)},
                "spec": pod_spec(image, limits, token, runtime_class),
            },
            "networkPolicyManagement": "Managed",
            "networkPolicy": network_policy(limits),
        },
    }


def render_warm_pool(
    name: str, namespace: str, template: str, replicas: int, labels: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "/".join(EXTENSIONS_API),
        "kind": "SandboxWarmPool",
        "metadata": _meta(name, namespace, labels),
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    }


def render_claim(
    name: str, namespace: str, warm_pool: str, shutdown_time: datetime, labels: dict[str, str]
) -> dict[str, Any]:
    """A claim on the warm pool; at shutdown_time the controller deletes it and its sandbox (hard TTL)."""
    return {
        "apiVersion": "/".join(EXTENSIONS_API),
        "kind": "SandboxClaim",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "warmPoolRef": {"name": warm_pool},
            "lifecycle": {"shutdownTime": _rfc3339(shutdown_time), "shutdownPolicy": "Delete"},
            "additionalPodMetadata": {"labels": dict(labels)},
        },
    }


def _rfc3339(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
