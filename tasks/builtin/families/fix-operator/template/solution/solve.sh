#!/bin/bash
set -e
sed -i "s/return {{body}}/return {{good}}/" calc.py
