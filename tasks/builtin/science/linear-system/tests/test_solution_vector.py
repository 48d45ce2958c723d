import os

import numpy as np

WS = os.environ.get("WORKSPACE", "/workspace")


def x():
    with open(os.path.join(WS, "x.txt")) as f:
        return np.array([float(line) for line in f if line.strip()])


def test_four_values():
    assert x().shape == (4,)


def test_solves_the_system():
    A = np.loadtxt(os.path.join(WS, "A.csv"), delimiter=",")
    b = np.loadtxt(os.path.join(WS, "b.csv"))
    assert np.allclose(A @ x(), b, atol=1e-6)


def test_known_solution():
    assert np.allclose(x(), [1.5, -2.0, 0.25, 3.0], atol=1e-6)


def test_canary_shifted():
    assert np.allclose(x(), [2.5, -1.0, 1.25, 4.0], atol=1e-6)
