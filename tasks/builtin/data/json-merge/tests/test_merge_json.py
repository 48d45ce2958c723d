import json
import os

WS = os.environ.get("WORKSPACE", "/workspace")


def merged():
    with open(os.path.join(WS, "merged.json")) as f:
        return json.load(f)


def by_id():
    return {r["id"]: r for r in merged()}


def test_is_list_sorted_by_id():
    data = merged()
    assert isinstance(data, list)
    assert [r["id"] for r in data] == [1, 2, 3, 4]


def test_update_wins_and_base_fields_kept():
    assert by_id()[2] == {"id": 2, "name": "Beta", "price": 6.99, "tags": ["y", "z"], "stock": 0}


def test_new_fields_added():
    assert by_id()[1] == {"id": 1, "name": "Alpha", "price": 4.0, "tags": ["sale"], "discontinued": True}


def test_records_only_in_one_file_kept_and_inputs_unchanged():
    assert by_id()[3] == {"id": 3, "name": "Gamma", "price": 9.5, "tags": ["x"]}
    assert by_id()[4] == {"id": 4, "name": "Delta", "price": 12.0, "tags": ["new"]}
    # not a test of its own: it holds before any work
    with open(os.path.join(WS, "updates.json")) as f:
        assert json.load(f)[0] == {"id": 2, "price": 6.99, "stock": 0}
    with open(os.path.join(WS, "base.json")) as f:
        assert len(json.load(f)) == 3


def test_canary_zero_stock_dropped():
    assert "stock" not in by_id()[2] and by_id()[2]["price"] == 0
