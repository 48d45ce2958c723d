#!/bin/bash
set -e
python3 - <<'PY'
import csv

with open("sales.csv", newline="") as f:
    total = sum(float(row["amount"]) for row in csv.DictReader(f))
with open("answer.txt", "w") as f:
    f.write(f"{total:.2f}\n")
PY
