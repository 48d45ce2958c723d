"""The test runner's end of the candidate proxy: the child process of a test session (_Child, one: CHILD),
and what it hands the hidden tests: RemoteObject handles to objects that stay in the child, local stand-ins
for the candidate's exception classes, genuine built-in values for plain ones (wire.py).

A handle never compares equal to a plain value; two handles compare with the candidate's own __eq__ (its
behaviour is what such a test checks; canaries are the defence there). Exceptions cross as their built-in
base type with the candidate's message, so pytest.raises(ValueError) works; SystemExit, KeyboardInterrupt and
pytest's outcomes (skip, exit) become RuntimeError.
"""

import os
import signal
import subprocess
import sys

if __package__:  # the harness's own package (the host: pytest_kind ships these files, tests import them)
    from . import child, wire
else:  # a grading container: these files sit flat in the grader's _harness/, as _harness_<name>.py
    import _harness_child as child
    import _harness_wire as wire

_GONE = "the candidate's process ended earlier: this object of it is gone"


def _program():
    """The child's program (`python3 -I -c <it> --child`): wire.py's and child.py's text, each run as the
    module of its name in a grading container, then the child's main(). Read now: the files may be gone by
    the time a child starts (a command server that imported these modules for a batch's first turn serves
    the later ones from memory)."""
    texts = []
    for name, module in (("_harness_wire", wire), ("_harness_child", child)):
        with open(module.__file__, encoding="utf-8") as f:
            texts.append((name, f.read()))
    return (
        "import sys, types\n"
        f"for name, text in {texts!r}:\n"
        "    module = sys.modules[name] = types.ModuleType(name)\n"
        "    exec(compile(text, name + '.py', 'exec'), module.__dict__)\n"
        "sys.modules['_harness_child'].main()\n"
    )


_PROGRAM = _program()


