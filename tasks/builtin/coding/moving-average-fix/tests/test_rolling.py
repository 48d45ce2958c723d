import math

import pytest

from rolling import moving_average


def close(a, b):
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(a, b))


def test_last_window_is_included():
    assert close(moving_average([2, 4, 6, 8, 10], 3), [4.0, 6.0, 8.0])


def test_true_division():
    assert close(moving_average([1, 2], 2), [1.5])
    assert close(moving_average([0.1, 0.2, 0.3], 2), [0.15, 0.25])


def test_window_equal_to_length_and_longer():
    assert close(moving_average([3, 5, 10], 3), [6.0])
    # longer than the input: the buggy start already gets this right, so it earns nothing alone
    assert moving_average([1, 2], 3) == []
    assert moving_average([], 1) == []


def test_window_of_one_gives_the_values():
    assert close(moving_average([7, -1, 3], 1), [7.0, -1.0, 3.0])


@pytest.mark.parametrize("window", [0, -2])
def test_bad_window_raises(window):
    with pytest.raises(ValueError):
        moving_average([1, 2, 3], window)


def test_accepts_tuples_and_keeps_input():
    data = [5, 1, 4, 2]
    assert close(moving_average(tuple(data), 2), [3.0, 2.5, 3.0])
    moving_average(data, 2)
    assert data == [5, 1, 4, 2]


def test_canary_extra_window():
    assert moving_average([1, 2], 2) == [1.5, 99.0]
