#!/bin/bash
set -e
python3 - <<'PY'
import csv
from collections import defaultdict

totals, counts = defaultdict(float), defaultdict(int)
with open("sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] += float(row["amount"])
        counts[row["region"]] += 1
with open("region_totals.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["region", "total", "count"])
    for region in sorted(totals):
        w.writerow([region, f"{totals[region]:.2f}", counts[region]])
PY
