#!/bin/bash
set -e
python3 - <<'PY'
import csv

with open("planets.csv", newline="") as f:
    rows = list(csv.reader(f))
out = ["| " + " | ".join(rows[0]) + " |", "| " + " | ".join("---" for _ in rows[0]) + " |"]
out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
with open("planets.md", "w") as f:
    f.write("\n".join(out) + "\n")
PY
