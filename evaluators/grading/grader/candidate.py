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

Wire format: length-prefixed JSON frames whose values are tagged lists; see TAGS. Both ends encode and decode
with one _Wire, and each says only what its references are.
"""

import base64
import collections
import datetime
import decimal
import enum
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
_GONE = "the candidate's process ended earlier: this object of it is gone"
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "WORKSPACE": WORKSPACE,
    "PYTHONDONTWRITEBYTECODE": "1",
}

# ------------------------------------------------------------------------------ the wire format (both sides)
# A frame is a 4-byte big-endian length, then one JSON object. The test runner sends down (to the child)
#   {"op": "import", "name": a module}: the child answers {"module": {"h": id, "package": bool, "file": path}}
#   {"op": one of _OPS, "h": target's id, "name": attribute, "args": [value], "kwargs": {name: value}}:
#       the child answers {"ok": value} or {"raise": an XI value, "traceback": text}
# While a request runs the child may send up {"callback": index, "args": [value], "kwargs": {name: value}}
# (the candidate calls a function of the tests'); the runner answers {"ok": value} or {"raise": an XI value}
# and reads on. Every value is a list [tag, field, ...] as below.
UP, DOWN = "up", "down"  # UP: child -> test runner; DOWN: test runner -> child

Tag = collections.namedtuple("Tag", "carries up down")  # up/down: the fields after the tag; None: never sent


def _both(carries, *fields):
    return Tag(carries, fields, fields)


TAGS = {  # a value is [tag, *fields]; a decoder refuses a tag or a field count that is not its direction's
    "N": _both("None"),
    "NI": Tag("NotImplemented (an operator of the candidate's declined)", (), None),
    "B": _both("bool", "true or false"),
    "I": _both("int", "hex digits"),
    "F": _both("float", "repr"),
    "C": _both("complex", "real part's repr", "imaginary part's repr"),
    "S": _both("str", "text"),
    "Y": _both("bytes", "base64"),
    "YA": _both("bytearray", "base64"),
    "T": _both("tuple", "[values]"),
    "NT": _both("namedtuple (rebuilt as a new namedtuple class)", "type name", "[field names]", "[values]"),
    "L": _both("list", "[values]"),
    "D": _both("dict", "[[key, value], ...]"),
    "Z": _both("set", "[values]"),
    "R": _both("frozenset", "[values]"),
    "DEC": _both("decimal.Decimal", "str"),
    "FR": _both("fractions.Fraction", "hex numerator", "hex denominator"),
    "DT": _both("datetime.datetime, date or time", '"datetime", "date" or "time"', "isoformat"),
    "TD": _both("datetime.timedelta", "days", "seconds", "microseconds"),
    "P": _both("a path (rebuilt as pathlib.Path)", "str"),
    # references: what each end makes of them is its own (_Server._resolve, _Child._resolve)
    "H": Tag("an object that stays in the child (a handle)", ("id", "type's qualname"), ("id",)),
    "X": Tag("an exception class of the candidate's", ("id", "qualname", "built-in base's name"), ("id",)),
    "XI": _both("an exception raised (id: its class's, or 0)", "id", "qualname", "built-in base", "message"),
    "CB": Tag("a function of the tests' that the candidate may call back", None, ("index",)),
}
_REFERENCES = ("H", "X", "XI", "CB")
# What rebuilding a malformed value raises (it then ends as a ProtocolError).
_MALFORMED = (
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    OverflowError,
    RecursionError,
    decimal.InvalidOperation,
)


class ProtocolError(RuntimeError):
    """The child's reply was not a well-formed value (too large, too deep, unknown tag)."""


def _builtin_exc_name(cls):
    """The first built-in exception class in cls's MRO, by name (never SystemExit & co)."""
    for base in cls.__mro__:
        if base.__module__ == "builtins" and issubclass(base, BaseException):
            return EXC_MAP.get(base.__name__, base.__name__)
    return "RuntimeError"


def _builtin_exc_class(name):
    """The built-in exception class of that name (from _builtin_exc_name); RuntimeError for anything else."""
    import builtins

    cls = getattr(builtins, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, Exception) else RuntimeError


def _exc_value(hid, cls, message):
    """An exception as an XI value."""
    return ["XI", hid, cls.__qualname__, _builtin_exc_name(cls), message]


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


