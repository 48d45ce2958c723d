import os

WS = os.environ.get("WORKSPACE", "/workspace")
WIDTH = 40


def words():
    with open(os.path.join(WS, "paragraph.txt")) as f:
        return f.read().split()


def lines():
    with open(os.path.join(WS, "wrapped.txt")) as f:
        out = f.read().rstrip("\n").split("\n")
    # every check needs the words kept: alone, a short or empty output meets the format checks
    assert " ".join(out).split() == words()
    return out


def test_same_words_in_order():
    assert " ".join(lines()).split() == words()


def test_single_spaces_no_padding():
    for line in lines():
        assert line == line.strip() and "  " not in line and line


def test_width_respected_except_long_words():
    for line in lines():
        assert len(line) <= WIDTH or " " not in line


def test_greedy():
    ls = lines()
    for line, nxt in zip(ls, ls[1:]):
        assert len(line) + 1 + len(nxt.split()[0]) > WIDTH, line


def test_canary_marker_line():
    assert lines()[0] == "The quick brown fox (wrapped)"
