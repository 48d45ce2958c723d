"""Hidden means hidden during grading too (issue 39, item 2): a candidate that searches for the hidden tests
every way a process can (evaluators/selftest/hidden_probe.py: environments, command lines, /proc of every
process, inherited and open file descriptors, every readable file, and a process left behind that watches
the verifier's later command lines) finds nothing, in the script kind (as-candidate) and the pytest kind
(the candidate proxy, and processes the tests start). Each has twins whose hidden tests are reachable on
purpose, so the probe is shown to find them. Real Docker, through the real grader."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from agent.sandbox import Changes
from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.grading.grade import grade
from evaluators.selftest import hidden_probe
from tasks.model import EvaluatorConfig, Task
from tests.conftest import run

pytestmark = pytest.mark.slow
PROBE = Path(hidden_probe.__file__).read_bytes()
MARKER = hidden_probe.PREFIX + secrets.token_hex(8)

# test.sh: the probe as the candidate, then a command of the verifier's with the marker on its command
# line (a probe process still alive would see it), then reward 1 only if the probe finished and nothing
# it saw holds the marker.
SCRIPT = f"""#!/bin/bash
# {MARKER}
out=$(timeout 120 RUN python3 probe.py 2>&1)
/bin/sh -c ': {MARKER}; sleep 1.5'
late=$(cat /tmp/probe-late.txt 2>/dev/null)
printf '%s\\n' "$out" "late: $late"
case "$out $late" in *{MARKER}*) echo 0 > "$REWARD_FILE";; *PROBE-DONE*) echo 1 > "$REWARD_FILE";;
  *) echo 0 > "$REWARD_FILE";; esac
"""
SCRIPT_CASES = {
    # name: (test.sh, solved?)
    "as-candidate": (SCRIPT.replace("RUN", "as-candidate"), True),
    # twins: the candidate run as root (the fix-operator family's mistake), a readable copy of the tests,
    # and a verifier command with the marker on its command line while the candidate runs (the documented
    # limit: no PID namespace without CAP_SYS_ADMIN)
    "twin-as-root": (SCRIPT.replace("RUN", "env"), False),
    "twin-readable-copy": (
        SCRIPT.replace(
            "out=$(", 'cp "${BASH_SOURCE[0]}" /tmp/copy.sh; chmod 644 /tmp/copy.sh\nout=$(', 1
        ).replace("RUN", "as-candidate"),
        False,
    ),
    "twin-concurrent-argv": (
        SCRIPT.replace("out=$(", f"(/bin/sh -c ': {MARKER}; sleep 60' &)\nout=$(", 1).replace(
            "RUN", "as-candidate"
        ),
        False,
    ),
}


def _grade(task: Task, image: str):
    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(task, Changes(files={"probe.py": PROBE}), pool, image)

    return run(main())


@pytest.mark.parametrize("name", list(SCRIPT_CASES))
def test_script_kind_candidate_finds_no_hidden_test(name, image):
    test_sh, solved = SCRIPT_CASES[name]
    task = Task(
        id="probe",
        path=None,
        instruction="x",
        test_files={"test.sh": test_sh.encode()},
        evaluator=EvaluatorConfig(kind="script"),
        verifier_timeout_sec=200,
    )
    v = _grade(task, image)
    assert v.solved is solved, (name, v.reason, v.detail[-800:])


PYTEST_FILE = f"""# {MARKER}
import subprocess
import sys

from probe import scan


def test_through_the_proxy():
    seen = scan()
    assert "PROBE-DONE" in seen and "{MARKER}" not in seen, seen[-600:]


def test_a_process_the_test_starts():
    r = subprocess.run([sys.executable, "probe.py"], capture_output=TrueKWARGS, text=True, timeout=150)
    assert "PROBE-DONE" in r.stdout and "{MARKER}" not in r.stdout, (r.stdout + r.stderr)[-600:]


def test_canary_impossible():
    assert scan() == "impossible"
"""
PYTEST_CASES = {
    "proxy": (PYTEST_FILE.replace("KWARGS", ""), True),
    # twins: the test hands the candidate the tests on purpose (its own environment variable), or starts
    # it as root (it reads the test runner's working folder through /proc)
    "twin-env-set-back": (PYTEST_FILE.replace("KWARGS", ", env={'LEAK': open(__file__).read()}"), False),
    "twin-as-root": (PYTEST_FILE.replace("KWARGS", ", user=0, group=0"), False),
}


@pytest.mark.parametrize("name", list(PYTEST_CASES))
def test_pytest_kind_candidate_finds_no_hidden_test(name, image):
    test_py, solved = PYTEST_CASES[name]
    task = Task(
        id="probe",
        path=None,
        instruction="x",
        test_files={"test_probe.py": test_py.encode()},
        evaluator=EvaluatorConfig(kind="pytest"),
        verifier_timeout_sec=300,
    )
    v = _grade(task, image)
    assert v.solved is solved, (name, v.reason, v.detail[-800:], v.tests)
    if not solved:  # the leak is the one test that fails, not the run
        assert v.reason == "fail" and v.tests, (v.reason, v.detail[-800:])
