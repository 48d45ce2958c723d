"""The candidate proxy: hidden tests call the candidate's Python code in another process, as another user.

This file runs in two places inside a grading container, and uses the standard library only:
  - the test runner (root, in /grader): the grader's conftest calls install(). A `from solution import f`
    in a hidden test then returns a proxy module; every attribute, call and operation on it is a request to
  - the child (`python3 -I -c <this file> --child`, as the sandbox user), which imports the candidate's
    modules from /workspace and answers each request with one reply.

Why: code under test that runs inside pytest can patch pytest's reports, read the hidden tests, or return an
object that claims to equal anything. Here only plain values cross (None, bool, int, float, complex, str,
bytes, containers of them, Decimal, Fraction, dates, paths, namedtuples), rebuilt by this side as genuine
built-in objects, whatever the child claims. Other objects stay in the child and cross as handles whose
methods run remotely. A handle never compares equal to a plain value; two handles compare with the
candidate's own __eq__ (its behaviour is what such a test checks; canaries are the defence there).
Exceptions cross as their built-in base type with the candidate's message, so pytest.raises(ValueError)
works; SystemExit, KeyboardInterrupt and pytest's outcomes (skip, exit) become RuntimeError.

Wire format: a 4-byte big-endian length, then a JSON object. Every value is a list [tag, ...]; see _enc/_dec.
"""

import base64
import datetime
import decimal
import fractions
import importlib.abc
import importlib.machinery
import itertools
import json
import os
import pathlib
import select
import signal
import struct
import subprocess
import sys
import types

WORKSPACE = os.environ.get("WORKSPACE", "/workspace")
CANDIDATE_UID = int(os.environ.get("HARNESS_CANDIDATE_UID", "10001"))
CALL_TIMEOUT = float(os.environ.get("HARNESS_CALL_TIMEOUT", "60"))
MAX_FRAME = 64 << 20  # bytes of one reply; a larger one ends the child
MAX_DEPTH = 100  # nesting of one value; deeper parts stay in the child as handles
EXC_MAP = {
    "SystemExit": "RuntimeError",
    "KeyboardInterrupt": "RuntimeError",
    "GeneratorExit": "RuntimeError",
    "BaseException": "RuntimeError",
    "BaseExceptionGroup": "RuntimeError",
}
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "WORKSPACE": WORKSPACE,
    "PYTHONDONTWRITEBYTECODE": "1",
}


class ProtocolError(RuntimeError):
    """The child's reply was not a well-formed value (too large, too deep, unknown tag)."""


def _builtin_exc_name(cls):
    """The first built-in exception class in cls's MRO, by name (never SystemExit & co)."""
    for base in cls.__mro__:
        if base.__module__ == "builtins" and issubclass(base, BaseException):
            return EXC_MAP.get(base.__name__, base.__name__)
    return "RuntimeError"


# ------------------------------------------------------------------------------ framing (both sides)


def _send(fd, obj):
    data = json.dumps(obj, allow_nan=True).encode("utf-8", "surrogatepass")
    data = struct.pack(">I", len(data)) + data
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact(fd, n, deadline):
    out = bytearray()
    while len(out) < n:
        if deadline is not None:
            left = deadline - _now()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"the candidate did not answer within {CALL_TIMEOUT:g} s")
        chunk = os.read(fd, min(n - len(out), 1 << 20))
        if not chunk:
            raise EOFError("the candidate's process ended")
        out += chunk
    return bytes(out)


