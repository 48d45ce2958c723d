from solution import fizzbuzz


def test_fifteen():
    assert fizzbuzz(15)[-1] == "FizzBuzz"
    assert fizzbuzz(15) == ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz",
                            "11", "Fizz", "13", "14", "FizzBuzz"]


def test_length_matches_n():
    assert len(fizzbuzz(97)) == 97


def test_far_values():
    out = fizzbuzz(100)
    assert out[89] == "FizzBuzz"  # 90
    assert out[98] == "Fizz"  # 99
    assert out[99] == "Buzz"  # 100
    assert out[96] == "97"


def test_zero_and_negative_give_empty_list():
    assert fizzbuzz(0) == []
    assert fizzbuzz(-4) == []


def test_items_are_plain_strings():
    out = fizzbuzz(30)
    assert len(out) == 30 and all(type(x) is str for x in out)  # not vacuous on an empty result


def test_canary_extra_item():
    assert fizzbuzz(3) == ["1", "2", "Fizz", "Buzz!"]
