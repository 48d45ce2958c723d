#!/bin/bash
# Runs in /workspace as root; calc.py runs as the sandbox user (as-candidate). Reward 1: its {{fname}}
# returns the right value for the hidden inputs. The expected values are computed first, their formula
# on stdin (no command line carries it), before any code of the candidate's runs.
reward=0
want=$(python3 -I - <<'PY'
def ref(a, b):
    return {{good}}
print(ref({{a}}, {{b}}), ref(7, 3))
PY
)
got=$(timeout 10 as-candidate python3 -c 'import calc; print(calc.{{fname}}({{a}}, {{b}}), calc.{{fname}}(7, 3))' 2>/dev/null)
if [ -n "$got" ] && [ "$got" = "$want" ]; then reward=1; fi
echo "$reward" > "$REWARD_FILE"
