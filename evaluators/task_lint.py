"""What a task's own files show is wrong, without a sandbox: the solution given away (in the instruction or
in the starting files) and hidden tests that depend on the network or on the wall clock. `harness tasks
validate` reports these beside what its sandbox runs find (evaluators/validate.py).

Why static: the grading container has no network unless the task asks, so a test that needs the network
fails the oracle run anyway (and reads here as what it is), and a test that reads the date passes today and
fails on another day, which no run today shows. The patterns are deliberately narrow (a call that fetches,
a call that reads the date); docs/task-quality.md ("Broken tasks") gives what they miss.
"""

from __future__ import annotations

import re

from tasks.model import Task

# A line this long is distinctive: shorter ones (`set -e`, `fi`, `return out`) appear in any two files.
MIN_LINE = 25
SHORT_LINE = 8  # `return x`: a line of code, not `fi` or `EOF`
_COMMON = ("import ", "from ", "#", "def ", "class ", "cat >", "cat <<", "python3 ", "set -", "cd ")

# a fetch call, or curl/wget in a command's place (not "apt-get install -y curl")
NETWORK = re.compile(
    r"\burlopen\(|\brequests\.(get|post|head)\(|\bhttpx\.|\bhttp\.client\b|\bsocket\.create_connection\("
    r"|\bsocket\.getaddrinfo\(|\bgethostbyname\(|\b(nc|ping)\s+-"
    r"""|(^|[;|&(`"'\[]|\$\()\s*(sudo\s+)?["']?(curl|wget)(\s|["'],)""",
    re.M,
)
# a URL whose host is not this container's own: a service the test started itself needs no network
LOCAL = r"(localhost|127\.[\d.]+|0\.0\.0\.0|\[::1\])"
REMOTE_URL = re.compile(rf"\b(https?|ftp)://(?!{LOCAL}[:/'\"\s]|{LOCAL}$)[\w.-]+", re.M)
LOCAL_HOST = re.compile(rf"\b{LOCAL}\b")
# time.time() is left out: tests use it for unique names and elapsed time, not for the date
CLOCK = re.compile(
    r"\b(datetime|date)\.(now|today|utcnow)\(|\btime\.(localtime|gmtime|ctime)\(\)"
    r"|\$\(date\b|`date\b"
)


def _lines(data: bytes, min_len: int = MIN_LINE) -> set[str]:
    out = set()
    for line in data.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if len(line) >= min_len and not line.startswith(_COMMON):
            out.add(line)
    return out


def solution_leaks(task: Task) -> list[str]:
    """The solution's distinctive lines (solution/*) quoted in the instruction, a whole solution file in a
    starting file (the workspace, or the context a Dockerfile copies from), and an answer task's expected
    answer quoted in the instruction."""
    problems = []
    starting = {**task.workspace_files, **task.build_context}
    # a line the starting files hold is given anyway (HumanEval: the prompt is the stub and the instruction)
    given = set().union(*(_lines(d) for d in starting.values()))
    lines = set().union(*(_lines(d) for d in task.solution_files.values())) - given
    quoted = sorted(line for line in lines if line in task.instruction)
    if quoted:
        problems.append(f"instruction quotes the solution: {quoted[0][:60]!r}")
    # all of a solution file's lines (2 or more of 8+ characters) in one starting file: a fix task's oracle
    # rewrites a starting file, so some of its lines are there already, but never all (the fix is not);
    # short lines count here, since a solution's distinctive lines can all be given (HumanEval's prompt)
    for sol, data in sorted(task.solution_files.items()):
        own = _lines(data, SHORT_LINE)
        where = [p for p, d in sorted(starting.items()) if len(own) >= 2 and own <= _lines(d, SHORT_LINE)]
        if where:
            problems.append(f"starting file {where[0]} holds the solution ({sol}, {len(own)} lines)")
            break
    expected = getattr(task.evaluator.settings, "expected", None)
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        expected = f"{expected:g}"
    if isinstance(expected, str) and len(expected.strip()) >= 4 and expected.strip() in task.instruction:
        problems.append(f"instruction quotes the expected answer {expected.strip()[:40]!r}")
    return problems


def _tests_text(task: Task) -> list[tuple[str, str]]:
    return [(name, data.decode("utf-8", "replace")) for name, data in sorted(task.test_files.items())]


def network_use(task: Task) -> list[str]:
    """Hidden tests that fetch from another machine, in a task whose verifier has no network. A fetch counts
    when the file names a remote URL, or fetches and names no local address (the target is computed)."""
    harbor = task.harbor
    if task.environment.allow_internet or (harbor is not None and getattr(harbor, "verifier_network", False)):
        return []
    for name, text in _tests_text(task):
        call = NETWORK.search(text)
        remote = REMOTE_URL.search(text)
        if call and (remote or not LOCAL_HOST.search(text)):
            what = remote.group(0) if remote else call.group(0).strip(" (;|&`$")
            return [
                f"hidden test {name} uses the network ({what}) but its verifier has none:"
                " ship the data with the tests"
            ]
    return []


def clock_use(task: Task) -> list[str]:
    """Hidden tests that read the date or time of day: their verdict can change from one day to the next."""
    for name, text in _tests_text(task):
        m = CLOCK.search(text)
        if m:
            call = m.group(0).strip(" (`$")
            return [
                f"hidden test {name} reads the wall clock ({call}): its verdict can change with the date;"
                " use fixed dates"
            ]
    return []


def lint(task: Task, oracle_passed: bool = False) -> list[str]:
    """Every problem the task's files show, one line each. A fetch the oracle passed without does not decide
    the verdict (Terminal-Bench's test.sh fetches uv's installer; the image has uv), so it is reported only to
    explain an oracle that fails."""
    return solution_leaks(task) + ([] if oracle_passed else network_use(task)) + clock_use(task)
