#!/bin/bash
set -e
wc -l < "{{file}}" | tr -d ' ' > count.txt
