#!/bin/bash
set -e
cat > settings.ini <<'INI'
# Settings for the web app (checked by app.py)
[server]
host = 0.0.0.0
port = 8080
workers = 4

[logging]
level = INFO
file = /var/log/webapp.log

[features]
signup = true
export = false
INI
