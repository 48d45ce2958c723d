"""The sandbox backends, one folder each: docker/ (the Docker SDK), k8s/ (Kubernetes through agent-sandbox),
and the others agent/sandbox/registry.py registers.

A backend's package defines BACKEND (agent/sandbox/registry.py's Backend: its options dataclass, its
capabilities, its pool, the images it names, its prune) and imports nothing heavy; its modules implement the
contract (agent/sandbox/contract.py), usually as a Host under served.py's ServedSandbox. Adding one is its
folder and one `register` line in the registry; nothing else changes.
"""
