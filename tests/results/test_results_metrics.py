"""Metrics: pass@k against brute force, errors kept out of denominators, bootstrap CIs, paired comparison."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from results import metrics
from results.store import open_run
from results.synthetic import make_run


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (the first c correct) that contain a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_equals_brute_force_over_all_subsets():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert metrics.pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (
                    n,
                    c,
                    k,
                )


def test_pass_at_k_is_stable_for_large_n():
    # 1 - C(199,100)/C(200,100) = 1 - 100/200, with binomials far beyond float range.
    assert metrics.pass_at_k(200, 1, 100) == pytest.approx(0.5, abs=1e-12)
    assert metrics.pass_at_k(1000, 3, 10) == pytest.approx(
        1 - math.comb(997, 10) / math.comb(1000, 10), rel=1e-9
    )
    with pytest.raises(ValueError):
        metrics.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        metrics.pass_at_k(3, 1, 4)


def frame(rows: list[tuple]) -> pd.DataFrame:
    """Attempt-table rows: (task, domain, difficulty, status, reward, steps, cost)."""
    return pd.DataFrame(
        [
            {
                "task_id": t,
                "domain": d,
                "difficulty": lvl,
                "status": s,
                "solved": s == "solved",
                "reward": r,
                "n_steps": steps,
                "prompt_tokens": 100,
                "completion_tokens": 10,
                "cost": cost,
                "duration_total": 2.0,
                "reason": "pass" if s == "solved" else "fail",
                "exit_reason": "submitted",
                "error": "boom\ntrace" if s == "error" else None,
            }
            for t, d, lvl, s, r, steps, cost in rows
        ]
    )


def test_errors_are_counted_apart_and_excluded_from_rates_and_pass_at_k():
    df = frame(
        [
            ("a", "coding", 1, "solved", 1.0, 4, 0.01),
            ("a", "coding", 1, "solved", 1.0, 6, 0.01),
            ("a", "coding", 1, "failed", 0.5, 10, 0.03),
            ("a", "coding", 1, "error", 0.0, 1, 0.02),
            ("b", "math", 2, "failed", 0.0, 8, 0.01),
            ("b", "math", 2, "failed", 0.0, 8, 0.01),
            ("b", "math", 2, "failed", 0.0, 8, 0.01),
            ("c", "math", 2, "error", 0.0, 0, 0.0),
            ("c", "math", 2, "error", 0.0, 0, 0.0),
        ]
    )
    tasks = metrics.task_table(df)
    assert tasks.loc["a", ["n", "solved", "errors"]].tolist() == [3, 2, 1]
    assert math.isnan(tasks.loc["c", "rate"])  # only errors: no score at all, not a zero

    overall = metrics.summarize(df, "overall", n_boot=200).iloc[0]
    assert overall["n_tasks"] == 3 and overall["n_attempts"] == 6 and overall["n_errors"] == 3
    assert overall["solved_rate"] == pytest.approx((2 / 3 + 0) / 2)  # tasks a and b; c has no valid attempt
    assert overall["pass@3"] == pytest.approx((metrics.pass_at_k(3, 2, 3) + 0) / 2)
    assert "pass@4" not in overall  # K = most valid samples of any task
    assert overall["mean_reward"] == pytest.approx((2.5 / 3 + 0) / 2)
    assert overall["steps_per_attempt"] == pytest.approx((4 + 6 + 10 + 8 * 3) / 6)
    assert overall["steps_per_solved"] == pytest.approx(5.0)
    assert overall["cost_per_solved"] == pytest.approx(0.01)
    assert overall["total_cost"] == pytest.approx(0.10)  # errors cost money too
    assert overall["solved_ci_low"] <= overall["solved_rate"] <= overall["solved_ci_high"]

    by_domain = metrics.summarize(df, "domain", n_boot=200).set_index("group")
    assert by_domain.loc["coding", "solved_rate"] == pytest.approx(2 / 3)
    assert by_domain.loc["math", "n_errors"] == 2 and by_domain.loc["math", "solved_rate"] == 0
    per_task = metrics.summarize(df, "task").set_index("group")
    assert math.isnan(per_task.loc["a", "solved_ci_low"])  # CIs resample tasks: none for one task

    reasons = metrics.failure_reasons(df)
    assert reasons.set_index(["field", "value"])["count"].to_dict() == {
        ("reason", "fail"): 4,
        ("exit_reason", "submitted"): 4,
    }
    errors = metrics.error_summary(df)
    assert errors.to_dict("records") == [{"exit_reason": "submitted", "error": "boom", "count": 3}]


def test_run_summary_has_every_level_and_handles_an_empty_run():
    df = frame([("a", "coding", 1, "solved", 1.0, 3, 0.0), ("b", "text", 3, "failed", 0.0, 3, 0.0)])
    summary = metrics.run_summary(df, n_boot=100)
    assert summary.groupby("level").size().to_dict() == {
        "overall": 1,
        "domain": 2,
        "difficulty": 2,
        "task": 2,
    }
    empty = metrics.run_summary(frame([]).reindex(columns=frame([("a", "x", 1, "solved", 1, 1, 0)]).columns))
    assert empty.iloc[0]["n_tasks"] == 0 and math.isnan(empty.iloc[0]["solved_rate"])


def test_bootstrap_ci_is_seeded_and_brackets_the_mean():
    values = np.random.default_rng(0).random(50)
    ci = metrics.bootstrap_ci(values, n_boot=2000, seed=7)
    assert ci == metrics.bootstrap_ci(values, n_boot=2000, seed=7)
    assert ci != metrics.bootstrap_ci(values, n_boot=2000, seed=8)
    assert ci[0] < values.mean() < ci[1]
    # Roughly mean +- 1.96 standard errors for a large sample.
    se = values.std(ddof=1) / math.sqrt(len(values))
    assert ci[1] - ci[0] == pytest.approx(2 * 1.96 * se, rel=0.2)
    assert metrics.bootstrap_ci([0.3, 0.3, 0.3]) == (0.3, 0.3)
    assert all(math.isnan(x) for x in metrics.bootstrap_ci([]))


def brute_sign_flip(diffs: list[float]) -> float:
    observed = abs(sum(diffs))
    patterns = list(itertools.product((-1, 1), repeat=len(diffs)))
    return sum(abs(sum(s * d for s, d in zip(p, diffs))) >= observed - 1e-12 for p in patterns) / len(
        patterns
    )


def test_sign_flip_test_exact_and_monte_carlo():
    diffs = [1, 1, 1, 1, 1, 1, 1, 1, -1, 0.5, 0, 0]
    p, method = metrics.sign_flip_test(diffs)
    assert method.startswith("exact") and p == pytest.approx(brute_sign_flip(diffs))
    p, method = metrics.sign_flip_test([1.0] * 20, n_perm=5000, seed=3)
    assert "draws" in method and p < 0.001  # exact value is 2 / 2**20
    assert metrics.sign_flip_test([0, 0]) == (1.0, "exact sign-flip permutation")


def test_compare_two_synthetic_runs(tmp_path):
    tasks = [(f"t{i:02d}", "coding" if i % 2 else "math", 1 + i % 3) for i in range(20)]
    # A solves t00-t09; B solves t01-t17 (t00 regressed, t10-t17 improved); t19 is an infra error in A.
    run_a = make_run(
        tmp_path / "a",
        "m-a",
        tasks,
        samples=2,
        outcome=lambda t, s: "error" if t == "t19" else ("solved" if int(t[1:]) < 10 else "failed"),
    )
    run_b = make_run(
        tmp_path / "b",
        "m-b",
        tasks,
        samples=2,
        outcome=lambda t, s: "solved" if 1 <= int(t[1:]) <= 17 else "failed",
    )
    a, b = open_run(run_a).read_attempts(), open_run(run_b).read_attempts()
    c = metrics.compare(a, b, n_boot=1000, seed=0)
    assert c.n_tasks == 19 and c.only_b == ["t19"] and c.only_a == []
    assert c.rate_a == pytest.approx(10 / 19) and c.rate_b == pytest.approx(17 / 19)
    assert c.diff == pytest.approx(7 / 19)
    assert c.improved == [f"t{i}" for i in range(10, 18)] and c.regressed == ["t00"]
    assert c.p_value == pytest.approx(brute_sign_flip([1.0] * 8 + [-1.0]))
    assert 0 < c.ci_low < c.diff < c.ci_high
    assert set(c.per_task.columns) == {"task_id", "rate_a", "rate_b", "diff"}
    same = metrics.compare(a, a)
    assert same.diff == 0 and same.p_value == 1.0 and not same.improved and not same.regressed


def test_per_task_pass_from_attempts_matches_the_task_table_and_scores_short_tasks_on_all_samples():
    from results.synthetic import make_attempt

    outcomes = {
        "a": ["solved", "failed", "failed", "error"],
        "b": ["failed", "failed", "failed", "failed"],
        "c": ["error", "error"],
        "d": ["solved", "error", "error", "error"],
    }
    attempts = [make_attempt("r", t, i, status=s) for t, ss in outcomes.items() for i, s in enumerate(ss)]
    assert metrics.per_task_pass(attempts, 1) == pytest.approx(
        {"a": 1 / 3, "b": 0.0, "d": 1.0}
    )  # c: no valid sample
    # pass@3: task d has one valid sample, so it is scored on it (pass@1), not left out as summarize() does.
    assert metrics.per_task_pass(attempts, 3) == pytest.approx({"a": 1.0, "b": 0.0, "d": 1.0})
    df = pd.DataFrame(
        [
            {
                "task_id": a.task_id,
                "domain": a.domain,
                "difficulty": a.difficulty,
                "status": a.status,
                "solved": a.solved,
                "reward": a.reward,
            }
            for a in attempts
        ]
    )
    assert metrics.task_table(df).loc[["a", "b", "d"], "rate"].tolist() == pytest.approx([1 / 3, 0.0, 1.0])


def test_strict_solved_needs_full_reward_and_no_tamper_verdict():
    from results.attempts import is_solved
    from results.synthetic import make_attempt

    honest = make_attempt("r", "a", 0)
    tamper = honest.model_copy(update={"task_id": "b", "reason": "tamper"})
    partial = honest.model_copy(update={"task_id": "c", "reward": 0.5})
    assert [is_solved(a) for a in (honest, tamper, partial)] == [True, True, True]  # the grader's flag
    assert [is_solved(a, strict=True) for a in (honest, tamper, partial)] == [True, False, False]
    assert metrics.per_task_pass([honest, tamper, partial], 1, strict=True) == {"a": 1.0, "b": 0.0, "c": 0.0}
    assert metrics.per_task_pass([honest, tamper, partial], 1) == {"a": 1.0, "b": 1.0, "c": 1.0}


def test_cluster_bootstrap_matches_an_exact_enumeration_of_family_resamples():
    import itertools
    from collections import Counter

    # Three families: A's two instances both solved, B's one failed, C's two split.
    values, clusters = [1, 1, 0, 0, 1], ["A", "A", "B", "C", "C"]
    fams = {"A": [1, 1], "B": [0], "C": [0, 1]}
    exact: Counter = Counter()
    for draw in itertools.product("ABC", repeat=3):  # 27 equally likely ordered draws of 3 families
        pooled = [v for f in draw for v in fams[f]]
        exact[round(sum(pooled) / len(pooled), 6)] += 1 / 27
    means = metrics.cluster_bootstrap_means(values, clusters, n_boot=40000, seed=3)
    seen = Counter(round(float(m), 6) for m in means)
    assert set(seen) == set(exact)
    for m, p in exact.items():
        assert seen[m] / len(means) == pytest.approx(p, abs=0.01)
    # the same draws by hand: each replicate picks 3 of the sorted families with the seeded generator
    idx = np.random.default_rng(3).integers(0, 3, size=(40000, 3))
    by_hand = [
        sum(sum(fams["ABC"[i]]) for i in row) / sum(len(fams["ABC"[i]]) for i in row) for row in idx[:50]
    ]
    assert list(means[:50]) == pytest.approx(by_hand)
    # 90% interval by hand: BBB (mean 0) has 1/27 < 5%, then B,B,C in any order (0,0,0,1: 1/4) 3/27, so
    # the 5% point is 1/4; at the top AAA (1) 1/27, then A,A,C (5 of 6) 3/27, so the 95% point is 5/6
    lo, hi = metrics.cluster_bootstrap_ci(values, clusters, n_boot=40000, seed=3, level=0.9)
    assert (lo, hi) == pytest.approx((1 / 4, 5 / 6))
    # at 95% the lowest and highest means (1/27 each, above 2.5%) are the ends
    assert metrics.cluster_bootstrap_ci(values, clusters, n_boot=40000, seed=3) == pytest.approx((0, 1))


def test_a_family_that_moves_together_widens_the_interval_over_an_instance_bootstrap():
    # four families of five identical instances: really four observations, not twenty
    values = [1.0] * 5 + [0.0] * 5 + [1.0] * 5 + [0.0] * 5
    clusters = [f for f in "abcd" for _ in range(5)]
    lo_c, hi_c = metrics.cluster_bootstrap_ci(values, clusters, n_boot=4000, seed=0)
    lo_i, hi_i = metrics.bootstrap_ci(values, n_boot=4000, seed=0)
    assert hi_c - lo_c > 1.5 * (hi_i - lo_i)
    # every instance its own cluster: an instance bootstrap again
    lo_s, hi_s = metrics.cluster_bootstrap_ci(values, [str(i) for i in range(20)], n_boot=4000, seed=0)
    assert hi_s - lo_s == pytest.approx(hi_i - lo_i, abs=0.06)
    assert metrics.cluster_bootstrap_ci([0.5, 0.5], ["a", "b"]) == (0.5, 0.5)
    with pytest.raises(ValueError):
        metrics.cluster_bootstrap_ci([1.0], ["a", "b"])


def test_mean_and_spread_of_seeds():
    s = metrics.mean_and_spread([0.1, 0.2, 0.6])
    assert s["mean"] == pytest.approx(0.3) and s["sd"] == pytest.approx(math.sqrt(0.07))
    assert (s["min"], s["max"], s["n"]) == (0.1, 0.6, 3)
    assert metrics.mean_and_spread([0.4])["sd"] == 0.0
