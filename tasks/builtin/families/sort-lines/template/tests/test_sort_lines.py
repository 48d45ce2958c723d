import os
from pathlib import Path

WS = Path(os.environ.get("WORKSPACE", "/workspace"))
DATA = """{{lines}}"""


def result_lines():
    return (WS / "{{out}}").read_text().splitlines()


def test_lines_are_sorted():
    assert result_lines() == sorted(DATA.splitlines())
    # the input unchanged: not a test of its own, as it holds before any work
    assert (WS / "{{file}}").read_text() == DATA


def test_duplicates_kept():
    assert len(result_lines()) == len(DATA.splitlines())


def test_canary_reverse_order():
    assert result_lines() == sorted(DATA.splitlines(), reverse=True) + ["zzz"]
