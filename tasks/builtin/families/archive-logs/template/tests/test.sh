#!/bin/bash
# Runs in /workspace. Reward 1: the three logs are in {{folder}}/ with their content, the other files
# stayed, no .log file is left outside, and moved.txt says 3.
ok=1
for f in "{{log1}}" "{{log2}}" "{{log3}}"; do [ -f "{{folder}}/$f" ] && [ ! -e "$f" ] || ok=0; done
grep -qx "{{log1}} log 1" "{{folder}}/{{log1}}" 2>/dev/null || ok=0
for f in "{{keep1}}" "{{keep2}}"; do [ -f "$f" ] || ok=0; done
[ -z "$(ls ./*.log 2>/dev/null)" ] || ok=0
[ "$(tr -d ' \n' < moved.txt 2>/dev/null)" = "3" ] || ok=0
echo "$ok" > "$REWARD_FILE"
