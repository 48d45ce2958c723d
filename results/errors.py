"""The error types every layer shares (the bottom of the import graph: imports nothing of ours).

UserError: the CLI prints its message on one line and exits 2 (no traceback).
"""


class UserError(Exception):
    """Bad input or environment the user can fix. The message names the thing and the fix."""


class InfraError(Exception):
    """The harness's own machinery failed (Docker, sandbox died). Attempts hit by it get status 'error'."""


class OracleFailed(Exception):
    """A task's reference solution did not run cleanly: the task is broken, not the agent."""
