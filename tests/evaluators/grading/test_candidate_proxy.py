"""The candidate proxy (evaluators/grading/grader/: candidate.py, remote.py, child.py, wire.py) in a real
grading container: hidden tests that import the candidate see what they would see in-process for plain
values, objects, exceptions, callbacks and packages, while nothing of the test runner is within the
candidate's reach."""

import collections
import datetime
import decimal
import enum
import fractions
import os
import pathlib
import random
import textwrap

import pytest

from agent.sandbox import Changes
from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.grading.grade import grade
from evaluators.grading.grader import remote, wire
from evaluators.grading.grader.child import _Server
from evaluators.grading.hidden_tests import is_canary
from evaluators.grading.pytest_kind import PytestSettings, prepare
from tasks.model import EvaluatorConfig, Task
from tests.conftest import run


def d(text: str) -> bytes:
    return textwrap.dedent(text).lstrip().encode()


SHAPES = d('''
    import collections, dataclasses, datetime, decimal, fractions

    PI_ISH = 3.14


    class ShapeError(LookupError):
        pass


    def area(w, h):
        """Width times height."""
        if w < 0:
            raise ValueError("negative width")
        return w * h


    def parse(text):
        a, b = text.split(",")
        return int(a), int(b)


    def count_words(text):
        return collections.Counter(text.split())


    def as_decimal(s):
        return decimal.Decimal(s)


    def half(n):
        return fractions.Fraction(n, 2)


    def day(y, m, d):
        return datetime.date(y, m, d)


    def raw():
        return b"\\x00\\xff"


    def nothing():
        return None


    Pair = collections.namedtuple("Pair", "left right")


    def make_pair(a, b):
        return Pair(a, b)


    class Stack:
        def __init__(self):
            self.items = []

        def push(self, x):
            self.items.append(x)

        def pop(self):
            return self.items.pop()

        def peek(self):
            return self.items[-1]

        def __len__(self):
            return len(self.items)

        def __iter__(self):
            return iter(self.items)

        def __contains__(self, x):
            return x in self.items


    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int

        def __add__(self, other):
            return Point(self.x + other.x, self.y + other.y)


    def fail_custom():
        raise ShapeError("custom failure")


    def apply(f, xs):
        return [f(x) for x in xs]


    def gen_squares(n):
        for i in range(n):
            yield i * i


    _STATE = ["new"]


    class Resource:
        def __enter__(self):
            _STATE[0] = "open"
            return "opened"

        def __exit__(self, *exc):
            _STATE[0] = "closed"
            return False


    def state():
        return _STATE[0]


    def read_upper(path):
        with open(path) as f:
            return f.read().upper()


    def write_to(path, text):
        with open(path, "w") as f:
            f.write(text)
    ''')

