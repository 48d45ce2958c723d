"""Change capture, run inside a sandbox as root: `python3 -I -c <this file> MODE ROOT ...` (standard
library only).

  list ROOT MAX_FILES  -> JSON {"entries": {path: [kind, size, sha256|link target, executable]},
                                "rejected": [...], "not_listed": N}
                          kind: f file, l link (its target text, never followed), o other (fifo, socket,
                          device); folders are walked, not listed. Past MAX_FILES entries only the
                          MAX_FILES first are listed (shallowest, then smallest, then by path; links and
                          others count 0) and
                          N says how many were not: memory stays bounded, whatever the workspace holds
  read ROOT MAX_BYTES  -> paths as a JSON list on stdin; JSON {"files": {path: base64}, "rejected": [...]}
  changed ROOT MAX_FILES MAX_BYTES MAX_READ
                       -> a baseline {path: [kind, size, ...]} as JSON on stdin; list's answer (every
                          path of the baseline listed beside the MAX_FILES first others: a changed or
                          deleted starting file is never lost to the cap), plus "files"
                          and "read_rejected" (read's answer) for every regular file whose entry differs
                          from the baseline's, when there are at most MAX_READ of them with at most
                          MAX_BYTES in all (else no "files": the caller chooses which to read). One round
                          trip for an attempt's changes instead of two.

Why a script of its own: the workspace is the agent's, so anything a user can make there must come back as
a listing, never as a crash that aborts the run. Every step is relative to an open folder (dir_fd) and
never follows a link, so very deep trees (no recursion, no path-length limit), unreadable files and
folders, odd names (bytes that are not UTF-8 cross as surrogate escapes) and special files are listed or
rejected with a reason. Only regular files are ever opened, and never a fifo (O_NONBLOCK, then fstat).
"""

import base64
import hashlib
import json
import os
import stat
import sys

MAX_DEPTH = 256  # folders deeper than this are rejected (their paths would pass PATH_MAX anyway)
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


def _join(parent, name):
    return name if not parent else parent + "/" + name


def listing(root, max_files, keep=frozenset()):
    entries, rejected = {}, []
    # (depth, size, path, meta) of entries not in `keep`: only the max_files first are listed, shallowest
    # then smallest (an answer sits near the top; a dependency folder's thousands of files lie deeper)
    others = []
    bound = None  # (depth, size, path) of the last kept once others were cut: anything after it is dropped
    dropped = 0
    top = os.open(root, OPEN_DIR)
    stack = [(top, "", 0, None)]  # (folder fd, its path, depth, scandir iterator)
    while stack:
        fd, path, depth, it = stack[-1]
        if it is None:
            try:
                it = iter(list(os.scandir(fd)))
            except OSError as e:
                rejected.append("unreadable folder %s (%s)" % (path or ".", e.strerror))
                it = iter(())
            stack[-1] = (fd, path, depth, it)
        entry = next(it, None)
        if entry is None:
            os.close(fd)
            stack.pop()
            continue
        name = entry.name
        rel = _join(path, name)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as e:
            rejected.append("unreadable entry %s (%s)" % (rel, e.strerror))
            continue
        if stat.S_ISDIR(st.st_mode):
            if depth + 1 >= MAX_DEPTH:
                rejected.append("folder %s is more than %d levels deep" % (rel, MAX_DEPTH))
                continue
            try:
                sub = os.open(name, OPEN_DIR, dir_fd=fd)
            except OSError as e:
                rejected.append("unreadable folder %s (%s)" % (rel, e.strerror))
                continue
            stack.append((sub, rel, depth + 1, None))
            continue
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        if rel not in keep and bound is not None and (rel.count("/"), size, rel) > bound:
            dropped += 1  # past the cap and larger than all kept: not even read
            continue
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError:
                target = ""
            meta = ["l", 0, target[:4096], False]
        elif stat.S_ISREG(st.st_mode):
            digest = _hash(fd, name)
            if digest is None:
                rejected.append("unreadable file %s" % rel)
                meta = ["o", st.st_size, "", False]
            else:
                meta = ["f", st.st_size, digest, bool(st.st_mode & 0o111)]
        else:
            meta = ["o", 0, "", False]
        if rel in keep:
            entries[rel] = meta
            continue
        others.append((rel.count("/"), size, rel, meta))
        if len(others) >= 2 * max_files + 1:  # cut back to the first: at most twice the cap held
            others.sort(key=lambda o: o[:3])
            dropped += len(others) - max_files
            del others[max_files:]
            bound = others[-1][:3] if others else (-1, -1, "")
    if len(others) > max_files:
        others.sort(key=lambda o: o[:3])
        dropped += len(others) - max_files
        del others[max_files:]
    entries.update((rel, meta) for _, _, rel, meta in others)
    return {"entries": entries, "rejected": rejected, "not_listed": dropped}


def _open_regular(fd, name):
    f = os.open(name, OPEN_FILE, dir_fd=fd)
    if not stat.S_ISREG(os.fstat(f).st_mode):
        os.close(f)
        raise OSError(0, "not a regular file")
    return f


def _hash(fd, name):
    try:
        f = _open_regular(fd, name)
    except OSError:
        return None
    h = hashlib.sha256()
    try:
        while True:
            chunk = os.read(f, 1 << 20)
            if not chunk:
                break
            h.update(chunk)
    except OSError:
        return None
    finally:
        os.close(f)
    return h.hexdigest()


def read(root, max_bytes, paths):
    files, rejected, total = {}, [], 0
    top = os.open(root, OPEN_DIR)
    for rel in paths:
        parts = rel.split("/")
        if not rel or any(p in ("", ".", "..") for p in parts):
            rejected.append("bad path %s" % rel)
            continue
        fds = [top]
        try:
            for part in parts[:-1]:  # walk down without following links
                fds.append(os.open(part, OPEN_DIR, dir_fd=fds[-1]))
            f = _open_regular(fds[-1], parts[-1])
            try:
                chunks = []
                while True:
                    chunk = os.read(f, 1 << 20)
                    if not chunk:
                        break
                    total += len(chunk)
                    if total > max_bytes:
                        raise OverflowError
                    chunks.append(chunk)
            finally:
                os.close(f)
            files[rel] = base64.b64encode(b"".join(chunks)).decode()
        except OverflowError:
            rejected.append("changes over the cap of %d bytes" % max_bytes)
            files = {}
            break
        except OSError as e:
            rejected.append("unreadable file %s (%s)" % (rel, e.strerror or e))
        finally:
            for f in fds[1:]:
                os.close(f)
    os.close(top)
    return {"files": files, "rejected": rejected}


def changed(root, max_files, max_bytes, max_read, baseline):
    out = listing(root, max_files, keep=frozenset(baseline))
    new = [p for p, m in out["entries"].items() if m[0] == "f" and baseline.get(p) != m]
    if len(new) <= max_read and sum(out["entries"][p][1] for p in new) <= max_bytes:
        got = read(root, max_bytes, sorted(new))
        out["files"], out["read_rejected"] = got["files"], got["rejected"]
    return out


def main():
    mode, root = sys.argv[1], sys.argv[2]
    if mode == "list":
        out = listing(root, int(sys.argv[3]))
    elif mode == "changed":
        out = changed(root, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), json.load(sys.stdin))
    else:
        out = read(root, int(sys.argv[3]), json.load(sys.stdin))
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
