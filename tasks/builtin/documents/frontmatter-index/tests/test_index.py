import json
import os

WS = os.environ.get("WORKSPACE", "/workspace")

EXPECTED = [
    {"title": "Shipping v2: what changed", "date": "2024-02-20", "file": "shipping-v2.md"},
    {"title": "Hello, World", "date": "2024-01-15", "file": "hello-world.md"},
    {"title": "Year in review", "date": "2023-12-31", "file": "year-review.md"},
]


def index():
    with open(os.path.join(WS, "index.json")) as f:
        return json.load(f)


def test_drafts_and_non_posts_skipped():
    files = {p["file"] for p in index()}
    assert "draft-ideas.md" not in files and "no-front-matter.md" not in files and "notes.txt" not in files


def test_quotes_removed_and_colon_kept():
    titles = {p["file"]: p["title"] for p in index()}
    assert titles["shipping-v2.md"] == "Shipping v2: what changed"
    assert titles["year-review.md"] == "Year in review"


def test_body_not_parsed_as_front_matter():
    assert all(p["title"] != "Not This" for p in index())


def test_sorted_newest_first():
    assert [p["date"] for p in index()] == ["2024-02-20", "2024-01-15", "2023-12-31"]


def test_exact_index():
    assert index() == EXPECTED


def test_canary_draft_included():
    assert index()[0] == {"title": "Ideas (draft)", "date": "2024-03-01", "file": "draft-ideas.md", "draft": "yes"}