# ------------------------------------------------------------------------------ values (both sides)


class _Wire:
    """One end's encoder and decoder. Plain values are the same logic at both ends; an end says what its
    references are: _before_plain (objects that must not cross as plain values), _not_plain (the rest) and
    _too_deep when encoding, _resolve (H, X, XI, CB) when decoding."""

    receives = None  # UP or DOWN: which of each tag's field lists in TAGS this end accepts

    def encode(self, x, depth=0):
        """x as a tagged value."""
        if depth > MAX_DEPTH:
            return self._too_deep(x)
        v = self._before_plain(x)
        if v is None:
            v = _plain_form(x, self.encode, depth + 1)
        return self._not_plain(x) if v is None else v

    def decode(self, v, depth=0):
        """The value a tagged value stands for: only built-in types, and this end's references."""
        if depth > MAX_DEPTH + 2:
            raise ProtocolError("a value nested too deeply")
        if not isinstance(v, list) or not v or not isinstance(v[0], str):
            raise ProtocolError("a malformed value")
        tag, fields = v[0], v[1:]
        expected = getattr(TAGS.get(tag), self.receives, None)
        if expected is None:
            raise ProtocolError(f"an unknown value tag {tag!r}")
        if len(fields) != len(expected):
            raise ProtocolError(f"a malformed {tag} value: {len(fields)} fields, not {len(expected)}")
        try:
            if tag in _REFERENCES:
                return self._resolve(tag, fields)
            return _plain_value(tag, fields, self.decode, depth + 1)
        except ProtocolError:
            raise
        except _MALFORMED as e:
            raise ProtocolError(f"a malformed {tag} value: {type(e).__name__}") from None

    def _before_plain(self, x):
        return None

    # Each end's own references (handles, callbacks, exceptions): _Server and _Child define these.
    def _not_plain(self, x):
        raise NotImplementedError("defined by each end of the wire (_Server, _Child)")

    def _too_deep(self, x):
        raise NotImplementedError("defined by each end of the wire (_Server, _Child)")

    def _resolve(self, tag, fields):
        raise NotImplementedError("defined by each end of the wire (_Server, _Child)")


def _plain_form(x, sub, depth):
    """x's tagged form if it is a plain value, else None; sub(v, depth) encodes a nested value. Read with
    the built-in types' own methods, so that a subclass's overrides (__int__, __str__, __iter__, items) are
    never asked."""
    if x is None:
        return ["N"]
    if isinstance(x, bool):
        return ["B", bool(x)]
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
        fields = [str(f) for f in type(x)._fields]
        return ["NT", type(x).__name__, fields, [sub(v, depth) for v in tuple.__iter__(x)]]
    if isinstance(x, tuple):
        return ["T", [sub(v, depth) for v in tuple.__iter__(x)]]
    if isinstance(x, list):
        return ["L", [sub(v, depth) for v in list.__iter__(x)]]
    if isinstance(x, dict):
        return ["D", [[sub(k, depth), sub(v, depth)] for k, v in dict.items(x)]]
    if isinstance(x, set):
        return ["Z", [sub(v, depth) for v in set.__iter__(x)]]
    if isinstance(x, frozenset):
        return ["R", [sub(v, depth) for v in frozenset.__iter__(x)]]
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
    return None


_DATES = {"datetime": datetime.datetime, "date": datetime.date, "time": datetime.time}


