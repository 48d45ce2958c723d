import math

import pytest

from solution import newton


def test_square_root_of_two():
    assert math.isclose(newton(lambda x: x * x - 2, lambda x: 2 * x, 1.0), math.sqrt(2), abs_tol=1e-12)


def test_cos_fixed_point():
    root = newton(lambda x: math.cos(x) - x, lambda x: -math.sin(x) - 1, 0.5)
    assert math.isclose(root, 0.7390851332151607, abs_tol=1e-12)


def test_cubic_negative_root():
    root = newton(lambda x: x ** 3 + 2 * x + 5, lambda x: 3 * x * x + 2, -1.0)
    assert abs(root ** 3 + 2 * root + 5) <= 1e-12


def test_returns_x0_when_already_a_root():
    calls = []

    def df(x):
        calls.append(x)
        return 1.0

    assert newton(lambda x: x - 3.0, df, 3.0) == 3.0
    assert calls == []


def test_tolerance_is_used():
    root = newton(lambda x: x * x - 2, lambda x: 2 * x, 1.0, tol=1e-3)
    assert abs(root * root - 2) <= 1e-3
    assert root != math.sqrt(2)  # stops early with a loose tolerance


def test_zero_derivative_raises():
    with pytest.raises(ZeroDivisionError):
        newton(lambda x: x * x + 1, lambda x: 2 * x, 0.0)


def test_no_convergence_raises():
    with pytest.raises(RuntimeError) as e:
        newton(lambda x: x * x + 1, lambda x: 2 * x, 0.5, max_iter=30)
    assert not isinstance(e.value, NotImplementedError)  # the stub's error is a RuntimeError too


def test_max_iter_respected():
    steps = []

    def f(x):
        steps.append(x)
        return x * x + 1

    with pytest.raises(RuntimeError) as e:
        newton(f, lambda x: 2 * x, 0.5, max_iter=7)
    assert not isinstance(e.value, NotImplementedError) and 1 <= len(steps) <= 9


def _one(x):
    return 1.0


def _steps_to(n):
    """f for which each step (df = 1) moves x from 0 up by 1 until x reaches n, where f(x) is 0."""
    return lambda x: -1.0 if x < n else 0.0


def test_default_max_iter_is_fifty():
    assert newton(_steps_to(50), _one, 0.0) == 50.0
    with pytest.raises(RuntimeError):
        newton(_steps_to(51), _one, 0.0)


def test_tolerance_is_inclusive():
    assert newton(lambda x: 0.5, _one, 1.0, tol=0.5) == 1.0  # abs(f(x0)) == tol: x0 at once
    # reached with the last allowed step: abs(f(3)) == tol is checked after the loop too
    assert newton(lambda x: -1.0 if x < 3 else 0.5, _one, 0.0, tol=0.5, max_iter=3) == 3.0


def test_negative_derivative():
    assert newton(lambda x: 1.0 - x, lambda x: -1.0, 0.0) == 1.0


def test_canary_wrong_root():
    assert newton(lambda x: x * x - 4, lambda x: 2 * x, 1.0) == 3.0
