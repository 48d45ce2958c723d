"""Runs inside every sandbox as its main process (under tini); the host passes this source in the
environment variable HARNESS_SERVER (popped at once, so commands never see it).

Why: `docker exec` costs ~70-95 ms a command and has no timeout; a long-lived process that spawns
each command itself costs ~1-2 ms and can kill a command's whole process tree. It talks over the
container's attached stdin/stdout (one JSON object per line), so the network can stay off.

It runs as root with only SETUID/SETGID/KILL capabilities, and every command runs as the
unprivileged sandbox user: the agent cannot kill this server, and the server can kill anything
the agent starts. It is one thread around one selector: under a fork bomb it needs no new
thread or process to time out, kill and answer. Standard library only: it must run on any
image that has python3.

Request:  {"id": 1, "argv": [...] | "cmd": "shell text", "timeout": 30, "cap": 65536,
           "user": "agent"|"root"|uid, "cwd": "/workspace", "env": {...}, "stdin": "<base64>",
           "fork": ["module" | "/root/owned/file.py", ...]}
          "fork" (root, an argv `python3 -I -c SOURCE ARGS...` or `python3 -I -m MODULE ARGS...`): run it
          as a fork of this server, which imports the modules named (or files, see preload_file) once
          beforehand: the same program without an interpreter's start (~15 ms), pytest's import (~100 ms)
          or the candidate proxy's compile (~12 ms) each time. Any other request with "fork" runs as usual.
Reply:    {"id": 1, "exit_code": 0, "out_head": b64, "out_tail": b64, "out_dropped": 0,
           "err_head": ..., "err_tail": ..., "err_dropped": 0, "duration": 0.01,
           "timed_out": false, "oom": false}; a command that cannot start (its folder unreadable, no such
           program, no process left) is answered the same way with exit code 126/127 and the reason on
           stderr, plus "spawn_error": true
"""

import base64
import gc
import importlib
import json
import os
import selectors
import signal
import stat
import subprocess
import sys
import time
import types

AGENT_UID = int(os.environ.get("HARNESS_UID", "10001"))
OUT = sys.stdout.buffer


def send(obj):
    OUT.write((json.dumps(obj) + "\n").encode())
    OUT.flush()


class Capped:
    """Keeps the first and last cap/2 bytes of a stream and counts what was dropped in between."""

    def __init__(self, cap):
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk):
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def fields(self, prefix):
        dropped = self.total - len(self.head) - len(self.tail)
        return {
            prefix + "_head": base64.b64encode(bytes(self.head)).decode(),
            prefix + "_tail": base64.b64encode(bytes(self.tail)).decode(),
            prefix + "_dropped": dropped,
        }


