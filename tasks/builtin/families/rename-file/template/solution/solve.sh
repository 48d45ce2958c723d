#!/bin/bash
set -e
mv "{{src}}" "{{dst}}"
