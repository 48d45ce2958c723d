#!/bin/bash
set -e
cd photos
for f in IMG_*.JPG; do
    digits=${f#IMG_}
    digits=${digits%.JPG}
    if [[ "$digits" =~ ^[0-9]+$ ]]; then
        mv -- "$f" "photo-$digits.jpg"
    fi
done
