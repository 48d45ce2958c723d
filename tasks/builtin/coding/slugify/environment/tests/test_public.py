from solution import slugify


def test_simple_title():
    assert slugify("Hello, World!") == "hello-world"


def test_digits_are_kept():
    assert slugify("Top 10 Tips") == "top-10-tips"
