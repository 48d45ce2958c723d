import csv
import os

WS = os.environ.get("WORKSPACE", "/workspace")

EXPECTED = [
    ["name", "age", "city", "country", "email"],
    ["Ada Lovelace", "36", "London", "UK", "ada@example.com"],
    ["Grace Hopper", "85", "Arlington", "US", ""],
    ["Hopper, Grace B.", "", "", "US", "gbh@example.com"],
    ['Alan "Turing"', "41", "Wilmslow", "UK", ""],
    ["Katherine Johnson", "101", "", "", "kj@example.com"],
]


def rows():
    with open(os.path.join(WS, "people.csv"), newline="") as f:
        return [r for r in csv.reader(f) if r]


def test_header():
    assert rows()[0] == EXPECTED[0]


def test_missing_and_null_are_empty():
    got = rows()
    assert got[2][4] == "" and got[3][1] == "" and got[4][4] == "" and got[5][2:4] == ["", ""]


def test_quoting_survives():
    assert [r[0] for r in rows()[1:]] == [r[0] for r in EXPECTED[1:]]


def test_all_rows():
    assert rows() == EXPECTED


def test_canary_none_written():
    assert rows()[2][4] == "None!"
