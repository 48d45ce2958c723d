#!/bin/bash
set -e
python3 - <<'PY'
import json
import re
from collections import Counter

ENTRY = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) \[([A-Z]+)\] ([^:\s]+):")
levels, errors = Counter(), []
with open("service.log") as f:
    for line in f:
        m = ENTRY.match(line)
        if not m:
            continue
        ts, level, component = m.groups()
        levels[level] += 1
        if level == "ERROR":
            errors.append((ts, component))
summary = {
    "entries": sum(levels.values()),
    "levels": dict(levels),
    "first_error": errors[0][0],
    "last_error": errors[-1][0],
    "top_error_component": Counter(c for _, c in errors).most_common(1)[0][0],
}
with open("summary.json", "w") as f:
    json.dump(summary, f, indent=2)
PY
