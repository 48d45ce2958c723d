"""Reward-integrity cases at the edges of grading (issue 21): files the grading container could not hold,
numbers in reward files that are no plain number, and code that forks up to the pid limit. Each must end
as an ordinary `failed` verdict with a reason in the record, never an infrastructure `error`; on top of an
honest solution, what the README's policy says (files that cannot be recreated are left out, listed as
not captured, and the rest is graded)."""

from __future__ import annotations

from evaluators.selftest.case import Case, both, detail_has, graded, zero_reward
from evaluators.selftest.fixtures import CORRECT, SUBMIT, WRONG, bash, with_wrong, write


def _py(code: str) -> str:
    """Shell text that runs `code` with python3 in the workspace."""
    return f"python3 - <<'PY'\n{code}PY"


# 25 folders of 200 characters: a path of 5,000+ bytes, which the kernel refuses in one piece (the agent
# makes it one folder at a time).
LONG_PATH = _py(
    "import os\nos.chdir('/workspace')\nfor _ in range(25):\n"
    "    os.mkdir('p' * 200)\n    os.chdir('p' * 200)\n"
    "open('deep_module.py', 'w').write('x = 1\\n')\nprint('LONG-MADE', len(os.getcwd()))\n"
)
# The limits exactly: a path of PATH_MAX - 1 bytes (kept) and of PATH_MAX bytes (left out), one made of
# two-byte characters (left out: limits count bytes), single names at and over NAME_MAX, 255 undecodable
# bytes, control characters.
NAME_LIMITS = _py(
    "import os\n\n\ndef chain(top, total, unit):\n"
    "    os.chdir('/workspace')\n    os.mkdir(top)\n    os.chdir(top)\n"
    "    used = len(('/workspace/' + top + '/').encode())\n"
    "    while total - used > 255:\n"
    "        os.mkdir(unit)\n        os.chdir(unit)\n        used += len(unit.encode()) + 1\n"
    "    leaf = 'f' * (total - used)\n    open(leaf, 'w').write('x')\n"
    "    return len(os.path.join(os.getcwd(), leaf).encode())\n\n\n"
    "print('AT-LIMIT', chain('at', 4095, 'q' * 200))\nprint('OVER-LIMIT', chain('over', 4096, 'q' * 200))\n"
    "print('WIDE', chain('wide', 4200, '\\u00e9' * 100))\nos.chdir('/workspace')\n"
    "for label, name in (('NAME255', 'n' * 255), ('NAME256', 'n' * 256), ('UTF8-256', '\\u00e9' * 128),\n"
    "                    ('BYTES255', b'\\xff' * 255), ('CONTROL', 'c\\x1b[2J\\x9b\\u202e.txt')):\n"
    "    try:\n        open(name, 'w').write('x')\n        print(label + '-MADE')\n"
    "    except OSError as e:\n        print(label + '-REFUSED', e.strerror)\n"
)
MANY_FILES = _py(
    "import os\nos.makedirs('junk', exist_ok=True)\nfor i in range(3000):\n"
    "    open('junk/%05d.txt' % i, 'w').write('j')\nprint('MANY-MADE')\n"
)
HUGE_FILE = "head -c 20000000 /dev/zero > big.bin && echo HUGE-MADE"
# An honest add() whose module starts 300 workers at import, retrying while the pid limit refuses forks.
FORK_WORKERS = (
    "import os, time\nworkers = []\nwhile len(workers) < 300:\n    try:\n        pid = os.fork()\n"
    "    except BlockingIOError:\n        time.sleep(0.05)\n        continue\n    if pid == 0:\n"
    "        time.sleep(1000)\n        os._exit(0)\n    workers.append(pid)\n"
)


