#!/bin/bash
set -e
find scripts -type f -name '*.sh' -exec chmod +x {} +
