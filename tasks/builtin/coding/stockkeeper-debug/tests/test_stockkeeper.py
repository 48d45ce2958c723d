import os
import subprocess
import sys

import pytest

from stockkeeper import format_cents, format_report, load_inventory, low_stock, parse_line, parse_price, total_value
from stockkeeper.models import Item

WS = os.environ.get("WORKSPACE", "/workspace")

OTHER_CSV = """sku,name,quantity,price
Z9 , Zipper, 3 , 0.07
# comment line
M1,Magnet,12,2.55

K7,Kettle,6,39.9
B2,Bolt,0,0.01
"""


@pytest.mark.parametrize("text,cents", [("19.99", 1999), ("4.10", 410), ("0.29", 29), ("5", 500),
                                        ("39.9", 3990), (" 2.55 ", 255), ("1.15", 115), ("8.7", 870)])
def test_parse_price_is_exact(text, cents):
    assert parse_price(text) == cents


def test_parse_line_strips_fields():
    assert parse_line(" A1 , Thing , 3 , 2.50 ") == Item("A1", "Thing", 3, 250)


def test_load_inventory_skips_blank_and_comment_lines(tmp_path):
    p = tmp_path / "inv.csv"
    p.write_text(OTHER_CSV)
    items = load_inventory(str(p))
    assert [i.sku for i in items] == ["Z9", "M1", "K7", "B2"]
    assert items[0] == Item("Z9", "Zipper", 3, 7)


def test_total_value_uses_quantity():
    items = [Item("a", "A", 3, 250), Item("b", "B", 0, 999), Item("c", "C", 2, 1)]
    assert total_value(items) == 752


def test_low_stock_is_inclusive_and_sorted():
    items = [Item("z", "Z", 5, 1), Item("a", "A", 6, 1), Item("m", "M", 0, 1)]
    assert low_stock(items) == ["m", "z"]
    assert low_stock(items, threshold=6) == ["a", "m", "z"]
    assert low_stock(items, threshold=0) == ["m"]


@pytest.mark.parametrize("cents,text", [(1999, "19.99"), (5, "0.05"), (0, "0.00"), (-250, "-2.50"),
                                        (-5, "-0.05"), (-1, "-0.01"), (123456, "1234.56")])
def test_format_cents(cents, text):
    assert format_cents(cents) == text


def test_report_for_other_inventory(tmp_path):
    p = tmp_path / "inv.csv"
    p.write_text(OTHER_CSV)
    # 3*7 + 12*255 + 6*3990 + 0*1 = 21 + 3060 + 23940 = 27021
    assert format_report(load_inventory(str(p))) == "items: 4\ntotal: 270.21\nlow stock: B2, Z9\n"


def test_report_none_low(tmp_path):
    items = [Item("a", "A", 50, 100)]
    assert format_report(items) == "items: 1\ntotal: 50.00\nlow stock: none\n"


def test_command_line(tmp_path):
    p = tmp_path / "inv.csv"
    p.write_text(OTHER_CSV)
    out = subprocess.run([sys.executable, "-m", "stockkeeper", str(p)], cwd=WS, capture_output=True, text=True,
                         timeout=20)
    assert out.returncode == 0
    assert out.stdout == "items: 4\ntotal: 270.21\nlow stock: B2, Z9\n"


def test_canary_sample_total():
    items = load_inventory(os.path.join(WS, "inventory.csv"))
    assert format_cents(total_value(items)) == "999.99"
