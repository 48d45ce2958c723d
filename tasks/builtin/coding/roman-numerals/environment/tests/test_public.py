from solution import from_roman, to_roman


def test_examples():
    assert to_roman(4) == "IV"
    assert to_roman(1994) == "MCMXCIV"
    assert from_roman("XLII") == 42
