"""What a harness that died left in the cluster: prune_k8s() (`harness sandbox prune --k8s`)."""

from __future__ import annotations

from agent.sandbox.k8s.api import K8sApi
from agent.sandbox.k8s.manifests import EXTENSIONS_API
from agent.sandbox.labels import LABEL_POOL


def prune_k8s(api: K8sApi) -> None:
    """Deletes every harness claim, warm pool and template in the namespace: what a harness that died left
    (claims expire by themselves at shutdownTime; warm pools would keep their pods running)."""
    for plural in ("sandboxclaims", "sandboxwarmpools", "sandboxtemplates"):
        api.delete_all(EXTENSIONS_API, plural, LABEL_POOL)  # a bare key selects objects that have the label
