"""The candidate proxy: hidden tests call the candidate's Python code in another process, as another user.
This module owns its installing: install() (the grader's conftest calls it), the import finder that makes
the candidate's modules proxy modules, and processes started by tests running as the candidate user.

The proxy's files run in two places inside a grading container, and use the standard library only:
  - the test runner (root, in /grader): the grader's conftest calls install(). A `from solution import f`
    in a hidden test then returns a proxy module; every attribute, call and operation on it is a request to
  - the child (child.py, run as `python3 -I -c <its program> --child` by the sandbox user), which imports
    the candidate's modules from /workspace and answers each request with one reply.
The files: wire.py (the messages both ends send, the grading's settings), child.py (the child's end),
remote.py (the test runner's end: the child process, handles to its objects) and this one. pytest_kind
ships them flat, as _harness/_harness_<name>.py; they import each other by those names there.

Why: code under test that runs inside pytest can patch pytest's reports, read the hidden tests, or return an
object that claims to equal anything. Here only plain values cross, rebuilt by the test runner as genuine
built-in objects, whatever the child claims. Other objects stay in the child and cross as handles whose
methods run remotely (remote.py).
"""

import importlib.abc
import importlib.machinery
import os
import subprocess
import sys
import types

if __package__:  # the harness's own package (the host: pytest_kind ships these files, tests import them)
    from . import remote, wire
else:  # a grading container: these files sit flat in the grader's _harness/, as _harness_<name>.py
    import _harness_remote as remote
    import _harness_wire as wire


class RemoteModule(types.ModuleType):
    """A module of the candidate's: attribute reads go to the child (re-imported if the child restarted)."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name != "__all__":
            raise AttributeError(name)
        if (
            self.__dict__.get("_harness_generation") != remote.CHILD.generation
            or remote.CHILD.proc is None
            or remote.CHILD.proc.poll() is not None
        ):
            _import_into(self)
        handle = remote.RemoteObject(self.__dict__["_harness_hid"], remote.CHILD.generation, "module")
        if name == "__all__":
            try:
                return remote._request("getattr", handle, name="__all__")
            except AttributeError:
                return [n for n in remote._request("dir", handle) if not n.startswith("_")]
        return remote._request("getattr", handle, name=name)


def _import_into(module):
    info = remote.CHILD.request({"op": "import", "name": module.__name__})
    module.__dict__["_harness_hid"] = wire._int(info["h"])
    module.__dict__["_harness_generation"] = remote.CHILD.generation
    module.__file__ = wire._str(info.get("file", ""))
    if info.get("package") is True:
        module.__path__ = []  # a package: its submodules are imported through this finder too


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return RemoteModule(spec.name)

    def exec_module(self, module):
        _import_into(module)


class CandidateFinder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: a module that nothing else provides and that exists in the workspace."""

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if "." not in fullname and not (
            os.path.isfile(os.path.join(wire.WORKSPACE, top + ".py"))
            or os.path.isdir(os.path.join(wire.WORKSPACE, top))
        ):
            return None
        if "." in fullname and not isinstance(sys.modules.get(top), RemoteModule):
            return None
        return importlib.machinery.ModuleSpec(
            fullname,
            _Loader(),
            origin=f"candidate:{fullname}",
            is_package=os.path.isdir(os.path.join(wire.WORKSPACE, *fullname.split("."))),
        )


def _as_candidate_popen():
    """Processes the tests start (scripts, CLIs, subprocess) run as the candidate user, not as the runner, and
    inherit nothing that names the grader's folder: the environment is the child's (CHILD_ENV) plus what the
    test set itself (a variable the runner's own environment does not hold as it is), the working folder
    the workspace unless the test chose one, no file descriptor but 0-2 unless the test passes some."""
    original = subprocess.Popen.__init__

    def __init__(self, *args, **kwargs):
        if os.getuid() == 0 and kwargs.get("user") is None and kwargs.get("group") is None:
            kwargs.update(user=wire.CANDIDATE_UID, group=wire.CANDIDATE_UID, extra_groups=[])
            given = kwargs.get("env")
            own = {
                k: v for k, v in (given or {}).items() if not (isinstance(k, str) and os.environ.get(k) == v)
            }
            kwargs["env"] = {**wire.CHILD_ENV, **own}
            kwargs["close_fds"] = True
            if kwargs.get("cwd") is None:
                kwargs["cwd"] = wire.WORKSPACE
        original(self, *args, **kwargs)

    subprocess.Popen.__init__ = __init__

    def system(command):
        code = subprocess.call(command, shell=True)
        return code << 8 if code >= 0 else -code

    os.system = system


def install(mode="proxy"):
    """Called by the grader's conftest. proxy: the candidate's modules come through the child;
    direct: they import into the test process (a task's opt-out; canaries are then the only defence)."""
    wire.configure()
    _as_candidate_popen()
    if mode == "direct":
        sys.path.append(wire.WORKSPACE)
    else:
        sys.meta_path.append(CandidateFinder())
    import atexit

    atexit.register(remote.CHILD.stop)
