import json
import os

WS = os.environ.get("WORKSPACE", "/workspace")


def summary():
    with open(os.path.join(WS, "summary.json")) as f:
        return json.load(f)


def test_entry_count_ignores_continuation_lines():
    assert summary()["entries"] == 68


def test_levels():
    assert summary()["levels"] == {"INFO": 40, "DEBUG": 12, "WARN": 9, "ERROR": 7}


def test_first_and_last_error():
    s = summary()
    assert s["first_error"] == "2024-06-03T08:01:05"
    assert s["last_error"] == "2024-06-03T08:24:25"


def test_top_error_component():
    assert summary()["top_error_component"] == "db"


def test_exact_keys():
    assert set(summary()) == {"entries", "levels", "first_error", "last_error", "top_error_component"}


def test_canary_levels_lowercase():
    assert summary()["levels"] == {"info": 40, "debug": 12, "warn": 9, "error": 7, "fatal": 1}
