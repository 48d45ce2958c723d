#!/bin/bash
set -e
python3 - <<'PY'
import csv
import json


def text(value):
    return "" if value is None else str(value)


with open("people.json") as f:
    people = json.load(f)
with open("people.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["name", "age", "city", "country", "email"])
    for p in people:
        address = p.get("address") or {}
        w.writerow([text(p.get("name")), text(p.get("age")), text(address.get("city")),
                    text(address.get("country")), text(p.get("email"))])
PY
