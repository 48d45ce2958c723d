#!/bin/bash
set -e
python3 - <<'PY'
import csv
from datetime import datetime


def iso(text):
    for fmt in ("%Y-%m-%d", "%d/%m/%Y", "%b %d %Y"):
        try:
            return datetime.strptime(text, fmt).strftime("%Y-%m-%d")
        except ValueError:
            pass
    raise ValueError(f"unknown date format: {text!r}")


seen, out = set(), []
with open("customers.csv", newline="") as f:
    for row in csv.DictReader(f):
        row = {k: v.strip() for k, v in row.items()}
        row["email"] = row["email"].lower()
        if not row["email"] or row["id"] in seen:
            continue
        seen.add(row["id"])
        row["signup_date"] = iso(row["signup_date"])
        out.append(row)
out.sort(key=lambda r: int(r["id"]))
with open("clean.csv", "w", newline="") as f:
    w = csv.DictWriter(f, ["id", "name", "email", "signup_date"], lineterminator="\n")
    w.writeheader()
    w.writerows(out)
PY
