#!/bin/bash
set -e
wc -w < "{{file}}" | tr -d " " > words.txt
