"""The Kubernetes API over plain HTTPS with `requests`: the few REST calls the pool makes, with credentials
from KUBECONFIG or the pod's service account."""

from __future__ import annotations

import base64
import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

from results.errors import InfraError, UserError


class K8sApi:
    """The few REST calls the pool makes, with credentials from a kubeconfig or a service account."""

    def __init__(
        self,
        server: str,
        namespace: str = "default",
        *,
        token: Optional[str] = None,
        verify: Any = True,
        cert: Any = None,
    ):
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
            host, port = (
                os.environ["KUBERNETES_SERVICE_HOST"],
                os.environ.get("KUBERNETES_SERVICE_PORT", "443"),
            )
            return cls(
                f"https://{host}:{port}",
                namespace or (sa / "namespace").read_text().strip(),
                token=(sa / "token").read_text().strip(),
                verify=str(sa / "ca.crt"),
            )
        return cls.from_kubeconfig(path, namespace)

    @classmethod
    def from_kubeconfig(cls, path: str, namespace: Optional[str] = None) -> "K8sApi":
        """Server, CA and credentials (token, or client certificate and key) of the current context."""
        try:
            import yaml
        except ModuleNotFoundError:
            raise UserError(
                "--sandbox k8s reads the kubeconfig with PyYAML: pip install 'harness[k8s]'"
            ) from None
        try:
            cfg = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise UserError(f"--sandbox k8s: no kubeconfig at {path}: set KUBECONFIG") from None
        except Exception as e:
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
            raise UserError(
                f"{path}: user {ctx.get('user')!r} authenticates with an exec plugin; give the context "
                "a token or a client certificate (e.g. a service account token)"
            )
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
            raise UserError(
                f"kubernetes API {self.server} refused {method} {url.split('/apis/')[-1]}: "
                f"{r.status_code}; give the kubeconfig's user rights on agent-sandbox objects"
            )
        if r.status_code == 404 and "/apis/" in url:
            raise UserError(
                f"kubernetes API {self.server}: no {url.split('/apis/')[1].split('/namespaces')[0]}: "
                "install agent-sandbox (its CRDs and controller) in the cluster"
            )
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