HIDDEN = d("""
    import datetime, decimal, fractions, subprocess

    import pytest

    import shapes
    from pkg.sub import twice
    from shapes import Point, ShapeError, Stack, apply, area, make_pair


    def test_plain_values():
        assert area(2, 3) == 6 and type(area(2, 3)) is int
        assert shapes.PI_ISH == 3.14
        assert shapes.parse("1,2") == (1, 2) and type(shapes.parse("1,2")) is tuple
        assert shapes.count_words("a b a") == {"a": 2, "b": 1}
        assert shapes.as_decimal("1.10") == decimal.Decimal("1.10")
        assert shapes.half(3) == fractions.Fraction(3, 2)
        assert shapes.day(2024, 2, 29) == datetime.date(2024, 2, 29)
        assert shapes.raw() == b"\\x00\\xff"
        assert shapes.nothing() is None


    def test_names_and_docs():
        assert area.__name__ == "area" and area.__doc__ == "Width times height."
        assert Stack.__name__ == "Stack" and Stack.__doc__ is None and shapes.__name__ == "shapes"


    def test_namedtuple():
        p = make_pair(1, 2)
        assert p == (1, 2) and p.left == 1 and p.right == 2


    def test_objects():
        s = Stack()
        s.push(1)
        s.push("two")
        assert len(s) == 2 and s.peek() == "two" and "two" in s
        assert s.pop() == "two" and list(s) == [1]
        s.label = "mine"
        assert s.label == "mine"
        assert Point(1, 2) == Point(1, 2) and Point(1, 2) != Point(2, 1)
        assert repr(Point(1, 2)) == "Point(x=1, y=2)"
        assert isinstance(Point(1, 2), Point) and not isinstance(3, Point)
        assert hash(Point(1, 2)) == hash(Point(1, 2))
        assert Point(1, 2) + Point(3, 4) == Point(4, 6)


    def test_exceptions():
        with pytest.raises(ValueError, match="negative"):
            area(-1, 2)
        with pytest.raises(ShapeError):
            shapes.fail_custom()
        with pytest.raises(LookupError, match="custom"):
            shapes.fail_custom()


    def test_callbacks_generators_context():
        assert apply(lambda x: x * 10, [1, 2]) == [10, 20]
        assert list(shapes.gen_squares(4)) == [0, 1, 4, 9]
        with shapes.Resource() as r:
            assert r == "opened"
        assert shapes.state() == "closed"


    def test_subpackage():
        assert twice(4) == 8


    def test_files(tmp_path):
        f = tmp_path / "in.txt"
        f.write_text("hello")
        assert shapes.read_upper(str(f)) == "HELLO"
        assert shapes.read_upper(f) == "HELLO"
        shapes.write_to(str(tmp_path / "out.txt"), "x")
        assert (tmp_path / "out.txt").read_text() == "x"


    def test_processes_run_as_the_candidate():
        assert subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() == "10001"


    def test_canary_area():
        assert area(2, 3) == 7
    """)

WORKSPACE = {"shapes.py": SHAPES, "pkg/__init__.py": b"", "pkg/sub.py": b"def twice(x):\n    return 2 * x\n"}


def task(import_mode: str = "proxy") -> Task:
    return Task(
        id="shapes",
        path=None,
        instruction="x",
        workspace_files=WORKSPACE,
        test_files={"test_shapes.py": HIDDEN},
        evaluator=EvaluatorConfig(kind="pytest", settings=PytestSettings(import_mode=import_mode)),
    )


def grade_files(files: dict, t: Task, image: str):
    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(t, Changes(files=files), pool, image)

    return run(main())


def test_proxy_keeps_what_tests_see(image):
    v = grade_files({}, task(), image)
    assert (v.solved, v.reason) == (True, "pass"), [(t.id, t.outcome, t.message) for t in v.tests]
    ids = {t.id for t in v.tests}
    assert "tests.test_shapes.test_objects" in ids and "tests.test_shapes.test_canary_area" in ids


def test_direct_mode_imports_in_process(image):
    v = grade_files({}, task("direct"), image)
    assert (v.solved, v.reason) == (True, "pass"), [(t.id, t.outcome, t.message) for t in v.tests]


def test_direct_mode_report_patch_is_caught_by_random_canary_names(image):
    """Opting out of the proxy leaves canaries as the defence: a patch that spares tests named test_canary*
    finds none, because every test has a random name while graded."""
    patch = d("""
        import _pytest.reports as r
        orig = r.TestReport.from_item_and_call
        def fake(item, call):
            rep = orig(item, call)
            if "canary" not in item.name:
                rep.outcome = "passed"
                rep.longrepr = None
            return rep
        r.TestReport.from_item_and_call = staticmethod(fake)
        """)
    wrong = SHAPES.replace(b"return w * h", b"return w + h") + patch
    v = grade_files({"shapes.py": wrong}, task("direct"), image)
    assert (v.solved, v.reward, v.reason) == (False, 0.0, "tamper"), v
    v = grade_files({"shapes.py": wrong}, task("proxy"), image)  # the patch never reaches the runner
    assert (v.solved, v.reason) == (False, "fail") and v.reward < 1.0, v
    assert {t.id: t.outcome for t in v.tests}["tests.test_shapes.test_plain_values"] == "failed"


