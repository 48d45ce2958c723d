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
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import secrets
import socket
import subprocess
import tempfile
import time
import uuid
from collections import deque
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from results.errors import InfraError, UserError
from agent.sandbox.container import Limits, Sandbox
from agent.sandbox.images import AGENT_UID, PATH, WORKSPACE, content_hash
from agent.sandbox.labels import LABEL_POOL, LABEL_RUN
from agent.sandbox.pool import SandboxPool
from agent.sandbox.transport import SERVER_SOURCE, SandboxDied

SANDBOX_API = ("agents.x-k8s.io", "v1beta1")
EXTENSIONS_API = ("extensions.agents.x-k8s.io", "v1beta1")
SERVER_PORT = 7071
CONTAINER = "sandbox"

# The pod's main process (root, with only SETUID/SETGID/KILL): one authenticated connection, then the
# command server on it. The environment it was given is popped, so commands never see the token.
LAUNCHER = r'''
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
'''
# The same server over an exec stream (the fallback): the container's environment comes again with exec.
EXEC_SERVER = ("import os\nfor k in ('HARNESS_PORT', 'HARNESS_TOKEN', 'HARNESS_LAUNCHER'): os.environ.pop(k, None)\n"
               "exec(os.environ.pop('HARNESS_SERVER'))")


# -- manifests ----------------------------------------------------------------------------------------

