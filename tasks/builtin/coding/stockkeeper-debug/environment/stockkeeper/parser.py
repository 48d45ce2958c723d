from .models import Item


def parse_price(text: str) -> int:
    return int(float(text) * 100)


def parse_line(line: str) -> Item:
    sku, name, quantity, price = line.split(",")
    return Item(sku, name, int(quantity), parse_price(price))


def load_inventory(path) -> list:
    with open(path) as f:
        lines = f.read().splitlines()
    items = []
    for line in lines[1:]:
        if line.startswith("#"):
            continue
        items.append(parse_line(line))
    return items
