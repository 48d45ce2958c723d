#!/bin/bash
set -e
mkdir -p "{{folder}}"
mv ./*.log "{{folder}}/"
ls "{{folder}}" | wc -l | tr -d " " > moved.txt
