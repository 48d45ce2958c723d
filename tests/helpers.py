"""Shared test data: the `add` task most tests grade, builders for tasks written in a test, and in-memory
stand-ins (a sandbox for the agent loop, a misbehaving HTTP server).

One place for these, so no test module imports another test module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from agent.sandbox import Changes, ExecResult, SandboxDied, Stream
from agent.sandbox.contract import OUTPUT_CAP, pooled
from evaluators.selftest import fixtures
from results.errors import InfraError
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


# -- an in-memory sandbox (the agent/sandbox/contract.py Sandbox contract) -----------------------------
def _capped(data: bytes, cap: int) -> Stream:
    """A stream kept as the command server keeps it (server.py Capped): the first and last cap/2 bytes."""
    half = max(cap // 2, 1)
    head, rest = data[:half], data[half:]
    tail = rest[-half:] if rest else b""
    return Stream(head, tail, len(data) - len(head) - len(tail))


class FakeSandbox:
    """The Sandbox contract in memory: no Docker, answers in microseconds
    (tests/agent/sandbox/test_sandbox_contract.py runs the same behaviours against it as against the real
    backends).

    `script` maps a shell command (text) to its answer: output text (exit code 0), an ExecResult, or a list of
    those taken in turn (the last repeats); any other shell text succeeds with no output. An answer whose
    `duration` is longer than the timeout given times out, as the real sandbox's does. A command in `dies`
    kills the sandbox (SandboxDied); death_cause() then says `dies_of` ("oom", or None for any other death);
    killed by kill(), it says None. An argv runs against the in-memory files (absolute paths in `files`):
    the loop's file write (bash -c '... cat > "$1"' _ PATH, content on stdin), and echo, cat, sleep, true,
    false, pwd, printenv, rm and `head -c N /dev/zero` as coreutils do; any other program is not found (127).
    Every exec is kept in `calls`."""

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
        self.id = f"fake-{id(self):x}"
        self.files: dict[str, bytes] = {}
        self.calls: list[dict] = []  # {"cmd", "timeout", "stdin", "user", "cwd", "env"} of every exec
        self.dead = False
        self.warm_start = None
        self._cause: str | None = None
        self._baseline: dict[str, bytes] | None = None

    @property
    def commands(self) -> list:
        return [c["cmd"] for c in self.calls]

    def _path(self, name: str, cwd: str) -> str:
        return name if name.startswith("/") else f"{cwd.rstrip('/')}/{name}"

    async def exec(
        self,
        cmd: str | list[str],
        timeout: float = 60.0,
        *,
        user: str | int = "agent",
        cwd: str | None = None,
        env: dict | None = None,
        stdin: bytes | None = None,
        cap: int = OUTPUT_CAP,
        fork: tuple[str, ...] | None = None,
    ) -> ExecResult:
        cwd = self.workdir if cwd in (None, "/workspace") else cwd
        self.calls.append(
            {"cmd": cmd, "timeout": timeout, "stdin": stdin, "user": user, "cwd": cwd, "env": env}
        )
        if self.dead or (isinstance(cmd, str) and cmd in self.dies):
            if not self.dead:
                self._cause = self.dies_of
            self.dead = True
            raise SandboxDied("fake sandbox died")
        if isinstance(cmd, list):
            code, out, err, duration = self._argv(cmd, cwd, env or {}, stdin)
            answer = ExecResult.from_streams(code, _capped(out, cap), _capped(err, cap), duration)
        else:
            answers = self.script.get(cmd, [""])
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if isinstance(answer, str):
                answer = ExecResult(exit_code=0, stdout=answer, stderr="", duration=0.0)
        if answer.duration > timeout:  # killed at the timeout (SIGKILL), as the real sandbox does
            return ExecResult(exit_code=-9, stdout="", stderr="", duration=timeout, timed_out=True)
        return answer

    def _argv(
        self, argv: list[str], cwd: str, env: dict, stdin: bytes | None
    ) -> tuple[int, bytes, bytes, float]:
        prog, args = argv[0], argv[1:]
        if prog in ("bash", "sh") and args[:1] == ["-c"] and "cat >" in args[1]:  # the loop's file write
            self.files[self._path(args[-1], cwd)] = stdin or b""
            return 0, b"", b"", 0.0
        if prog == "echo":
            return 0, (" ".join(args) + "\n").encode(), b"", 0.0
        if prog in ("true", "false"):
            return int(prog == "false"), b"", b"", 0.0
        if prog == "pwd":
            return 0, cwd.encode() + b"\n", b"", 0.0
        if prog == "sleep":
            return 0, b"", b"", float(args[0])
        if prog == "printenv":
            return (0, env[args[0]].encode() + b"\n", b"", 0.0) if args[0] in env else (1, b"", b"", 0.0)
        if prog == "head" and args[:1] == ["-c"] and args[2:] == ["/dev/zero"]:
            return 0, bytes(int(args[1])), b"", 0.0
        if prog in ("cat", "rm"):
            if prog == "cat" and not args:
                return 0, stdin or b"", b"", 0.0
            out, err, code = b"", b"", 0
            for name in args:
                path = self._path(name, cwd)
                if path not in self.files:
                    err += f"{prog}: {name}: No such file or directory\n".encode()
                    code = 1
                elif prog == "cat":
                    out += self.files[path]
                else:
                    del self.files[path]
            return code, out, err, 0.0
        return 127, b"", f"{prog}: command not found\n".encode(), 0.0

    def death_cause(self, wait: float = 5.0) -> str | None:
        return self._cause

    def kill(self) -> None:
        self.dead = True

    # -- files and change capture
    def _root(self, root: str) -> str:
        return (self.workdir if root == "/workspace" else root).rstrip("/")

    async def put_files(
        self, files: dict[str, bytes], dest: str = "/workspace", user: str | int = "agent", executable=()
    ) -> list[str]:
        if self.dead:
            raise SandboxDied("fake sandbox died")
        self.files.update({f"{self._root(dest)}/{k.lstrip('/')}": v for k, v in files.items()})
        return []

    async def get_files(
        self, paths: list[str], root: str = "/workspace", max_bytes: int = 16 << 20
    ) -> dict[str, bytes]:
        if self.dead:
            raise SandboxDied("fake sandbox died")
        out = {
            p: self.files[f"{self._root(root)}/{p}"] for p in paths if f"{self._root(root)}/{p}" in self.files
        }
        if sum(map(len, out.values())) > max_bytes:
            raise InfraError(f"files under {root} exceed {max_bytes} bytes")
        return out

    def _workspace(self) -> dict[str, bytes]:
        prefix = self.workdir.rstrip("/") + "/"
        return {p[len(prefix) :]: d for p, d in self.files.items() if p.startswith(prefix)}

    async def mark_baseline(self, max_files: int = 5000) -> None:
        self._baseline = self._workspace()

    async def changes(self, max_bytes: int = 10 << 20, max_files: int = 2000, links: bool = False) -> Changes:
        """The workspace's changes since mark_baseline() (no baseline: none, as the loop's tests expect)."""
        if self._baseline is None:
            return Changes()
        now, base = self._workspace(), self._baseline
        return Changes(
            files={p: d for p, d in now.items() if base.get(p) != d},
            deleted=sorted(p for p in base if p not in now),
        )


class FakePool:
    """The SandboxPool contract handing out FakeSandboxes (for run_attempt paths that never grade)."""

    run_id = "fake"

    def __init__(self, **sandbox_kw):
        self.sandbox_kw, self.sandboxes = sandbox_kw, []

    async def acquire(self, image: str, limits=None, task: str = "pool") -> FakeSandbox:
        self.sandboxes.append(FakeSandbox(**self.sandbox_kw))
        return self.sandboxes[-1]

    async def release(self, sb: FakeSandbox) -> None:
        sb.kill()

    def sandbox(self, image: str, limits=None, task: str = "pool"):
        return pooled(self, image, limits, task)

    def expect(self, acquires: int) -> None:
        pass

    async def close(self) -> None:
        for sb in self.sandboxes:
            sb.kill()


def suite_sample(tasks):
    """Every task outside a family, and of each family its first train and first held-out instance:
    the instances differ only in their parameters (`harness tasks validate tasks/builtin/families`
    checks all 280; kept out of the test suite for its time: the suite stays under 30 minutes)."""
    picked, seen = [], set()
    for t in tasks:
        if not t.family or (t.family, t.split) not in seen:
            picked.append(t)
            seen.add((t.family, t.split))
    return picked


def signals_as_in_a_shell() -> None:
    """preexec_fn for a child a test interrupts: Ctrl-C, SIGTERM and SIGHUP back to their defaults. A suite
    started in the background (`make test &`, nohup) ignores SIGINT or SIGHUP, and children inherit that."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
