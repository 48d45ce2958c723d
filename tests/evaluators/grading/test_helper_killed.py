"""The agent cannot turn its container into an `error` (issue 39, item 3): a root agent in a Harbor task that
kills (SIGKILL) or stops (SIGSTOP) the harness's command server, found by its executable's path in /proc,
ends as a graded verdict in every verifier mode: the attempt goes on from its container's filesystem
(evaluators/grading/harbor/runtime.revive), so an honest solution that does the same is still solved. Our own
tasks' command server runs as root while the agent is uid 10001: it cannot be killed or stopped at all.

Real Docker; Harbor tasks built FROM our base image; a replay model runs the agent's commands."""

from __future__ import annotations

import pytest

from agent.sandbox import SandboxSpec
from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.selftest.harbor_cases import kill_helper
from tests.conftest import run
from tests.evaluators.grading.test_harbor_runtime import CHECK, SOLVE, eval_replay, harbor_task

pytestmark = pytest.mark.slow


VARIANTS = {
    # name: (the agent's commands, solved?)
    "sigkill": ([kill_helper("KILL")], False),
    "sigstop": ([kill_helper("STOP")], False),
    "work-then-sigkill": ([SOLVE, kill_helper("KILL")], True),
    "work-then-sigstop": ([SOLVE, kill_helper("STOP")], True),
    # a process left behind kills it after the honest work: during capture or verification
    "sigkill-later-then-work": (
        [f"(sleep 2; {kill_helper('KILL')}) > /dev/null 2>&1 &", SOLVE],
        True,
    ),
}
MODES = ("fresh", "snapshot", "shared")


def test_killing_or_stopping_the_command_server_is_graded_in_every_mode(image, tmp_path):
    tasks, scripts = [], {}
    for mode in MODES:
        for name, (cmds, _) in VARIANTS.items():
            tid = f"{name}-{mode}"
            toml = (
                'schema_version = "1.1"\n[agent]\ncommand_timeout_sec = 5\n'
                f'[verifier]\nisolation = "{mode}"\n'
            )
            tasks.append(harbor_task(tmp_path, toml, name=tid, test_sh=CHECK))
            scripts[tid] = cmds
    _, recs = eval_replay(tmp_path, scripts, tasks)
    assert len(recs) == len(tasks)
    for mode in MODES:
        for name, (_, solved) in VARIANTS.items():
            r = recs[f"{name}-{mode}"]
            got = (r["status"], r["reason"])
            want = ("solved", "pass") if solved else ("failed", "fail")
            assert got == want, (name, mode, r["detail"], r["error"], r["exit_reason"])
            if name in ("sigkill", "sigstop", "work-then-sigkill", "work-then-sigstop"):
                assert r["exit_reason"] == "sandbox_died", (name, mode, r["exit_reason"])
            if not name.startswith("sigkill-later") or mode == "shared":  # else kill_all ends the killer
                assert "helper killed by the agent" in r["detail"], (name, mode, r["detail"])


def test_our_agent_cannot_kill_or_stop_its_command_server(image):
    """uid 10001 without capabilities: every signal to the root server (and to tini) is refused, and the
    sandbox answers the next command."""

    async def go():
        async with DockerPool(run_id="server-kill-test", warm=0) as pool:
            async with pool.sandbox(image, SandboxSpec()) as sb:
                r = await sb.exec(
                    "for p in /proc/[0-9]*; do pid=${p#/proc/}; [ $pid = $$ ] && continue; "
                    'for s in KILL STOP TERM; do kill -$s $pid 2>/dev/null && echo "signalled $pid $s"; '
                    "done; done; kill -9 -1; true",
                    20,
                )
                again = await sb.exec("echo still here", 10)
                return r, again

    r, again = run(go())
    assert b"signalled" not in r.out.data, r.out.data
    assert again.exit_code == 0 and again.out.data == b"still here\n"