def _recv(fd, deadline=None):
    (size,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    if size > MAX_FRAME:
        raise ProtocolError(f"a reply of {size} bytes is over the {MAX_FRAME} byte limit")
    try:
        return json.loads(_read_exact(fd, size, deadline).decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"unreadable reply: {type(e).__name__}") from None


def _now():
    import time

    return time.monotonic()


# ------------------------------------------------------------------------------ the child


def _child_main():
    """Serves requests on a private copy of stdin/stdout; the candidate's own prints go to stderr and
    its reads of stdin see nothing."""
    req_fd, rep_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.chdir(WORKSPACE)
    sys.path.append(WORKSPACE)  # at the end: the candidate's modules import, the standard library wins
    objects = {}
    ids = itertools.count(1)

    def keep(obj):
        i = next(ids)
        objects[i] = obj
        return i

    def enc(x, depth=0):
        if depth > MAX_DEPTH:
            return ["H", keep(x), type(x).__qualname__]
        if x is None:
            return ["N"]
        if x is NotImplemented:
            return ["NI"]
        if isinstance(x, bool):
            return ["B", bool(x)]
        import enum

        if isinstance(x, enum.Enum):
            return ["H", keep(x), type(x).__qualname__]
        if isinstance(x, int):
            return ["I", format(int.__int__(x), "x")]
        if isinstance(x, float):
            return ["F", float.__repr__(x)]
        if isinstance(x, complex):
            return ["C", float.__repr__(x.real), float.__repr__(x.imag)]
        if isinstance(x, str):
            return ["S", str.__str__(x)]
        if isinstance(x, (bytes, bytearray)):
            return ["Y" if isinstance(x, bytes) else "YA", base64.b64encode(bytes(x)).decode()]
        if isinstance(x, tuple) and isinstance(getattr(type(x), "_fields", None), tuple):
            return [
                "NT",
                type(x).__name__,
                [str(f) for f in type(x)._fields],
                [enc(v, depth + 1) for v in tuple.__iter__(x)],
            ]
        if isinstance(x, tuple):
            return ["T", [enc(v, depth + 1) for v in tuple.__iter__(x)]]
        if isinstance(x, list):
            return ["L", [enc(v, depth + 1) for v in list.__iter__(x)]]
        if isinstance(x, dict):
            return ["D", [[enc(k, depth + 1), enc(v, depth + 1)] for k, v in dict.items(x)]]
        if isinstance(x, (set, frozenset)):
            items = [
                enc(v, depth + 1) for v in (set.__iter__(x) if isinstance(x, set) else frozenset.__iter__(x))
            ]
            return ["Z" if isinstance(x, set) else "R", items]
        if isinstance(x, decimal.Decimal):
            return ["DEC", decimal.Decimal.__str__(x)]
        if isinstance(x, fractions.Fraction):
            return ["FR", format(x.numerator, "x"), format(x.denominator, "x")]
        if isinstance(x, datetime.datetime):
            return ["DT", "datetime", datetime.datetime.isoformat(x)]
        if isinstance(x, datetime.date):
            return ["DT", "date", datetime.date.isoformat(x)]
        if isinstance(x, datetime.time):
            return ["DT", "time", datetime.time.isoformat(x)]
        if isinstance(x, datetime.timedelta):
            return ["TD", x.days, x.seconds, x.microseconds]
        if isinstance(x, pathlib.PurePath):
            return ["P", str(x)]
        if isinstance(x, type) and issubclass(x, BaseException):
            return ["X", keep(x), x.__qualname__, _builtin_exc_name(x)]
        if isinstance(x, BaseException):
            return ["XI", keep(type(x)), type(x).__qualname__, _builtin_exc_name(type(x)), _message(x)]
        return ["H", keep(x), type(x).__qualname__]

    def dec(v):
        tag = v[0]
        if tag in ("H", "X"):
            return objects[v[1]]
        if tag == "CB":
            return callback(v[1])
        return _decode_plain(v, dec)

    def callback(cid):
        """A function of the tests', passed to the candidate: calling it asks the test runner to run it."""

        def call(*args, **kwargs):
            _send(
                rep_fd,
                {
                    "callback": cid,
                    "args": [enc(a) for a in args],
                    "kwargs": {str(k): enc(v) for k, v in kwargs.items()},
                },
            )
            answer = _recv(req_fd)
            if "raise" in answer:
                import builtins

                info = answer["raise"]
                cls = getattr(builtins, str(info[3]), RuntimeError)
                raise (
                    cls(str(info[4]))
                    if isinstance(cls, type) and issubclass(cls, BaseException)
                    else RuntimeError(str(info[4]))
                )
            return dec(answer["ok"])

        return call

    def reply(value):
        try:
            _send(rep_fd, {"ok": enc(value)})
        except Exception as e:  # e.g. a str that cannot be encoded: say so instead of dying
            _send(rep_fd, {"raise": ["XI", 0, "ProtocolError", "RuntimeError", f"unsendable result: {e}"]})

    while True:
        try:
            req = _recv(req_fd)
        except EOFError:
            os._exit(0)
        op = req.get("op")
        try:
            if op == "import":
                import importlib

                module = importlib.import_module(req["name"])
                value = {
                    "h": keep(module),
                    "package": hasattr(module, "__path__"),
                    "file": str(getattr(module, "__file__", "") or ""),
                }
                _send(rep_fd, {"module": value})
                continue
            target = objects[req["h"]]
            args = [dec(a) for a in req.get("args", [])]
            kwargs = {k: dec(a) for k, a in req.get("kwargs", {}).items()}
            if op == "getattr":
                value = getattr(target, req["name"])
            elif op == "setattr":
                setattr(target, req["name"], args[0])
                value = None
            elif op == "delattr":
                delattr(target, req["name"])
                value = None
            elif op == "call":
                value = target(*args, **kwargs)
            elif op == "special":  # looked up on the type, as Python does for operators
                method = getattr(type(target), req["name"], None)
                value = NotImplemented if method is None else method(target, *args)
            elif op == "isinstance":
                value = isinstance(args[0], target)
            elif op == "issubclass":
                value = issubclass(args[0], target)
            elif op == "dir":
                value = sorted(dir(target))
            else:
                raise ValueError(f"unknown request {op!r}")
        except BaseException as e:
            _send(rep_fd, {"raise": enc(e), "traceback": _traceback(e)})
            continue
        reply(value)


def _message(e):
    try:
        return str(e)[:2000]
    except BaseException:
        return "<unprintable message>"


def _traceback(e):
    import traceback

    try:
        return "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:]
    except BaseException:
        return ""


# ------------------------------------------------------------------------------ plain values (both sides)


def _decode_plain(v, dec, depth=0):
    """Rebuilds a plain value from its tagged form: only built-in types come out of here."""
    if depth > MAX_DEPTH + 2:
        raise ProtocolError("a value nested too deeply")
    if not isinstance(v, list) or not v or not isinstance(v[0], str):
        raise ProtocolError("a malformed value")
    tag, rest = v[0], v[1:]
    sub = lambda x: dec(x) if depth == 0 else _decode_nested(x, dec, depth + 1)  # noqa: E731
    try:
        if tag == "N":
            return None
        if tag == "NI":
            return NotImplemented
        if tag == "B":
            return rest[0] is True
        if tag == "I":
            return int(_str(rest[0]), 16)
        if tag == "F":
            return float(_str(rest[0]))
        if tag == "C":
            return complex(float(_str(rest[0])), float(_str(rest[1])))
        if tag == "S":
            return _str(rest[0])
        if tag in ("Y", "YA"):
            raw = base64.b64decode(_str(rest[0]), validate=True)
            return raw if tag == "Y" else bytearray(raw)
        if tag == "L":
            return [sub(x) for x in _list(rest[0])]
        if tag == "T":
            return tuple(sub(x) for x in _list(rest[0]))
        if tag == "NT":
            import collections

            cls = collections.namedtuple(_str(rest[0]), [_str(f) for f in _list(rest[1])], rename=True)
            return cls(*[sub(x) for x in _list(rest[2])])
        if tag == "D":
            return {sub(k): sub(x) for k, x in (_pair(p) for p in _list(rest[0]))}
        if tag == "Z":
            return {sub(x) for x in _list(rest[0])}
        if tag == "R":
            return frozenset(sub(x) for x in _list(rest[0]))
        if tag == "DEC":
            return decimal.Decimal(_str(rest[0]))
        if tag == "FR":
            return fractions.Fraction(int(_str(rest[0]), 16), int(_str(rest[1]), 16))
        if tag == "DT":
            kind = {"datetime": datetime.datetime, "date": datetime.date, "time": datetime.time}[rest[0]]
            return kind.fromisoformat(_str(rest[1]))
        if tag == "TD":
            return datetime.timedelta(days=_int(rest[0]), seconds=_int(rest[1]), microseconds=_int(rest[2]))
        if tag == "P":
            return pathlib.Path(_str(rest[0]))
    except ProtocolError:
        raise
    except (
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        OverflowError,
        RecursionError,
        decimal.InvalidOperation,
    ) as e:
        raise ProtocolError(f"a malformed {tag} value: {type(e).__name__}") from None
    raise ProtocolError(f"an unknown value tag {tag!r}")


def _decode_nested(v, dec, depth):
    if isinstance(v, list) and v and v[0] in ("H", "X", "XI"):
        return dec(v)
    return _decode_plain(v, dec, depth)


def _str(x):
    if type(x) is not str:
        raise TypeError("expected a string")
    return x


def _int(x):
    if type(x) is not int:
        raise TypeError("expected an integer")
    return x


def _list(x):
    if type(x) is not list:
        raise TypeError("expected a list")
    return x


def _pair(x):
    if type(x) is not list or len(x) != 2:
        raise TypeError("expected a pair")
    return x


# ------------------------------------------------------------------------------ the test runner's side


class _Child:
    """The one candidate process of a test session; restarted (a new generation) if it ends."""

    def __init__(self):
        self.proc = None
        self.generation = 0
        self.source = None

    def ensure(self):
        if self.proc is not None and self.proc.poll() is None:
            return
        if self.source is None:
            with open(__file__, encoding="utf-8") as f:
                self.source = f.read()
        self.generation += 1
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", self.source, "--child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=WORKSPACE,
            env=dict(CHILD_ENV),
            start_new_session=True,
            user=CANDIDATE_UID,
            group=CANDIDATE_UID,
            extra_groups=[],
        )

    def stop(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()

    def request(self, msg, generation=None):
        if generation is not None and (
            generation != self.generation or self.proc is None or self.proc.poll() is not None
        ):
            raise RuntimeError("the candidate's process ended earlier: this object of it is gone")
        self.ensure()
        try:
            _send(self.proc.stdin.fileno(), msg)
            while True:
                reply = _recv(self.proc.stdout.fileno(), _now() + CALL_TIMEOUT)
                if not (isinstance(reply, dict) and "callback" in reply):
                    break
                _send(self.proc.stdin.fileno(), _run_callback(reply, self.generation))
        except (EOFError, BrokenPipeError):
            code = self.proc.wait()
            raise RuntimeError(f"the candidate's process ended (exit code {code})") from None
        except (TimeoutError, ProtocolError):
            self.stop()
            raise
        if not isinstance(reply, dict):
            self.stop()
            raise ProtocolError("a malformed reply")
        if "raise" in reply:
            raise _exception(reply["raise"], str(reply.get("traceback", ""))[-4000:])
        if "module" in reply:
            return reply["module"]
        if "ok" not in reply:
            self.stop()
            raise ProtocolError("a malformed reply")
        return _decode(reply["ok"], self.generation)


_CALLBACKS = []  # the tests' functions passed to the candidate, by index


def _run_callback(msg, generation):
    """Runs one of the tests' functions for the candidate: plain values and handles in and out."""
    try:
        fn = _CALLBACKS[_int(msg["callback"])]
        args = [_decode(a, generation) for a in _list(msg.get("args", []))]
        kwargs = {str(k): _decode(v, generation) for k, v in dict(msg.get("kwargs", {})).items()}
        return {"ok": _encode(fn(*args, **kwargs))}
    except Exception as e:
        return {"raise": ["XI", 0, type(e).__qualname__, _builtin_exc_name(type(e)), _message(e)]}


CHILD = _Child()
_EXC_CLASSES = {}  # (generation-independent) qualname + base -> local exception class


def _exc_class(hid, qualname, base):
    import builtins

    base_cls = getattr(builtins, str(base), None)
    if not (isinstance(base_cls, type) and issubclass(base_cls, Exception)):
        base_cls = RuntimeError
    qualname = str(qualname)
    if qualname == base_cls.__name__:
        return base_cls  # the built-in itself: `type(e) is ValueError` holds
    key = (qualname, base_cls)
    if key not in _EXC_CLASSES:
        _EXC_CLASSES[key] = type(
            qualname.rsplit(".", 1)[-1], (base_cls,), {"__module__": "candidate", "__qualname__": qualname}
        )
    cls = _EXC_CLASSES[key]
    cls._harness_hid = (CHILD.generation, hid)
    return cls


def _exception(v, traceback_text=""):
    try:
        if not (isinstance(v, list) and len(v) == 5 and v[0] == "XI"):
            raise ProtocolError("a malformed exception")
        cls = _exc_class(v[1], _str(v[2]), _str(v[3]))
        exc = cls(_str(v[4]))
    except (ProtocolError, TypeError) as e:
        return ProtocolError(f"the candidate raised something unreadable ({e})")
    if traceback_text and hasattr(exc, "add_note"):
        exc.add_note("in the candidate's process:\n" + traceback_text)
    return exc


def _decode(v, generation):
    def dec(x):
        if x[0] == "H":
            return RemoteObject(_int(x[1]), generation, _str(x[2]))
        if x[0] == "X":
            return _exc_class(_int(x[1]), _str(x[2]), _str(x[3]))
        if x[0] == "XI":
            return _exception(x)
        return _decode_plain(x, dec, 1)

    try:
        if isinstance(v, list) and v and v[0] in ("H", "X", "XI"):
            return dec(v)
        return _decode_plain(v, dec)
    except (TypeError, IndexError, RecursionError) as e:
        raise ProtocolError(f"a malformed value: {type(e).__name__}") from None


def _encode(x, depth=0):
    """A value the test passes to the candidate: plain values, or the candidate's own objects."""
    if depth > MAX_DEPTH:
        raise TypeError("a value nested too deeply to pass to the candidate")
    if isinstance(x, RemoteObject):
        if x._generation != CHILD.generation:
            raise RuntimeError("the candidate's process ended earlier: this object of it is gone")
        return ["H", x._hid]
    if isinstance(x, type) and issubclass(x, BaseException) and hasattr(x, "_harness_hid"):
        return ["X", x._harness_hid[1]]
    if x is None:
        return ["N"]
    if isinstance(x, bool):
        return ["B", x]
    if isinstance(x, int):
        return ["I", format(int(x), "x")]
    if isinstance(x, float):
        return ["F", repr(float(x))]
    if isinstance(x, complex):
        return ["C", repr(x.real), repr(x.imag)]
    if isinstance(x, str):
        return ["S", str(x)]
    if isinstance(x, (bytes, bytearray)):
        return ["Y" if isinstance(x, bytes) else "YA", base64.b64encode(bytes(x)).decode()]
    if isinstance(x, tuple) and isinstance(getattr(type(x), "_fields", None), tuple):
        return ["NT", type(x).__name__, list(type(x)._fields), [_encode(v, depth + 1) for v in x]]
    if isinstance(x, tuple):
        return ["T", [_encode(v, depth + 1) for v in x]]
    if isinstance(x, list):
        return ["L", [_encode(v, depth + 1) for v in x]]
    if isinstance(x, dict):
        return ["D", [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in x.items()]]
    if isinstance(x, (set, frozenset)):
        return ["Z" if isinstance(x, set) else "R", [_encode(v, depth + 1) for v in x]]
    if isinstance(x, decimal.Decimal):
        return ["DEC", str(x)]
    if isinstance(x, fractions.Fraction):
        return ["FR", format(x.numerator, "x"), format(x.denominator, "x")]
    if isinstance(x, datetime.datetime):
        return ["DT", "datetime", x.isoformat()]
    if isinstance(x, datetime.date):
        return ["DT", "date", x.isoformat()]
    if isinstance(x, datetime.time):
        return ["DT", "time", x.isoformat()]
    if isinstance(x, datetime.timedelta):
        return ["TD", x.days, x.seconds, x.microseconds]
    if isinstance(x, pathlib.PurePath) or hasattr(x, "strpath"):  # py.path.local (tmpdir) too
        return ["P", str(x)]
    if callable(x):  # a function of the tests': the candidate may call it back
        _CALLBACKS.append(x)
        return ["CB", len(_CALLBACKS) - 1]
    raise TypeError(f"cannot pass a {type(x).__name__} to the candidate's process (only plain values cross)")


def _request(op, obj, **fields):
    msg = {"op": op, "h": obj._hid, **fields}
    return CHILD.request(msg, generation=obj._generation)


def _special(name):
    def method(self, *args):
        return _request("special", self, name=name, args=[_encode(a) for a in args])

    method.__name__ = name
    return method


def _compare(name):
    def method(self, other):
        if not isinstance(other, RemoteObject):
            return NotImplemented  # never let the candidate decide that it equals a plain value
        result = _request("special", self, name=name, args=[_encode(other)])
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
        _request("setattr", self, name=name, args=[_encode(value)])

    def __delattr__(self, name):
        _request("delattr", self, name=name)

    def __call__(self, *args, **kwargs):
        return _request(
            "call",
            self,
            args=[_encode(a) for a in args],
            kwargs={str(k): _encode(v) for k, v in kwargs.items()},
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
        value = _request("special", self, name="__contains__", args=[_encode(item)])
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
            return _request("isinstance", self, args=[_encode(obj)]) is True
        except TypeError:
            return False

    def __subclasscheck__(self, cls):
        if not isinstance(cls, RemoteObject):
            return False
        return _request("issubclass", self, args=[_encode(cls)]) is True

    def __dir__(self):
        names = _request("dir", self)
        return names if isinstance(names, list) else []

    def __format__(self, spec):
        text = _request("special", self, name="__format__", args=[_encode(str(spec))])
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


class RemoteModule(types.ModuleType):
    """A module of the candidate's: attribute reads go to the child (re-imported if the child restarted)."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name != "__all__":
            raise AttributeError(name)
        if (
            self.__dict__.get("_harness_generation") != CHILD.generation
            or CHILD.proc is None
            or CHILD.proc.poll() is not None
        ):
            _import_into(self)
        handle = RemoteObject(self.__dict__["_harness_hid"], CHILD.generation, "module")
        if name == "__all__":
            try:
                return _request("getattr", handle, name="__all__")
            except AttributeError:
                return [n for n in _request("dir", handle) if not n.startswith("_")]
        return _request("getattr", handle, name=name)


def _import_into(module):
    info = CHILD.request({"op": "import", "name": module.__name__})
    module.__dict__["_harness_hid"] = _int(info["h"])
    module.__dict__["_harness_generation"] = CHILD.generation
    module.__file__ = _str(info.get("file", ""))
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
            os.path.isfile(os.path.join(WORKSPACE, top + ".py"))
            or os.path.isdir(os.path.join(WORKSPACE, top))
        ):
            return None
        if "." in fullname and not isinstance(sys.modules.get(top), RemoteModule):
            return None
        return importlib.machinery.ModuleSpec(
            fullname,
            _Loader(),
            origin=f"candidate:{fullname}",
            is_package=os.path.isdir(os.path.join(WORKSPACE, *fullname.split("."))),
        )


def _as_candidate_popen():
    """Processes the tests start (scripts, CLIs, subprocess) run as the candidate user, not as the runner."""
    original = subprocess.Popen.__init__

    def __init__(self, *args, **kwargs):
        if os.getuid() == 0 and kwargs.get("user") is None and kwargs.get("group") is None:
            kwargs.update(user=CANDIDATE_UID, group=CANDIDATE_UID, extra_groups=[])
        original(self, *args, **kwargs)

    subprocess.Popen.__init__ = __init__

    def system(command):
        code = subprocess.call(command, shell=True)
        return code << 8 if code >= 0 else -code

    os.system = system


def install(mode="proxy"):
    """Called by the grader's conftest. proxy: the candidate's modules come through the child;
    direct: they import into the test process (a task's opt-out; canaries are then the only defence)."""
    _as_candidate_popen()
    if mode == "direct":
        sys.path.append(WORKSPACE)
    else:
        sys.meta_path.append(CandidateFinder())
    import atexit

    atexit.register(CHILD.stop)


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child_main()
