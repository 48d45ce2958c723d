"""The script evaluator kind: the task's tests/test.sh runs as root in a fresh grading container and writes a
reward 0..1 to $REWARD_FILE (root-only); it starts the candidate's code with `as-candidate CMD...`, so that
code cannot reach the reward file."""

from __future__ import annotations

from agent import AGENT_UID
from evaluators.grading import verdict as rules
from evaluators.grading.kind import Exportable, Kind
from results.errors import UserError
from tasks.impossible import Variants

# On test.sh's PATH: runs the candidate's code as the candidate user (the sandbox user). What that code can
# reach names nothing of the grader's: a clean environment, no file descriptor but 0-2 (bash keeps its script
# open), and no process of the candidate's outlives the call (kill -1 as that user), so none can read the
# command lines of the verifier's later processes (/proc/<pid>/cmdline is readable by every user; hiding them
# would need CAP_SYS_ADMIN, which the grading container does not have).
AS_CANDIDATE = f"""#!/usr/bin/python3 -I
# Runs a command as the candidate user: a clean environment, only fds 0-2, none of its processes left after.
import os, signal, sys, time
U = {AGENT_UID}
ENV = {{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "WORKSPACE": "/workspace"}}
def become():
    os.setgroups([]); os.setresgid(U, U, U); os.setresuid(U, U, U)
def sweep():  # every process of the candidate's, as the candidate (kill -1 spares the caller)
    pid = os.fork()
    if pid == 0:
        become()
        for _ in range(200):
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                os._exit(0)
            time.sleep(0.005)
        os._exit(1)
    os.waitpid(pid, 0)
def stop(sig, frame):
    sys.exit(128 + sig)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, stop)
if len(sys.argv) < 2:
    sys.exit("usage: as-candidate COMMAND [ARG...]")
pid = os.fork()
if pid == 0:
    try:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        become()
        os.execvpe(sys.argv[1], sys.argv[1:], ENV)
    except OSError as e:
        sys.stderr.write(f"as-candidate: {{sys.argv[1]}}: {{e.strerror}}\\n")
    os._exit(127)
try:
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    code = 128 - code if code < 0 else code
finally:
    sweep()
sys.exit(code)
""".encode()
EXPORT_TEST_SH = """# as in harness: test.sh runs as root and starts the candidate's code with `as-candidate CMD...`
S=$(mktemp -d); chmod 0700 "$S"
env -i PATH=$H/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 WORKSPACE=/workspace REWARD_FILE="$S/reward.txt" \\
  timeout -s KILL {timeout} bash $H/script/test.sh
reward=$(/usr/bin/python3 -I $H/verdict.py script "$S/reward.txt")
"""  # noqa: E501 -- in the exported tests/test.sh, byte for byte


class ScriptKind(Kind, Variants, Exportable):
    name = "script"

    def settings(self, table, tests, loc, where):
        from tasks.model import EvaluatorConfig

        if "test.sh" not in tests:
            raise UserError(
                f'{where("tests/test.sh")}: missing (kind = "script" runs tests/test.sh, which writes '
                "a reward 0..1 to the file named by $REWARD_FILE)"
            )
        return EvaluatorConfig(kind=self.name)

    async def grade(self, task, sub):
        from evaluators.grading import grade

        why = grade.tamper(task, sub.changes)
        if why:
            return rules.Verdict(0.0, False, "tamper", detail=why)
        timeout = task.verifier_timeout_sec
        folder = grade.private_folder()
        reward_file = f"{folder}/reward.txt"
        files = {f"tests/{p}": d for p, d in task.test_files.items()}
        files["bin/as-candidate"] = AS_CANDIDATE
        env = {
            "PATH": f"{folder}/bin:/usr/bin:/bin",
            "HOME": f"{folder}/home",
            "LANG": "C.UTF-8",
            "WORKSPACE": "/workspace",
            "REWARD_FILE": reward_file,
            "HARNESS_TEST_SH": f"{folder}/tests/test.sh",
        }
        grader = grade.grader_files(files, folder, f"{folder}/home", executable={"bin/as-candidate"})
        grading = sub.container(grader)
        async with grading as sb:
            # Sourced by name from the environment, which only root can read, and unset before it runs: the
            # command line (readable by anyone) does not say where the hidden files are, nor does what test.sh
            # starts inherit it. ${BASH_SOURCE[0]} is the script's path.
            source = 'f=$HARNESS_TEST_SH; unset HARNESS_TEST_SH; . "$f"'
            run = await grade.run(
                sb,
                ["timeout", "-s", "KILL", str(int(timeout)), "bash", "-c", source],
                timeout,
                env,
                cwd="/workspace",
            )
            if isinstance(run, rules.Verdict):
                return run
            at_limit = await grade.pid_limit_note(sb, grading.prepared, task, run)
            raw = await grade.read(sb, reward_file)
        if run.timed_out or run.exit_code in (124, 137, -9):
            why = f"test.sh ran out of time ({timeout:.0f}s)" + (f": {at_limit}" if at_limit else "")
            return rules.Verdict(0.0, False, "timeout", detail=grading.not_written + why)
        v = rules.script_verdict(raw)
        v.detail = grading.not_written + v.detail
        return v

    def variant_tests(self, task):
        return "shell", ["test.sh"]

    def export(self, task):
        files = {f"script/{p}": d for p, d in task.test_files.items()}
        files["bin/as-candidate"] = AS_CANDIDATE
        return EXPORT_TEST_SH, files


KIND = ScriptKind()
