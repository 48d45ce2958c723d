#!/bin/bash
set -e
python3 - <<'PY'
import csv

with open("velocity.csv", newline="") as f:
    rows = [(float(r["t_s"]), float(r["v_mps"])) for r in csv.DictReader(f)]
distance = sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(rows, rows[1:]))
with open("distance.txt", "w") as f:
    f.write(f"{distance:.6f}\n")
PY
