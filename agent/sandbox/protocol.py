"""What the agent loop (agent/loop.py) needs of a sandbox, and nothing more.

The real sandboxes (Sandbox, NativeSandbox, K8sSandbox) have these members; so does the in-memory fake the
loop's tests use (tests/helpers.py FakeSandbox). tests/test_loop.py checks that both match this protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:  # only for the annotations: this module stays importable on its own
    from agent.sandbox import ExecResult


class LoopSandbox(Protocol):
    workdir: str  # the agent's working folder: /workspace, or a Harbor image's WORKDIR

    async def exec(
        self, cmd: str | list[str], timeout: float = 60.0, *, stdin: Optional[bytes] = None
    ) -> ExecResult:
        """Runs shell text (or an argv list) as the agent; `stdin` is fed to it. A dead sandbox raises
        agent.sandbox.SandboxDied."""
        ...

    def death_cause(self, wait: float = 5.0) -> Optional[str]:
        """After SandboxDied: "oom" when what ran inside used the memory limit up, else None."""
        ...
