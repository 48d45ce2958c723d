"""What an evaluator kind decides: the `Kind` base class every kind subclasses, and the run's questions that
go to each task's kind (`refuse_unsupported`, `offline`, `network_lines`). The registry that finds a kind by
name is tasks/kinds.py.

A kind is one module (evaluators/grading/<name>_kind.py, or a plugin's) holding one `Kind` subclass instance
named KIND; it owns its [evaluator] settings (`keys` and `settings`, the parser the task loader calls;
`table`, its inverse), its sandbox needs (`limits`, `containers`, `batchable`, and the backend capabilities
`sandbox_needs`), the attempt's hooks
(`prepare`, `oracle`, `has_steps`/`run_steps`, `after_agent`, `capture`, `verify_in_place`), its grading
(`grade_fresh`), its images (`image_key`, `build_image`, `own_image`), its network (`offline`,
`network_line`), its impossible variants (`variant_tests`, `no_variant`) and its export to Harbor's format
(`export`). The defaults below are an ordinary kind's: the agent works in /workspace of a sandbox of the
task's limits, its changes are captured and the sandbox released, then a fresh grading container (or none)
grades. evaluators/run/ (runner.py, policies.py, task_images.py), evaluators/cli.py, evaluators/validate.py,
evaluators/harbor_export.py, tasks/impossible.py and the task loader ask the task's kind and never test for
one by name.

Kind modules are imported on first use; those a task.toml names must stay cheap to import (the standard
library, ids, verdict rules): `harness tasks list` parses their settings without paying for the sandbox or
Docker's client, which their hooks import when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from results.errors import OracleFailed, UserError
from tasks.kinds import get, of

if TYPE_CHECKING:
    from agent.sandbox import Backend, Changes, Sandbox, SandboxPool, SandboxSpec
    from evaluators.grading.verdict import Verdict
    from tasks.model import EvaluatorConfig, Task


def refuse_unsupported(tasks: "list[Task]", backend: "Backend") -> None:
    """A UserError for the first task whose sandboxes need a capability the sandbox backend lacks (the
    kind's sandbox_needs: an image of its own, Harbor's runtime contract, ...)."""
    for t in tasks:
        for capability, why in of(t).sandbox_needs(t).items():
            backend.require(capability, f"task {t.id} {why}", fix="leave such tasks out (--glob)")


def offline(tasks: "list[Task]") -> "list[Task]":
    """--no-internet: every task without network for any of its containers."""
    return [of(t).offline(t) for t in tasks]


def network_lines(tasks: "list[Task]") -> list[str]:
    """What the run's tasks say about their network, one line per kind that has something to say."""
    by_kind: dict[str, list] = {}
    for t in tasks:
        by_kind.setdefault(t.evaluator.kind, []).append(t)
    return [line for name, group in by_kind.items() if (line := get(name).network_line(group))]


