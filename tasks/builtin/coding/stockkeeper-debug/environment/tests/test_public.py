import os

from stockkeeper import format_report, load_inventory

HERE = os.path.dirname(os.path.abspath(__file__))


def test_sample_report():
    items = load_inventory(os.path.join(HERE, "..", "inventory.csv"))
    assert format_report(items) == "items: 4\ntotal: 222.43\nlow stock: B200, C300\n"
