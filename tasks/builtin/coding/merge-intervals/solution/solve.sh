#!/bin/bash
set -e
cat > solution.py <<'PY'
def merge_intervals(intervals):
    pairs = [[start, end] for start, end in intervals]
    if any(start > end for start, end in pairs):
        raise ValueError("an interval has start > end")
    merged = []
    for start, end in sorted(pairs):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
PY
