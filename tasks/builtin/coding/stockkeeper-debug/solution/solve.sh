#!/bin/bash
# Fixes: exact price parsing (no float), strip fields, skip blank lines, quantity in the total,
# inclusive low-stock threshold, negative amounts in format_cents.
set -e
cat > stockkeeper/parser.py <<'PY'
from decimal import Decimal

from .models import Item


def parse_price(text: str) -> int:
    return int(Decimal(text.strip()) * 100)


def parse_line(line: str) -> Item:
    sku, name, quantity, price = (field.strip() for field in line.split(","))
    return Item(sku, name, int(quantity), parse_price(price))


def load_inventory(path) -> list:
    with open(path) as f:
        lines = f.read().splitlines()
    items = []
    for line in lines[1:]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        items.append(parse_line(line))
    return items
PY
cat > stockkeeper/report.py <<'PY'
def total_value(items) -> int:
    return sum(item.value_cents for item in items)


def low_stock(items, threshold=5) -> list:
    return sorted(item.sku for item in items if item.quantity <= threshold)


def format_cents(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"


def format_report(items, threshold=5) -> str:
    low = low_stock(items, threshold)
    lines = [
        f"items: {len(items)}",
        f"total: {format_cents(total_value(items))}",
        "low stock: " + (", ".join(low) if low else "none"),
    ]
    return "\n".join(lines) + "\n"
PY
