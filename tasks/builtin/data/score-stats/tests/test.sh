#!/bin/bash
# Runs in /workspace. Reward = the fraction of the six statistics in stats.json that are right (within 1e-6).
python3 -I - "$REWARD_FILE" <<'PY'
import json
import sys

EXPECTED = {"count": 9, "mean": 80.25, "median": 80.0, "min": 55.5, "max": 100.0, "stdev": 13.550317749451896}
reward = 0.0
try:
    with open("stats.json") as f:
        got = json.load(f)
    if isinstance(got, dict) and set(got) == set(EXPECTED):
        right = [k for k, v in EXPECTED.items()
                 if type(got[k]) in (int, float) and abs(got[k] - v) <= 1e-6]
        reward = len(right) / len(EXPECTED)
except (OSError, ValueError):
    pass
with open(sys.argv[1], "w") as f:
    f.write(f"{reward}\n")
PY
