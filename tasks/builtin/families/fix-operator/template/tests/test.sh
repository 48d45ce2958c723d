#!/bin/bash
# Runs in /workspace. Reward 1: calc.py's {{fname}} returns the right value for the hidden inputs.
reward=0
got=$(timeout 10 python3 -c 'import calc; print(calc.{{fname}}({{a}}, {{b}}), calc.{{fname}}(7, 3))' 2>/dev/null)
want=$(python3 -c 'a, b = {{a}}, {{b}}; import sys
def ref(a, b): return {{good}}
print(ref(a, b), ref(7, 3))')
if [ -n "$got" ] && [ "$got" = "$want" ]; then reward=1; fi
echo "$reward" > "$REWARD_FILE"
