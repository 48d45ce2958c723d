"""What an evaluator kind is: the core every kind implements (`Kind`: its [evaluator] settings and `grade`),
and the optional capabilities a kind adds when an ordinary kind's attempt is not enough for it. The registry
that finds a kind by name is tasks/kinds.py.

A kind is one module (evaluators/grading/<name>_kind.py, or a plugin's: docs/extending.md) holding one
instance named KIND. An ordinary kind's attempt: the agent works in /workspace of a sandbox of the task's
limits on the task's image, its changes are captured and the sandbox released, then `grade` decides from
them (evaluators/grading/grade.py's `Submission`: on the host, or in a fresh grading container with the
changes, `Submission.container`).
A kind needs no more than `name` and `grade`; one with settings adds a `Settings` dataclass (read and
written back by the defaults below, or by its own `settings`/`table` with better messages).

A capability is a class below that the kind also subclasses; whoever asks it holds the default for a kind
without it, and never tests for a kind by name:

  capability     hooks                                      asked by (default without it)
  Batchable      batchable                                  grading/grade.py (a grading container each)
  Exportable     export                                     harbor_export.py (refused)
  Variants       variant_tests, no_variant                  tasks/impossible.py, where it is defined (none)
  OwnImage       image_key, build_image, own_image          run/task_images.py (the task's Dockerfile)
  NetworkPolicy  offline, network_line                      run/network.py (nothing to take away or say)
  OwnSandbox     limits, containers, prepare, oracle,       run/attempt_sandbox.py (the task's limits,
                 after_agent, capture, sandbox_needs        /workspace, solve.sh, sb.changes(), and
                                                            own_images for an image of its own)
  InPlace        verify_in_place, not_regradable            run/attempt.py, rescore.py (graded after the
                                                            release; regradable)
  Steps          has_steps, run_steps                       run/attempt.py (one step)

Harbor's kind (harbor_kind.py) has them all but Batchable; pytest is Batchable, Variants and Exportable.

Kind modules are imported on first use; those a task.toml names must stay cheap to import (the standard
library, ids, verdict rules): `harness tasks list` parses their settings without paying for the sandbox or
Docker's client, which their hooks import when they run.
"""

from __future__ import annotations

import dataclasses
import typing
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Optional

from results.errors import UserError
from tasks.fields import show

if TYPE_CHECKING:
    from agent.sandbox import Changes, Sandbox, SandboxPool, SandboxSpec
    from evaluators.grading.verdict import Verdict
    from tasks.model import EvaluatorConfig, Task


class Kind(ABC):
    """The core: a name, the [evaluator] settings, and the verdict."""

    name = ""
    Settings: Optional[type] = None  # the frozen dataclass of its settings (None: it has none)
    grading_container = True  # grade() takes a grading container from the pool (False: decided on the host)

    @property
    def keys(self) -> frozenset[str]:
        """The [evaluator] keys it reads: "kind" and the Settings' fields (a kind whose `settings` reads
        others sets its own, as a class attribute)."""
        return frozenset({"kind", *(f.name for f in dataclasses.fields(self.Settings or _NoSettings))})

    def settings(self, table: dict, tests: dict[str, bytes], loc: str, where) -> "EvaluatorConfig":
        """The [evaluator] table (keys already checked against `keys`) of the task.toml at `loc`, checked
        against the task's hidden `tests`; UserError naming the file, the field and the fix. The default
        fills `Settings` by field name: a field without a default is required, a value has the type of
        its field."""
        from tasks.model import EvaluatorConfig

        if self.Settings is None:
            return EvaluatorConfig(kind=self.name)
        try:
            types = typing.get_type_hints(self.Settings)
        except NameError:  # an annotation that does not resolve here: its values go unchecked
            types = {}
        values = {}
        for f in dataclasses.fields(self.Settings):
            if f.name not in table:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise UserError(
                        f"{loc}: [evaluator] {f.name} is missing (kind = {show(self.name)} needs it)"
                    )
                continue
            value, want = table[f.name], types.get(f.name)
            value = tuple(value) if isinstance(value, list) else value  # frozen settings hold tuples
            if isinstance(want, type) and not _fits(value, want):
                what = _TOML_TYPES.get(want, want.__name__)
                raise UserError(f"{loc}: [evaluator] {f.name} must be {what} (got {show(value)})")
            values[f.name] = value
        return EvaluatorConfig(kind=self.name, settings=self.Settings(**values))

    def settings_of(self, task: "Task") -> Any:
        """The task's settings of this kind: what its parser read, or the defaults (Settings())."""
        got = task.evaluator.settings
        return got if got is not None or self.Settings is None else self.Settings()

    def table(self, task: "Task") -> dict:
        """The [evaluator] table that `settings` reads back as the task's settings (tasks/impossible.py
        writes task folders with it)."""
        got = self.settings_of(task)
        values = dataclasses.asdict(got) if got is not None else {}
        return {"kind": self.name, **{k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}}

    @abstractmethod
    async def grade(self, task: "Task", sub) -> "Verdict":
        """The attempt's verdict (evaluators/grading/verdict.py's Verdict) from `sub`, its grade.Submission
        (the changes, the kept files, `sub.container()`). Anything it raises is the attempt's `grader_error`,
        but InfraError (the engine failed: the attempt runs again)."""

    def span(self, task: "Task") -> dict:
        """Attributes of the attempt's "grade" span."""
        return {"harness.evaluator.kind": self.name}


