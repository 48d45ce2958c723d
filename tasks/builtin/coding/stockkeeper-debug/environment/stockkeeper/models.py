from dataclasses import dataclass


@dataclass
class Item:
    sku: str
    name: str
    quantity: int
    price_cents: int  # unit price

    @property
    def value_cents(self) -> int:
        return self.quantity * self.price_cents