class Kind:
    name = ""
    keys: frozenset[str] = frozenset({"kind"})  # the [evaluator] keys it reads
    Settings: Optional[type] = None  # the frozen dataclass of its settings (None: it has none)
    in_place = False  # verify_in_place may decide while the agent's sandbox still exists

    # ------------------------------------------------------------------------------------------ settings
    def settings(self, table: dict, tests: dict[str, bytes], loc: str, where) -> "EvaluatorConfig":
        """The [evaluator] table (keys already checked against `keys`) of the task.toml at `loc`, checked
        against the task's hidden `tests`; UserError naming the file, the field and the fix."""
        from tasks.model import EvaluatorConfig

        return EvaluatorConfig(kind=self.name)

    def settings_of(self, task: "Task") -> Any:
        """The task's settings of this kind: what its parser read, or the defaults (Settings())."""
        got = task.evaluator.settings
        return got if got is not None or self.Settings is None else self.Settings()

    def table(self, task: "Task") -> dict:
        """The [evaluator] table that `settings` reads back as the task's settings (tasks/impossible.py
        writes task folders with it)."""
        return {"kind": self.name}

    # ----------------------------------------------------------------------------------- sandbox needs
    def limits(self, task: "Task") -> "SandboxSpec":
        """The agent's sandbox."""
        from agent.sandbox import SandboxSpec

        return SandboxSpec.for_task(task.environment)

    def containers(self, task: "Task") -> int:
        """Sandboxes one attempt takes from the pool: the agent's, and a grading container."""
        return 2

    def batchable(self, task: "Task") -> bool:
        """Whether an attempt may be graded in a grading container shared with other attempts
        (evaluators/grading/grade.GradingStations)."""
        return False

    # ----------------------------------------------------------------------------------------- attempt
    async def prepare(self, task: "Task", sb: "Sandbox") -> None:
        """In the agent's sandbox, after the starting files and before the baseline."""

    async def oracle(self, task: "Task", sb: "Sandbox") -> None:
        """The task's own solution: solution/solve.sh run in /workspace, as the agent would."""
        await sb.put_files(task.solution_files, dest="/tmp/oracle")
        r = await sb.exec("bash /tmp/oracle/solve.sh", timeout=task.agent.timeout_sec)
        await sb.exec("rm -rf /tmp/oracle", timeout=30)
        if r.exit_code != 0:
            raise OracleFailed(f"solve.sh exited {r.exit_code}: {r.output[-300:]}")

    def has_steps(self, task: "Task") -> bool:
        """Whether the task runs in several steps (run_steps), each with its agent and its verifier."""
        return False

    async def run_steps(self, task: "Task", policy, sb: "Sandbox", pool: "SandboxPool", image: str):
        """With has_steps: every step, agent and verifier, in the one sandbox; returns (verdict, the merged
        loop result or None, the kept files, the last step's changes)."""
        raise NotImplementedError(f"evaluator kind {self.name!r} has no steps")

    async def after_agent(self, task: "Task", sb: "Sandbox") -> dict[str, bytes]:
        """When the policy is done, in its sandbox: the files the attempt keeps."""
        return {}

    async def capture(self, task: "Task", sb: "Sandbox") -> "Changes":
        """The changes of the agent's sandbox."""
        from agent.sandbox import Changes

        if sb.dead:
            return Changes(rejected=["the sandbox died before its changes could be captured"])
        return await sb.changes()

    async def verify_in_place(
        self, task: "Task", sb: "Sandbox", pool: "SandboxPool", changes: "Changes"
    ) -> Optional["Verdict"]:
        """With `in_place`: a verdict decided while the agent's sandbox exists, or None (grade_fresh)."""
        return None

    async def grade_fresh(
        self,
        task: "Task",
        changes: "Changes",
        pool: "SandboxPool",
        image: str,
        kept: Optional[dict[str, bytes]] = None,
        stations: Any = None,
    ) -> "Verdict":
        """The verdict after the agent's sandbox is gone, from its captured changes (and the files it kept);
        with `stations` a batchable attempt takes a turn in a shared grading container."""
        raise NotImplementedError(f"evaluator kind {self.name!r} does not grade")

    def not_regradable(self, task: "Task") -> str:
        """Why an attempt's kept changes cannot be graded again later (`harness rescore`), or "" when they
        can: grade_fresh needs nothing but them."""
        return ""

    def span(self, task: "Task") -> dict:
        """Attributes of the attempt's "grade" span."""
        return {"harness.evaluator.kind": self.name}

    # ---------------------------------------------------------------------------------------- images
    def image_key(self, task: "Task") -> str:
        """What, besides the build context, tells the task's image apart (evaluators/run/task_images.py)."""
        return repr(None)

    def build_image(self, task: "Task", log) -> str:
        """Builds (or finds) the image the task's attempts run in, on this host's Docker engine (the backends
        with own_images run it); returns its id."""
        from agent.sandbox.backends.docker.images import task_image

        return task_image(task.dockerfile, task.build_context, log)

    def own_image(self, task: "Task") -> str:
        """What makes the task's image its own ("" when it runs on the base image)."""
        return "environment/Dockerfile" if task.dockerfile else ""

    def sandbox_needs(self, task: "Task") -> dict[str, str]:
        """The capabilities (agent/sandbox/registry.py CAPABILITIES) the task's sandboxes need of the backend,
        each with why: a backend that lacks one refuses the task before the run (refuse_unsupported)."""
        own = self.own_image(task)
        return {"own_images": f"has its own image ({own})"} if own else {}

    # ---------------------------------------------------------------------------------------- network
    def offline(self, task: "Task") -> "Task":
        """--no-internet: the task with no network for any of its containers (an ordinary kind's have none
        to take away)."""
        return task

    def network_line(self, tasks: "list[Task]") -> str:
        """One line for a run: which of `tasks` (all of this kind) have network and why; "" when there is
        nothing to say."""
        return ""

    # ---------------------------------------------------------------------------- impossible variants
    def variant_tests(self, task: "Task") -> tuple[str, list[str]]:
        """For tasks/impossible.py: the language of the hidden test files whose expected values an impossible
        variant contradicts ("python" or "shell") and their names; ("", []) when the kind has no variants."""
        return "", []

    def no_variant(self, task: "Task") -> str:
        """Why a task of this kind gets no impossible variant (variant_tests is empty)."""
        return f"evaluator kind {self.name} (its verdict has no expected value in a test file to contradict)"

    # ---------------------------------------------------------------------------------------- export
    def export(self, task: "Task") -> tuple[str, dict[str, bytes]]:
        """For `harness tasks export --format harbor` (evaluators/harbor_export.py): the lines of the exported
        tests/test.sh that set $reward, and the files under tests/harness/ (besides verdict.py)."""
        raise UserError(f"task {task.id}: a {self.name} task cannot be exported to Harbor's format")
