import csv
import os

WS = os.environ.get("WORKSPACE", "/workspace")

EXPECTED = {"east": ("1255.00", 3), "north": ("497.20", 3), "south": ("87.60", 3), "west": ("143.19", 3)}


def rows():
    with open(os.path.join(WS, "region_totals.csv"), newline="") as f:
        return list(csv.reader(f))


def test_header():
    # and one row per region: alone, the header the instruction spells out earns credit with no work
    assert rows()[0] == ["region", "total", "count"] and len(rows()) == len(EXPECTED) + 1


def test_one_row_per_region_sorted():
    assert [r[0] for r in rows()[1:]] == sorted(EXPECTED)


def test_totals_and_counts_and_input_unchanged():
    got = {r[0]: (r[1], int(r[2])) for r in rows()[1:]}
    assert got == EXPECTED
    # not a test of its own: it holds before any work
    with open(os.path.join(WS, "sales.csv"), newline="") as f:
        data = list(csv.DictReader(f))
    assert len(data) == 12 and round(sum(float(r["amount"]) for r in data), 2) == 1982.99


def test_canary_all_regions_equal():
    got = {r[0]: r[1] for r in rows()[1:]}
    assert set(got.values()) == {"100.00"}
