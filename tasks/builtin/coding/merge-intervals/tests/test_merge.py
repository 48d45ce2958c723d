import copy

import pytest

from solution import merge_intervals


def test_example():
    assert merge_intervals([[8, 10], [1, 3], [2, 6]]) == [[1, 6], [8, 10]]


def test_touching_intervals_merge():
    assert merge_intervals([[2, 3], [1, 2], [5, 5], [5, 7]]) == [[1, 3], [5, 7]]


def test_contained_intervals():
    assert merge_intervals([[1, 10], [2, 3], [4, 8], [11, 12]]) == [[1, 10], [11, 12]]


def test_empty_and_single():
    assert merge_intervals([]) == []
    assert merge_intervals([[4, 4]]) == [[4, 4]]


def test_floats_and_negatives():
    assert merge_intervals([[-1.5, 0], [0.5, 2.5], [-3, -2], [2.5, 3]]) == [[-3, -2], [-1.5, 0], [0.5, 3]]


def test_input_not_modified_and_result_is_new():
    data = [[5, 6], [1, 4], [3, 5]]
    before = copy.deepcopy(data)
    out = merge_intervals(data)
    assert data == before
    assert out == [[1, 6]]
    out[0][0] = 99
    assert data == before


def test_result_items_are_lists():
    out = merge_intervals([(3, 4), (1, 2)])
    assert out == [[1, 2], [3, 4]] and all(type(x) is list for x in out)


def test_bad_pair_raises():
    with pytest.raises(ValueError):
        merge_intervals([[1, 2], [5, 3]])


def test_many_intervals():
    data = [[i, i + 1] for i in range(0, 2000, 2)] + [[1, 1999]]
    assert merge_intervals(data) == [[0, 1999]]


def test_merges_into_the_last_group_only():
    assert merge_intervals([[6, 9], [1, 2], [5, 6]]) == [[1, 2], [5, 9]]


def test_canary_triple():
    assert merge_intervals([[1, 3], [2, 4]]) == [[1, 3, 4]]
