import os
from pathlib import Path

WS = Path(os.environ.get("WORKSPACE", "/workspace"))
DATA = """{{lines}}"""


def answer():
    return int((WS / "{{out}}").read_text().strip())


def test_count_is_right():
    assert (WS / "{{out}}").read_text().strip().isdigit()
    assert answer() == {{n}}
    # the input unchanged: not a test of its own, as it holds before any work
    assert (WS / "{{file}}").read_text() == DATA


def test_canary_counts_every_line():
    assert answer() == len(DATA.splitlines()) + 100
