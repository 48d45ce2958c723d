#!/bin/bash
set -e
awk '{ s += $1; n += 1 } END { printf "%.2f\n", s / n }' "{{file}}" > mean.txt
