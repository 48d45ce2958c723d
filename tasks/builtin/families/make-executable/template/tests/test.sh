#!/bin/bash
# Runs in /workspace as root; the script runs as the sandbox user (as-candidate). Reward 1: it is
# executable and still prints its message; 0.5: executable but its output changed; 0: not executable.
reward=0
if [ -f "{{script}}" ] && [ -x "{{script}}" ]; then
    out=$(timeout 10 as-candidate "./{{script}}" 2>/dev/null)
    if [ "$out" = "{{message}}" ]; then reward=1; else reward=0.5; fi
fi
echo "$reward" > "$REWARD_FILE"
