from solution import slugify


def test_lowercases_and_joins_words():
    assert slugify("Release Notes") == "release-notes"


def test_runs_of_separators_collapse():
    assert slugify("a  --  b__c") == "a-b-c"


def test_no_leading_or_trailing_dash():
    assert slugify("  ...Edge cases!!  ") == "edge-cases"


def test_apostrophes_and_symbols():
    assert slugify("C'est la vie & more") == "c-est-la-vie-more"


def test_non_ascii_letters_are_separators():
    assert slugify("naïve café") == "na-ve-caf"


def test_only_separators_gives_empty():
    assert slugify("Release Notes") == "release-notes"  # alone, "" for everything would pass
    assert slugify("!!! ???") == ""
    assert slugify("") == ""


def test_already_a_slug_is_unchanged():
    assert slugify("already-a-slug-2") == "already-a-slug-2"


def test_returns_a_plain_str():
    out = slugify("Abc Def")
    assert type(out) is str and out == "abc-def"


def test_canary_adds_punctuation():
    assert slugify("Hello World") == "hello-world!!"
