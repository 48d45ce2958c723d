#!/bin/bash
set -e
cat > config.json <<'JSON'
{
  "service": "billing",
  "port": 8443,
  "debug": false,
  "workers": 4,
  "allowed_hosts": ["api.example.com", "admin.example.com"],
  "database": {
    "host": "db.internal",
    "port": 5432,
    "name": "billing"
  },
  "timeout_sec": 2.5
}
JSON
