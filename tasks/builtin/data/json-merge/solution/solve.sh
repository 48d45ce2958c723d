#!/bin/bash
set -e
python3 - <<'PY'
import json

with open("base.json") as f:
    records = {r["id"]: dict(r) for r in json.load(f)}
with open("updates.json") as f:
    for update in json.load(f):
        records.setdefault(update["id"], {}).update(update)
with open("merged.json", "w") as f:
    json.dump([records[k] for k in sorted(records)], f, indent=2)
PY
