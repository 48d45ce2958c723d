#!/bin/bash
set -e
python3 - <<'PY'
import json
from pathlib import Path


def front_matter(path):
    lines = path.read_text().splitlines()
    if not lines or lines[0] != "---":
        return None
    meta = {}
    for line in lines[1:]:
        if line == "---":
            return meta
        key, _, value = line.partition(":")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        meta[key.strip()] = value
    return None


posts = []
for path in sorted(Path("posts").glob("*.md")):
    meta = front_matter(path)
    if meta is None or meta.get("draft") == "true":
        continue
    posts.append({"title": meta["title"], "date": meta["date"], "file": path.name})
posts.sort(key=lambda p: p["date"], reverse=True)
Path("index.json").write_text(json.dumps(posts, indent=2) + "\n")
PY