@dataclasses.dataclass(frozen=True)
class _NoSettings:
    pass


_TOML_TYPES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", tuple: "a list"}


def _fits(value: Any, want: type) -> bool:
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


class Batchable(ABC):
    """Attempts may be graded in a grading container shared with other attempts (grade.GradingStations)."""

    @abstractmethod
    def batchable(self, task: "Task") -> bool:
        """Whether this task's attempts may share one (the candidate's code never runs as root there)."""


class Exportable(ABC):
    """`harness tasks export --format harbor` (evaluators/harbor_export.py)."""

    @abstractmethod
    def export(self, task: "Task") -> tuple[str, dict[str, bytes]]:
        """The lines of the exported tests/test.sh that set $reward, and the files under tests/harness/
        (besides verdict.py); UserError when this task cannot be exported."""


class OwnImage(ABC):
    """The task's image is not only its Dockerfile's (evaluators/run/task_images.py)."""

    @abstractmethod
    def image_key(self, task: "Task") -> str:
        """What, besides the build context, tells the task's image apart."""

    @abstractmethod
    def build_image(self, task: "Task", log) -> str:
        """Builds (or finds) the image the task's attempts run in, and any other its grading needs; returns
        the attempts' image id."""

    @abstractmethod
    def own_image(self, task: "Task") -> str:
        """What makes the task's image its own ("" when it runs on the base image): a backend that runs only
        the base image (--sandbox k8s) refuses such tasks."""


class NetworkPolicy(ABC):
    """The task's containers may have network (evaluators/run/network.py)."""

    @abstractmethod
    def offline(self, task: "Task") -> "Task":
        """--no-internet: the task with no network for any of its containers."""

    @abstractmethod
    def network_line(self, tasks: "list[Task]") -> str:
        """One line for a run: which of `tasks` (all of this kind) have network and why; "" when there is
        nothing to say."""


class OwnSandbox(ABC):
    """The attempt's sandbox is the kind's own, not an ordinary kind's (evaluators/run/attempt_sandbox.py)."""

    @abstractmethod
    def limits(self, task: "Task") -> "SandboxSpec":
        """The agent's sandbox."""

    @abstractmethod
    def containers(self, task: "Task") -> int:
        """Sandboxes one attempt takes from the pool."""

    @abstractmethod
    async def prepare(self, task: "Task", sb: "Sandbox") -> None:
        """In the agent's sandbox, after the starting files and before the baseline."""

    @abstractmethod
    async def oracle(self, task: "Task", sb: "Sandbox") -> None:
        """The task's own solution, run as the agent would; OracleFailed when it fails."""

    @abstractmethod
    async def after_agent(self, task: "Task", sb: "Sandbox") -> dict[str, bytes]:
        """When the policy is done, in its sandbox: the files the attempt keeps."""

    @abstractmethod
    async def capture(self, task: "Task", sb: "Sandbox") -> "Changes":
        """The changes of the agent's sandbox."""

    @abstractmethod
    def sandbox_needs(self, task: "Task") -> dict[str, str]:
        """The capabilities (agent/sandbox/registry.py CAPABILITIES) the task's sandboxes need of the sandbox
        backend, each with why: a backend that lacks one refuses the task before the run."""


class InPlace(ABC):
    """The verdict may be decided while the agent's sandbox still exists (evaluators/run/attempt.py)."""

    @abstractmethod
    async def verify_in_place(
        self, task: "Task", sb: "Sandbox", pool: "SandboxPool", changes: "Changes"
    ) -> Optional["Verdict"]:
        """After the capture, before the sandbox's release: a verdict, or None (then `grade`)."""

    @abstractmethod
    def not_regradable(self, task: "Task") -> str:
        """Why an attempt's kept changes cannot be graded again later (`harness rescore`), or "" when they
        can: `grade` needs nothing but them."""


class Steps(ABC):
    """The task may run in several steps, each with its agent and its verifier (evaluators/run/attempt.py)."""

    @abstractmethod
    def has_steps(self, task: "Task") -> bool:
        """Whether this task does."""

    @abstractmethod
    async def run_steps(self, task: "Task", policy, sb: "Sandbox", pool: "SandboxPool", image: str):
        """Every step, agent and verifier, in the one sandbox; returns (verdict, the merged loop result or
        None, the kept files, the last step's changes)."""