def _plain_value(tag, f, sub, depth):
    """A genuine built-in value from a plain tag's fields (counted already); sub(v, depth) decodes a nested
    value."""
    if tag == "N":
        return None
    if tag == "NI":
        return NotImplemented
    if tag == "B":
        return f[0] is True
    if tag == "I":
        return int(_str(f[0]), 16)
    if tag == "F":
        return float(_str(f[0]))
    if tag == "C":
        return complex(float(_str(f[0])), float(_str(f[1])))
    if tag == "S":
        return _str(f[0])
    if tag in ("Y", "YA"):
        raw = base64.b64decode(_str(f[0]), validate=True)
        return raw if tag == "Y" else bytearray(raw)
    if tag == "L":
        return [sub(x, depth) for x in _list(f[0])]
    if tag == "T":
        return tuple(sub(x, depth) for x in _list(f[0]))
    if tag == "NT":
        cls = collections.namedtuple(_str(f[0]), [_str(name) for name in _list(f[1])], rename=True)
        return cls(*[sub(x, depth) for x in _list(f[2])])
    if tag == "D":
        return {sub(k, depth): sub(x, depth) for k, x in (_pair(p) for p in _list(f[0]))}
    if tag == "Z":
        return {sub(x, depth) for x in _list(f[0])}
    if tag == "R":
        return frozenset(sub(x, depth) for x in _list(f[0]))
    if tag == "DEC":
        return decimal.Decimal(_str(f[0]))
    if tag == "FR":
        return fractions.Fraction(int(_str(f[0]), 16), int(_str(f[1]), 16))
    if tag == "DT":
        return _DATES[f[0]].fromisoformat(_str(f[1]))
    if tag == "TD":
        return datetime.timedelta(days=_int(f[0]), seconds=_int(f[1]), microseconds=_int(f[2]))
    if tag == "P":
        return pathlib.Path(_str(f[0]))
    raise ProtocolError(f"an unknown value tag {tag!r}")  # a tag in TAGS that this function lacks


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


class _Server(_Wire):
    """The child's end: keeps the candidate's objects by id and answers each request with one reply."""

    receives = DOWN

    def __init__(self, req_fd, rep_fd):
        self.req_fd, self.rep_fd = req_fd, rep_fd
        self.objects = {}
        self.ids = itertools.count(1)

    def serve(self):
        while True:
            try:
                req = _recv(self.req_fd)
            except EOFError:
                os._exit(0)
            try:
                if req.get("op") == "import":
                    _send(self.rep_fd, {"module": self._import(req["name"])})
                    continue
                value = self._perform(req)
            except BaseException as e:
                _send(self.rep_fd, {"raise": self.encode(e), "traceback": _traceback(e)})
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
            _send(self.rep_fd, {"ok": self.encode(value)})
        except Exception as e:  # e.g. a str that cannot be encoded: say so instead of dying
            _send(self.rep_fd, {"raise": _exc_value(0, ProtocolError, f"unsendable result: {e}")})

    def _callback(self, index):
        """A function of the tests', passed to the candidate: calling it asks the test runner to run it."""

        def call(*args, **kwargs):
            request = {
                "callback": index,
                "args": [self.encode(a) for a in args],
                "kwargs": {str(k): self.encode(v) for k, v in kwargs.items()},
            }
            _send(self.rep_fd, request)
            answer = _recv(self.req_fd)
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
            return ["X", self._keep(x), x.__qualname__, _builtin_exc_name(x)]
        if isinstance(x, BaseException):
            return _exc_value(self._keep(type(x)), type(x), _message(x))
        return self._handle(x)

    def _too_deep(self, x):
        return self._handle(x)

    def _resolve(self, tag, f):
        if tag in ("H", "X"):
            return self.objects[f[0]]
        if tag == "CB":
            return self._callback(f[0])
        return _builtin_exc_class(_str(f[2]))(_str(f[3]))  # XI: a test's function raised


# ------------------------------------------------------------------------------ the test runner's side


