"""The attempt's sandbox as the task's evaluator kind shapes it: the kind's own (the OwnSandbox capability,
evaluators/grading/kind.py: Harbor's runtime contract), or an ordinary kind's, defined here; and what it
needs of the sandbox backend (sandbox_needs: the capabilities of agent/sandbox/registry.py), asked before a
run starts (refuse_unsupported)."""

from __future__ import annotations

from agent.sandbox import Backend, Changes, Sandbox, SandboxSpec
from evaluators.grading.kind import Kind, OwnImage, OwnSandbox
from results.errors import OracleFailed
from tasks import kinds
from tasks.model import Task


class OrdinarySandbox(OwnSandbox):
    """An ordinary kind's: a sandbox of the task's limits with its files in /workspace, solution/solve.sh as
    the oracle, nothing kept after the agent, the changes read from the sandbox, and a grading container
    unless the kind decides on the host."""

    def __init__(self, kind: Kind):
        self.kind = kind

    def limits(self, task: Task) -> SandboxSpec:
        return SandboxSpec.for_task(task.environment)

    def containers(self, task: Task) -> int:
        return 1 + self.kind.grading_container

    async def prepare(self, task: Task, sb: Sandbox) -> None:
        pass

    async def oracle(self, task: Task, sb: Sandbox) -> None:
        """solution/solve.sh run in /workspace, as the agent would."""
        await sb.put_files(task.solution_files, dest="/tmp/oracle")
        r = await sb.exec("bash /tmp/oracle/solve.sh", timeout=task.agent.timeout_sec)
        await sb.exec("rm -rf /tmp/oracle", timeout=30)
        if r.exit_code != 0:
            raise OracleFailed(f"solve.sh exited {r.exit_code}: {r.output[-300:]}")

    async def after_agent(self, task: Task, sb: Sandbox) -> dict[str, bytes]:
        return {}

    async def capture(self, task: Task, sb: Sandbox) -> Changes:
        if sb.dead:
            return Changes(rejected=["the sandbox died before its changes could be captured"])
        return await sb.changes()

    def sandbox_needs(self, task: Task) -> dict[str, str]:
        """An image of its own needs a backend that builds the tasks' images."""
        own = own_image(task)
        return {"own_images": f"has its own image ({own})"} if own else {}


def sandbox_of(kind: Kind) -> OwnSandbox:
    """What shapes an attempt of this kind: the kind itself when it has its own sandbox, else the ordinary."""
    return kind if isinstance(kind, OwnSandbox) else OrdinarySandbox(kind)


def own_image(task: Task) -> str:
    """What makes the task's image its own ("" when it runs on the base image)."""
    kind = kinds.of(task)
    if isinstance(kind, OwnImage):
        return kind.own_image(task)
    return "environment/Dockerfile" if task.dockerfile else ""


def refuse_unsupported(tasks: list[Task], backend: Backend) -> None:
    """A UserError for the first task whose sandboxes need a capability the sandbox backend lacks."""
    for t in tasks:
        for capability, why in sandbox_of(kinds.of(t)).sandbox_needs(t).items():
            backend.require(capability, f"task {t.id} {why}", fix="leave such tasks out (--glob)")
