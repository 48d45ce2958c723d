import pytest

from solution import from_roman, to_roman


def test_subtractive_forms():
    assert [to_roman(n) for n in (4, 9, 40, 90, 400, 900)] == ["IV", "IX", "XL", "XC", "CD", "CM"]


def test_bounds():
    assert to_roman(1) == "I"
    assert to_roman(3999) == "MMMCMXCIX"
    assert to_roman(2024) == "MMXXIV"


def test_round_trip_every_number():
    for n in range(1, 4000):
        s = to_roman(n)
        assert type(s) is str
        assert from_roman(s) == n


@pytest.mark.parametrize("n", [0, -1, 4000, 10000])
def test_to_roman_out_of_range(n):
    with pytest.raises(ValueError):
        to_roman(n)


@pytest.mark.parametrize("s", ["", "IIII", "VX", "IL", "MMMM", "IIV", "abc", "xiv", "XIVI"])
def test_from_roman_rejects_non_standard(s):
    with pytest.raises(ValueError):
        from_roman(s)


def test_from_roman_returns_int():
    assert type(from_roman("MMXXIV")) is int


def test_canary_four():
    assert to_roman(4) == "IIV?"
