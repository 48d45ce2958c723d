import json
import os
import subprocess
import sys

WS = os.environ.get("WORKSPACE", "/workspace")

EXPECTED = {"rows": 7, "months": {"2024-01": 120.75, "2024-02": 64.5, "2024-03": 117.0}, "top_customer": "Smith, Jane"}

OTHER = """date,customer,amount
2023-12-31,"Zed, Inc.",10.10
2024-01-01,Beta,0.20
2023-12-01,Alpha,5.00
2024-01-15,Alpha,5.10
2024-01-20,"Zed, Inc.",0.20
2024-11-02,Beta,10.00
"""


def run_sh():
    return subprocess.run(["bash", "run.sh"], cwd=WS, capture_output=True, text=True, timeout=30)


def read_summary():
    with open(os.path.join(WS, "out", "summary.json")) as f:
        return json.load(f)


def test_run_sh_works_twice():
    first = run_sh()
    assert first.returncode == 0, first.stderr
    second = run_sh()
    assert second.returncode == 0, second.stderr
    assert read_summary() == EXPECTED


def test_months_are_in_order():
    assert run_sh().returncode == 0
    assert list(read_summary()["months"]) == ["2024-01", "2024-02", "2024-03"]


def test_other_input(tmp_path):
    src, dst = tmp_path / "in.csv", tmp_path / "sub.json"
    src.write_text(OTHER)
    p = subprocess.run([sys.executable, "-m", "salespipe", str(src), str(dst)], cwd=WS, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    summary = json.loads(dst.read_text())
    # Alpha 10.10 and "Zed, Inc." 10.30 and Beta 10.20: Zed wins; months sorted across the year boundary.
    assert summary == {"rows": 6, "months": {"2023-12": 15.1, "2024-01": 5.5, "2024-11": 10.0},
                       "top_customer": "Zed, Inc."}


def test_tie_goes_to_alphabetically_first(tmp_path):
    src, dst = tmp_path / "in.csv", tmp_path / "out.json"
    src.write_text("date,customer,amount\n2024-05-01,Mango,3.00\n2024-05-02,Kiwi,1.00\n2024-05-03,Kiwi,2.00\n")
    p = subprocess.run([sys.executable, "-m", "salespipe", str(src), str(dst)], cwd=WS, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    # the months too: alone, the tie already holds in the buggy start
    assert json.loads(dst.read_text()) == {"rows": 3, "months": {"2024-05": 6.0}, "top_customer": "Kiwi"}


def test_month_totals_are_rounded_to_two_decimals(tmp_path):
    src, dst = tmp_path / "in.csv", tmp_path / "out.json"
    src.write_text("date,customer,amount\n2024-06-01,Fig,0.333\n2024-06-02,Fig,0.333\n")
    p = subprocess.run([sys.executable, "-m", "salespipe", str(src), str(dst)], cwd=WS, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert json.loads(dst.read_text())["months"] == {"2024-06": 0.67}


def test_canary_top_customer():
    assert run_sh().returncode == 0
    assert read_summary()["top_customer"] == "Nobody Ltd"
