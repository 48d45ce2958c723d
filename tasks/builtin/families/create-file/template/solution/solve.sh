#!/bin/bash
set -e
printf '%s\n' "{{text}}" > "{{name}}"
