import os

WS = os.environ.get("WORKSPACE", "/workspace")

EXPECTED = [
    "| name | moons | distance_au | notes |",
    "| --- | --- | --- | --- |",
    "| Mercury | 0 | 0.39 | closest to the Sun |",
    "| Venus | 0 | 0.72 | hottest |",
    "| Earth | 1 | 1.00 | home, sweet home |",
    "| Mars | 2 | 1.52 | red |",
    "| Jupiter | 95 | 5.20 | largest |",
]


def lines():
    with open(os.path.join(WS, "planets.md")) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def test_header_and_separator():
    assert lines()[:2] == EXPECTED[:2]


def test_quoted_cell_with_comma():
    assert EXPECTED[4] in lines()


def test_whole_table():
    assert lines() == EXPECTED


def test_canary_extra_column():
    assert lines()[2] == "| Mercury | 0 | 0.39 | closest to the Sun | yes |"
