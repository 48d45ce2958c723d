#!/bin/bash
set -e
python3 - <<'PY'
import csv
import json
import statistics

with open("scores.csv", newline="") as f:
    scores = [float(r["score"]) for r in csv.DictReader(f) if r["score"].strip()]
stats = {"count": len(scores), "mean": statistics.mean(scores), "median": statistics.median(scores),
         "min": min(scores), "max": max(scores), "stdev": statistics.pstdev(scores)}
with open("stats.json", "w") as f:
    json.dump(stats, f)
PY
