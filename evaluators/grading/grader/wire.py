"""The candidate proxy's wire: what its two ends (the test runner, the child) send each other and how each
reads it, and the grading's settings that both read. Standard library only, as all of grader/.

Wire format: length-prefixed JSON frames whose values are tagged lists; see TAGS. Both ends encode and decode
with one _Wire, and each says only what its references are (remote.py: the test runner's end; child.py: the
child's). Plain values (None, bool, int, float, complex, str, bytes, containers of them, Decimal, Fraction,
dates, paths, namedtuples) are rebuilt by the reader as genuine built-in objects, whatever the sender claims.
"""

import base64
import collections
import datetime
import decimal
import fractions
import json
import os
import pathlib
import select
import struct

# This grading's settings, from the environment (configure() reads them again for each test session).
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


def configure():
    """This grading's settings, from the test runner's environment, read when the conftest installs the proxy
    (not only at import: a command server may have imported these modules once for a batch's turns, each of
    which has its own candidate user). The other modules read them as wire.NAME when they use them."""
    global WORKSPACE, CANDIDATE_UID, CALL_TIMEOUT
    WORKSPACE = os.environ.get("WORKSPACE", "/workspace")
    CANDIDATE_UID = int(os.environ.get("HARNESS_CANDIDATE_UID", "10001"))
    CALL_TIMEOUT = float(os.environ.get("HARNESS_CALL_TIMEOUT", "60"))
    CHILD_ENV["WORKSPACE"] = WORKSPACE


# ------------------------------------------------------------------------------ the wire format (both sides)
# A frame is a 4-byte big-endian length, then one JSON object. The test runner sends down (to the child)
#   {"op": "import", "name": a module}: the child answers {"module": {"h": id, "package": bool, "file": path}}
#   {"op": one of child._OPS, "h": target's id, "name": attribute, "args": [value], "kwargs": {name: value}}:
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


def _read_exact(fd, n, deadline, alive=None):
    """n bytes from fd. `alive`: a pidfd of the process that answers; once it has ended with nothing more
    to read, that is the end (a process it left behind may hold the pipe open, and would else make the
    reader wait out its deadline)."""
    out = bytearray()
    while len(out) < n:
        if deadline is not None:
            left = deadline - _now()
            ready = select.select([fd] + ([alive] if alive is not None else []), [], [], max(left, 0))[0]
            if fd not in ready and alive in ready:
                raise EOFError("the candidate's process ended")
            if left <= 0 or not ready:
                raise TimeoutError(f"the candidate did not answer within {CALL_TIMEOUT:g} s")
        chunk = os.read(fd, min(n - len(out), 1 << 20))
        if not chunk:
            raise EOFError("the candidate's process ended")
        out += chunk
    return bytes(out)


def _recv(fd, deadline=None, alive=None):
    (size,) = struct.unpack(">I", _read_exact(fd, 4, deadline, alive))
    if size > MAX_FRAME:
        raise ProtocolError(f"a reply of {size} bytes is over the {MAX_FRAME} byte limit")
    try:
        return json.loads(_read_exact(fd, size, deadline, alive).decode("utf-8", "surrogatepass"))
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
