"""The Python API for using the agent outside an evaluation (`harness run`).

from agent.workflow import run_workflow
result = asyncio.run(run_workflow("openai/gpt-4o-mini", Path("repo"), "fix the failing test",
                                  verify=["python3 -m pytest -q"]))
print(result.diff)

Three steps, each safe for the user's folder by construction:
- select_files: what goes into the sandbox (what git would commit: tracked plus untracked files that are not
  ignored; secrets never, unless --include'd), streamed in batches;
- run_workflow: the agent works on the copy; --verify runs against the user's originals of protected paths;
- apply_changes: every change is checked first, then all of them are applied or none (held-back paths, such as
  protected tests and whatever the allowlist rule does not allow, are listed and never written).

Where things live:
  paths      what a path is (secret, CI, test, version control, runs by itself), bad names, git's view
  selection  select_files: what is copied into the sandbox, in batches
  protect    what stays the user's: the tests --verify names, test machinery, files that run by themselves
  allow      the rule for what --apply may write without --allow-hooks (holds)
  result     WorkflowResult, WorkflowChanges, ApplyResult
  run        run_workflow and the diff
  apply      plan_changes and apply_changes (all or nothing)
"""

from __future__ import annotations

from agent.workflow.allow import COMPILED_NAMES, CONFIG_NAMES, holds
from agent.workflow.apply import apply_changes, plan_changes
from agent.workflow.paths import (
    AUTORUN_GLOBS,
    CI_GLOBS,
    DEPENDENCY_DIRS,
    SECRET_GLOBS,
    TEST_GLOBS,
    VCS_DIRS,
    VCS_FILES,
    VCS_REASONS,
    escape_terminal,
    ignored_paths,
    limit_reason,
    matches,
    refuse_reason,
    unsafe_char,
)
from agent.workflow.protect import (
    NPM_RUNNERS,
    PACKAGE_HOOK_KEYS,
    RUNNER_CONFIGS,
    AutorunPaths,
    autorun_paths,
    default_protect,
    package_hooks_changed,
    test_machinery,
)
from agent.workflow.result import ApplyResult, WorkflowChanges, WorkflowResult
from agent.workflow.run import MAX_CHANGE_BYTES, run_workflow, unified_diff
from agent.workflow.selection import (
    BATCH_BYTES,
    MAX_WORKSPACE_BYTES,
    LeftOut,
    Selection,
    read_workspace,
    select_files,
)

__all__ = [
    "SECRET_GLOBS",
    "CI_GLOBS",
    "TEST_GLOBS",
    "DEPENDENCY_DIRS",
    "VCS_DIRS",
    "VCS_FILES",
    "AUTORUN_GLOBS",
    "matches",
    "unsafe_char",
    "escape_terminal",
    "VCS_REASONS",
    "refuse_reason",
    "limit_reason",
    "ignored_paths",
    "MAX_WORKSPACE_BYTES",
    "BATCH_BYTES",
    "LeftOut",
    "Selection",
    "select_files",
    "read_workspace",
    "RUNNER_CONFIGS",
    "default_protect",
    "test_machinery",
    "PACKAGE_HOOK_KEYS",
    "NPM_RUNNERS",
    "AutorunPaths",
    "package_hooks_changed",
    "autorun_paths",
    "WorkflowChanges",
    "WorkflowResult",
    "ApplyResult",
    "plan_changes",
    "holds",
    "CONFIG_NAMES",
    "COMPILED_NAMES",
    "apply_changes",
    "MAX_CHANGE_BYTES",
    "run_workflow",
    "unified_diff",
]