class _Child(wire._Wire):
    """The test runner's end: the one candidate process of a test session, restarted (a new generation) if
    it ends. What it sends comes back as genuine built-in values, RemoteObject handles and local stand-ins
    for its exception classes; the tests' own functions cross to it as callbacks."""

    receives = wire.UP

    def __init__(self):
        self.proc = None
        self.pidfd = None  # readable once the child has ended (None where the kernel has no pidfd)
        self.generation = 0
        self.source = None
        self.callbacks = []  # the tests' functions passed to the candidate, by index

    def ensure(self):
        if self.proc is not None and self.proc.poll() is None:
            return
        if self.source is None:
            self.source = _PROGRAM
        self.generation += 1
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", self.source, "--child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=wire.WORKSPACE,
            env=dict(wire.CHILD_ENV),
            start_new_session=True,
            user=wire.CANDIDATE_UID,
            group=wire.CANDIDATE_UID,
            extra_groups=[],
        )
        self._close_pidfd()
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def _close_pidfd(self):
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def stop(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        self._close_pidfd()

    def request(self, msg, generation=None):
        if generation is not None and (
            generation != self.generation or self.proc is None or self.proc.poll() is not None
        ):
            raise RuntimeError(_GONE)
        self.ensure()
        try:
            wire._send(self.proc.stdin.fileno(), msg)
            while True:
                reply = wire._recv(self.proc.stdout.fileno(), wire._now() + wire.CALL_TIMEOUT, self.pidfd)
                if not (isinstance(reply, dict) and "callback" in reply):
                    break
                wire._send(self.proc.stdin.fileno(), self._run_callback(reply))
        except (EOFError, BrokenPipeError):
            code = self.proc.wait()
            raise RuntimeError(f"the candidate's process ended (exit code {code})") from None
        except (TimeoutError, wire.ProtocolError):
            self.stop()
            raise
        if not isinstance(reply, dict):
            self.stop()
            raise wire.ProtocolError("a malformed reply")
        if "raise" in reply:
            raise self._raised(reply["raise"], str(reply.get("traceback", ""))[-4000:])
        if "module" in reply:
            return reply["module"]
        if "ok" not in reply:
            self.stop()
            raise wire.ProtocolError("a malformed reply")
        return self.decode(reply["ok"])

    def _run_callback(self, msg):
        """Runs one of the tests' functions for the candidate: plain values and handles in and out."""
        try:
            fn = self.callbacks[wire._int(msg["callback"])]
            args = [self.decode(a) for a in wire._list(msg.get("args", []))]
            kwargs = {str(k): self.decode(v) for k, v in dict(msg.get("kwargs", {})).items()}
            return {"ok": self.encode(fn(*args, **kwargs))}
        except Exception as e:
            return {"raise": wire._exc_value(0, type(e), wire._message(e))}

    def _raised(self, v, traceback_text=""):
        """The exception of a "raise" reply, rebuilt here; a ProtocolError if it is not readable as one."""
        try:
            if not (isinstance(v, list) and v[:1] == ["XI"]):
                raise wire.ProtocolError("a malformed exception")
            exc = self.decode(v)
        except wire.ProtocolError as e:
            return wire.ProtocolError(f"the candidate raised something unreadable ({e})")
        if traceback_text and hasattr(exc, "add_note"):
            exc.add_note("in the candidate's process:\n" + traceback_text)
        return exc

    def _before_plain(self, x):
        if isinstance(x, RemoteObject):
            if x._generation != self.generation:
                raise RuntimeError(_GONE)
            return ["H", x._hid]
        if isinstance(x, type) and issubclass(x, BaseException) and hasattr(x, "_harness_hid"):
            return ["X", x._harness_hid[1]]
        return None

    def _not_plain(self, x):
        if hasattr(x, "strpath"):  # py.path.local (tmpdir)
            return ["P", str(x)]
        if callable(x):  # a function of the tests': the candidate may call it back
            self.callbacks.append(x)
            return ["CB", len(self.callbacks) - 1]
        raise TypeError(
            f"cannot pass a {type(x).__name__} to the candidate's process (only plain values cross)"
        )

    def _too_deep(self, x):
        raise TypeError("a value nested too deeply to pass to the candidate")

    def _resolve(self, tag, f):
        if tag == "H":
            return RemoteObject(wire._int(f[0]), self.generation, wire._str(f[1]))
        cls = _exc_class(wire._int(f[0]), wire._str(f[1]), wire._str(f[2]), self.generation)
        return cls if tag == "X" else cls(wire._str(f[3]))


CHILD = _Child()
_EXC_CLASSES = {}  # (generation-independent) qualname + base -> local exception class


def _exc_class(hid, qualname, base, generation):
    """A local stand-in for an exception class of the candidate's: a subclass of its built-in base, with its
    name (or that built-in itself), so that pytest.raises(ValueError) and `type(e) is ValueError` hold."""
    base_cls = wire._builtin_exc_class(base)
    if qualname == base_cls.__name__:
        return base_cls  # the built-in itself: `type(e) is ValueError` holds
    key = (qualname, base_cls)
    if key not in _EXC_CLASSES:
        _EXC_CLASSES[key] = type(
            qualname.rsplit(".", 1)[-1], (base_cls,), {"__module__": "candidate", "__qualname__": qualname}
        )
    cls = _EXC_CLASSES[key]
    cls._harness_hid = (generation, hid)
    return cls


def _request(op, obj, **fields):
    msg = {"op": op, "h": obj._hid, **fields}
    return CHILD.request(msg, generation=obj._generation)


def _special(name):
    def method(self, *args):
        return _request("special", self, name=name, args=[CHILD.encode(a) for a in args])

    method.__name__ = name
    return method


def _compare(name):
    def method(self, other):
        if not isinstance(other, RemoteObject):
            return NotImplemented  # never let the candidate decide that it equals a plain value
        result = _request("special", self, name=name, args=[CHILD.encode(other)])
        return result if isinstance(result, bool) or result is NotImplemented else NotImplemented

    method.__name__ = name
    return method


# Plain attributes of functions, classes and modules that tests read (`f.__name__`): fetched from the child.
REMOTE_DUNDERS = {
    "__name__",
    "__qualname__",
    "__module__",
    "__annotations__",
    "__defaults__",
    "__kwdefaults__",
    "__wrapped__",
    "__version__",
    "__all__",
    "__file__",
}


class RemoteObject:
    # An object that lives in the candidate's process (no docstring: __doc__ is the remote object's)
    __slots__ = ("_hid", "_generation", "_type", "_methods")

    def __init__(self, hid, generation, type_name):
        object.__setattr__(self, "_hid", hid)
        object.__setattr__(self, "_generation", generation)
        object.__setattr__(self, "_type", type_name)
        object.__setattr__(self, "_methods", {})

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name not in REMOTE_DUNDERS:
            raise AttributeError(name)  # protocols are looked up on the type; never guessed remotely
        return _request("getattr", self, name=name)

    @property
    def __doc__(self):
        doc = _request("getattr", self, name="__doc__")
        return doc if isinstance(doc, str) else None

    def __setattr__(self, name, value):
        _request("setattr", self, name=name, args=[CHILD.encode(value)])

    def __delattr__(self, name):
        _request("delattr", self, name=name)

    def __call__(self, *args, **kwargs):
        return _request(
            "call",
            self,
            args=[CHILD.encode(a) for a in args],
            kwargs={str(k): CHILD.encode(v) for k, v in kwargs.items()},
        )

    def __repr__(self):
        try:
            text = _request("special", self, name="__repr__")
        except Exception:
            text = None
        return text if isinstance(text, str) else f"<candidate {self._type} object>"

    def __str__(self):
        text = _request("special", self, name="__str__")
        if not isinstance(text, str):
            raise TypeError("__str__ of a candidate object returned a non-string")
        return text

    def __bool__(self):
        value = _request("special", self, name="__bool__")
        if value is NotImplemented:
            length = _request("special", self, name="__len__")
            return length is NotImplemented or bool(length)
        if not isinstance(value, bool):
            raise TypeError("__bool__ of a candidate object returned a non-bool")
        return value

    def __len__(self):
        value = _request("special", self, name="__len__")
        if value is NotImplemented:
            raise TypeError(f"object of type {self._type} has no len()")
        return value

    def __iter__(self):
        it = _request("special", self, name="__iter__")
        if it is NotImplemented:
            raise TypeError(f"{self._type} object is not iterable")
        if not isinstance(it, RemoteObject):
            return iter(it)
        return _RemoteIterator(it)

    def __next__(self):
        value = _request("special", self, name="__next__")
        if value is NotImplemented:
            raise TypeError(f"{self._type} object is not an iterator")
        return value

    def __contains__(self, item):
        value = _request("special", self, name="__contains__", args=[CHILD.encode(item)])
        if value is NotImplemented:
            return any(x == item for x in self)
        return bool(value) if isinstance(value, bool) else False

    def __hash__(self):
        value = _request("special", self, name="__hash__")
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"unhashable candidate object {self._type}")
        return value

    def __enter__(self):
        return _request("special", self, name="__enter__")

    def __exit__(self, *exc):
        _request("special", self, name="__exit__", args=[["N"], ["N"], ["N"]])
        return False  # the test's own exception is never swallowed by the candidate

    def __instancecheck__(self, obj):
        try:
            return _request("isinstance", self, args=[CHILD.encode(obj)]) is True
        except TypeError:
            return False

    def __subclasscheck__(self, cls):
        if not isinstance(cls, RemoteObject):
            return False
        return _request("issubclass", self, args=[CHILD.encode(cls)]) is True

    def __dir__(self):
        names = _request("dir", self)
        return names if isinstance(names, list) else []

    def __format__(self, spec):
        text = _request("special", self, name="__format__", args=[CHILD.encode(str(spec))])
        if not isinstance(text, str):
            raise TypeError("__format__ of a candidate object returned a non-string")
        return text

    __eq__ = _compare("__eq__")
    __ne__ = _compare("__ne__")
    __lt__ = _compare("__lt__")
    __le__ = _compare("__le__")
    __gt__ = _compare("__gt__")
    __ge__ = _compare("__ge__")


for _name in (
    "getitem",
    "setitem",
    "delitem",
    "int",
    "float",
    "index",
    "complex",
    "round",
    "abs",
    "neg",
    "pos",
    "invert",
    "reversed",
    "bytes",
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
    "radd",
    "rsub",
    "rmul",
    "rtruediv",
    "rfloordiv",
    "rmod",
    "rpow",
    "rmatmul",
    "rand",
    "ror",
    "rxor",
    "rlshift",
    "rrshift",
    "divmod",
    "rdivmod",
    "iadd",
    "isub",
    "imul",
):
    setattr(RemoteObject, f"__{_name}__", _special(f"__{_name}__"))


class _RemoteIterator:
    def __init__(self, it):
        self.it = it

    def __iter__(self):
        return self

    def __next__(self):
        try:
            value = _request("special", self.it, name="__next__")
        except StopIteration:
            raise StopIteration from None
        if value is NotImplemented:
            raise TypeError("the candidate's __iter__ returned a non-iterator")
        return value
