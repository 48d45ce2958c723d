#!/bin/bash
set -e
cat > solution.py <<'PY'
import re

PATTERN = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str) -> int:
    m = PATTERN.fullmatch(text)
    if not text or not m:
        raise ValueError(f"not a duration: {text!r}")
    hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return hours * 3600 + minutes * 60 + seconds
PY
