#!/bin/bash
set -e
grep "^{{key}}=" "{{file}}" | cut -d= -f2- > "{{out}}"
