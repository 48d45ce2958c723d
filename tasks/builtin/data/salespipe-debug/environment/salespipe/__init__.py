"""Sales CSV -> monthly summary JSON. See README.md."""
