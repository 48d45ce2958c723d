import os
from pathlib import Path

WS = Path(os.environ.get("WORKSPACE", "/workspace"))
TARGET = WS / "{{name}}"
TEXT = "{{text}}"


def read():
    return TARGET.read_text()


def test_content_is_exactly_the_text():
    # One trailing newline (what echo writes) is fine; nothing else may differ.
    assert read() in (TEXT, TEXT + "\n")


def test_no_extra_lines_or_spaces():
    lines = read().splitlines()
    assert lines == [TEXT]


def test_canary_content_has_suffix():
    assert read() == TEXT + " (final version)\n"
