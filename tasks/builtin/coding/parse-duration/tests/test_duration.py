import pytest

from solution import parse_duration


@pytest.mark.parametrize("text,seconds", [
    ("1h30m", 5400), ("90s", 90), ("2h", 7200), ("1h5s", 3605), ("10m30s", 630), ("0s", 0),
    ("1h1m1s", 3661), ("100m", 6000), ("007s", 7),
])
def test_valid(text, seconds):
    value = parse_duration(text)
    assert type(value) is int
    assert value == seconds


@pytest.mark.parametrize("text", ["", "5", "h", "1x", "30m1h", "1h 30m", "-5m", "1h1h", "1.5h", "s1", " 1h"])
def test_invalid(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_canary_negative():
    assert parse_duration("2m") == -120
