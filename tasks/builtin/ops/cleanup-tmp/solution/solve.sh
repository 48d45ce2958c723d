#!/bin/bash
set -e
find project -type f -name '*.tmp' -delete
