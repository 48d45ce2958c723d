"""The host half of change capture: what an attempt changed in the workspace (contract.py's Changes).

agent/sandbox/capture.py runs inside the sandbox as root (python3, or the static helper's own walk:
backends/docker/native.py): `list` answers path -> [kind, size, sha256 or link target, executable] for the
workspace, `read` the changed files' contents. ChangeCapture compares two listings and reads out what changed,
with caps and path checks, never trusting what the agent left in its workspace."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Awaitable, Callable, Optional

from agent.sandbox.contract import WORKSPACE, Changes
from agent.sandbox.transport import SandboxDied, SandboxUnresponsive

CAPTURE_SOURCE = (Path(__file__).parent / "capture.py").read_text()
NAME_MAX = 255  # bytes in one file name (Linux filesystems)
PATH_MAX = 4096  # bytes in a path the kernel accepts, with its final NUL
MAX_DEPTH = 256  # agent/sandbox/capture.py's: deeper folders are never listed
# Entries (files, links) of a workspace listing beyond the baseline's own: past it the shallowest, then the
# smallest, are listed and the rest counted (capture.py): a dependency folder beside an answer costs only
# itself
MAX_LISTED = 20_000
NOT_LISTED = "/not_listed"  # a snapshot's count of what it left out (a key no relative path can be)


def unwritable(path: str, root: str = WORKSPACE) -> Optional[str]:
    """Why the file `path` (relative to `root`) cannot be written into a sandbox as it was captured, or None.
    The one rule change capture (which then leaves the file out) and put_files (which never writes such a
    name) share: what capture accepts, a grading container can recreate. Names cross as text with
    undecodable bytes as surrogate escapes (capture.py), so they are measured as the bytes they stand for."""
    try:
        raw = path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return "a name with characters that stand for no bytes"
    parts = raw.split(b"/")
    if b"\0" in raw or any(part in (b"", b".", b"..") for part in parts):
        return "not a plain relative path"
    longest = max(len(part) for part in parts)
    if longest > NAME_MAX:
        return f"a name of {longest} bytes, over the limit of {NAME_MAX}"
    if len(parts) > MAX_DEPTH:
        return f"{len(parts)} levels deep, over the limit of {MAX_DEPTH}"
    full = len(root.rstrip("/").encode("utf-8", "surrogateescape")) + 1 + len(raw)
    if full >= PATH_MAX:
        return f"a path of {full} bytes, over the limit of {PATH_MAX - 1}"
    return None


def shown(path: str, limit: int = 80) -> str:
    """A path for a message: its repr (odd characters escaped), long ones cut in the middle."""
    text = repr(path)[1:-1]
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


class CaptureError(Exception):
    """The workspace could not be listed or read (the changes are then rejected, never a crash)."""


class ChangeCapture:
    """Change capture for one sandbox: `capture(args, stdin, cap)` runs capture.py's two modes inside it (the
    sandbox's own way: python3, or the static helper) and returns the JSON answer or raises CaptureError;
    `workdir` is where the agent's files are (the limits on a path count from there). Holds the baseline,
    and what put_files wrote there (for diff)."""

    def __init__(self, capture: Callable[..., Awaitable[dict]], workdir: str = WORKSPACE):
        self._capture = capture
        self.workdir = workdir
        self.baseline: Optional[dict] = None
        self.initial_files: dict[str, bytes] = {}

    async def snapshot(
        self, max_files: int = MAX_LISTED, changed: Optional[tuple] = None, read: Optional[dict] = None
    ) -> dict:
        """path -> [kind, size, sha256 or link target, executable] for everything under /workspace
        (kind: f file, l link, o other); past max_files only the first, shallowest then smallest (and, with
        `changed`, every path of the baseline), NOT_LISTED: how many were left out; "!rejected": what could
        not be listed."""
        if changed is None:
            out = await self._capture(["list", WORKSPACE, str(max_files)])
        else:  # and read what differs from a baseline (capture.py's `changed`) into read["files"]
            base, max_bytes, max_read = changed
            args = ["changed", WORKSPACE, str(max_files), str(max_bytes), str(max_read)]
            out = await self._capture(args, stdin=json.dumps(base).encode())
            if isinstance(out.get("files"), dict):
                read.update(files=out["files"], rejected=list(out.get("read_rejected", [])))
        entries = {p: m for p, m in out.get("entries", {}).items() if m[0] != "d"}
        if out.get("not_listed"):
            entries[NOT_LISTED] = out["not_listed"]
        if out.get("rejected"):
            entries["!rejected"] = list(out["rejected"])
        return entries

    async def mark_baseline(self, max_files: int = 5000):
        """Remembers the workspace as it is now; changes() compares against it (`run` on a large
        repository passes a larger max_files, here and to changes())."""
        self.baseline = await self.snapshot(max_files=max_files)

    async def changes(self, max_bytes: int = 10 << 20, max_files: int = 2000, links: bool = False) -> Changes:
        """The agent's changes since mark_baseline(), bounded in bytes and file count. Never raises for
        anything the agent can make in its workspace: special files, unreadable or too deep entries, names
        no container can hold (unwritable()) and files past the caps are not copied out, only listed in
        `rejected` (the attempt is graded without them); so are symlinks, unless `links` (Harbor tasks,
        whose verifier keeps them): then each is kept as its target text in `links`. Past a cap (files,
        bytes, or MAX_LISTED entries listed), changed starting files come first, then the shallowest and
        smallest: a dependency folder left beside a solution costs only itself."""
        ch = Changes()
        base = {p: m for p, m in (self.baseline or {}).items() if p not in ("!rejected", NOT_LISTED)}
        read: dict = {}  # the changed files, read in the listing's round trip when within the caps
        try:
            now = await self.snapshot(changed=(base, max_bytes, max_files), read=read)
        except CaptureError as e:
            ch.rejected.append(str(e))
            return ch
        except SandboxUnresponsive:
            raise  # retried by the runner, as any other command that gets no answer
        except SandboxDied as e:  # the walk itself ended the sandbox (a static helper on a deep tree)
            ch.rejected.append(f"the sandbox died while its changes were listed ({e}): no change is captured")
            return ch
        if NOT_LISTED in (self.baseline or {}):  # starting files unknown: new ones cannot be told from them
            ch.rejected.append(
                f"{self.baseline[NOT_LISTED]} entries of the starting workspace past the listing cap: "
                "no change is captured"
            )
            return ch
        ch.rejected += now.pop("!rejected", [])
        if now.get(NOT_LISTED):
            ch.rejected.append(
                f"{now.pop(NOT_LISTED)} new entries past the listing cap of {MAX_LISTED} are left out, the "
                "deepest and largest (changed starting files and the shallowest, smallest new ones are "
                "captured)"
            )
        changed = [p for p, meta in now.items() if base.get(p) != meta and not _is_cache(p)]
        ch.deleted = sorted(p for p in base if p not in now and base[p][0] != "o")
        files = []
        for p in sorted(changed):
            kind = now[p][0]
            if kind == "l":
                why = unwritable(p, self.workdir) or ("" if now[p][2] else "its target could not be read")
                if not links:  # our own kinds' graders never follow a link the agent made
                    ch.rejected.append(f"symlink {shown(p)}")
                elif why:
                    ch.rejected.append(f"symlink {shown(p)} ({why})")
                else:
                    ch.links[p] = now[p][2]
            elif kind == "o":
                ch.rejected.append(f"special or unreadable file {shown(p)}")
            elif kind == "f":
                why = unwritable(p, self.workdir)
                if why:  # no container could hold it: graded without it
                    ch.rejected.append(f"{shown(p)} ({why})")
                else:
                    files.append(p)
        wanted, total, over = [], 0, []
        for p in sorted(files, key=lambda p: (p not in base, p.count("/"), now[p][1], p)):
            if len(wanted) >= max_files or total + now[p][1] > max_bytes:
                over.append(p)
                continue
            total += now[p][1]
            wanted.append(p)
            if now[p][3:4] == [True]:
                ch.executable.add(p)
        if over:
            some = ", ".join(shown(p, 40) for p in over[-3:])  # the largest
            ch.rejected.append(
                f"{len(over)} changed files past the caps of {max_files} files and {max_bytes} bytes, "
                f"e.g. {some}"
            )
        if wanted and "files" in read and all(p in read["files"] for p in wanted):
            ch.files = {p: base64.b64decode(read["files"][p]) for p in wanted}
            ch.rejected += read["rejected"]
        elif wanted:
            try:
                out = await self._capture(
                    ["read", WORKSPACE, str(max(total, 1))], stdin=json.dumps(sorted(wanted)).encode()
                )
                ch.files = {p: base64.b64decode(d) for p, d in out.get("files", {}).items()}
                ch.rejected += out.get("rejected", [])
            except SandboxUnresponsive:
                raise
            except (CaptureError, SandboxDied, ValueError, TypeError) as e:
                ch.rejected.append(f"reading the changed files failed: {e}")
                ch.files = {}
        ch.executable &= set(ch.files)
        return ch

    async def diff(self) -> str:
        """A unified diff of the workspace against the baseline (text files), for people and `run`."""
        import difflib

        ch = await self.changes()
        before = self.initial_files
        parts = []
        for p in ch.paths:
            a = before.get(p, b"").decode("utf-8", "replace").splitlines(keepends=True)
            b = ch.files.get(p, b"").decode("utf-8", "replace").splitlines(keepends=True)
            parts.extend(difflib.unified_diff(a, b, f"a/{p}", f"b/{p}"))
        return "".join(parts)


def _is_cache(path: str) -> bool:
    """Byte-code and test caches: written by running code, never part of an answer."""
    parts = path.split("/")
    return "__pycache__" in parts or ".pytest_cache" in parts or path.endswith((".pyc", ".pyo"))
