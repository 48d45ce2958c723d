"""Durable file primitives for run folders: whole-file JSON replaces and torn-line-safe JSONL scanning;
and the one bounded JSON reader (load_json: size and nesting checked before parsing) for every file
harness reads that someone else may have written (run folders, replay and ATIF files, reward files).

A JSON file written with write_json_atomic is seen old or new, never half-written. An append-only JSONL
file can end in at most one torn line after a crash (a write cut short); iter_jsonl skips it without
touching the file, and cut_torn_line removes it before anyone appends again.
"""

from __future__ import annotations

import errno
import json
import os
import re
from itertools import accumulate
from pathlib import Path
from typing import Any, Iterator, Optional

from results.errors import UserError

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# Nesting of brackets; our own records are under 10 deep. evaluators/grading/verdict.py has the same limit
# and its own json_depth because it is exported into tasks and runs there alone (stdlib only); a test
# checks the two agree.
MAX_JSON_DEPTH = 100
MAX_RECORD_BYTES = 256 << 20  # one line of attempts.jsonl (trajectories with token ids run to tens of MB)
_STRING = re.compile(rb'"[^"]*"')
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def replace_durably(path: Path, data: bytes, tmp: Path) -> None:
    """Write `data` to `tmp`, fsync it, rename it over `path` and fsync the folder: readers see the old
    file or the new one, never a mix, and the new one survives a crash once this returns. On an OSError
    `tmp` is removed and the error raised for the caller to word."""
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace `path` with `data` as JSON: readers see the old file or the new one, never a mix."""
    payload = (json.dumps(data, indent=2) + "\n").encode()
    try:
        replace_durably(path, payload, path.with_name(f".{path.name}.{os.getpid()}.tmp"))
    except OSError as e:
        if e.errno in DISK_FULL:
            raise UserError(f"disk full writing {path}: free space and run the command again") from None
        raise


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of brackets outside strings, without parsing (deep input cannot recurse),
    at C speed: escapes dropped (\\\\ first, then \\"), everything but quotes and brackets dropped,
    strings dropped, then a running sum over the brackets left."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    return max(0, max(accumulate(1 if b in b"[{" else -1 for b in _STRING.sub(b"", raw)), default=0))


def bounded_json_text(raw: str | bytes, where: str, max_bytes: int, fix: str = "") -> str:
    """The text of a file that holds JSON (or JSON lines), checked before anything parses it: size,
    UTF-8, nesting (MAX_JSON_DEPTH). A failure is one UserError line naming `where` and `fix`."""
    fix = f"; {fix}" if fix else ""
    if len(raw) > max_bytes:
        raise UserError(f"{where}: over the limit of {max_bytes} bytes{fix}")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"{where}: not UTF-8 text (byte {e.start}){fix}") from None
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise UserError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels{fix}")
    return raw


def load_json(raw: str | bytes, where: str, max_bytes: int, fix: str = "") -> Any:
    """JSON from a file harness did not necessarily write, bounded before parsing (bounded_json_text);
    the caller checks the shape it needs."""
    text = bounded_json_text(raw, where, max_bytes, fix)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise UserError(f"{where}: not JSON ({str(e)[:80]}){'; ' + fix if fix else ''}") from None


def read_bounded(path: Path, max_bytes: int, where: str = "") -> bytes:
    """A file's bytes, read no further than max_bytes + 1 (so a huge file is refused, not loaded)."""
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes + 1)
    except OSError as e:
        raise UserError(f"{where or path}: cannot read the file ({e.strerror or e})") from None


def read_json_file(path: Path, max_bytes: int, fix: str = "") -> Any:
    """load_json of a file (read_bounded)."""
    return load_json(read_bounded(path, max_bytes), str(path), max_bytes, fix)


class JsonlScan:
    """What a scan of a JSONL file found after the last complete record."""

    def __init__(self) -> None:
        self.records = 0
        self.good_end = 0  # byte offset just past the last complete record
        self.torn_line = 0  # line number of a torn last line, 0 if none
        self.torn_bytes = 0


def iter_jsonl(path: Path, scan: Optional[JsonlScan] = None) -> Iterator[dict[str, Any]]:
    """Stream the JSON objects of an append-only file, one line at a time.

    A last line without its newline, or that is not a JSON object, is a write cut short by a crash:
    it is skipped (and described in `scan`). A bad line with more lines after it means the file was
    damaged some other way; that is refused rather than guessed at.
    """
    scan = scan if scan is not None else JsonlScan()
    if not path.exists():
        return
    with open(path, "rb") as f:  # binary: only b"\n" ends a line (JSON escapes every other line break)
        bad: Optional[tuple[int, int]] = None
        # a line is read up to MAX_RECORD_BYTES: a longer one is damage, as is one nested too deep
        for line_no, line in enumerate(iter(lambda: f.readline(MAX_RECORD_BYTES + 1), b""), start=1):
            if bad is not None:
                raise UserError(
                    f"{path} line {bad[0]} is not a complete JSON record but more lines follow it: the file "
                    f"was changed outside harness; delete that line (the other records are intact)"
                )
            if len(line) > MAX_RECORD_BYTES or json_depth(line) > MAX_JSON_DEPTH:
                raise UserError(
                    f"{path} line {line_no} is over {MAX_RECORD_BYTES} bytes or nested deeper than "
                    f"{MAX_JSON_DEPTH} levels: not a record harness wrote; delete that line"
                )
            record = None
            if line.endswith(b"\n"):
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):
                    pass
            if isinstance(record, dict):
                scan.records += 1
                scan.good_end += len(line)
                yield record
            else:
                bad = (line_no, len(line))
        if bad is not None:
            scan.torn_line, scan.torn_bytes = bad


def cut_torn_line(path: Path, scan: JsonlScan) -> None:
    """Cut off the torn last line `scan` found in `path`: appending after a partial line would join
    the next record to it on one bad line."""
    with open(path, "r+b") as f:
        f.truncate(scan.good_end)
        f.flush()
        os.fsync(f.fileno())