def _score(case: str, what: str, shell: str, *words: str) -> Case:
    """score.sh prints something that is no usable reward: no_report, and the detail says what it was."""
    return Case(
        case,
        "reward",
        f"the reward file holds {what}: no_report with the reason, never a traceback",
        lambda c: [bash(f"cat > score.sh <<'EOF'\n{shell}\nEOF\necho ATTACK-RAN"), SUBMIT],
        task="score",
        check=both(zero_reward("no_report", "ATTACK-RAN"), detail_has(*words)),
    )


def edge_cases() -> list[Case]:
    not_captured = detail_has("not captured")
    return [
        Case(
            "long_path",
            "reward",
            "a file under a 5,000-byte path: not captured, graded without it, reward 0",
            lambda c: [bash(with_wrong(LONG_PATH)), SUBMIT],
            task="add",
            check=both(
                zero_reward("fail", "ATTACK-RAN", "LONG-MADE"),
                not_captured,
                detail_has("over the limit of 4095"),
            ),
            honest=both(graded("solved"), not_captured),
        ),
        Case(
            "name_limits",
            "reward",
            "paths at and over PATH_MAX (also in 2-byte characters), names at NAME_MAX, odd bytes: reward 0",
            lambda c: [bash(with_wrong(NAME_LIMITS)), SUBMIT],
            task="add",
            check=both(
                zero_reward("fail", "ATTACK-RAN", "AT-LIMIT", "OVER-LIMIT", "NAME255-MADE", "BYTES255-MADE"),
                detail_has("a path of 4096 bytes", "a path of 4200 bytes"),
                lambda o: (
                    ["the 4,095-byte path was not captured"] if "a path of 4095" in o.rec.detail else []
                ),
            ),
            honest=both(graded("solved"), detail_has("a path of 4096 bytes")),
        ),
        Case(
            "many_changed_files",
            "reward",
            "3,000 new files beside the solution: those past 2,000 are not captured, reward 0",
            lambda c: [bash(with_wrong(MANY_FILES)), SUBMIT],
            task="add",
            check=both(
                zero_reward("fail", "ATTACK-RAN", "MANY-MADE"), not_captured, detail_has("past the caps")
            ),
            honest=both(graded("solved"), detail_has("past the caps")),
        ),
        Case(
            "huge_file",
            "reward",
            "a 20 MB file beside the solution: not captured (over 10 MB), reward 0",
            lambda c: [bash(with_wrong(HUGE_FILE)), SUBMIT],
            task="add",
            check=both(zero_reward("fail", "ATTACK-RAN", "HUGE-MADE"), detail_has("big.bin")),
            honest=both(graded("solved"), detail_has("big.bin")),
        ),
        Case(
            "fork_workers_at_import",
            "reward",
            "starts 300 processes at import, retrying at the pid limit: timeout, and the detail says why",
            lambda c: [bash(with_wrong(write("solution.py", WRONG + FORK_WORKERS))), SUBMIT],
            task="add_brief",
            slow=True,
            check=both(zero_reward("timeout", "ATTACK-RAN"), detail_has("limit of 64 processes")),
            honest=both(graded("failed", "timeout"), detail_has("limit of 64 processes")),
            honest_script=lambda c: [bash(with_wrong(write("solution.py", CORRECT + FORK_WORKERS))), SUBMIT],
        ),
        _score(
            "reward_huge_integer", "a 400-digit integer", "echo 1$(printf '0%.0s' $(seq 400))", "too large"
        ),
        _score(
            "reward_long_integer",
            "a 5,000-digit integer",
            "python3 -c \"print('1' + '0' * 5000)\"",
            "too long",
        ),
        _score("reward_nan", "NaN", "echo nan", "non-finite"),
        _score("reward_infinity", "-Infinity", "echo -Infinity", "non-finite"),
        _score("reward_overflow", "1e999", "echo 1e999", "too large"),
        _score("reward_hex", "0x1 (another notation)", "echo 0x1", "not a number"),
        _score(
            "reward_huge_file",
            "50 MB of blanks, then 1",
            "head -c 50000000 /dev/zero | tr '\\0' ' '; echo 1",
            "too long",
        ),
    ]
