import json
import math
import os

WS = os.environ.get("WORKSPACE", "/workspace")


def fit():
    with open(os.path.join(WS, "fit.json")) as f:
        return json.load(f)


def test_keys():
    assert set(fit()) == {"slope", "intercept", "r2", "n"}


def test_missing_row_skipped():
    assert fit()["n"] == 25


def test_slope_and_intercept():
    f = fit()
    assert math.isclose(f["slope"], 1.756626930121916, abs_tol=1e-6)
    assert math.isclose(f["intercept"], -4.983268710708841, abs_tol=1e-6)


def test_r2():
    assert math.isclose(fit()["r2"], 0.9868951149884057, abs_tol=1e-6)


def test_canary_perfect_fit():
    assert fit()["r2"] == 1.5
