import os
from pathlib import Path

WS = Path(os.environ.get("WORKSPACE", "/workspace"))
PHOTOS = WS / "photos"


def names():
    return sorted(os.listdir(PHOTOS))


def test_renamed_files():
    for n in ("0001", "0002", "0017", "0100", "1234"):
        assert (PHOTOS / f"photo-{n}.jpg").read_text() == f"image {n}\n"


def test_no_old_names_left():
    assert not [n for n in names() if n.startswith("IMG_") and n.endswith(".JPG") and n[4:-4].isdigit()]


def test_other_files_untouched():
    assert (PHOTOS / "photo-0001.jpg").is_file()  # alone, the rest holds before any work
    assert (PHOTOS / "IMG_0003.PNG").read_text() == "png image\n"
    assert (PHOTOS / "IMG_0002_edit.JPG").read_text() == "edited\n"
    assert (PHOTOS / "img_0005.jpg").read_text() == "lower\n"
    assert (PHOTOS / "notes.txt").read_text() == "see photos\n"


def test_exact_listing():
    assert names() == ["IMG_0002_edit.JPG", "IMG_0003.PNG", "img_0005.jpg", "notes.txt", "photo-0001.jpg",
                       "photo-0002.jpg", "photo-0017.jpg", "photo-0100.jpg", "photo-1234.jpg"]


def test_canary_numbers_without_zeros():
    assert (PHOTOS / "photo-1.jpg").read_text() == "image 0001 (copy)\n"
