"""The registry of sandbox backends (`--sandbox NAME`): what a backend is (Backend: its options, its declared
capabilities, its pool, the images it names, its prune), the capabilities a run may ask of one, and where
each backend lives.

A backend is one folder, agent/sandbox/backends/<name>/, whose package defines BACKEND (importing only what
is cheap: its client is imported when its pool or prune is first called), and one `register` line at the
end of this module. Its sandboxes and pool implement agent/sandbox/contract.py, and
tests/agent/sandbox/test_sandbox_contract.py runs the contract's behaviours against every backend registered
here. A backend that is not in this tree is found as any plugin is (results/plugins.py): an installed
package's entry point in the group "harness.sandboxes", or `--sandbox module:BACKEND`.

The orchestrator (evaluators/) never checks for a backend by name: it asks `has`/`require` for a capability,
and each task's kind says which capabilities its sandboxes need (OwnSandbox.sandbox_needs,
evaluators/grading/kind.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

from results import plugins
from results.errors import UserError

# What a backend may declare, in words (the messages of a run that needs one quote them):
CAPABILITIES: dict[str, str] = {
    # without it the backend names the images its sandboxes run (Backend.images): the base image, say
    "own_images": "it runs each task's own image, built on this host's Docker engine",
    # `harness sandbox prune` prunes it by default; a run first prunes what dead harness processes left
    "local": "its sandboxes live on this machine",
    # GradingStations (evaluators/grading/grade.py): one grading container takes turns between attempts
    "batch_grading": "its pool takes back idle sandboxes, which --batch-grading needs",
    # NativeSpec sandboxes (contract.py): the static helper (helper.c) on any image, the image's user/WORKDIR
    "harbor": "it serves any image with the static helper, Harbor's runtime contract",
    # docker diff / docker commit of a sandbox: Harbor's snapshot and shared verifier modes
    "diff": "its engine lists and commits a sandbox's filesystem changes",
    # evaluators/run/cluster.py: the attempts run on the nodes of a Ray cluster, each with its own engine
    "cluster": "it runs on the nodes of a Ray cluster",
}


@dataclass(frozen=True)
class NoOptions:
    """The options of a backend that has none."""


@dataclass(frozen=True)
class Backend:
    """One sandbox backend. The callables take the backend's options (an instance of `options`, a dataclass
    whose fields carry their help and defaults: `harness eval` makes a --NAME-FIELD flag of each)."""

    name: str
    # options -> a factory of pools, called as Pool(run_id=, warm=, max_containers=). Bad settings (a
    # kubeconfig, ...) fail here, before a run folder is made.
    make_pool: Callable[[Any], Callable[..., Any]]
    options: type = NoOptions
    capabilities: frozenset[str] = frozenset()
    # (tasks, options) -> task id -> the image its sandboxes run; needed without "own_images".
    name_images: Optional[Callable[[list, Any], dict[str, str]]] = None
    # (options, orphans_only) -> a line for the user: removes what harness runs left behind.
    clean: Optional[Callable[[Any, bool], str]] = None

    def __post_init__(self):
        unknown = set(self.capabilities) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"sandbox backend {self.name!r}: unknown capabilities {sorted(unknown)}")
        if self.name_images is None and "own_images" not in self.capabilities:
            raise ValueError(f"sandbox backend {self.name!r}: without own_images it must name its images")

    @property
    def flag_prefix(self) -> str:
        """Its options' flags are --PREFIX-FIELD (--k8s-namespace): the name, as a Python identifier."""
        return self.name.replace("-", "_").replace(".", "_").replace(":", "_") + "_"

    # -- capabilities ----------------------------------------------------------------------------------
    def has(self, capability: str) -> bool:
        if capability not in CAPABILITIES:
            raise ValueError(f"no sandbox capability {capability!r}")
        return capability in self.capabilities

    def require(self, capability: str, what: str, fix: str = "") -> None:
        """A UserError when this backend lacks `capability`, which `what` (a flag, a task) needs; `fix`: what
        else the user may do, besides choosing a backend that has it."""
        if not self.has(capability):
            others = " or ".join(f"--sandbox {n}" for n in providing(capability))
            fixes = " or ".join(f for f in (fix, f"use {others}" if others else "") if f)
            raise UserError(
                f"{what}: it needs a sandbox backend with {capability} ({CAPABILITIES[capability]}); "
                f"--sandbox {self.name} has none" + (f": {fixes}" if fixes else "")
            )

    # -- what the orchestrator calls -------------------------------------------------------------------
    def settings(self, given: Any = None) -> Any:
        """Its options from a dict (EvalConfig.sandbox_options; None: the defaults), or as given."""
        if isinstance(given, self.options):
            return given
        given = dict(given or {})
        known = {f.name for f in dataclasses.fields(self.options)}
        if set(given) - known:
            raise UserError(
                f"sandbox backend {self.name!r} has no option {sorted(set(given) - known)[0]!r}: it has "
                + (", ".join(sorted(known)) or "none")
            )
        return self.options(**given)

    def pool(self, options: Any = None) -> Callable[..., Any]:
        return self.make_pool(self.settings(options))

    def images(self, tasks: list, options: Any = None) -> dict[str, str]:
        if self.name_images is None:
            raise TypeError(f"sandbox backend {self.name!r} runs the tasks' own images: build them")
        return self.name_images(tasks, self.settings(options))

    def prune(self, options: Any = None, orphans_only: bool = False) -> str:
        if self.clean is None:
            return "nothing to prune"
        return self.clean(self.settings(options), orphans_only)


DEFAULT = "docker"
BUILTIN: dict[str, str] = {}  # name -> `module:attribute`, in registration order


def register(name: str, target: str) -> None:
    if name in BUILTIN:
        raise ValueError(f"sandbox backend {name!r} is registered twice")
    BUILTIN[name] = target


def names() -> list[str]:
    """Every backend a name finds: the built-in ones, then installed plugins'."""
    return list(BUILTIN) + [n for n in plugins.installed("sandboxes") if n not in BUILTIN]


def sandbox_backend(name: str) -> Backend:
    """The backend of that name (or dotted path); a UserError naming the choices for any other."""
    target = BUILTIN.get(name) or plugins.find("sandboxes", name)
    if target is None:
        raise UserError(f"sandbox backend {name!r}: choose one of {', '.join(names())}")
    backend = plugins.load(target, f"sandbox backend {name!r}")
    if not isinstance(backend, Backend):
        raise UserError(f"sandbox backend {name!r}: {target} is not a Backend (agent/sandbox/registry.py)")
    if backend.name != name and not plugins.is_path(name):
        raise UserError(f"sandbox backend {name!r}: {target} is a backend named {backend.name!r}")
    return backend


def providing(capability: str) -> list[str]:
    """The built-in backends that have `capability` (for messages)."""
    return [n for n in BUILTIN if capability in sandbox_backend(n).capabilities]


register("docker", "agent.sandbox.backends.docker:BACKEND")
register("k8s", "agent.sandbox.backends.k8s:BACKEND")
register("docker-cli", "agent.sandbox.backends.docker_cli:BACKEND")
