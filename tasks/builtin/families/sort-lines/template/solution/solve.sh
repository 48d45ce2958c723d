#!/bin/bash
set -e
sort "{{file}}" > "{{out}}"
