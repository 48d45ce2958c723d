#!/bin/bash
set -e
cd "$(dirname "$0")"
mkdir out
python3 -m salespipe out/summary.json data/sales.csv
echo "wrote out/summary.json"
