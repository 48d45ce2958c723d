#!/bin/bash
set -e
cat > backup.sh <<'SH'
#!/bin/bash
# Copy every .txt file from "my documents" into backup/ and report how many were copied.
set -e
SRC="my documents"
DEST=backup
mkdir -p "$DEST"
count=0
for f in "$SRC"/*.txt; do
    [ -e "$f" ] || continue
    cp "$f" "$DEST/"
    count=$((count+1))
done
echo "backed up $count files"
SH