def oom_kills():
    """The memory cgroup's OOM-kill counter (v2 or v1), or -1 when the kernel does not expose it."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return -1


def reap_strays():
    """Kill every process but PID 1 and this server: commands are stateless, nothing outlives them.
    kill(-1) skips the caller and init; repeat while a fork bomb may still be spawning."""
    for _ in range(100):
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return  # nothing left to signal
        time.sleep(0.005)
        try:  # collect zombies re-parented to us
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass


PYTHONS = ("python3", "/usr/bin/python3")


def forkable(req):
    """Whether a request may run as a fork of this server (see the docstring's "fork")."""
    argv = req.get("argv")
    return (
        isinstance(req.get("fork"), list)
        and req.get("user") == "root"
        and isinstance(argv, list)
        and len(argv) >= 4
        and all(isinstance(a, str) for a in argv)
        and argv[0] in PYTHONS
        and argv[1] == "-I"
        and argv[2] in ("-c", "-m")
    )


def preload(modules):
    """Imports what forked commands would each import again (pytest): from the image's own files only, as
    this server runs with -I (no working folder, no user site, no PYTHON* variables on sys.path)."""
    for name in modules:
        if "/" in name:
            preload_file(name)
        elif name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:
                pass  # the forked program imports it itself, and says why it cannot
    inspect = sys.modules.get("inspect")
    if inspect is not None:  # its module-by-file cache, filled once here: a failing test's report walks
        inspect.getmodule(None, "/")  # every loaded module on a cold cache (~3 ms a forked pytest run)
    # What is imported stays out of the collector: a full collection in a forked child would write to every
    # page it shares with this server (measured: a child's gc.collect() 15 ms of CPU, 3.4 ms frozen).
    gc.freeze()


def preload_file(path):
    """A "fork" entry that is a path (/grader/.../NAME.py): imports that file as module NAME, once (a later
    entry of the same NAME, from another folder, is taken to be the same file), and only a regular file that
    root owns and nobody else may write: the harness's own, never a candidate's."""
    name = os.path.basename(path)[:-3] if path.endswith(".py") else ""
    if not name.isidentifier() or name in sys.modules:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
                return
            source = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
        finally:
            os.close(fd)
        module = types.ModuleType(name)
        module.__file__ = path
        sys.modules[name] = module
        exec(compile(source, path, "exec"), module.__dict__)
    except Exception:
        sys.modules.pop(name, None)  # the forked program imports it itself, and says why it cannot


class Forked:
    """A `python3 -I -c/-m ...` command run as a fork of this server; Popen's parts that Command uses.
    The child is a new session with its own pipes as 0, 1 and 2 and no other inherited descriptor (the
    host's stream above all), in its folder, with exactly the request's environment."""

    def __init__(self, argv, cwd, env, with_stdin):
        if not os.path.isdir(cwd):  # as Popen says it, before anything starts
            raise FileNotFoundError(2, "No such file or directory", cwd)
        pipes = [os.pipe() for _ in range(3 if with_stdin else 2)]
        null = None if with_stdin else os.open(os.devnull, os.O_RDONLY)
        self.returncode = None
        try:
            self.pid = os.fork()
        except OSError:  # no process left (a fork bomb): the command's result, as with Popen
            for fd in [f for pair in pipes for f in pair] + ([null] if null is not None else []):
                os.close(fd)
            raise
        if self.pid == 0:  # the child: never returns
            child_main(argv, cwd, env, pipes, null)
        if null is not None:
            os.close(null)
        os.close(pipes[0][1])
        os.close(pipes[1][1])
        self.stdout = os.fdopen(pipes[0][0], "rb", buffering=0)
        self.stderr = os.fdopen(pipes[1][0], "rb", buffering=0)
        self.stdin = None
        if with_stdin:
            os.close(pipes[2][0])
            self.stdin = os.fdopen(pipes[2][1], "wb", buffering=0)

    def wait(self):
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:  # collected elsewhere: its status is gone
                self.returncode = -9
        return self.returncode


def child_main(argv, cwd, env, pipes, null):
    """What `python3 -I -c/-m` would do, in the forked child, then exit with its code (never returns)."""
    code = 1
    try:
        os.setsid()
        os.dup2(pipes[2][0] if null is None else null, 0)
        os.dup2(pipes[0][1], 1)
        os.dup2(pipes[1][1], 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        if not env.get("LC_ALL") and (env.get("LC_CTYPE") or env.get("LANG") or "C") in ("C", "POSIX"):
            os.environ["LC_CTYPE"] = "C.UTF-8"  # what a fresh python3 sets in the C locale (PEP 538)
        if argv[2] == "-c":
            sys.argv = ["-c", *argv[4:]]
            exec(compile(argv[3], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            import runpy

            sys.argv = [argv[3], *argv[4:]]
            runpy.run_module(argv[3], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


class Command:
    def __init__(self, req, sel):
        self.id = req["id"]
        self.started = time.monotonic()
        self.deadline = self.started + float(req.get("timeout", 60))
        cap = int(req.get("cap", 65536))
        self.out, self.err = Capped(cap), Capped(cap)
        self.timed_out = False
        self.oom_before = oom_kills()
        argv = req["argv"] if "argv" in req else ["/bin/bash", "-c", req["cmd"]]
        user = req.get("user")
        as_root = user == "root"
        # a number: that user (batch grading gives each attempt its own: evaluators/grading); never root
        uid = user if isinstance(user, int) and not isinstance(user, bool) and user > 0 else AGENT_UID
        self.stdin_data = base64.b64decode(req["stdin"]) if req.get("stdin") else None
        if forkable(req):
            preload(req["fork"])
            cwd, env = req.get("cwd", "/workspace"), req.get("env") or dict(os.environ)
            self.proc = Forked(argv, cwd, env, self.stdin_data is not None)
        else:
            self.proc = self.popen(argv, req, as_root, uid)
        self.open = 2  # pipes not yet at EOF
        self.exited = False
        for pipe, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, (self, sink))
        self.pidfd = os.pidfd_open(self.proc.pid)
        sel.register(self.pidfd, selectors.EVENT_READ, (self, "exit"))
        if self.stdin_data is not None:
            os.set_blocking(self.proc.stdin.fileno(), False)
            sel.register(self.proc.stdin, selectors.EVENT_WRITE, (self, "stdin"))

    def popen(self, argv, req, as_root, uid):
        return subprocess.Popen(
            argv,
            cwd=req.get("cwd", "/workspace"),
            env=req.get("env") or dict(os.environ),
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if self.stdin_data is not None else subprocess.DEVNULL,
            user=None if as_root else uid,
            group=None if as_root else uid,
            extra_groups=None if as_root else [],
        )

    def kill_tree(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def reply(self):
        r = {
            "id": self.id,
            "exit_code": self.proc.returncode,
            "duration": time.monotonic() - self.started,
            "timed_out": self.timed_out,
            "oom": self.oom_before >= 0 and oom_kills() > self.oom_before,
        }
        r.update(self.out.fields("out"))
        r.update(self.err.fields("err"))
        return r


def unregister(sel, obj):
    try:
        sel.unregister(obj)
    except (KeyError, ValueError):
        pass
    try:
        obj.close() if hasattr(obj, "close") else os.close(obj)
    except OSError:
        pass


def finish(sel, cmd, running):
    """The command's process exited: kill what it left behind, drain its pipes, answer."""
    cmd.kill_tree()  # its whole group, also what it left in the background
    cmd.proc.wait()
    running.discard(cmd)
    if not running:
        reap_strays()  # processes that escaped the group (setsid, daemons)
    for pipe, sink in ((cmd.proc.stdout, cmd.out), (cmd.proc.stderr, cmd.err)):
        try:
            while True:
                chunk = os.read(pipe.fileno(), 65536)
                if not chunk:
                    break
                sink.add(chunk)
        except (BlockingIOError, OSError, ValueError):
            pass  # a holder of the pipe escaped; what was read is what we have
        unregister(sel, pipe)
    if cmd.stdin_data is not None:
        unregister(sel, cmd.proc.stdin)
    unregister(sel, cmd.pidfd)
    send(cmd.reply())


def main():
    sel = selectors.DefaultSelector()
    stdin_fd = sys.stdin.buffer.fileno()
    os.set_blocking(stdin_fd, False)
    sel.register(stdin_fd, selectors.EVENT_READ, None)
    running = set()
    pending = bytearray()
    send({"id": 0, "ready": True, "pid": os.getpid()})
    while True:
        now = time.monotonic()
        for cmd in [c for c in running if not c.timed_out and c.deadline <= now]:
            cmd.timed_out = True
            cmd.kill_tree()  # the pidfd fires once the process is gone
        wait = min([c.deadline - now for c in running if not c.timed_out] + [3600])
        for key, _ in sel.select(max(wait, 0)):
            if key.data is None:  # a request from the host
                try:
                    chunk = os.read(stdin_fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    return  # the host went away
                pending += chunk
                while (nl := pending.find(b"\n")) >= 0:
                    line, pending = bytes(pending[:nl]), pending[nl + 1 :]
                    if line.strip():
                        start(json.loads(line), sel, running)
                continue
            cmd, what = key.data
            if cmd not in running:
                continue  # finished earlier in this same batch of events; its pipes are closed
            if what == "exit":
                finish(sel, cmd, running)
            elif what == "stdin":
                try:
                    n = os.write(key.fileobj.fileno(), cmd.stdin_data[:65536])
                    cmd.stdin_data = cmd.stdin_data[n:]
                except BlockingIOError:
                    continue
                except OSError:
                    cmd.stdin_data = b""
                if not cmd.stdin_data:
                    unregister(sel, key.fileobj)
                    cmd.stdin_data = None
            else:
                try:
                    chunk = os.read(key.fileobj.fileno(), 65536)
                except BlockingIOError:
                    continue
                except (OSError, ValueError):
                    chunk = b""
                if chunk:
                    what.add(chunk)
                else:
                    unregister(sel, key.fileobj)


def start(req, sel, running):
    try:
        running.add(Command(req, sel))
    except Exception as e:
        # The command could not start: its folder unreadable (chmod 000 /workspace), no such program, no
        # process left (EAGAIN under a fork bomb). All of these the agent can cause, so they are the
        # command's result, like a shell's 126/127, never a dead sandbox.
        code = 127 if isinstance(e, FileNotFoundError) else 126
        msg = ("cannot start the command: %s: %s\n" % (type(e).__name__, e)).encode()
        reply = {
            "id": req.get("id"),
            "exit_code": code,
            "duration": 0.0,
            "timed_out": False,
            "oom": False,
            "spawn_error": True,
        }
        for prefix, data in (("out", b""), ("err", msg)):
            sink = Capped(int(req.get("cap", 65536)))
            sink.add(data)
            reply.update(sink.fields(prefix))
        send(reply)


main()
