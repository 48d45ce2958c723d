import json
import os
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def test_run_sh_builds_the_summary():
    subprocess.run(["bash", "run.sh"], cwd=ROOT, check=True)
    with open(os.path.join(ROOT, "out", "summary.json")) as f:
        summary = json.load(f)
    assert summary["rows"] == 7
    assert summary["months"]["2024-01"] == 120.75
