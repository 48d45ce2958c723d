"""The candidate proxy's child: the program that runs as the candidate user in a grading container
(`python3 -I -c <remote.py's child program> --child`), imports the candidate's modules from the workspace,
keeps the objects they make and answers each request of the test runner with one reply (see wire.py).
All of the candidate's code runs here, never in the test runner.
"""

import enum
import itertools
import os
import sys

if __package__:  # the harness's own package (the host: pytest_kind ships these files, tests import them)
    from . import wire
else:  # a grading container, the child included: these files sit flat there, as _harness_<name>.py
    import _harness_wire as wire


def main():
    """Serves requests on a private copy of stdin/stdout; the candidate's own prints go to stderr and
    its reads of stdin see nothing."""
    req_fd, rep_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.chdir(wire.WORKSPACE)
    sys.path.append(wire.WORKSPACE)  # at the end: the candidate's modules import, the standard library wins
    _Server(req_fd, rep_fd).serve()


def _op_special(target, req, args, kwargs):
    method = getattr(type(target), req["name"], None)  # looked up on the type, as Python does for operators
    return NotImplemented if method is None else method(target, *args)


_OPS = {  # the requests on an object (import aside): (target, request, args, kwargs) -> the value to reply
    "getattr": lambda target, req, args, kwargs: getattr(target, req["name"]),
    "setattr": lambda target, req, args, kwargs: setattr(target, req["name"], args[0]),
    "delattr": lambda target, req, args, kwargs: delattr(target, req["name"]),
    "call": lambda target, req, args, kwargs: target(*args, **kwargs),
    "special": _op_special,
    "isinstance": lambda target, req, args, kwargs: isinstance(args[0], target),
    "issubclass": lambda target, req, args, kwargs: issubclass(args[0], target),
    "dir": lambda target, req, args, kwargs: sorted(dir(target)),
}


class _Server(wire._Wire):
    """The child's end: keeps the candidate's objects by id and answers each request with one reply."""

    receives = wire.DOWN

    def __init__(self, req_fd, rep_fd):
        self.req_fd, self.rep_fd = req_fd, rep_fd
        self.objects = {}
        self.ids = itertools.count(1)

    def serve(self):
        while True:
            try:
                req = wire._recv(self.req_fd)
            except EOFError:
                os._exit(0)
            try:
                if req.get("op") == "import":
                    wire._send(self.rep_fd, {"module": self._import(req["name"])})
                    continue
                value = self._perform(req)
            except BaseException as e:
                wire._send(self.rep_fd, {"raise": self.encode(e), "traceback": wire._traceback(e)})
                continue
            self._reply(value)

    def _import(self, name):
        import importlib

        module = importlib.import_module(name)
        return {
            "h": self._keep(module),
            "package": hasattr(module, "__path__"),
            "file": str(getattr(module, "__file__", "") or ""),
        }

    def _perform(self, req):
        target = self.objects[req["h"]]
        args = [self.decode(a) for a in req.get("args", [])]
        kwargs = {k: self.decode(a) for k, a in req.get("kwargs", {}).items()}
        op = _OPS.get(req.get("op"))
        if op is None:
            raise ValueError(f"unknown request {req.get('op')!r}")
        return op(target, req, args, kwargs)

    def _reply(self, value):
        try:
            wire._send(self.rep_fd, {"ok": self.encode(value)})
        except Exception as e:  # e.g. a str that cannot be encoded: say so instead of dying
            wire._send(
                self.rep_fd, {"raise": wire._exc_value(0, wire.ProtocolError, f"unsendable result: {e}")}
            )

    def _callback(self, index):
        """A function of the tests', passed to the candidate: calling it asks the test runner to run it."""

        def call(*args, **kwargs):
            request = {
                "callback": index,
                "args": [self.encode(a) for a in args],
                "kwargs": {str(k): self.encode(v) for k, v in kwargs.items()},
            }
            wire._send(self.rep_fd, request)
            answer = wire._recv(self.req_fd)
            if "raise" in answer:
                raise self.decode(answer["raise"])
            return self.decode(answer["ok"])

        return call

    def _keep(self, obj):
        i = next(self.ids)
        self.objects[i] = obj
        return i

    def _handle(self, x):
        return ["H", self._keep(x), type(x).__qualname__]

    def _before_plain(self, x):
        if x is NotImplemented:
            return ["NI"]
        if isinstance(x, enum.Enum):  # an IntEnum member is an int, yet one of its class's members
            return self._handle(x)
        return None

    def _not_plain(self, x):
        if isinstance(x, type) and issubclass(x, BaseException):
            return ["X", self._keep(x), x.__qualname__, wire._builtin_exc_name(x)]
        if isinstance(x, BaseException):
            return wire._exc_value(self._keep(type(x)), type(x), wire._message(x))
        return self._handle(x)

    def _too_deep(self, x):
        return self._handle(x)

    def _resolve(self, tag, f):
        if tag in ("H", "X"):
            return self.objects[f[0]]
        if tag == "CB":
            return self._callback(f[0])
        return wire._builtin_exc_class(wire._str(f[2]))(wire._str(f[3]))  # XI: a test's function raised