def pod_spec(image: str, limits: Limits, token: str, runtime_class: Optional[str] = None) -> dict[str, Any]:
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
        "containers": [{
            "name": CONTAINER,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-u", "-I", "-c", "import os; exec(os.environ.pop('HARNESS_LAUNCHER'))"],
            "workingDir": WORKSPACE,
            "env": [{"name": "HARNESS_LAUNCHER", "value": LAUNCHER},
                    {"name": "HARNESS_SERVER", "value": SERVER_SOURCE},
                    {"name": "HARNESS_TOKEN", "value": token},
                    {"name": "HARNESS_PORT", "value": str(SERVER_PORT)},
                    {"name": "HARNESS_UID", "value": str(AGENT_UID)},
                    {"name": "HOME", "value": "/tmp"}, {"name": "PATH", "value": PATH},
                    {"name": "LANG", "value": "C.UTF-8"}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
            "ports": [{"containerPort": SERVER_PORT, "protocol": "TCP"}],
            "readinessProbe": {"tcpSocket": {"port": SERVER_PORT}, "periodSeconds": 1},
            "resources": {"requests": {"cpu": cpu, "memory": memory},
                          "limits": {"cpu": cpu, "memory": memory,
                                     "ephemeral-storage": f"{limits.workspace_mb + limits.tmp_mb + 64}Mi"}},
            "securityContext": {
                "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,  # the server; commands: AGENT_UID
                "allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": limits.read_only,
                # as on Docker (agent/sandbox/container.py create_sandbox): for the server and the harness's own root
                # commands (capture, the grader's runner); a command of the sandbox user gets none
                "capabilities": {"drop": ["ALL"], "add": ["SETUID", "SETGID", "KILL", "DAC_OVERRIDE"]},
            },
            "volumeMounts": [{"name": "workspace", "mountPath": WORKSPACE}, {"name": "tmp", "mountPath": "/tmp"},
                             {"name": "grader", "mountPath": "/grader"}],
        }],
        "volumes": [{"name": "workspace", "emptyDir": {"medium": "Memory", "sizeLimit": f"{limits.workspace_mb}Mi"}},
                    {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": f"{limits.tmp_mb}Mi"}},
                    {"name": "grader", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
    }
    if runtime_class or limits.runtime:
        spec["runtimeClassName"] = runtime_class or limits.runtime  # gVisor / Kata
    return spec


def network_policy(limits: Limits) -> dict[str, Any]:
    """Ingress: the command server's port only. Egress: none, unless the task allows the internet."""
    egress = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}] if limits.network else []
    return {"ingress": [{"ports": [{"protocol": "TCP", "port": SERVER_PORT}]}], "egress": egress}


def _meta(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def render_template(name: str, namespace: str, image: str, limits: Limits, token: str, labels: dict[str, str],
                    runtime_class: Optional[str] = None) -> dict[str, Any]:
    return {"apiVersion": "/".join(EXTENSIONS_API), "kind": "SandboxTemplate",
            "metadata": _meta(name, namespace, labels),
            "spec": {"podTemplate": {"metadata": {"labels": dict(labels)},
                                     "spec": pod_spec(image, limits, token, runtime_class)},
                     "networkPolicyManagement": "Managed",
                     "networkPolicy": network_policy(limits)}}


def render_warm_pool(name: str, namespace: str, template: str, replicas: int, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "/".join(EXTENSIONS_API), "kind": "SandboxWarmPool",
            "metadata": _meta(name, namespace, labels),
            "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}}}


def render_claim(name: str, namespace: str, warm_pool: str, shutdown_time: datetime,
                 labels: dict[str, str]) -> dict[str, Any]:
    """A claim on the warm pool; at shutdown_time the controller deletes it and its sandbox (hard TTL)."""
    return {"apiVersion": "/".join(EXTENSIONS_API), "kind": "SandboxClaim",
            "metadata": _meta(name, namespace, labels),
            "spec": {"warmPoolRef": {"name": warm_pool},
                     "lifecycle": {"shutdownTime": _rfc3339(shutdown_time), "shutdownPolicy": "Delete"},
                     "additionalPodMetadata": {"labels": dict(labels)}}}


def _rfc3339(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the API ------------------------------------------------------------------------------------------

class K8sApi:
    """The few REST calls the pool makes, with credentials from a kubeconfig or a service account."""

    def __init__(self, server: str, namespace: str = "default", *, token: Optional[str] = None,
                 verify: Any = True, cert: Any = None):
        import requests
        self.server, self.namespace = server.rstrip("/"), namespace
        self.http = requests.Session()
        self.http.verify, self.http.cert = verify, cert
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"
        self._files: list[str] = []

    @classmethod
    def from_environment(cls, namespace: Optional[str] = None) -> "K8sApi":
        path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube/config")
        sa = Path("/var/run/secrets/kubernetes.io/serviceaccount")
        if not Path(path).exists() and (sa / "token").exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
            host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            return cls(f"https://{host}:{port}", namespace or (sa / "namespace").read_text().strip(),
                       token=(sa / "token").read_text().strip(), verify=str(sa / "ca.crt"))
        return cls.from_kubeconfig(path, namespace)

    @classmethod
    def from_kubeconfig(cls, path: str, namespace: Optional[str] = None) -> "K8sApi":
        """Server, CA and credentials (token, or client certificate and key) of the current context."""
        try:
            import yaml
        except ModuleNotFoundError:
            raise UserError("--sandbox k8s reads the kubeconfig with PyYAML: pip install 'harness[k8s]'") from None
        try:
            cfg = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise UserError(f"--sandbox k8s: no kubeconfig at {path}: set KUBECONFIG") from None
        except Exception as e:  # noqa: BLE001 -- any parse error: name the file
            raise UserError(f"{path}: not a kubeconfig ({str(e).splitlines()[0][:150]})") from None

        def named(kind: str, name: str) -> dict:
            for entry in cfg.get(kind) or []:
                if entry.get("name") == name:
                    return entry.get(kind[:-1]) or {}
            raise UserError(f"{path}: {kind[:-1]} {name!r} of the current context is not defined")
        ctx_name = cfg.get("current-context")
        if not ctx_name:
            raise UserError(f"{path}: no current-context: pick one with `kubectl config use-context NAME`")
        ctx = named("contexts", ctx_name)
        cluster, user = named("clusters", ctx.get("cluster", "")), named("users", ctx.get("user", ""))
        api = cls(cluster["server"], namespace or ctx.get("namespace") or "default", token=user.get("token"))
        if cluster.get("insecure-skip-tls-verify"):
            api.http.verify = False
        elif cluster.get("certificate-authority-data") or cluster.get("certificate-authority"):
            api.http.verify = api._file(cluster, "certificate-authority")
        if user.get("client-certificate-data") or user.get("client-certificate"):
            api.http.cert = (api._file(user, "client-certificate"), api._file(user, "client-key"))
        if user.get("exec") or user.get("auth-provider"):
            raise UserError(f"{path}: user {ctx.get('user')!r} authenticates with an exec plugin; give the context "
                            "a token or a client certificate (e.g. a service account token)")
        return api

    def _file(self, entry: dict, key: str) -> str:
        if entry.get(key):
            return entry[key]
        f = tempfile.NamedTemporaryFile(prefix="harness-k8s-", delete=False)
        f.write(base64.b64decode(entry[f"{key}-data"]))
        f.close()
        self._files.append(f.name)
        return f.name

    def _url(self, api: tuple[str, str], plural: str, name: str = "") -> str:
        base = f"{self.server}/apis/{api[0]}/{api[1]}" if api[0] else f"{self.server}/api/{api[1]}"
        return f"{base}/namespaces/{self.namespace}/{plural}" + (f"/{name}" if name else "")

    def _call(self, method: str, url: str, **kw) -> Optional[dict]:
        import requests
        try:
            r = self.http.request(method, url, timeout=30, **kw)
        except requests.RequestException as e:
            raise InfraError(f"kubernetes API {self.server}: {e}") from None
        if r.status_code == 404 and method in ("GET", "DELETE"):
            return None
        if r.status_code in (401, 403):
            raise UserError(f"kubernetes API {self.server} refused {method} {url.split('/apis/')[-1]}: "
                            f"{r.status_code}; give the kubeconfig's user rights on agent-sandbox objects")
        if r.status_code == 404 and "/apis/" in url:
            raise UserError(f"kubernetes API {self.server}: no {url.split('/apis/')[1].split('/namespaces')[0]}: "
                            "install agent-sandbox (its CRDs and controller) in the cluster")
        if r.status_code >= 300:
            raise InfraError(f"kubernetes API {method} {url}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else {}

    def create(self, api: tuple[str, str], plural: str, body: dict) -> dict:
        return self._call("POST", self._url(api, plural), json=body)

    def get(self, api: tuple[str, str], plural: str, name: str) -> Optional[dict]:
        return self._call("GET", self._url(api, plural, name))

    def delete(self, api: tuple[str, str], plural: str, name: str) -> None:
        self._call("DELETE", self._url(api, plural, name), json={"propagationPolicy": "Background"})

    def delete_all(self, api: tuple[str, str], plural: str, selector: str) -> None:
        self._call("DELETE", self._url(api, plural), params={"labelSelector": selector})

    def pod(self, name: str) -> Optional[dict]:
        return self.get(("", "v1"), "pods", name)

    def close(self) -> None:
        self.http.close()
        for f in self._files:
            with contextlib.suppress(OSError):
                os.unlink(f)


# -- one sandbox --------------------------------------------------------------------------------------

class K8sSandbox(Sandbox):
    """A claimed pod whose command server is reached over a plain socket (TCP to the pod IP, or the local
    end of an exec stream). Everything above that socket is Sandbox's own code."""

    multiplexed = False  # the server's stdout alone, not Docker's attach stream

    def __init__(self, sock: socket.socket, name: str, image: str, limits: Limits, pool_key: tuple,
                 on_kill: Callable[[], None], pod_status: Callable[[], Optional[dict]],
                 helper: Optional[subprocess.Popen] = None):
        self.container = None
        self.id = name
        self.image, self.limits, self.pool_key = image, limits, pool_key
        self._baseline = None
        self._initial_files: dict[str, bytes] = {}
        self._on_kill, self._pod_status, self._helper = on_kill, pod_status, helper
        self._open_channel(sock)

    def died_of_oom(self, wait: float = 5.0) -> bool:
        end = time.monotonic() + wait
        while True:
            try:
                pod = self._pod_status() or {}
            except Exception:  # noqa: BLE001 -- no answer: not provably the agent
                return False
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
                if term:
                    return term.get("reason") == "OOMKilled"
            if time.monotonic() >= end:
                return False
            time.sleep(0.2)

    def kill(self):
        """Close the stream and delete the claim (the controller deletes the pod); safe to call twice."""
        self.dead = True
        with contextlib.suppress(Exception):
            self._sock.close()
        if self._helper is not None:
            with contextlib.suppress(Exception):
                self._helper.kill()
                self._helper.wait(timeout=5)
        on_kill, self._on_kill = self._on_kill, None
        if on_kill is not None:
            with contextlib.suppress(Exception):
                on_kill()


def kubectl_exec(namespace: str, pod: str) -> list[str]:
    return ["kubectl", "exec", "-i", "-n", namespace, pod, "-c", CONTAINER, "--",
            "python3", "-u", "-I", "-c", EXEC_SERVER]


# -- the pool -----------------------------------------------------------------------------------------

class K8sSandboxPool:
    """SandboxPool's interface over agent-sandbox: acquire() hands out a fresh claimed sandbox (from a
    client-side queue of `warm` pre-claimed ones per image and limits), release() deletes it."""

    def __init__(self, run_id: Optional[str] = None, warm: int = 2, max_containers: int = 8, *,
                 api: Optional[K8sApi] = None, images: Optional[dict[str, str]] = None,
                 runtime_class: Optional[str] = None, ttl: float = 3 * 3600, connect: str = "auto",
                 exec_argv: Callable[[str, str], list[str]] = kubectl_exec, claim_timeout: float = 300):
        if connect not in ("auto", "pod-ip", "exec"):
            raise UserError(f"k8s connect mode {connect!r}: use auto, pod-ip or exec")
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.pool_id = uuid.uuid4().hex[:12]
        self.api = api or K8sApi.from_environment()
        self.images = dict(images or {})  # local image id -> the reference the cluster pulls
        self.runtime_class, self.ttl, self.connect = runtime_class, ttl, connect
        self.exec_argv, self.claim_timeout = exec_argv, claim_timeout
        self.warm = warm
        self.token = secrets.token_hex(16)
        self.labels = {LABEL_RUN: _label_value(self.run_id), LABEL_POOL: self.pool_id}
        self._slots = asyncio.Semaphore(max(1, max_containers))
        self._pools: dict[tuple, str] = {}  # (image, limits) -> warm pool name
        self._pools_lock = asyncio.Lock()
        self._ready: dict[tuple, deque] = {}
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._pod_ip_ok: Optional[bool] = None if connect == "auto" else connect == "pod-ip"

    # objects ----------------------------------------------------------------------
    async def _warm_pool(self, image: str, limits: Limits) -> str:
        key = (image, limits)
        async with self._pools_lock:
            if key not in self._pools:
                ref = self.images.get(image, image)
                name = f"harness-{self.pool_id[:8]}-{content_hash(ref, repr(limits))[:8]}"
                tpl = render_template(name, self.api.namespace, ref, limits, self.token, self.labels,
                                      self.runtime_class)
                await asyncio.to_thread(self.api.create, EXTENSIONS_API, "sandboxtemplates", tpl)
                pool = render_warm_pool(name, self.api.namespace, name, self.warm, self.labels)
                await asyncio.to_thread(self.api.create, EXTENSIONS_API, "sandboxwarmpools", pool)
                self._pools[key] = name
            return self._pools[key]

    async def _claim(self, image: str, limits: Limits) -> K8sSandbox:
        pool = await self._warm_pool(image, limits)
        name = f"{pool}-{secrets.token_hex(4)}"
        body = render_claim(name, self.api.namespace, pool, datetime.now(timezone.utc) + timedelta(seconds=self.ttl),
                            self.labels)
        await asyncio.to_thread(self.api.create, EXTENSIONS_API, "sandboxclaims", body)
        try:
            pod, ip = await self._wait_claimed(name)
            sock, helper = await asyncio.to_thread(self._connect, pod, ip)
            sb = K8sSandbox(sock, name, image, limits, (image, limits),
                            on_kill=lambda: self.api.delete(EXTENSIONS_API, "sandboxclaims", name),
                            pod_status=lambda: self.api.pod(pod), helper=helper)
            await asyncio.to_thread(sb.wait_ready)
            return sb
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.api.delete, EXTENSIONS_API, "sandboxclaims", name)
            raise

    async def _wait_claimed(self, claim: str) -> tuple[str, str]:
        """The claimed sandbox's pod name and IP, once the controller has bound one."""
        end = time.monotonic() + self.claim_timeout
        delay = 0.05
        while time.monotonic() < end:
            obj = await asyncio.to_thread(self.api.get, EXTENSIONS_API, "sandboxclaims", claim) or {}
            sb = (obj.get("status") or {}).get("sandbox") or {}
            if sb.get("name") and sb.get("podIPs"):
                return sb["name"], sb["podIPs"][0]
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        raise InfraError(f"sandbox claim {claim} was not bound within {self.claim_timeout:.0f}s")

    def _connect(self, pod: str, ip: str) -> tuple[socket.socket, Optional[subprocess.Popen]]:
        if self._pod_ip_ok is not False:
            end = time.monotonic() + 15
            while True:
                try:
                    sock = socket.create_connection((ip, SERVER_PORT), timeout=5)
                    sock.sendall(self.token.encode() + b"\n")
                    sock.settimeout(None)
                    self._pod_ip_ok = True
                    return sock, None
                except ConnectionRefusedError:  # reachable, not listening yet
                    if time.monotonic() > end:
                        raise SandboxDied(f"pod {pod}: nothing listens on {ip}:{SERVER_PORT}") from None
                    time.sleep(0.1)
                except OSError as e:
                    if self._pod_ip_ok:  # reachable before: this pod is the problem
                        raise SandboxDied(f"pod {pod} at {ip}:{SERVER_PORT}: {e}") from None
                    self._pod_ip_ok = False  # pod IPs are not routable from here: exec streams from now on
                    break
        mine, theirs = socket.socketpair()
        helper = subprocess.Popen(self.exec_argv(self.api.namespace, pod), stdin=theirs, stdout=theirs,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        return mine, helper

    # SandboxPool's interface -------------------------------------------------------------------
    async def acquire(self, image: str, limits: Limits = Limits(), task: str = "pool") -> Sandbox:
        if self._closed:
            raise InfraError("the k8s sandbox pool is closed")
        await self._slots.acquire()
        try:
            key = (image, limits)
            ready = self._ready.setdefault(key, deque())
            while ready:
                sb = ready.popleft()
                if not sb.dead:
                    self._refill(key)
                    return sb
            sb = await self._claim(image, limits)
            self._refill(key)
            return sb
        except BaseException:
            self._slots.release()
            raise

    async def release(self, sb: Sandbox):
        sb.dead = True
        self._slots.release()
        self._spawn(asyncio.to_thread(sb.kill))

    sandbox = SandboxPool.sandbox  # the same acquire/release context as the Docker pool

    def _refill(self, key):
        """Keeps up to `warm` claimed, connected sandboxes ready: a claim takes ~1-3 s on a real cluster."""
        ready = self._ready.setdefault(key, deque())
        want = self.warm - len(ready) - sum(1 for t in self._tasks if getattr(t, "harness_key", None) == key)
        for _ in range(max(0, want)):
            t = self._spawn(self._prefetch(key))
            t.harness_key = key

    async def _prefetch(self, key):
        try:
            sb = await self._claim(*key)
        except Exception:  # noqa: BLE001 -- an optimisation: acquire() claims one itself if needed
            return
        if self._closed:
            await asyncio.to_thread(sb.kill)
        else:
            self._ready.setdefault(key, deque()).append(sb)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self):
        """Deletes every claim, warm pool and template this pool made."""
        self._closed = True
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for q in self._ready.values():
            for sb in q:
                await asyncio.to_thread(sb.kill)
        self._ready.clear()
        selector = f"{LABEL_POOL}={self.pool_id}"
        for plural in ("sandboxclaims", "sandboxwarmpools", "sandboxtemplates"):
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.api.delete_all, EXTENSIONS_API, plural, selector)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


def _label_value(s: str) -> str:
    """A valid label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    v = "".join(c if c.isalnum() or c in "._-" else "-" for c in s)[:63].strip("._-")
    return v or "x"


def prune_k8s(api: K8sApi) -> None:
    """Deletes every harness claim, warm pool and template in the namespace: what a harness that died left
    (claims expire by themselves at shutdownTime; warm pools would keep their pods running)."""
    for plural in ("sandboxclaims", "sandboxwarmpools", "sandboxtemplates"):
        api.delete_all(EXTENSIONS_API, plural, LABEL_POOL)  # a bare key selects objects that have the label


# -- what `eval --sandbox k8s` needs -----------------------------------------------------------------

def k8s_images(tasks: list, options: dict) -> dict[str, str]:
    """task id -> the image the pods run: the base image, pushed to a registry the cluster pulls from."""
    image = options.get("image") or os.environ.get("HARNESS_K8S_IMAGE")
    if not image:
        raise UserError("--sandbox k8s needs the sandbox image in a registry the cluster can pull: build it "
                        "(`harness images build`), push it, and pass --k8s-image REGISTRY/IMAGE:TAG")
    own = [t for t in tasks if t.dockerfile or getattr(t, "harbor", None) is not None]
    if own:
        raise UserError(f"task {own[0].id} has its own image (environment/Dockerfile or a Harbor image): --sandbox k8s "
                        "runs only tasks on the base image for now; leave such tasks out (--glob) or run them on Docker")
    return {t.id: image for t in tasks}


def k8s_pool(options: dict) -> Callable[..., K8sSandboxPool]:
    """A SandboxPool-compatible factory for the runner, with the cluster's settings bound."""
    import functools
    api = K8sApi.from_environment(options.get("namespace"))
    return functools.partial(K8sSandboxPool, api=api, runtime_class=options.get("runtime_class"),
                             connect=options.get("connect", "auto"))
