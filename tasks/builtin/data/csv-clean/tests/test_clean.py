import csv
import os

WS = os.environ.get("WORKSPACE", "/workspace")

EXPECTED = [
    ["1", "Alice Smith", "alice@example.com", "2024-01-05"],
    ["3", "Carol King", "carol@example.com", "2024-02-10"],
    ["4", "Dan Brown", "dan@example.org", "2024-03-03"],
    ["5", "Adams, Eve", "eve@example.net", "2024-02-29"],
    ["9", "Ivan Petrov", "ivan@example.net", "2023-12-31"],
    ["10", "Jane Roe", "jane.roe@example.com", "2023-12-24"],
]


def rows():
    with open(os.path.join(WS, "clean.csv"), newline="") as f:
        return [r for r in csv.reader(f) if r]


def test_header():
    # and a first row: alone, the header the instruction spells out earns credit with no work
    assert rows()[0] == ["id", "name", "email", "signup_date"] and rows()[1] == EXPECTED[0]


def test_rows_without_email_dropped():
    ids = [r[0] for r in rows()[1:]]
    assert "1" in ids and "2" not in ids and "7" not in ids  # "1": alone, no rows at all would pass


def test_duplicates_removed_and_sorted_numerically():
    assert [r[0] for r in rows()[1:]] == ["1", "3", "4", "5", "9", "10"]


def test_dates_normalised():
    assert {r[0]: r[3] for r in rows()[1:]} == {r[0]: r[3] for r in EXPECTED}


def test_emails_lowercase_and_trimmed():
    assert {r[0]: r[2] for r in rows()[1:]} == {r[0]: r[2] for r in EXPECTED}


def test_all_rows_exact_and_input_unchanged():
    assert rows()[1:] == EXPECTED
    with open(os.path.join(WS, "customers.csv")) as f:  # not a test of its own: it holds before any work
        assert f.read().count("\n") == 10


def test_canary_first_row_shouted():
    assert rows()[1] == ["1", "ALICE SMITH!", "alice@example.com", "2024-01-05"]
