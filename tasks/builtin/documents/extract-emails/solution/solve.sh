#!/bin/bash
set -e
python3 - <<'PY'
import re

text = open("contacts.txt").read()
found = re.findall(r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z0-9-]+", text)
with open("emails.txt", "w") as f:
    f.write("\n".join(sorted({e.lower() for e in found})) + "\n")
PY
