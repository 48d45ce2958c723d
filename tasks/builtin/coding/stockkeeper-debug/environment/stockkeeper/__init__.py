"""Inventory CSV -> stock report. See README.md."""
from .parser import load_inventory, parse_line, parse_price
from .report import format_cents, format_report, low_stock, total_value

__all__ = ["load_inventory", "parse_line", "parse_price", "format_cents", "format_report", "low_stock",
           "total_value"]
