"""A run folder's one writer (RunStore, holding .lock): a new run or a resumed one (a torn last line cut off
first), each attempt appended durably as one line, its kept changes and files stored as objects first, and
--retry-errors' records moved to retried.jsonl. The folder's layout and its readers are results.store's."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Sequence

from results.errors import UserError
from results.jsonl import (
    DISK_FULL,
    JsonlScan,
    cut_torn_line,
    fsync_dir,
    iter_jsonl,
    replace_durably,
    write_all,
    write_json_atomic,
)
from results.manifest import MANIFEST, Manifest, config_differences, read_manifest
from results.schema import Attempt, KeptChanges
from results.store import ATTEMPTS, LOCK, OBJECTS, RETRIED, RunReader

# What one attempt keeps of its changes: files up to KEEP_FILE_BYTES each and KEEP_BYTES together (the
# capture's own cap is 10 MB); a file over either is listed in KeptChanges.omitted. The diff keeps the
# first KEEP_DIFF_BYTES.
KEEP_FILE_BYTES = 1 << 20
KEEP_BYTES = 4 << 20
KEEP_DIFF_BYTES = 1 << 20

log = logging.getLogger("harness.results")


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def unified_diff(before: dict[str, bytes], after: dict[str, bytes], deleted: Sequence[str] = ()) -> str:
    """A unified diff of the changed files (after) and deleted ones against the starting files (before);
    a binary file is one line saying so."""
    import difflib

    parts = []
    for path in sorted(set(after) | set(deleted)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if any(b"\0" in x for x in (old or b"", new or b"")):
            parts.append(f"Binary files a/{path} and b/{path} differ\n")
            continue
        a = (old or b"").decode("utf-8", "replace").splitlines(keepends=True)
        b = (new or b"").decode("utf-8", "replace").splitlines(keepends=True)
        lines = list(
            difflib.unified_diff(
                a,
                b,
                f"a/{path}" if old is not None else "/dev/null",
                f"b/{path}" if new is not None else "/dev/null",
            )
        )
        parts.extend(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
        )
    return "".join(parts)


def _acquire_lock(run_dir: Path) -> int:
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise UserError(
            f"run folder {run_dir} is in use by another harness process (pid {holder}); "
            f"wait for it to finish or stop it first"
        ) from None
    # The pid is only for the message above; the flock itself is what excludes (and dies with us).
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _encode(attempt: Attempt) -> bytes:
    try:
        return (attempt.model_dump_json() + "\n").encode()
    except ValueError:
        # Lone surrogates (undecodable bytes in model or tool output) cannot be UTF-8 encoded;
        # replace them rather than lose the attempt.
        text = json.dumps(attempt.model_dump(mode="json"), ensure_ascii=False)
        return (text + "\n").encode("utf-8", errors="replace")


class RunStore(RunReader):
    """The single writer of one run folder. Use create() for a new run, open() to resume one."""

    def __init__(self, run_dir: Path, lock_fd: int):
        # Private: create() and open() hold the lock before anything is read or written.
        self._lock_fd: Optional[int] = lock_fd
        self._mutex = threading.Lock()  # appends from several threads stay one line each
        super().__init__(run_dir)
        self.repaired: Optional[str] = None  # what open() cut off, if anything
        self._keys: set[str] = set()
        self._fd: Optional[int] = None

    # -- lifecycle

    @classmethod
    def create(cls, run_dir: str | os.PathLike, manifest: Manifest) -> "RunStore":
        """Start a new run in `run_dir` (created if missing; refused if it already holds a run)."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = _acquire_lock(run_dir)
        try:
            if (run_dir / MANIFEST).exists() or (run_dir / ATTEMPTS).exists():
                raise UserError(
                    f"run folder {run_dir} already holds a run; resume it with --resume {run_dir} "
                    f"or choose a new folder"
                )
            manifest = manifest.model_copy(
                update={
                    "run_id": manifest.run_id or run_dir.name,
                    "started_at": manifest.started_at or utc_now(),
                    "finished_at": None,
                }
            )
            write_json_atomic(run_dir / MANIFEST, manifest.model_dump(mode="json"))
        except BaseException:
            os.close(lock_fd)
            raise
        return cls._ready(run_dir, lock_fd, repair=False)

    @classmethod
    def open(cls, run_dir: str | os.PathLike, manifest: Optional[Manifest] = None) -> "RunStore":
        """Resume the run in `run_dir`.

        With `manifest` (what the new invocation would run), refuses if model, tasks, samples,
        temperature or the task suite differ from the recorded run. Cuts off a torn last line.
        """
        run_dir = Path(run_dir)
        read_manifest(run_dir)  # a clear error for a missing or foreign folder before locking it
        lock_fd = _acquire_lock(run_dir)
        try:
            recorded = read_manifest(run_dir)
            if manifest is not None:
                diffs = config_differences(recorded, manifest)
                if diffs:
                    raise UserError(
                        f"cannot resume {run_dir}: the new settings differ from the recorded run in "
                        f"{'; '.join(diffs)}; use the original settings or start a new run folder"
                    )
        except BaseException:
            os.close(lock_fd)
            raise
        return cls._ready(run_dir, lock_fd, repair=True)

    @classmethod
    def _ready(cls, run_dir: Path, lock_fd: int, repair: bool) -> "RunStore":
        try:
            store = cls(run_dir, lock_fd)  # from here on, store.close() releases the lock
        except BaseException:
            os.close(lock_fd)
            raise
        try:
            if repair:
                store._load_keys_and_repair()
            store._open_for_append()
        except BaseException:
            store.close()
            raise
        return store

    def _load_keys_and_repair(self) -> None:
        scan = JsonlScan()
        for record in iter_jsonl(self.attempts_path, scan):
            key = record.get("key")
            if not isinstance(key, str):
                raise UserError(
                    f"{self.attempts_path} record {scan.records} has no 'key': the file was changed "
                    f"outside harness; delete that line"
                )
            self._keys.add(key)
        if scan.torn_line:
            cut_torn_line(self.attempts_path, scan)
            self.repaired = (
                f"{self.attempts_path}: dropped a torn last line (line {scan.torn_line}, "
                f"{scan.torn_bytes} bytes) left by an interrupted run; the file now ends at the "
                f"last complete record ({scan.records} attempts); that attempt will run again"
            )
            log.warning(self.repaired)

    def drop_errors(self) -> int:
        """For --resume --retry-errors: move the records of attempts that ended in `error` (infra) out of
        attempts.jsonl into retried.jsonl, so that they run again; returns how many. retried.jsonl is
        fsync'd before attempts.jsonl is replaced whole (temp file + fsync + os.replace): a crash
        leaves the old file or the new one, and no record is lost."""
        keep, errors = [], []
        with open(self.attempts_path, "rb") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    record = {}
                (errors if record.get("status") == "error" else keep).append(line)
        if not errors:
            return 0
        with self._mutex:
            fd = os.open(self.dir / RETRIED, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                write_all(fd, b"".join(errors))
                os.fsync(fd)
            finally:
                os.close(fd)
            tmp = self.attempts_path.with_name(f".{ATTEMPTS}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, b"".join(keep))
                os.fsync(fd)
            finally:
                os.close(fd)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            os.replace(tmp, self.attempts_path)
            fsync_dir(self.dir)
            for line in errors:
                self._keys.discard(json.loads(line).get("key"))
        self._open_for_append()
        return len(errors)

    def _open_for_append(self) -> None:
        self._fd = os.open(self.attempts_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fsync_dir(self.dir)  # the new file's directory entry survives a crash too

    def finish(self) -> None:
        """Record finished_at in the manifest."""
        self.manifest = self.manifest.model_copy(update={"finished_at": utc_now()})
        write_json_atomic(self.dir / MANIFEST, self.manifest.model_dump(mode="json"))

    def close(self) -> None:
        """Stop writing and release the folder (idempotent). Does not mark the run finished."""
        with self._mutex:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- kept changes

    def put_object(self, data: bytes) -> str:
        """Store `data` under objects/ by its sha256 (once: an object already there and intact is not
        rewritten; a damaged one is replaced, so a record never names a wrong object); durable (file and
        folder fsync'd) when this returns. Returns the sha256."""
        import hashlib

        digest = hashlib.sha256(data).hexdigest()
        folder = self.dir / OBJECTS / digest[:2]
        path = folder / digest
        try:
            if hashlib.sha256(path.read_bytes()).digest() == bytes.fromhex(digest):
                return digest
        except FileNotFoundError:
            pass
        new_folder = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{digest}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            replace_durably(path, data, tmp)
            if new_folder:
                fsync_dir(folder.parent)
                fsync_dir(self.dir)
        except OSError as e:
            if e.errno in DISK_FULL:
                raise UserError(
                    f"disk full writing {path}: {len(self._keys)} attempts recorded, nothing lost; "
                    f"free space and resume with --resume {self.dir}"
                ) from None
            raise
        return digest

    def keep_changes(
        self,
        before: dict[str, bytes],
        files: dict[str, bytes],
        deleted: Sequence[str] = (),
        executable: Sequence[str] = (),
        links: Optional[dict[str, str]] = None,
    ) -> KeptChanges:
        """Keep an attempt's final changes (the captured files and links, a diff against the starting files
        `before`) before its record is appended; returns what the record points to. Files over the caps
        (KEEP_FILE_BYTES, KEEP_BYTES) are listed in `omitted`, not stored."""
        kept = KeptChanges(deleted=sorted(deleted), links=dict(links or {}))
        total = 0
        for path in sorted(files):
            data = files[path]
            if len(data) > KEEP_FILE_BYTES or total + len(data) > KEEP_BYTES:
                kept.omitted.append(path)
                continue
            kept.files[path] = self.put_object(data)
            total += len(data)
        kept.bytes = total
        kept.executable = sorted(p for p in executable if p in kept.files)
        stored = {p: files[p] for p in kept.files}
        notes = "".join(
            f"File b/{p} ({len(files[p])} bytes) is over the keep cap: not kept\n" for p in kept.omitted
        ) + "".join(f"Symlink b/{p} -> {t}\n" for p, t in sorted(kept.links.items()))
        # names with undecodable bytes (surrogate escapes) are shown escaped, as the report prints them
        diff = (unified_diff(before, stored, deleted) + notes).encode("utf-8", "backslashreplace")
        if len(diff) > KEEP_DIFF_BYTES:
            diff = diff[:KEEP_DIFF_BYTES] + f"\n[... diff cut at {KEEP_DIFF_BYTES} bytes ...]\n".encode()
        kept.diff = self.put_object(diff) if diff else ""
        return kept

    # -- records

    def done_keys(self) -> set[str]:
        """Keys of the attempts already recorded: resume skips these."""
        with self._mutex:
            return set(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def _write_files(self, attempt: Attempt) -> None:
        """The attempt's kept files (Harbor verifier output, artifacts) as objects like its changes, each
        durable before the record that names them is written; the record says where each one is."""
        data = attempt.file_data()
        for kept in attempt.files:
            digest = self.put_object(data.get(kept.name, b""))
            kept.path = f"{OBJECTS}/{digest[:2]}/{digest}"

    def append(self, attempt: Attempt) -> bool:
        """Record one finished attempt durably. Returns False (and writes nothing) if its key is already
        there.

        The line goes out in one os.write on an O_APPEND fd and is fsynced before this returns. On any
        write or fsync error the file is cut back to its size before the call, so it keeps only
        complete lines; a full disk becomes a UserError saying how many attempts are safe.
        """
        if attempt.run_id != self.run_id:
            raise ValueError(
                f"attempt {attempt.key} has run_id {attempt.run_id!r}, this run is {self.run_id!r}"
            )
        if attempt.file_data() and attempt.key not in self._keys:
            self._write_files(attempt)
        data = _encode(attempt)
        with self._mutex:
            if self._fd is None:
                raise RuntimeError(f"run store {self.dir} is closed")
            if attempt.key in self._keys:
                return False
            before = os.fstat(self._fd).st_size
            try:
                written = os.write(self._fd, data)
                if written < len(data):  # short write: the disk is nearly full; the rest raises why
                    write_all(self._fd, data[written:])
                os.fsync(self._fd)
            except OSError as e:
                try:
                    os.ftruncate(self._fd, before)
                    os.fsync(self._fd)
                except OSError:
                    pass  # a torn tail left here is cut off on resume
                if e.errno in DISK_FULL:
                    raise UserError(
                        f"disk full writing {self.attempts_path}: {len(self._keys)} attempts recorded, "
                        f"nothing lost; free space and resume with --resume {self.dir}"
                    ) from None
                raise
            self._keys.add(attempt.key)
            return True
