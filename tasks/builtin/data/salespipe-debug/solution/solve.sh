#!/bin/bash
# Fixes: mkdir -p and argument order in run.sh; csv module for quoted fields; month = date[:7];
# top customer by total amount with alphabetical tie-break; months sorted.
set -e
cat > run.sh <<'SH'
#!/bin/bash
set -e
cd "$(dirname "$0")"
mkdir -p out
python3 -m salespipe data/sales.csv out/summary.json
echo "wrote out/summary.json"
SH
cat > salespipe/load.py <<'PY'
import csv


def load_rows(path):
    """The data rows as dicts: date (str), customer (str), amount (float)."""
    with open(path, newline="") as f:
        return [{"date": r["date"], "customer": r["customer"], "amount": float(r["amount"])}
                for r in csv.DictReader(f)]
PY
cat > salespipe/summary.py <<'PY'
from collections import defaultdict


def monthly_totals(rows):
    totals = defaultdict(float)
    for row in rows:
        totals[row["date"][:7]] += row["amount"]
    return {month: round(totals[month], 2) for month in sorted(totals)}


def top_customer(rows):
    totals = defaultdict(float)
    for row in rows:
        totals[row["customer"]] += row["amount"]
    return min(totals, key=lambda name: (-round(totals[name], 2), name)) if totals else None


def summarize(rows):
    return {"rows": len(rows), "months": monthly_totals(rows), "top_customer": top_customer(rows)}
PY
