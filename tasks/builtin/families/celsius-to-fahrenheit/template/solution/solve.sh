#!/bin/bash
set -e
awk '{ print $1 * 9 / 5 + 32 }' "{{file}}" > fahrenheit.txt