def test_prepare_renames_and_shuffles_but_keeps_the_tasks_names():
    files = {
        "test_a.py": b"import os\n\n\n@pytest.mark.x\ndef test_one():\n    pass\n\n\ndef test_canary_x():\n"
        b"    assert False\n\n\nclass TestK:\n    def test_two(self):\n        pass\n\n\n"
        b"def test_three():\n    pass\n",
        "data.txt": b"keep",
    }
    orders = set()
    for seed in range(12):
        p = prepare(files, random.Random(seed))
        text = p.files["test_a.py"].decode()
        assert "test_one" not in text and "test_canary" not in text and "test_two" not in text
        assert p.files["data.txt"] == b"keep" and "@pytest.mark.x" in text
        assert sorted(p.names.values()) == [
            "tests.test_a.TestK.test_two",
            "tests.test_a.test_canary_x",
            "tests.test_a.test_one",
            "tests.test_a.test_three",
        ]
        assert [p.names[c] for c in p.canaries] == ["tests.test_a.test_canary_x"]
        assert not any(is_canary(i) for i in p.expected)
        compile(text, "test_a.py", "exec")
        orders.add(
            tuple(
                p.names[f"tests.test_a.{line[4:21]}"]
                for line in text.splitlines()
                if line.startswith("def test_")
            )
        )
    assert len(orders) > 1  # the canary's position changes from one grading to the next


@pytest.mark.parametrize(
    "bad",
    [
        ["I", 5],
        ["S"],
        ["L", "notalist"],
        ["Q", 1],
        "x",
        [],
        ["D", [[["N"]]]],
        ["NT", "P", ["a"], "x"],
        ["DT", "nope", "2024-01-01"],
        ["F", "1e999x"],
        ["I", "1", "more"],  # a field count that is not the table's
        ["H", 1],  # the runner's form of a handle, not the child's
        ["CB", 0],  # only the runner sends callbacks
        ["XI", 1, "E", "ValueError"],
        ["L", [["X", 1, "E", 5]]],
    ],
)
def test_malformed_values_from_the_child_are_refused(bad):
    with pytest.raises(wire.ProtocolError):
        remote._Child().decode(bad)


def test_values_rebuilt_as_builtins():
    v = remote._Child().decode(
        ["L", [["I", "ff"], ["S", "x"], ["T", [["B", True], ["N"]]], ["Z", [["F", "1.5"]]]]]
    )
    assert v == [255, "x", (True, None), {1.5}] and type(v[2]) is tuple
    deep = ["L", []]
    for _ in range(wire.MAX_DEPTH + 5):
        deep = ["L", [deep]]
    with pytest.raises(wire.ProtocolError):
        remote._Child().decode(deep)


def test_test_side_values_that_cannot_cross_say_so():
    runner = remote._Child()
    with pytest.raises(TypeError, match="cannot pass"):
        runner.encode(object())
    with pytest.raises(TypeError, match="cannot pass"):
        runner.encode(NotImplemented)  # only the candidate's operators decline
    assert runner.encode({"a": (1, b"x")}) == ["D", [[["S", "a"], ["T", [["I", "1"], ["Y", "eA=="]]]]]]


# ---------------------------------------------------- one wire: the same encoder and decoder at both ends

Pair = collections.namedtuple("Pair", "left right")
PLAIN = [
    None,
    True,
    -(2**70),
    1.5,
    float("inf"),
    2 - 3j,
    "caf\u00e9 \udcff",
    b"\x00\xff",
    bytearray(b"x"),
    (1, [2, {3: frozenset({4})}]),
    {"k": {5, 6}},
    decimal.Decimal("1.10"),
    fractions.Fraction(3, 2),
    datetime.datetime(2024, 2, 29, 1, 2, 3, 4),
    datetime.date(2024, 2, 29),
    datetime.time(1, 2),
    datetime.timedelta(days=1, microseconds=5),
    pathlib.PurePosixPath("/a/b"),
    Pair(1, "two"),
]


def over_the_wire(value):
    """A value as the other end reads it: framed, through a real pipe."""
    r, w = os.pipe()
    try:
        wire._send(w, value)
        return wire._recv(r)
    finally:
        os.close(r)
        os.close(w)


