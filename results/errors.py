"""Errors a user can cause. The CLI prints their message on one line and exits 2 (no traceback)."""


class UserError(Exception):
    """Bad input or environment the user can fix. The message names the thing and the fix."""


class InfraError(Exception):
    """The harness's own machinery failed (Docker, sandbox died). Attempts hit by it get status 'error'."""
