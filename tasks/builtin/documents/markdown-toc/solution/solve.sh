#!/bin/bash
set -e
python3 - <<'PY'
import re

out, in_code = [], False
for line in open("guide.md"):
    if line.startswith("```"):
        in_code = not in_code
        continue
    m = re.match(r"(#{2,3}) (.+?)\s*$", line)
    if in_code or not m:
        continue
    title = m.group(2)
    anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    out.append(("  " if len(m.group(1)) == 3 else "") + f"- [{title}](#{anchor})")
with open("toc.md", "w") as f:
    f.write("\n".join(out) + "\n")
PY
