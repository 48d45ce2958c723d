#!/bin/bash
# Runs in /workspace as root; the candidate's script runs as the sandbox user (as-candidate). Reward: 0.5 first run correct, 0.25 second run correct, 0.25 a new file name with spaces, a stray $count in the environment and no .txt file at all.
reward=0
check() {  # $1 = expected count; checks the output line and the backup folder contents
    [ "$out" = "backed up $1 files" ] || return 1
    [ "$(ls backup | wc -l)" -eq "$1" ] || return 1
    for f in "my documents"/*.txt; do
        cmp -s "$f" "backup/$(basename "$f")" || return 1
    done
}
rm -rf backup
if out=$(timeout 20 as-candidate bash backup.sh 2>/dev/null) && check 3; then
    reward=0.5
    if out=$(timeout 20 as-candidate bash backup.sh 2>/dev/null) && check 3; then
        reward=0.75
        printf 'new  file\n' > "my documents/meeting  minutes.txt"
        # and a stray `count` in the environment changes nothing
        if out=$(timeout 20 as-candidate bash backup.sh 2>/dev/null) && check 4 \
            && out=$(timeout 20 as-candidate env count=7 bash backup.sh 2>/dev/null) && check 4; then
            reward=1
        fi
        rm -f "my documents/meeting  minutes.txt"
        if [ "$reward" = 1 ]; then  # no .txt file at all: nothing copied, and it says so
            aside=$(mktemp -d)
            mv "my documents"/*.txt "$aside"/ && rm -rf backup
            out=$(timeout 20 as-candidate bash backup.sh 2>/dev/null) && [ "$out" = "backed up 0 files" ] || reward=0.75
            mv "$aside"/*.txt "my documents"/
        fi
    fi
fi
echo "$reward" > "$REWARD_FILE"
