"""The one record schema: an attempt = one sample of one task by one model.

Written by the eval loop (one JSON line per finished attempt), read by the report,
the exporter and the post-training loop. Bump SCHEMA_VERSION when a field changes meaning.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, PrivateAttr

SCHEMA_VERSION = 1

# Why an attempt ended (agent side) and why it scored what it did (evaluator side).
ExitReason = Literal[
    "submitted",
    "max_steps",
    "stuck",
    "wall_time",
    "token_budget",
    "cost_budget",
    "context_exceeded",
    "sandbox_died",
    "model_error",
    "cancelled",
]
Status = Literal["solved", "failed", "error"]  # error = the harness/infra failed, not the model


def clip(text: str, limit: int, head_share: float = 0.5) -> str:
    """Long text keeps its head and tail with a marker between: observations as the model sees and the
    record keeps them (half and half), and text in the report's viewer."""
    if len(text) <= limit:
        return text
    head, tail = int(limit * head_share), int(limit * (1 - head_share))
    return (
        f"{text[:head]}\n[... {len(text) - head - tail} characters cut here ...]\n"
        f"{text[-tail:] if tail else ''}"
    )


class Action(BaseModel):
    """What the model asked for in one step, after parsing."""

    kind: Literal["bash", "write", "submit", "format_error"]
    command: Optional[str] = None  # bash
    path: Optional[str] = None  # write
    content: Optional[str] = None  # write
    tool_call_id: Optional[str] = None  # native tool calling: the id to answer


class Step(BaseModel):
    index: int
    raw_output: str  # the model's reply text exactly as produced
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    observation: str = ""  # what went back to the model
    exit_code: Optional[int] = None
    timed_out: bool = False
    model_seconds: float = 0.0
    # of model_seconds, queued (a shared decoder, model slots, a rate limit): not counted in wall_time
    wait_seconds: float = 0.0
    tool_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    # Local backend only: the exact token ids the model saw and produced (training uses these).
    prompt_ids: Optional[list[int]] = None
    completion_ids: Optional[list[int]] = None


class TestOutcome(BaseModel):
    id: str
    outcome: Literal["passed", "failed", "error", "skipped"]
    message: str = ""


class Durations(BaseModel):
    """Seconds per phase of one attempt. Records written before the phase fields load with 0.0 there."""

    model: float = 0.0  # in model calls, including one that never replied (see model_unanswered)
    sandbox: float = 0.0  # time spent in sandbox execs during the attempt
    evaluation: float = 0.0
    total: float = 0.0
    model_unanswered: float = 0.0  # of `model`: a call the wall-time limit (or an error) cut before its reply
    acquire: float = 0.0  # getting the agent's sandbox (from the warm pool, or a cold start)
    setup: float = 0.0  # starting files and baseline in the sandbox
    agent: float = 0.0  # the policy: the agent loop (or oracle) from its first model call to its last step
    capture: float = 0.0  # reading the agent's changes out of its sandbox


class KeptChanges(BaseModel):
    """Where the attempt's final changes are kept in the run folder (results/run_writer.py keep_changes): each
    captured file by the sha256 of its bytes under objects/, and a unified diff against the starting files."""

    files: dict[str, str] = Field(default_factory=dict)  # path -> sha256 of its content (objects/)
    executable: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    links: dict[str, str] = Field(default_factory=dict)  # symlinks: path -> target text (Harbor tasks)
    omitted: list[str] = Field(default_factory=list)  # captured but over the keep cap: not stored
    diff: str = ""  # sha256 of the unified diff (objects/); "" when nothing changed
    bytes: int = 0  # stored bytes of the files


class Flag(BaseModel):
    """A known exploit pattern seen in the attempt's own actions (results/flags.py)."""

    pattern: str  # test_files | vcs_history | grader_paths | reward_file
    step: int  # the step's index
    evidence: str = ""  # the command or path that matched


class KeptFile(BaseModel):
    """A file kept with an attempt in its run folder (Harbor tasks: what test.sh left in /logs/verifier, its
    output, the artifacts). Written before the record that names it."""

    name: str  # e.g. "verifier/ctrf.json", "verifier/test-stdout.txt", "artifacts/logs/artifacts/out.txt"
    path: str = ""  # relative to the run folder; "" when it was not written
    size: int = 0  # bytes kept
    sha256: str = ""


class Attempt(BaseModel):
    schema_version: int = SCHEMA_VERSION
    key: str  # deterministic: run_id/task_id/sample -- resume skips keys already present
    run_id: str
    task_id: str
    task_version: str = "1"
    domain: str = ""
    difficulty: int = 0
    split: str = ""  # train / heldout / "" for tasks outside a family
    sample: int = 0
    model: str
    temperature: float = 0.0
    messages: list[dict[str, Any]] = Field(default_factory=list)  # final conversation
    steps: list[Step] = Field(default_factory=list)
    exit_reason: Optional[ExitReason] = None
    status: Status = "failed"
    reward: float = 0.0
    solved: bool = False
    reason: str = ""  # evaluator reason code: pass, fail, timeout, no_report, missing_tests, tamper, ...
    detail: str = ""  # the evaluator's explanation (which path was tampered with, test output tail, ...)
    tests: list[TestOutcome] = Field(default_factory=list)
    n_steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    durations: Durations = Field(default_factory=Durations)
    image: str = ""  # image id (sha256:...) that produced the result
    error: Optional[str] = None  # harness/infra error text (status == "error")
    patch_files: int = 0  # files the agent changed
    started_at: str = ""
    finished_at: str = ""
    node: str = ""  # the machine that ran it on a cluster run (host/ray node id); "" on one machine
    # Added later (absent in older runs, which still load): what the grade depended on and what was graded.
    grading_hash: str = ""  # Task.grading_hash(): hidden tests, evaluator, environment
    changes: Optional[KeptChanges] = None  # the final changes, kept in the run folder
    flags: list[Flag] = Field(default_factory=list)
    impossible: bool = False  # the task was an impossible variant: solving it means cheating
    verifier_output: str = ""  # Harbor tasks: test.sh's stdout and stderr, head and tail
    files: list[KeptFile] = Field(default_factory=list)  # kept in the run folder (results/run_writer.py)
    _file_data: dict[str, bytes] = PrivateAttr(
        default_factory=dict
    )  # their bytes until the store writes them

    def keep_files(self, files: dict[str, bytes]) -> None:
        """Files to keep with this attempt: RunStore.append writes them to the run folder, then the record."""
        import hashlib

        self._file_data = dict(files)
        self.files = [
            KeptFile(name=n, size=len(d), sha256=hashlib.sha256(d).hexdigest())
            for n, d in sorted(files.items())
        ]

    def file_data(self) -> dict[str, bytes]:
        return self._file_data

    trace_id: str = ""  # the attempt's OpenTelemetry trace (32 hex digits) when tracing was on


def attempt_key(run_id: str, task_id: str, sample: int) -> str:
    return f"{run_id}/{task_id}/{sample}"
