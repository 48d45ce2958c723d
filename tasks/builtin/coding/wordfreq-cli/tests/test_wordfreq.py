import os
import subprocess
import sys

WS = os.environ.get("WORKSPACE", "/workspace")


def run(tmp_path, text, n):
    p = tmp_path / "input.txt"
    p.write_text(text)
    out = subprocess.run([sys.executable, os.path.join(WS, "wordfreq.py"), str(p), str(n)], cwd=WS,
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_sample_file():
    out = subprocess.run([sys.executable, "wordfreq.py", "sample.txt", "3"], cwd=WS, capture_output=True,
                         text=True, timeout=20)
    assert out.stdout == "the 4\ncat 2\nmat 2\n"


def test_case_insensitive(tmp_path):
    assert run(tmp_path, "Apple apple APPLE pear Pear", 2) == "apple 3\npear 2\n"


def test_ties_alphabetical(tmp_path):
    assert run(tmp_path, "zeta beta alpha beta zeta gamma", 4) == "beta 2\nzeta 2\nalpha 1\ngamma 1\n"


def test_punctuation_and_digits_split_words(tmp_path):
    assert run(tmp_path, "don't stop-stop 4you 42 you\n\nYOU", 3) == "you 3\nstop 2\ndon 1\n"


def test_fewer_words_than_n(tmp_path):
    assert run(tmp_path, "one two two", 10) == "two 2\none 1\n"


def test_empty_file(tmp_path):
    assert run(tmp_path, "", 3) == ""


def test_bigger_text(tmp_path):
    text = "x " * 500 + "y " * 300 + "z " * 300 + "w\n" * 7
    assert run(tmp_path, text, 3) == "x 500\ny 300\nz 300\n"


def test_canary_counts_double(tmp_path):
    assert run(tmp_path, "Apple apple", 2) == "apple 4\n"
