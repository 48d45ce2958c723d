#!/bin/bash
set -e
sort -u "{{file}}" | wc -l | tr -d " " > "{{out}}"
