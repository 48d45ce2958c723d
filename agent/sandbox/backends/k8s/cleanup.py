"""What a harness that died left in the cluster: prune_k8s() (`harness sandbox prune --sandbox k8s`)."""

from __future__ import annotations

from agent.sandbox.backends.k8s.api import K8sApi
from agent.sandbox.backends.k8s.manifests import EXTENSIONS_API
from agent.sandbox.labels import LABEL_POOL


def prune_k8s(api: K8sApi) -> None:
    """Deletes every harness claim, warm pool and template in the namespace: what a harness that died left
    (claims expire by themselves at shutdownTime; warm pools would keep their pods running)."""
    for plural in ("sandboxclaims", "sandboxwarmpools", "sandboxtemplates"):
        api.delete_all(EXTENSIONS_API, plural, LABEL_POOL)  # a bare key selects objects that have the label


def prune(options, orphans_only: bool) -> str:
    """The backend's prune: every harness object in the namespace. Their owners cannot be told from here:
    with orphans_only nothing is deleted (claims expire by themselves at their shutdownTime)."""
    if orphans_only:
        return "nothing pruned: --orphans cannot tell a live harness's claims (they expire at their TTL)"
    api = K8sApi.from_environment(options.namespace)
    prune_k8s(api)
    return f"deleted the harness sandbox objects in namespace {api.namespace}"
