#!/bin/bash
set -e
awk -F, 'NR > 1 { s += $2 } END { print s }' "{{file}}" > total.txt
