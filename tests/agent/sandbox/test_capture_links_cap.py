"""Change capture of symlinks and past the listing cap, without Docker: capture.py run on a local folder (as
root runs it in a sandbox), the static helper's walk on the same folder, and ChangeCapture over capture.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agent.sandbox.capture import listing
from agent.sandbox.changes import CAPTURE_SOURCE, MAX_LISTED, ChangeCapture
from tests.conftest import run


def local_capture(root: Path):
    """ChangeCapture's `capture` for a local folder: capture.py run as a sandbox runs it, on `root`."""

    async def capture(args, stdin=None, cap=64 << 20):
        argv = [sys.executable, "-I", "-c", CAPTURE_SOURCE, args[0], str(root), *args[2:]]
        r = subprocess.run(argv, input=stdin, capture_output=True, check=True)
        return json.loads(r.stdout)

    return capture


def write(root: Path, files: dict[str, bytes]):
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_links_are_kept_as_their_target_text_when_asked_and_refused_by_name_otherwise(tmp_path):
    write(tmp_path, {"releases/v1/VERSION": b"1\n", "releases/v2/VERSION": b"2\n", "old.txt": b"o\n"})
    os.symlink("releases/v1", tmp_path / "current")
    cc = ChangeCapture(local_capture(tmp_path))
    run(cc.mark_baseline())
    (tmp_path / "current").unlink()
    os.symlink("releases/v2", tmp_path / "current")  # repointed
    os.symlink("/etc/passwd", tmp_path / "out")  # out of the folder: kept as text, never followed
    (tmp_path / "old.txt").unlink()
    os.symlink("gone-target", tmp_path / "old.txt")  # a file replaced by a (dangling) link
    os.mkfifo(tmp_path / "pipe")
    kept = run(cc.changes(links=True))
    assert kept.links == {"current": "releases/v2", "out": "/etc/passwd", "old.txt": "gone-target"}
    assert kept.files == {} and kept.deleted == []
    assert kept.rejected == ["special or unreadable file pipe"]
    refused = run(cc.changes())  # our own kinds: no link reaches their graders, and each is named
    assert refused.links == {}
    assert sorted(refused.rejected) == [
        "special or unreadable file pipe",
        "symlink current",
        "symlink old.txt",
        "symlink out",
    ]


def test_the_listing_past_its_cap_keeps_every_baseline_path_and_the_smallest_others(tmp_path):
    write(tmp_path, {"big-start.bin": bytes(5000), "start.txt": b"s\n"})
    write(tmp_path, {f"dep/f{i:03d}": bytes(10 + i) for i in range(100)})
    os.symlink("dep", tmp_path / "link")
    keep = frozenset({"big-start.bin", "start.txt", "gone.txt"})
    out = listing(str(tmp_path), 20, keep)
    others = sorted(set(out["entries"]) - keep)
    # the link counts 0 bytes: it and the 19 smallest files; the 81 larger ones are only counted
    assert others == sorted(["link"] + [f"dep/f{i:03d}" for i in range(19)])
    assert {"big-start.bin", "start.txt"} <= set(out["entries"]) and out["not_listed"] == 81
    assert listing(str(tmp_path), 1000, keep)["not_listed"] == 0  # under the cap: everything


def test_the_helper_lists_what_capture_py_lists(tmp_path):
    """Both capture implementations agree on links (target text, not followed), on what is listed past the
    cap and on how many are left out (their hashes differ: sha256 and FNV-1a)."""
    from agent.sandbox.backends.docker.native import helper_path

    helper = helper_path()  # make test installs gcc: a helper that cannot be built is a failure, not a skip
    write(tmp_path, {"start.txt": b"s\n", "big.bin": bytes(900)})
    write(tmp_path, {f"node_modules/p{i % 7}/f{i:03d}.js": bytes(i % 50) for i in range(300)})
    os.symlink("node_modules/p1", tmp_path / "current")
    os.symlink("../outside", tmp_path / "node_modules" / "up")
    keep = ["big.bin", "start.txt"]
    ours = listing(str(tmp_path), 40, frozenset(keep))
    req = {"id": 1, "op": "snapshot", "root": str(tmp_path), "max_files": 40, "keep": keep}
    lines = subprocess.run(
        [str(helper)], input=json.dumps(req) + "\n", capture_output=True, text=True, timeout=60
    ).stdout.splitlines()
    reply = next(r for r in map(json.loads, lines) if r.get("id") == 1)
    theirs = reply["snapshot"]
    assert reply["not_listed"] == ours["not_listed"] == 300 + 2 - 40
    assert set(theirs) == set(ours["entries"])
    for path, meta in ours["entries"].items():
        assert theirs[path][:2] == meta[:2], path
        if meta[0] == "l":
            assert theirs[path][2] == meta[2], path
    assert theirs["current"][2] == "node_modules/p1" and theirs["node_modules/up"][2] == "../outside"


def test_changes_past_the_listing_cap_keep_changed_starting_files_then_the_shallowest_smallest_new(tmp_path):
    """More than MAX_LISTED entries (a dependency folder the agent made): the changed starting file (larger
    than every new one), the deleted one, a new answer at the top (larger than every dependency file, so
    "smallest first" alone would lose it) and then the smallest new files are captured, and the record says
    how many entries were left out."""
    write(tmp_path, {"solution.py": b"stub\n", "gone.txt": b"g\n", "same.txt": b"="})
    cc = ChangeCapture(local_capture(tmp_path))
    run(cc.mark_baseline())
    extra = MAX_LISTED + 150
    for i in range(extra):  # sizes 1..9: every one smaller than the answer
        write(tmp_path, {f"node_modules/m{i % 97}/f{i}.js": b"x" * (1 + i % 9)})
    write(tmp_path, {"solution.py": b"def f():\n    return 42\n" * 3, "answer.txt": b"the answer\n" * 5})
    (tmp_path / "gone.txt").unlink()
    ch = run(cc.changes(max_files=50))
    assert ch.files["solution.py"] == b"def f():\n    return 42\n" * 3
    assert ch.files["answer.txt"] == b"the answer\n" * 5
    assert ch.deleted == ["gone.txt"] and "same.txt" not in ch.files
    new = sorted(p for p in ch.files if p not in ("solution.py", "answer.txt"))
    assert len(new) == 48 and all(len(ch.files[p]) == 1 for p in new)  # then the smallest new ones
    left = [r for r in ch.rejected if "past the listing cap" in r]
    assert left == [
        f"151 new entries past the listing cap of {MAX_LISTED} are left out, the deepest and largest "
        "(changed starting files and the shallowest, smallest new ones are captured)"
    ]
    assert any("changed files past the caps of 50 files" in r for r in ch.rejected)


def test_a_starting_workspace_past_the_baselines_cap_captures_nothing_and_says_so(tmp_path):
    write(tmp_path, {f"f{i}": b"x" for i in range(30)})
    cc = ChangeCapture(local_capture(tmp_path))
    run(cc.mark_baseline(max_files=20))
    write(tmp_path, {"answer.txt": b"42\n"})
    ch = run(cc.changes())
    assert ch.files == {} and ch.links == {}
    assert ch.rejected == ["10 entries of the starting workspace past the listing cap: no change is captured"]
