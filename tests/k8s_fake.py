"""A fake Kubernetes API server with an agent-sandbox controller whose pods are Docker containers.

Real HTTP (the backend's own REST client talks to it), real objects (stored as posted, checked for the
fields the CRDs require), and real pods: a claimed sandbox is a container started from the claim's
template's pod spec -- its image, command, environment, user, capabilities, read-only root,
memory-backed volumes, CPU and memory limits -- on Docker's bridge, so the backend reaches the
command server by "pod IP" exactly as in a cluster. What it does not do: enforce NetworkPolicy
(checked in the manifest goldens), schedule, or pull images.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent.sandbox.backends.docker.client import docker_client

_PATH = re.compile(
    r"^/apis?/(?:(?P<group>[^/]+)/)?(?P<version>v1(?:beta1)?)/namespaces/(?P<ns>[^/]+)/"
    r"(?P<plural>[a-z]+)(?:/(?P<name>[^/?]+))?(?:\?(?P<query>.*))?$"
)
LABEL = "harness.fake-k8s"


def _size(q: str) -> int:
    return int(q.rstrip("Mi"))


class FakeCluster:
    def __init__(self, namespace: str = "default"):
        self.namespace = namespace
        self.objects: dict[tuple[str, str], dict] = {}  # (plural, name) -> object
        self.log: list[tuple[str, str, str]] = []  # (method, plural, name)
        self.lock = threading.Lock()
        self.id = str(id(self))
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, code: int, body=None):
                data = json.dumps(body if body is not None else {}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self):
                m = _PATH.match(self.path)
                if not m or m["ns"] != outer.namespace:
                    self._reply(404, {"kind": "Status", "code": 404})
                    return None
                return m

            def do_POST(self):
                m = self._route()
                if m:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    code, out = outer.create(m["plural"], body)
                    self._reply(code, out)

            def do_GET(self):
                m = self._route()
                if m:
                    obj = outer.get(m["plural"], m["name"])
                    self._reply(200 if obj else 404, obj or {"kind": "Status", "code": 404})

            def do_DELETE(self):
                m = self._route()
                if m:
                    if self.headers.get("Content-Length"):
                        self.rfile.read(int(self.headers["Content-Length"]))
                    if m["name"]:
                        found = outer.delete(m["plural"], m["name"])
                        self._reply(200 if found else 404)
                    else:
                        sel = dict(p.split("=", 1) for p in (m["query"] or "").split("&") if "=" in p)
                        key, eq, value = sel.get("labelSelector", "").replace("%3D", "=").partition("=")
                        outer.delete_matching(m["plural"], key, value if eq else None)
                        self._reply(200)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    # -- the API and the controller ------------------------------------------------------------------
    REQUIRED = {
        "sandboxtemplates": ("SandboxTemplate", ["podTemplate"]),
        "sandboxwarmpools": ("SandboxWarmPool", ["sandboxTemplateRef"]),
        "sandboxclaims": ("SandboxClaim", ["warmPoolRef"]),
    }

    def create(self, plural: str, body: dict) -> tuple[int, dict]:
        kind, required = self.REQUIRED.get(plural, (None, []))
        if (
            kind is None
            or body.get("kind") != kind
            or body.get("apiVersion") != "extensions.agents.x-k8s.io/v1beta1"
        ):
            return 400, {"message": f"bad kind/apiVersion for {plural}"}
        missing = [f for f in required if f not in body.get("spec", {})]
        if missing:
            return 422, {"message": f"spec.{missing[0]}: Required value"}
        name = body["metadata"]["name"]
        with self.lock:
            if (plural, name) in self.objects:
                return 409, {"message": "AlreadyExists"}
            self.objects[(plural, name)] = body
            self.log.append(("POST", plural, name))
        if plural == "sandboxclaims":
            shutdown = body["spec"].get("lifecycle", {}).get("shutdownTime")
            if shutdown:
                datetime.strptime(shutdown, "%Y-%m-%dT%H:%M:%SZ")  # RFC 3339, as the CRD's date-time format
            threading.Thread(target=self._bind, args=(name,), daemon=True).start()
        return 201, body

    def get(self, plural: str, name: str):
        with self.lock:
            if plural == "pods":
                return self._pod(name)
            return self.objects.get((plural, name))

    def delete(self, plural: str, name: str) -> bool:
        with self.lock:
            obj = self.objects.pop((plural, name), None)
            self.log.append(("DELETE", plural, name))
        if obj is not None and plural == "sandboxclaims":
            self._remove_pod(((obj.get("status") or {}).get("sandbox") or {}).get("name"))
        return obj is not None

    def delete_matching(self, plural: str, key: str, value: str) -> None:
        with self.lock:
            names = [
                n
                for (p, n), o in self.objects.items()
                if p == plural
                and key in o["metadata"].get("labels", {})
                and (value is None or o["metadata"]["labels"][key] == value)
            ]
        for n in names:
            self.delete(plural, n)

    def _bind(self, claim: str) -> None:
        """The controller: a pod from the warm pool's template, then the claim's status names it."""
        with self.lock:
            c = self.objects[("sandboxclaims", claim)]
            pool = self.objects[("sandboxwarmpools", c["spec"]["warmPoolRef"]["name"])]
            tpl = self.objects[("sandboxtemplates", pool["spec"]["sandboxTemplateRef"]["name"])]
        pod = f"{claim}-pod"
        ip = self._run_pod(pod, tpl["spec"]["podTemplate"]["spec"])
        with self.lock:
            if ("sandboxclaims", claim) not in self.objects:
                self._remove_pod(pod)
                return
            c["status"] = {"sandbox": {"name": pod, "podIPs": [ip]}}

    def _run_pod(self, name: str, spec: dict) -> str:
        c = spec["containers"][0]
        sc, limits = c["securityContext"], c["resources"]["limits"]
        volumes = {v["name"]: v["emptyDir"] for v in spec["volumes"]}
        tmpfs = {
            m["mountPath"]: f"size={_size(volumes[m['name']]['sizeLimit'])}m,mode=0777,exec"
            for m in c["volumeMounts"]
        }
        container = docker_client().containers.run(
            c["image"],
            command=c["command"],
            detach=True,
            name=name,  # no init: the launcher is PID 1, as in a pod
            environment={e["name"]: e["value"] for e in c["env"]},
            working_dir=c["workingDir"],
            user=f"{sc['runAsUser']}:{sc['runAsGroup']}",
            cap_drop=sc["capabilities"]["drop"],
            cap_add=sc["capabilities"]["add"],
            privileged=sc["privileged"],
            security_opt=[] if sc["allowPrivilegeEscalation"] else ["no-new-privileges"],
            read_only=sc["readOnlyRootFilesystem"],
            tmpfs=tmpfs,
            mem_limit=f"{_size(limits['memory'])}m",
            memswap_limit=f"{_size(limits['memory'])}m",
            nano_cpus=int(limits["cpu"].rstrip("m")) * 1_000_000,
            network_mode="bridge",
            labels={LABEL: self.id},
            log_config={"type": "none"},
        )
        end = time.monotonic() + 60
        while time.monotonic() < end:  # the readiness probe: the server's port accepts
            container.reload()
            ip = container.attrs["NetworkSettings"]["IPAddress"]
            if ip:
                try:
                    socket.create_connection((ip, c["ports"][0]["containerPort"]), timeout=1).close()
                    return ip
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"fake pod {name} never became ready")

    def _pod(self, name: str):
        import docker.errors

        try:
            c = docker_client().containers.get(name)
        except docker.errors.NotFound:
            return None
        st = c.attrs["State"]
        state = (
            {"running": {}}
            if st["Running"]
            else {
                "terminated": {
                    "reason": "OOMKilled"
                    if st.get("OOMKilled")
                    else ("Completed" if st["ExitCode"] == 0 else "Error"),
                    "exitCode": st["ExitCode"],
                }
            }
        )
        return {
            "kind": "Pod",
            "metadata": {"name": name},
            "status": {"containerStatuses": [{"name": "sandbox", "state": state}]},
        }

    def _remove_pod(self, name):
        if name:
            import docker.errors

            try:
                docker_client().containers.get(name).remove(force=True)
            except docker.errors.NotFound:
                pass

    def pods(self) -> list[str]:
        return [
            c.name for c in docker_client().containers.list(all=True, filters={"label": f"{LABEL}={self.id}"})
        ]

    def kubeconfig(self, path) -> str:
        path.write_text(
            json.dumps(
                {  # JSON is YAML
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "me", "user": {"token": "t0ken"}}],
                    "contexts": [
                        {
                            "name": "fake",
                            "context": {"cluster": "fake", "user": "me", "namespace": self.namespace},
                        }
                    ],
                }
            )
        )
        return str(path)

    def stop(self) -> None:
        self.httpd.shutdown()
        for c in docker_client().containers.list(all=True, filters={"label": f"{LABEL}={self.id}"}):
            c.remove(force=True)
