#!/bin/bash
set -e
cat > invoice.json <<'JSON'
{"invoice_number": "NW-2024-0815", "issue_date": "2024-03-15", "due_date": "2024-04-14",
 "customer": "Contoso Bakery", "total": 285.6, "currency": "GBP"}
JSON
