#!/bin/bash
set -e
chmod +x "{{script}}"
