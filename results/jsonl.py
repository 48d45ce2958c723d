"""Durable file primitives for run folders: whole-file JSON replaces and torn-line-safe JSONL scanning.

A JSON file written with write_json_atomic is seen old or new, never half-written. An append-only JSONL
file can end in at most one torn line after a crash (a write cut short); iter_jsonl skips it without
touching the file, and cut_torn_line removes it before anyone appends again.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional

from results.errors import UserError

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


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
        for line_no, line in enumerate(f, start=1):
            if bad is not None:
                raise UserError(
                    f"{path} line {bad[0]} is not a complete JSON record but more lines follow it: the file "
                    f"was changed outside harness; delete that line (the other records are intact)"
                )
            record = None
            if line.endswith(b"\n"):
                try:
                    record = json.loads(line)
                except ValueError:
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
