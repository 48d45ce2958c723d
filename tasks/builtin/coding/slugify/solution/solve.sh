#!/bin/bash
set -e
cat > solution.py <<'PY'
import re


def slugify(text: str) -> str:
    """Return the URL slug of text (see the task instruction)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
PY
