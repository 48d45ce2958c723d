"""bench/serve.py --smoke runs end to end (both servers, both client counts) so the benchmark cannot rot."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.model
@pytest.mark.slow
def test_bench_serve_smoke_prints_the_table():
    p = subprocess.run(
        [sys.executable, "bench/serve.py", "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {
        line.split()[0]: line.split()[1:]
        for line in p.stdout.splitlines()
        if line.startswith(("ours", "pipeline"))
    }
    assert set(rows) == {"ours", "pipeline"} and all(len(v) == 5 for v in rows.values())
    assert all(float(v.rstrip("s")) > 0 for v in rows["ours"] + rows["pipeline"])
    assert re.search(r"ours / pipeline = \d+\.\d\dx", p.stdout)
