#!/bin/bash
set -e
grep -c "{{word}}" "{{file}}" > "{{out}}"
