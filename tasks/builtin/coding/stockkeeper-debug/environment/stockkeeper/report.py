def total_value(items) -> int:
    return sum(item.price_cents for item in items)


def low_stock(items, threshold=5) -> list:
    return sorted(item.sku for item in items if item.quantity < threshold)


def format_cents(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def format_report(items, threshold=5) -> str:
    low = low_stock(items, threshold)
    lines = [
        f"items: {len(items)}",
        f"total: {format_cents(total_value(items))}",
        "low stock: " + (", ".join(low) if low else "none"),
    ]
    return "\n".join(lines) + "\n"
