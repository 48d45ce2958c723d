"""Shared test data: the `add` task most tests grade, builders for tasks written in a test, and in-memory
stand-ins (a sandbox for the agent loop, a misbehaving HTTP server).

One place for these, so no test module imports another test module.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from agent.sandbox import Changes, ExecResult, SandboxDied
from evaluators.selftest import fixtures
from tasks.model import Task

# The `add` task's files are the self-test's (evaluators/selftest/fixtures.py), as bytes.
HIDDEN = fixtures.HIDDEN.format(marker="").encode()
STUB = fixtures.STUB.encode()
PUBLIC = fixtures.PUBLIC.encode()
CORRECT = fixtures.CORRECT.encode()
WRONG = fixtures.WRONG.encode()

# Replies of a scripted (replay) model for the `add` task, in the text protocol.
WRITE_CORRECT = (
    "I will implement it.\n```bash\nprintf 'def add(a, b):\\n    return a + b\\n' > solution.py\n```"
)
WRITE_WRONG = "```bash\nprintf 'def add(a, b):\\n    return a * b\\n' > solution.py\n```"
SUBMIT = "Done.\n```bash\nsubmit\n```"


def make_task(**kw) -> Task:
    """The `add` task: a stub solution.py, a visible test, hidden tests with a canary."""
    return Task(
        id="add",
        path=None,
        instruction="Implement add(a, b) in /workspace/solution.py.",
        workspace_files={"solution.py": STUB, "tests/test_public.py": PUBLIC},
        test_files={"test_add.py": HIDDEN},
        solution_files={"solve.sh": b"true\n"},
        **kw,
    )


# -- task folders on disk and the CLI as a subprocess ---------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
GOOD_TOML = """version = "1"

[metadata]
difficulty = 1

[agent]
timeout_sec = 60
max_steps = 5
command_timeout_sec = 10

[environment]
memory_mb = 256
pids = 64
storage_mb = 32

