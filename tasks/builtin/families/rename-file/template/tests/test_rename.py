import os
from pathlib import Path

WS = Path(os.environ.get("WORKSPACE", "/workspace"))
SRC = WS / "{{src}}"
DST = WS / "{{dst}}"
BODY = """{{body}}"""


def test_old_name_is_gone():
    assert DST.is_file()  # alone, deleting the file would pass
    # The names differ only in case for some instances, so compare exact names in the folder.
    assert "{{src}}" not in os.listdir(WS)


def test_content_unchanged():
    assert DST.read_text() == BODY


def test_canary_content_was_appended():
    assert DST.read_text() == BODY + "renamed\n"
