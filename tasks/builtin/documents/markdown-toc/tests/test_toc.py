import os

WS = os.environ.get("WORKSPACE", "/workspace")

EXPECTED = [
    "- [Getting Started](#getting-started)",
    "  - [Install the CLI](#install-the-cli)",
    "  - [First Run & Login](#first-run--login)",
    "- [Configuration Options](#configuration-options)",
    "  - [Environment Variables (Advanced)](#environment-variables-advanced)",
    "- [FAQ](#faq)",
    "  - [Why does `deploy` fail?](#why-does-deploy-fail)",
]


def lines():
    with open(os.path.join(WS, "toc.md")) as f:
        return [line.rstrip() for line in f if line.strip()]


def test_code_block_and_other_levels_skipped():
    text = "\n".join(lines())
    # the right titles in order (anchors aside): alone, any text without those words would pass
    assert [line.split("](")[0] for line in lines()] == [e.split("](")[0] for e in EXPECTED]
    assert "also not a heading" not in text and "Deep level" not in text and "Deployment Guide" not in text


def test_anchor_with_ampersand_keeps_double_dash():
    assert "  - [First Run & Login](#first-run--login)" in lines()


def test_whole_toc():
    assert lines() == EXPECTED


def test_canary_numbered():
    assert lines()[0] == "1. [Getting Started](#getting-started)"
