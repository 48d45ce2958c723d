"""The script evaluator kind: the task's tests/test.sh runs as root in a fresh grading container and writes a
reward 0..1 to $REWARD_FILE (root-only); it starts the candidate's code with `as-candidate CMD...`, so that
code cannot reach the reward file."""

from __future__ import annotations

from agent import AGENT_UID
from evaluators.grading import verdict as rules
from evaluators.grading.kinds import Kind
from results.errors import UserError

CANDIDATE_UID = AGENT_UID  # the candidate's code runs as the sandbox user
# On test.sh's PATH: runs the candidate's code as the candidate user with a clean environment.
AS_CANDIDATE = (
    f"#!/bin/sh\n# Runs a command as the candidate user, with a clean environment.\n"
    f"exec setpriv --reuid={CANDIDATE_UID} --regid={CANDIDATE_UID} --clear-groups -- "
    f"env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 WORKSPACE=/workspace "
    f'"$@"\n'
).encode()
EXPORT_TEST_SH = """# as in harness: test.sh runs as root and starts the candidate's code with `as-candidate CMD...`
S=$(mktemp -d); chmod 0700 "$S"
env -i PATH=$H/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 WORKSPACE=/workspace REWARD_FILE="$S/reward.txt" \\
  timeout -s KILL {timeout} bash $H/script/test.sh
reward=$(/usr/bin/python3 -I $H/verdict.py script "$S/reward.txt")
"""  # noqa: E501 -- in the exported tests/test.sh, byte for byte


class ScriptKind(Kind):
    name = "script"

    def settings(self, table, tests, loc, where):
        from tasks.model import EvaluatorConfig

        if "test.sh" not in tests:
            raise UserError(
                f'{where("tests/test.sh")}: missing (kind = "script" runs tests/test.sh, which writes '
                "a reward 0..1 to the file named by $REWARD_FILE)"
            )
        return EvaluatorConfig(kind=self.name)

    async def grade_fresh(self, task, changes, pool, image, kept=None, stations=None):
        from evaluators.grading import grade

        why = grade.tamper(task, changes)
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
        grading = grade.grading_sandbox(task, changes, pool, image, prepare=grader)
        async with grading as sb:
            # Sourced by name from the environment, which only root can read: the command line (readable by
            # anyone) does not say where the hidden files are. ${BASH_SOURCE[0]} is the script's path.
            run = await grade.run(
                sb,
                ["timeout", "-s", "KILL", str(int(timeout)), "bash", "-c", '. "$HARNESS_TEST_SH"'],
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
