"""Issue 11's guarantees outside the self-test catalogue: `run --apply` never touches version-control metadata
or follows links, networked sandboxes cannot reach each other or the host, and nothing an attempt does (or a
bug in grading) aborts a run or turns a failure into an excluded error."""

import asyncio
import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from agent.models.base import ModelError
from agent.sandbox import Changes, SandboxSpec
from agent.sandbox.backends.docker.pool import DockerPool
from agent.workflow import apply_changes, escape_terminal, refuse_reason
from evaluators.run.attempt import attempt_with_retries
from evaluators.run.config import EvalConfig
from evaluators.run.runner import run_eval
from evaluators.selftest import CORRECT, SUBMIT, add_task, bash, write
from results.errors import InfraError
from tests.conftest import ROOT, run
from tests.test_bad_input import harness

# ------------------------------------------------------------------------------------------ run --apply


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    (r / "solution.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (r / "old.txt").write_text("old\n")
    return r


def test_apply_writes_only_regular_files_of_the_working_tree(repo, tmp_path):
    """Version-control metadata and config are held back (listed; the rest applies). Links on the way or in
    the way, escapes from the folder and bad names refuse the whole patch: checked first, nothing written."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "linkdir").symlink_to(outside)
    (repo / "link.txt").symlink_to(outside / "target.txt")
    config_before = (repo / ".git" / "config").read_bytes()
    good = {"solution.py": CORRECT.encode(), "tool.sh": b"#!/bin/sh\necho hi\n", "new/dir/file.txt": b"new\n"}
    vcs = {
        ".git/config": b"[core]\n\tfsmonitor = touch /tmp/pwned\n",
        ".GIT/hooks/pre-commit": b"x",
        "sub/.git": b"gitdir: /etc\n",
        ".gitmodules": b"[submodule]\n",
        "sub/.hg/hgrc": b"[hooks]\n",
    }
    bad = {
        "linkdir/escaped.txt": b"x",
        "link.txt": b"x",
        "../outside/up.txt": b"x",
        "/etc/abs.txt": b"x",
        "bad\x1bname.txt": b"x",
    }
    refused = dict(
        apply_changes(repo, Changes(files={**good, **bad}, executable={"tool.sh"}, deleted=["old.txt"]))
    )
    assert set(bad) <= set(refused) and not (repo / "tool.sh").exists() and (repo / "old.txt").exists()
    assert not (repo / "new").exists() and "NotImplementedError" in (repo / "solution.py").read_text()
    changes = Changes(files={**good, **vcs}, executable={"tool.sh"}, deleted=["old.txt", ".git/HEAD"])
    held = dict(apply_changes(repo, changes))
    assert (repo / "solution.py").read_text() == CORRECT and (
        repo / "new/dir/file.txt"
    ).read_text() == "new\n"
    assert os.access(repo / "tool.sh", os.X_OK) and not (repo / "old.txt").exists()
    assert (repo / ".git" / "config").read_bytes() == config_before and (repo / ".git" / "HEAD").exists()
    assert set(held) == set(vcs) | {".git/HEAD"}
    assert list(outside.iterdir()) == [] and (repo / "link.txt").is_symlink()
    assert not (repo / "sub").exists() or not (repo / "sub" / ".git").exists()
    assert refuse_reason("src/ok.py") == "" and refuse_reason("a/../b") and refuse_reason(".Hg/x")


def test_escape_terminal_keeps_text_and_neutralises_controls():
    assert escape_terminal("ok\n\tline") == "ok\n\tline"
    assert (
        escape_terminal("\x1b]52;c;AAAA\x07red\x1b[31m\u202eevil\r")
        == "\\x1b]52;c;AAAA\\x07red\\x1b[31m\\u202eevil\\x0d"
    )


@pytest.mark.slow
def test_cli_run_apply_end_to_end_refuses_git_and_escapes_output(image, repo, tmp_path):
    """The agent writes .git/config with core.fsmonitor, a hook, a symlink, and prints escape sequences: the
    user's next `git status` runs nothing of it, and the terminal gets no raw escape byte."""
    marker = tmp_path / "fsmonitor-ran"
    attack = "\n".join(
        [
            write("solution.py", CORRECT),
            "mkdir -p .git/hooks",
            write(".git/config", f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch {marker}\n"),
            write(".git/hooks/post-checkout", f"#!/bin/sh\ntouch {marker}\n"),
            "ln -s /etc/passwd passwd_link",
            write("notes.txt", "hello \x1b[2J\x1b]0;pwned\x07 world"),
        ]
    )
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [bash(attack), SUBMIT]}))
    proc = harness(
        "run",
        "--model",
        f"replay:{script}",
        "--workspace",
        str(repo),
        "implement add",
        "--apply",
        "--verify",
        "python3 -c 'from solution import add; assert add(2, 3) == 5'",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\x1b" not in proc.stdout and "\x1b" not in proc.stderr and "\\x1b[2J" in proc.stdout
    assert (repo / "solution.py").read_text() == CORRECT and (repo / "notes.txt").exists()
    assert not (repo / "passwd_link").exists()
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()
    git(repo, "status")
    assert not marker.exists()


# ------------------------------------------------------------------------------------------ networks


def _listen_on_host() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("0.0.0.0", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    return srv, srv.getsockname()[1]


@pytest.mark.slow
def test_networked_sandboxes_reach_neither_each_other_nor_the_host(image):
    """Only local addresses are tried: a peer sandbox and this host's address on the run's bridge."""
    srv, port = _listen_on_host()
    accepted = []

    def accept():
        for _ in range(150):
            try:
                accepted.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    probe = (
        'python3 -c "import socket,sys\ntry:\n'
        " socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)"
        "\n print('CONNECTED')\nexcept OSError as e:\n print('REFUSED', e)\" {} {}"
    )

    async def main():
        async with DockerPool(warm=0) as pool:
            limits = SandboxSpec(network=True)
            a = await pool.acquire(image, limits)
            b = await pool.acquire(image, limits)
            try:
                ip_a = (await a.exec("hostname -I", timeout=10)).stdout.split()[0]
                gateway = (
                    await b.exec("ip route 2>/dev/null | awk '/default/ {print $3}' || true", timeout=10)
                ).stdout
                gateway = gateway.strip() or ".".join(ip_a.split(".")[:3] + ["1"])
                listener = asyncio.ensure_future(
                    a.exec(
                        'python3 -c "import socket,time\n'
                        "s=socket.socket();s.bind(('0.0.0.0',8765));s.listen(8);"
                        "s.settimeout(0.5)\nend=time.time()+8\nwhile time.time()<end:\n try:\n  s.accept()\n"
                        ' except OSError:\n  pass"',
                        timeout=12,
                    )
                )
                await asyncio.sleep(1.0)
                self_check = await a.exec(probe.format("127.0.0.1", 8765), timeout=10)  # the listener works
                peer = await b.exec(probe.format(ip_a, 8765), timeout=10)
                host = await b.exec(probe.format(gateway, port), timeout=10)
                await listener
                return self_check.stdout, peer.stdout, host.stdout
            finally:
                await pool.release(a)
                await pool.release(b)

    self_check, peer, host = run(main())
    srv.close()
    assert "CONNECTED" in self_check
    assert "REFUSED" in peer and "REFUSED" in host and not accepted, (peer, host)


# ------------------------------------------------------------------------------------------ the run goes on


def attempt_raising(image, exc: Exception, calls: list):
    async def policy(task, sb):
        calls.append(1)
        raise exc

    async def main():
        async with DockerPool(warm=0) as pool:
            return await attempt_with_retries(
                add_task("t"), lambda: policy, pool, image, run_id="r", model_name="m"
            )

    return run(main())


def test_an_unexpected_exception_is_the_attempts_failure_not_a_run_abort(image):
    rec = attempt_raising(image, RecursionError("deep"), [])
    assert (rec.status, rec.reason, rec.reward) == (
        "failed",
        "harness_error",
        0.0,
    ) and "RecursionError" in rec.error


def test_infrastructure_errors_are_retried_then_recorded_as_errors(image):
    calls = []
    rec = attempt_raising(image, InfraError("engine hiccup"), calls)
    assert (rec.status, rec.reason) == ("error", "infra_error") and len(calls) == 3


class RejectingModel:
    """A provider that refuses the conversation (HTTP 400, e.g. a content filter) or is down (503)."""

    name = "rejecting"
    supports_tools = False
    context_window = 100_000

    def __init__(self, status: int):
        self.status = status

    async def complete(self, messages, **kw):
        err = ModelError(f"provider said {self.status}")
        err.status = self.status
        raise err

    def count_tokens(self, messages) -> int:
        return sum(len(str(m.get("content", ""))) // 4 for m in messages)


@pytest.mark.parametrize("status,expected", [(400, "failed"), (503, "error")])
def test_a_refused_conversation_is_a_failure_an_outage_an_error(image, tmp_path, status, expected):
    out = tmp_path / "run"
    run(
        run_eval(
            EvalConfig(model="rejecting", out=out),
            [add_task("t")],
            progress=False,
            model_obj=RejectingModel(status),
        )
    )
    rec = json.loads((out / "attempts.jsonl").read_text())
    assert rec["status"] == expected and rec["reward"] == 0.0
    assert f"provider said {status}" in (rec["error"] or "")


def test_the_docs_describe_the_grading_design():
    readme, scoring = (ROOT / "README.md").read_text(), (ROOT / "docs" / "scoring.md").read_text()
    assert "docs/scoring.md" in readme and "tamper" in readme
    for needle in ("as-candidate", "import_mode", "10001", "proxy", "random name"):
        assert needle in scoring, needle


@pytest.mark.slow
def test_a_sandbox_that_never_answers_on_every_try_is_the_attempts_failure(image, tmp_path, monkeypatch):
    """A lost message is retried (test_adversarial_faults); when every try of an attempt ends with its
    command server silent, that is the attempt's own doing, not an error left out of the rates."""
    from agent.sandbox.transport import CommandChannel

    original = CommandChannel.request
    lost = []

    async def request(self, req, host_timeout):
        if "LOSE-ME" in str(req.get("cmd", "")):
            lost.append(self.id)
            self._send = lambda data: None
            host_timeout = 2.0
        return await original(self, req, host_timeout)

    monkeypatch.setattr(CommandChannel, "request", request)
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [bash("echo LOSE-ME"), SUBMIT]}))
    out = tmp_path / "run"
    run(run_eval(EvalConfig(model=f"replay:{script}", out=out), [add_task("t")], progress=False))
    rec = json.loads((out / "attempts.jsonl").read_text())
    assert len(set(lost)) == 3
    assert (rec["status"], rec["reason"], rec["reward"]) == ("failed", "sandbox_unresponsive", 0.0)
