import os
from pathlib import Path

WS = Path(os.environ.get("WORKSPACE", "/workspace"))
PROJECT = WS / "project"

KEPT = {
    "src/main.py": "print(\"hi\")\n",
    "src/cache/index.json": "keep me\n",
    "docs/README.md": "# Docs\n",
    "docs/notes.tmp.txt": "not temp\n",
    "docs/tmp.md": "still not temp\n",
    "build/tmp/output.bin": "build\n",
    "build/REPORT.TMP": "TMP upper case\n",
}


def files():
    return {p.relative_to(PROJECT).as_posix() for p in PROJECT.rglob("*") if p.is_file()}


def test_no_tmp_files_left():
    assert "src/main.py" in files()  # alone, an emptied project would pass
    assert [f for f in files() if f.endswith(".tmp")] == []


def test_other_files_kept_unchanged():
    assert files() == set(KEPT)
    for rel, text in KEPT.items():
        assert (PROJECT / rel).read_text() == text


def test_canary_readme_rewritten():
    assert (PROJECT / "docs/README.md").read_text() == "# Docs (cleaned)\n"
