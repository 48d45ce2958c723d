"""The terminal `harness eval` draws, seen through a real terminal: tmux at 80 columns (capture-pane). The
progress display and the summary fit (no line wraps), the first progress line comes within seconds, Ctrl-C
prints the exact resume command, and --resume says what it skips and what it runs again."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
WIDTH = 80

pytestmark = pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux (apt-get install tmux)")


@pytest.fixture
def short_tmp():
    """A folder with a short path: the run's paths are on the screen, and pytest's tmp_path is long."""
    path = Path(tempfile.mkdtemp(prefix="term-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Terminal:
    """A command in a detached tmux session of WIDTH columns, on a tmux server of its own."""

    def __init__(self, tmp: Path, command: str, height: int = 50):
        self.socket = str(tmp / "tmux.sock")
        self.tmux = ["tmux", "-S", self.socket]
        script = tmp / f"run{time.monotonic_ns()}.sh"
        script.write_text(f"cd {shlex.quote(str(tmp))}\n{command}\necho EXIT $?\nsleep 600\n")
        subprocess.run(
            [*self.tmux, "new-session", "-d", "-x", str(WIDTH), "-y", str(height), f"bash {script}"],
            check=True,
        )

    def screen(self, joined: bool = False) -> str:
        args = ["capture-pane", "-p"] + (["-J"] if joined else [])
        return subprocess.run([*self.tmux, *args], capture_output=True, text=True, check=True).stdout

    def wait_for(self, pattern: str, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = self.screen()
            if re.search(pattern, text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"not on the screen after {timeout:.0f}s: {pattern!r}\n{self.screen()}")

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


def fits(term: Terminal) -> list[str]:
    """The screen's lines, after checking that none is wider than the terminal or wrapped onto the next."""
    plain, joined = term.screen(), term.screen(joined=True)
    assert plain == joined, f"a line wrapped at {WIDTH} columns:\n{joined}"
    lines = plain.rstrip("\n").split("\n")
    assert all(len(line) <= WIDTH for line in lines)
    return lines


def eval_command(script: Path, out: Path) -> str:
    return (
        f"{shlex.quote(sys.executable)} {ROOT / 'harness.py'} eval --model replay:{script} "
        f"--tasks builtin:easy --limit 3 --out {out}"
    )


EXPECTED = """\
harness eval: replay:SCRIPT on 3 tasks x 1 samples
[########################] 3/3 solved 0 errors 0 Ns ETA Ns
== overview (95% CI: bootstrap over tasks; errors left out of rates)
               run
─
model          replay:SCRIPT
solved         0.000
95% CI         0.000-0.000
pass@1         0.000
tasks          3
attempts       3
errors         0
steps/attempt  2.0
tokens/attempt N
s/attempt      N
cost           $0.0000

== by domain
domain    run tasks attempts errors solved 95% CI
─
data      run     1        1      0  0.000 0.000-0.000
documents run     1        1      0  0.000 0.000-0.000
ops       run     1        1      0  0.000 0.000-0.000

== by difficulty
difficulty run tasks attempts errors solved 95% CI
─
1          run     3        3      0  0.000 0.000-0.000

== failure reasons (failed attempts)
run field       value     count
─
run reason      fail          2
run reason      no_answer     1
run exit_reason submitted     3
every column, plots and each attempt's steps:
  HARNESS report DIR/run
run folder: DIR/run
EXIT 0"""


def normalized(lines: list[str], tmp: Path, script: Path) -> str:
    text = "\n".join(lines).rstrip()
    text = text.replace(str(script), "SCRIPT").replace(str(tmp), "DIR")
    text = text.replace(str(ROOT / ".venv/bin/harness"), "HARNESS")  # the venv's entry point, as printed
    text = re.sub(r"\b\d+s\b", "Ns", text)
    text = re.sub("─+", "─", text)  # the rules' length follows the paths
    text = re.sub(r"^(tokens/attempt|s/attempt)( +)[\d.]+", r"\1\2N", text, flags=re.M)
    return text


@pytest.mark.slow
def test_eval_fits_80_columns_from_the_first_line_to_the_summary(image, short_tmp):
    tmp_path = short_tmp
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": ["```bash\nls\n```", "```bash\nsubmit\n```"]}))
    term = Terminal(tmp_path, eval_command(script, tmp_path / "run"))
    try:
        started = time.monotonic()
        # the first progress line comes within seconds, and says what the attempts are waiting on
        term.wait_for(r"\] 0/3 solved 0|running: |loading the model|building the images", timeout=30)
        assert time.monotonic() - started < 30
        fits(term)
        term.wait_for(r"EXIT \d", timeout=240)
        assert normalized(fits(term), tmp_path, script) == EXPECTED
    finally:
        term.close()


@pytest.mark.slow
def test_ctrl_c_prints_the_resume_command_and_resume_says_what_it_runs_again(image, short_tmp):
    tmp_path = short_tmp
    script = tmp_path / "slow.json"  # every attempt runs a 6 s command first: in flight when interrupted
    script.write_text(json.dumps({"*": ["```bash\nsleep 6\n```", "```bash\nsubmit\n```"]}))
    out = tmp_path / "run"
    term = Terminal(tmp_path, eval_command(script, out))
    try:
        term.wait_for(r"3 running: .*commands", timeout=120)
        term.keys("C-c")
        screen = term.wait_for(r"EXIT \d+", timeout=60)
        joined = term.screen(joined=True)
        command = re.search(r"resume with:\n  (.*)", joined).group(1).strip()
        # everything but the command (as long as its paths) fits; the display's last lines stay
        assert all(len(line) <= WIDTH for line in joined.replace(command, "").split("\n"))
        assert "EXIT 130" in screen
        assert sum(line.startswith("[") for line in joined.split("\n")) == 1  # no stale copy of the bar
        assert re.search(r"3 running: .*commands", joined)
        assert "3 attempts in flight were not recorded;\n  --resume runs them again from the start" in joined
        print(joined.rstrip())  # the screen, for the record (pytest -s)
    finally:
        term.close()
    assert command.endswith(f"--resume {out}") and "--limit 3" in command and "--out" not in command
    # the printed command, run as printed, continues the run
    assert command.startswith(str(ROOT / ".venv/bin/harness") + " ")  # runs without the venv on PATH
    resumed = subprocess.run(
        command,
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert (
        f"resuming {out}: skipping 0 recorded attempts; running 3 not recorded (never started, or in flight "
        "when the run stopped: those start over and are paid again)" in resumed.stderr
    )
    assert len((out / "attempts.jsonl").read_text().splitlines()) == 3


def test_said_lines_wrap_at_words_in_a_terminal_and_stay_whole_elsewhere():
    """A long line above the progress display (the resume note) wraps between words at the terminal's
    width, where the terminal itself would cut a word in two; written to a pipe or a log it stays one line."""
    import io

    from rich.console import Console

    from evaluators.run.progress import Progress
    from evaluators.run.runner import resume_note

    note = resume_note(Path("runs/20261201T165502Z-local-smollm2-135m"), 5, 210)
    for terminal in (True, False):
        out = io.StringIO()
        bar = Progress(console=Console(file=out, force_terminal=terminal, width=80, color_system=None))
        bar.say(note)
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # the live display's cursor codes
        lines = [line.rstrip() for line in text.splitlines() if line.strip() and not line.startswith("[")]
        if terminal:
            assert len(lines) > 1 and all(len(line) <= 80 for line in lines), lines
            assert " ".join(lines) == note  # every break falls between two words
        else:
            assert lines == [note]
