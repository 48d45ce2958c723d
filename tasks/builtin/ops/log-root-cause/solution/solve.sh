#!/bin/bash
# The first ERROR is the queue connection to the default amqp://localhost URL; the WARN before it says the key
# that would have set it was missing.
set -e
grep -m1 "not set, using default 'amqp" app.log | sed -E "s/.*key '([A-Z_]+)'.*/\1/" > answer.txt
