#!/bin/bash
set -e
python3 - <<'PY'
from pathlib import Path

p = Path("rolling.py")
src = p.read_text()
src = src.replace("    result = []\n", "    if window < 1:\n        raise ValueError(\"window must be at least 1\")\n    result = []\n")
src = src.replace("range(len(values) - window)", "range(len(values) - window + 1)")
src = src.replace("sum(chunk) // window", "sum(chunk) / window")
p.write_text(src)
PY