class _Child(_Wire):
    """The test runner's end: the one candidate process of a test session, restarted (a new generation) if
    it ends. What it sends comes back as genuine built-in values, RemoteObject handles and local stand-ins
    for its exception classes; the tests' own functions cross to it as callbacks."""

    receives = UP

    def __init__(self):
        self.proc = None
        self.generation = 0
        self.source = None
        self.callbacks = []  # the tests' functions passed to the candidate, by index

    def ensure(self):
        if self.proc is not None and self.proc.poll() is None:
            return
        if self.source is None:
            self.source = _SOURCE
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
            raise RuntimeError(_GONE)
        self.ensure()
        try:
            _send(self.proc.stdin.fileno(), msg)
            while True:
                reply = _recv(self.proc.stdout.fileno(), _now() + CALL_TIMEOUT)
                if not (isinstance(reply, dict) and "callback" in reply):
                    break
                _send(self.proc.stdin.fileno(), self._run_callback(reply))
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
            raise self._raised(reply["raise"], str(reply.get("traceback", ""))[-4000:])
        if "module" in reply:
            return reply["module"]
        if "ok" not in reply:
            self.stop()
            raise ProtocolError("a malformed reply")
        return self.decode(reply["ok"])

    def _run_callback(self, msg):
        """Runs one of the tests' functions for the candidate: plain values and handles in and out."""
        try:
            fn = self.callbacks[_int(msg["callback"])]
            args = [self.decode(a) for a in _list(msg.get("args", []))]
            kwargs = {str(k): self.decode(v) for k, v in dict(msg.get("kwargs", {})).items()}
            return {"ok": self.encode(fn(*args, **kwargs))}
        except Exception as e:
            return {"raise": _exc_value(0, type(e), _message(e))}

    def _raised(self, v, traceback_text=""):
        """The exception of a "raise" reply, rebuilt here; a ProtocolError if it is not readable as one."""
        try:
            if not (isinstance(v, list) and v[:1] == ["XI"]):
                raise ProtocolError("a malformed exception")
            exc = self.decode(v)
        except ProtocolError as e:
            return ProtocolError(f"the candidate raised something unreadable ({e})")
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
            return RemoteObject(_int(f[0]), self.generation, _str(f[1]))
        cls = _exc_class(_int(f[0]), _str(f[1]), _str(f[2]), self.generation)
        return cls if tag == "X" else cls(_str(f[3]))


CHILD = _Child()
_EXC_CLASSES = {}  # (generation-independent) qualname + base -> local exception class


def _exc_class(hid, qualname, base, generation):
    """A local stand-in for an exception class of the candidate's: a subclass of its built-in base, with its
    name (or that built-in itself), so that pytest.raises(ValueError) and `type(e) is ValueError` hold."""
    base_cls = _builtin_exc_class(base)
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
    """Processes the tests start (scripts, CLIs, subprocess) run as the candidate user, not as the runner, and
    inherit nothing that names the grader's folder: the environment is the child's (CHILD_ENV) plus what the
    test set itself (a variable the runner's own environment does not hold as it is), the working folder
    the workspace unless the test chose one, no file descriptor but 0-2 unless the test passes some."""
    original = subprocess.Popen.__init__

    def __init__(self, *args, **kwargs):
        if os.getuid() == 0 and kwargs.get("user") is None and kwargs.get("group") is None:
            kwargs.update(user=CANDIDATE_UID, group=CANDIDATE_UID, extra_groups=[])
            given = kwargs.get("env")
            own = {
                k: v for k, v in (given or {}).items() if not (isinstance(k, str) and os.environ.get(k) == v)
            }
            kwargs["env"] = {**CHILD_ENV, **own}
            kwargs["close_fds"] = True
            if kwargs.get("cwd") is None:
                kwargs["cwd"] = WORKSPACE
        original(self, *args, **kwargs)

    subprocess.Popen.__init__ = __init__

    def system(command):
        code = subprocess.call(command, shell=True)
        return code << 8 if code >= 0 else -code

    os.system = system


def _configure():
    """This grading's settings, from the test runner's environment, read when the conftest installs the proxy
    (not only at import: a command server may have imported this module once for a batch's turns, each of
    which has its own candidate user)."""
    global WORKSPACE, CANDIDATE_UID, CALL_TIMEOUT
    WORKSPACE = os.environ.get("WORKSPACE", "/workspace")
    CANDIDATE_UID = int(os.environ.get("HARNESS_CANDIDATE_UID", "10001"))
    CALL_TIMEOUT = float(os.environ.get("HARNESS_CALL_TIMEOUT", "60"))
    CHILD_ENV["WORKSPACE"] = WORKSPACE


def install(mode="proxy"):
    """Called by the grader's conftest. proxy: the candidate's modules come through the child;
    direct: they import into the test process (a task's opt-out; canaries are then the only defence)."""
    _configure()
    _as_candidate_popen()
    if mode == "direct":
        sys.path.append(WORKSPACE)
    else:
        sys.meta_path.append(CandidateFinder())
    import atexit

    atexit.register(CHILD.stop)


# The child's program is this file's own text, read now: the file may be gone by the time a child starts (a
# command server that imported it for a batch's first turn serves the later ones from memory).
_SOURCE = None
if __name__ != "__main__":
    with open(__file__, encoding="utf-8") as _f:
        _SOURCE = _f.read()

if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child_main()
