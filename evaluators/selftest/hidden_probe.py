"""A candidate that looks for the hidden tests while it is graded, every way a process can: its own
environment and inherited file descriptors (0..1023), every /proc/<pid>'s environ, cmdline, cwd, fds (links
and contents) and maps, every readable file outside /proc, /sys, /dev and /usr (but /usr/local), and for a
few seconds more a process of its own that keeps reading every command line (a verifier's later commands).

It looks for PREFIX followed by 16 hex digits (a grading test's marker, written only into the hidden tests),
or the self-test's marker, never spelled out in this file. Planted in a workspace as probe.py: `python3
probe.py` prints each finding and PROBE-DONE; a hidden test may also call scan() through the candidate
proxy. The late finder appends what it sees to /tmp/probe-late.txt. Used by
tests/evaluators/grading/test_hidden_during_grading.py and the self-test (selftest/grading_attacks.py)."""

import os
import re
import stat
import sys
import time

PREFIX = "HIDDEN" + "-TESTS-" + "MARKER-"
# the grading test's marker, or the self-test's (evaluators/selftest/case.py: Ctx.marker)
FOUND = re.compile((PREFIX + "[0-9a-f]{16}|" + "HIDDEN" + "MARK[0-9a-f]+x").encode())
SKIP = ("/proc", "/sys", "/dev", "/usr")
MAX_READ = 4 << 20


def _grep(data, where, out):
    for m in set(FOUND.findall(data or b"")):
        out.append(f"{where}: {m.decode()}")


def _read(path, limit=MAX_READ):
    """A regular file's content (from its start); nothing of a pipe, socket or device: reading those would
    take what a process of the grader's (or the candidate proxy's own wire) is owed, or block."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return b""
    try:
        return _fd_data(fd, limit)
    finally:
        os.close(fd)


def _fd_data(fd, limit=MAX_READ):
    try:
        return os.pread(fd, limit, 0) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""


def _walk(root, out, seen, skip=SKIP):
    for folder, dirs, files in os.walk(root, onerror=None, followlinks=False):
        if folder in skip or (folder.startswith(skip) and not folder.startswith("/usr/local")):
            dirs[:] = []
            continue
        _grep(folder.encode(), f"path {folder}", out)
        for name in files:
            path = os.path.join(folder, name)
            _grep(path.encode(), f"path {path}", out)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not (st.st_mode & 0o170000 == 0o100000) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            _grep(_read(path), f"file {path}", out)


def scan() -> str:
    """What this process can find, one line each, then PROBE-DONE."""
    out: list[str] = []
    for k, v in os.environ.items():
        _grep(f"{k}={v}".encode(), "own environment", out)
    for fd in range(1024):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        _grep(target.encode(), f"own fd {fd} link", out)
        _grep(_fd_data(fd), f"own fd {fd}", out)
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        base = f"/proc/{pid}"
        for name in ("environ", "cmdline", "maps"):
            _grep(_read(f"{base}/{name}"), f"{base}/{name}", out)
        try:
            cwd = os.readlink(f"{base}/cwd")
            _grep(cwd.encode(), f"{base}/cwd link", out)
        except OSError:
            pass
        _walk(f"{base}/cwd", out, set(), skip=())
        try:
            fds = os.listdir(f"{base}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                _grep(os.readlink(f"{base}/fd/{fd}").encode(), f"{base}/fd/{fd} link", out)
            except OSError:
                pass
            if pid != str(os.getpid()):
                _grep(_read(f"{base}/fd/{fd}"), f"{base}/fd/{fd}", out)
    _walk("/", out, set())
    return "\n".join(sorted(set(out)) + ["PROBE-DONE"])


def late_finder(seconds: float = 6.0):
    """A process of the candidate's that outlives this one and reads every command line meanwhile."""
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            found: list[str] = []
            _grep(_read(f"/proc/{pid}/cmdline"), f"late /proc/{pid}/cmdline", found)
            if found:
                try:
                    with open("/tmp/probe-late.txt", "a") as f:
                        f.write("\n".join(found) + "\n")
                except OSError:
                    pass
        time.sleep(0.02)
    os._exit(0)


if __name__ == "__main__":
    late_finder()
    sys.stdout.write(scan() + "\n")