[evaluator]
kind = "answer"
expected = "ok"
"""

# A pytest task's task.toml with a small sandbox (the hidden tests decide).
PYTEST_TOML = """version = "1"
[agent]
max_steps = 3
[environment]
memory_mb = 256
storage_mb = 32
[evaluator]
kind = "pytest"
"""


def write_task(root: Path, name: str = "t1", toml: str = GOOD_TOML, files: dict | None = None) -> Path:
    """A task folder in the on-disk format (tasks/model.py); `files` adds or (with None) removes files."""
    folder = root / name
    content = {
        "task.toml": toml,
        "instruction.md": "Write ok to /workspace/answer.txt.\n",
        "solution/solve.sh": "echo ok > answer.txt\n",
        **(files or {}),
    }
    return write_files(folder, content)


def write_files(root: Path, files: dict) -> Path:
    """Each file of `files` (relative path: text or bytes; None: not written) under root, folders made."""
    for rel, text in files.items():
        if text is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return root


def harness(
    *args: str, env: dict | None = None, cwd: Path = ROOT, timeout: float = 180
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    for key, value in list(full_env.items()):
        if value is None:
            del full_env[key]
    return subprocess.run(
        [sys.executable, str(ROOT / "harness.py"), *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )


def assert_one_clear_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, no traceback, exactly one line mentioning 'error', and that line names every needle."""
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "Traceback" not in proc.stdout, err[-3000:]
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, err[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def tool_turn(call_id: str, name: str, arguments: str, result: str) -> list[dict]:
    """One tool round of an OpenAI chat history: the assistant's call and the tool's answer."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


# -- an OpenAI-compatible HTTP server that misbehaves on cue (loopback only) --------------------------
OK_BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "flaky",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


class FlakyServer:
    """Answers the i-th POST with script[i] (the last entry repeats). Entries:
    "ok", "drop" (close without answering), "hang" (answer nothing until released),
    an int status, or (status, {headers}) / (status, {headers}, body)."""

    def __init__(self, script: list) -> None:
        self.script = script
        self.calls = 0
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                step = outer.script[min(outer.calls, len(outer.script) - 1)]
                outer.calls += 1
                if step == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if step == "hang":
                    outer.release.wait(30)
                    self.close_connection = True
                    return
                status, headers, body = 200, {}, OK_BODY
                if isinstance(step, int):
                    status, body = step, {"error": {"message": f"scripted {step}", "type": "x", "code": None}}
                elif isinstance(step, tuple):
                    status, headers = step[0], step[1]
                    body = (
                        step[2]
                        if len(step) > 2
                        else {"error": {"message": f"scripted {status}", "type": "x"}}
                    )
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


# -- an in-memory sandbox for the agent loop (agent/sandbox/protocol.py LoopSandbox) -----------------
class FakeSandbox:
    """What the agent loop needs of a sandbox, in memory: no Docker, answers in microseconds.

    `script` maps a shell command to its answer: output text (exit code 0), an ExecResult, or a list of
    those taken in turn (the last repeats); any other command succeeds with no output. An answer whose
    `duration` is longer than the timeout given times out, as the real sandbox's does. A command in `dies`
    kills the sandbox (SandboxDied); death_cause() then says `dies_of` ("oom", or None for any other death).
    A file write (the loop's argv form, content on stdin) lands in `files`; every exec is kept in `calls`.
    It also has the few members run_attempt uses around the loop (put_files, mark_baseline, dead, changes)."""

    workdir = "/workspace"

    def __init__(
        self,
        script: dict | None = None,
        *,
        workdir: str = "/workspace",
        dies: tuple = (),
        dies_of: str | None = "oom",
    ):
        self.script = {k: list(v) if isinstance(v, list) else [v] for k, v in (script or {}).items()}
        self.workdir, self.dies, self.dies_of = workdir, set(dies), dies_of
        self.files: dict[str, bytes] = {}
        self.calls: list[dict] = []  # {"cmd", "timeout", "stdin"} of every exec, in order
        self.dead = False

    @property
    def commands(self) -> list:
        return [c["cmd"] for c in self.calls]

    async def exec(
        self, cmd: str | list[str], timeout: float = 60.0, *, stdin: bytes | None = None
    ) -> ExecResult:
        self.calls.append({"cmd": cmd, "timeout": timeout, "stdin": stdin})
        if self.dead or (isinstance(cmd, str) and cmd in self.dies):
            self.dead = True
            raise SandboxDied("fake sandbox died")
        if isinstance(cmd, list):  # the loop's file write: bash -c 'mkdir -p ... && cat > "$1"' _ PATH
            self.files[cmd[-1]] = stdin or b""
            return ExecResult(exit_code=0, stdout="", stderr="", duration=0.0)
        answers = self.script.get(cmd, [""])
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, str):
            answer = ExecResult(exit_code=0, stdout=answer, stderr="", duration=0.0)
        if answer.duration > timeout:  # killed at the timeout (SIGKILL), as the real sandbox does
            return ExecResult(exit_code=-9, stdout="", stderr="", duration=timeout, timed_out=True)
        return answer

    def death_cause(self, wait: float = 5.0) -> str | None:
        return self.dies_of

    # -- what run_attempt uses around the loop
    async def put_files(
        self, files: dict[str, bytes], dest: str = "/workspace", user: str = "agent", executable=()
    ) -> None:
        self.files.update({f"{dest}/{k}": v for k, v in files.items()})

    async def mark_baseline(self) -> None:
        pass

    async def changes(self) -> Changes:
        return Changes()


class FakePool:
    """A SandboxPool that hands out FakeSandboxes (for run_attempt paths that never grade)."""

    def __init__(self, **sandbox_kw):
        self.sandbox_kw, self.sandboxes = sandbox_kw, []

    @contextlib.asynccontextmanager
    async def sandbox(self, image: str, limits=None, task: str = "pool"):
        self.sandboxes.append(FakeSandbox(**self.sandbox_kw))
        yield self.sandboxes[-1]
