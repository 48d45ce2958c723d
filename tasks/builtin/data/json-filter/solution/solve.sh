#!/bin/bash
set -e
python3 - <<'PY'
import json

with open("users.json") as f:
    users = json.load(f)
names = sorted(u["name"] for u in users if u["active"] and u["age"] > 30)
with open("answer.json", "w") as f:
    json.dump(names, f)
PY