def tags(v):
    if isinstance(v, list):
        if v and isinstance(v[0], str) and v[0] in wire.TAGS:
            yield v[0]
        for x in v:
            yield from tags(x)


@pytest.mark.parametrize("direction", ["up", "down"])
def test_plain_values_cross_both_ways_as_builtins(direction):
    child, runner = _Server(-1, -1), remote._Child()
    sender, receiver = (child, runner) if direction == "up" else (runner, child)
    seen = set()
    for value in PLAIN:
        sent = over_the_wire(sender.encode(value))
        seen.update(tags(sent))
        back = receiver.decode(sent)
        if isinstance(value, pathlib.PurePath):
            assert type(back) is type(pathlib.Path()) and str(back) == str(value)
        elif isinstance(value, Pair):
            assert back == value and back.left == 1 and back.right == "two" and type(back) is not Pair
        else:
            assert back == value and type(back) is type(value), (value, back)
    # every plain tag of the table is spoken, and nothing outside it
    references = {"H", "X", "XI", "CB", "NI"}
    assert seen == set(wire.TAGS) - references


def test_references_cross_both_ways():
    child, runner = _Server(-1, -1), remote._Child()

    class ShapeError(LookupError):
        pass

    obj = object()
    handle = runner.decode(over_the_wire(child.encode([obj])))[0]
    assert isinstance(handle, remote.RemoteObject) and handle._type == "object"
    assert child.decode(over_the_wire(runner.encode(handle))) is obj

    e = runner.decode(over_the_wire(child.encode(ShapeError("no such shape"))))
    assert isinstance(e, LookupError) and type(e).__name__ == "ShapeError" and str(e) == "no such shape"
    assert child.decode(over_the_wire(runner.encode(type(e)))) is ShapeError
    builtin = runner.decode(over_the_wire(child.encode(KeyError("k"))))
    assert type(builtin) is KeyError

    assert runner.decode(over_the_wire(child.encode(NotImplemented))) is NotImplemented
    assert callable(child.decode(over_the_wire(runner.encode(len))))
    for wrong_way in (["NI"], ["H", 1, "object"], ["X", 1, "E", "ValueError"]):
        with pytest.raises(wire.ProtocolError):
            child.decode(wrong_way)


def test_the_candidates_subclasses_cross_as_their_builtin_values():
    """What a subclass's overrides claim never reaches the runner: the built-in part is read."""

    class Int(int):
        def __int__(self):
            return 7

        def __format__(self, spec):
            return "7"

        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    class Str(str):
        def __str__(self):
            return "forged"

    class List(list):
        def __iter__(self):
            return iter([99])

    class Dict(dict):
        def items(self):
            return [("forged", 1)]

    class Color(enum.IntEnum):
        RED = 1

    child, runner = _Server(-1, -1), remote._Child()
    v = runner.decode(over_the_wire(child.encode([Int(3), Str("real"), List([1]), Dict(a=1)])))
    assert v == [3, "real", [1], {"a": 1}] and [type(x) for x in v] == [int, str, list, dict]
    assert v[0] != 4
    assert isinstance(runner.decode(over_the_wire(child.encode(Color.RED))), remote.RemoteObject)


def test_callbacks_answer_with_values_or_exceptions():
    """A test's function the candidate calls: its arguments come up, its result or exception goes down."""
    child, runner = _Server(-1, -1), remote._Child()

    def checked(x, scale=1):
        if x < 0:
            raise KeyError("negative")
        return x * scale

    index = runner.encode(checked)[1]
    answer = runner._run_callback(
        over_the_wire({"callback": index, "args": [child.encode(4)], "kwargs": {"scale": child.encode(10)}})
    )
    assert child.decode(over_the_wire(answer["ok"])) == 40
    answer = runner._run_callback(over_the_wire({"callback": index, "args": [child.encode(-1)]}))
    e = child.decode(over_the_wire(answer["raise"]))
    assert type(e) is KeyError and e.args == ("'negative'",)
    answer = runner._run_callback({"callback": index + 1, "args": []})  # no such callback
    assert type(child.decode(answer["raise"])) is IndexError
