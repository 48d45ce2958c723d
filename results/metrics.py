"""Scores from an attempts table (RunReader.read_attempts()): rates, pass@k, bootstrap CIs, paired comparison;
and per-task pass@k from Attempt records (per_task_pass). Each task's own solve rate and the audit of
broken tasks are results.task_audit.

Conventions:
- status == "error" is an infra failure, not the model's: such attempts are counted apart (n_errors)
  and left out of every rate, pass@k and mean. A task whose attempts all errored has no score.
- Rates are means over tasks of each task's solved fraction, so every task weighs the same
  whatever its number of valid samples.
- Confidence intervals resample tasks (the unit that varies between benchmarks), with a fixed seed,
  so they exist for groups of tasks, not for one task alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np
import pandas as pd

from results.attempts import is_solved
from results.schema import Attempt

LEVELS = ("overall", "domain", "difficulty", "task")
_BY = {"overall": None, "domain": "domain", "difficulty": "difficulty", "task": "task_id"}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021: 1 - C(n-c, k) / C(n, k), for n samples of which c passed.

    Computed as 1 - prod_{i=n-c+1..n} (1 - k/i), which never forms the huge binomials.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def bootstrap_ci(
    values: np.ndarray | list[float], n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile CI of the mean of `values` (one value per task), resampling tasks with replacement."""
    v = np.asarray(values, dtype=float)
    if len(v) == 0 or n_boot <= 0:
        return float("nan"), float("nan")
    if len(v) == 1 or np.all(v == v[0]):
        return float(v[0]), float(v[0])
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // len(v))  # bounded memory for large suites
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        means[start : start + m] = v[rng.integers(0, len(v), size=(m, len(v)))].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)


def cluster_bootstrap_means(
    values: list[float], clusters: list[str], n_boot: int = 1000, seed: int = 0
) -> np.ndarray:
    """The bootstrap distribution of the mean over instances when instances come in clusters (a task
    family's instances share a template, so they do not vary independently): each replicate draws as
    many clusters as there are, with replacement, and takes the mean of all their instances."""
    by: dict[str, list[float]] = {}
    for v, c in zip(values, clusters):
        by.setdefault(c, []).append(float(v))
    names = sorted(by)
    sums = np.array([sum(by[c]) for c in names])
    sizes = np.array([len(by[c]) for c in names], dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(names), size=(n_boot, len(names)))
    return sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)


def cluster_bootstrap_ci(
    values: list[float], clusters: list[str], n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile CI of the mean of `values` (one per instance), resampling whole clusters (families:
    `clusters[i]` is values[i]'s) rather than instances. With every instance its own cluster it is a
    percentile bootstrap over instances."""
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} cluster labels")
    v = np.asarray(values, dtype=float)
    if len(v) == 0 or n_boot <= 0:
        return float("nan"), float("nan")
    if np.all(v == v[0]):
        return float(v[0]), float(v[0])
    alpha = (1 - level) / 2
    lo, hi = np.quantile(cluster_bootstrap_means(list(v), list(clusters), n_boot, seed), [alpha, 1 - alpha])
    return float(lo), float(hi)


def mean_and_spread(values: list[float]) -> dict[str, float]:
    """Several seeds' figures: their mean, sample standard deviation (ddof 1; 0 for one value), min, max."""
    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        return {"n": 0, "mean": float("nan"), "sd": float("nan"), "min": float("nan"), "max": float("nan")}
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return {"n": len(v), "mean": float(v.mean()), "sd": sd, "min": float(v.min()), "max": float(v.max())}


def task_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per task: n valid attempts, solved count, errors, solved rate, mean reward."""
    cols = ["domain", "difficulty", "n", "solved", "errors", "rate", "reward"]
    if df.empty:
        return pd.DataFrame(columns=cols, index=pd.Index([], name="task_id"))
    ok = df["status"] != "error"
    work = df.assign(
        _ok=ok, _solved=ok & df["solved"].astype(bool), _reward=df["reward"].astype(float).where(ok)
    )
    g = work.groupby("task_id", sort=True)
    t = pd.DataFrame(
        {
            "domain": g["domain"].first(),
            "difficulty": g["difficulty"].first(),
            "n": g["_ok"].sum().astype(int),
            "solved": g["_solved"].sum().astype(int),
        }
    )
    t["errors"] = g.size() - t["n"]
    t["rate"] = (t["solved"] / t["n"]).where(t["n"] > 0)
    t["reward"] = g["_reward"].mean()
    return t[cols]


def per_task_pass(attempts: Iterable[Attempt], k: int, strict: bool = False) -> dict[str, float]:
    """pass@k of each task that has a valid sample, from Attempt records (the post-training loop's metrics).

    Solved is is_solved(attempt, strict). Unlike summarize(), which leaves a task with fewer than k
    valid samples out of pass@k, such a task here gets pass@n over all n of them: the loop scores
    every task it sampled even when some of a task's K samples hit an infra error.
    """
    rows = [
        {
            "task_id": a.task_id,
            "domain": a.domain,
            "difficulty": a.difficulty,
            "status": a.status,
            "solved": is_solved(a, strict),
            "reward": a.reward,
        }
        for a in attempts
    ]
    tasks = task_table(
        pd.DataFrame(rows, columns=["task_id", "domain", "difficulty", "status", "solved", "reward"])
    )
    scored = tasks[tasks["n"] > 0]
    return {
        str(t): pass_at_k(int(n), int(c), min(k, int(n)))
        for t, n, c in zip(scored.index, scored["n"], scored["solved"])
    }


def _mean(series: pd.Series) -> float:
    return float(series.mean()) if len(series) else float("nan")


def _group_row(
    tasks: pd.DataFrame, attempts: pd.DataFrame, max_k: int, with_ci: bool, n_boot: int, seed: int
) -> dict:
    scored = tasks[tasks["n"] > 0]
    rates = scored["rate"].to_numpy(dtype=float)
    rewards = scored["reward"].to_numpy(dtype=float)
    row: dict = {
        "n_tasks": len(tasks),
        "n_attempts": int(tasks["n"].sum()),
        "n_solved": int(tasks["solved"].sum()),
        "n_errors": int(tasks["errors"].sum()),
        "solved_rate": float(rates.mean()) if len(rates) else float("nan"),
    }
    row["solved_ci_low"], row["solved_ci_high"] = (
        bootstrap_ci(rates, n_boot, seed) if with_ci else (float("nan"), float("nan"))
    )
    row["mean_reward"] = float(rewards.mean()) if len(rewards) else float("nan")
    row["reward_ci_low"], row["reward_ci_high"] = (
        bootstrap_ci(rewards, n_boot, seed) if with_ci else (float("nan"), float("nan"))
    )
    for k in range(1, max_k + 1):
        # A task with fewer than k valid samples cannot estimate pass@k; it is left out of that k.
        vals = [pass_at_k(int(n), int(c), k) for n, c in zip(scored["n"], scored["solved"]) if n >= k]
        row[f"pass@{k}"] = float(np.mean(vals)) if vals else float("nan")
    valid = attempts[attempts["status"] != "error"]
    solved = valid[valid["solved"].astype(bool)]
    for label, part in (("attempt", valid), ("solved", solved)):
        row[f"steps_per_{label}"] = _mean(part["n_steps"])
        row[f"tokens_per_{label}"] = _mean(part["prompt_tokens"] + part["completion_tokens"])
        row[f"cost_per_{label}"] = _mean(part["cost"])
        row[f"seconds_per_{label}"] = _mean(part["duration_total"])
    row["total_cost"] = float(attempts["cost"].sum())  # errors cost money too
    return row


def summarize(
    df: pd.DataFrame, level: str = "overall", n_boot: int = 1000, seed: int = 0, max_k: Optional[int] = None
) -> pd.DataFrame:
    """Metrics per group at one level: 'overall', 'domain', 'difficulty' or 'task'.

    Columns: level, group, n_tasks, n_attempts, n_solved, n_errors, solved_rate, solved_ci_low/high,
    mean_reward, reward_ci_low/high, pass@1..pass@K (K = most valid samples of any task),
    {steps,tokens,cost,seconds}_per_{attempt,solved}, total_cost.
    """
    if level not in _BY:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")
    tasks = task_table(df)
    if max_k is None:
        max_k = int(tasks["n"].max()) if len(tasks) else 0
    by = _BY[level]
    if by is None:
        groups = [("all", tasks)]
    elif by == "task_id":
        groups = [(task_id, tasks.loc[[task_id]]) for task_id in tasks.index]
    else:
        groups = list(tasks.groupby(by, sort=True))
    rows = []
    for label, group in groups:
        attempts = df[df["task_id"].isin(group.index)]
        row = _group_row(group, attempts, max_k, with_ci=level != "task", n_boot=n_boot, seed=seed)
        rows.append({"level": level, "group": str(label), **row})
    if not rows:  # an empty run still has an overall row
        rows.append(
            {"level": level, "group": "all", **_group_row(tasks, df, 0, with_ci=False, n_boot=0, seed=seed)}
        )
    return pd.DataFrame(rows)


def run_summary(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """All levels stacked (overall, domain, difficulty, task), with one pass@k column set."""
    tasks = task_table(df)
    max_k = int(tasks["n"].max()) if len(tasks) else 0
    return pd.concat([summarize(df, level, n_boot, seed, max_k) for level in LEVELS], ignore_index=True)


def failure_reasons(df: pd.DataFrame) -> pd.DataFrame:
    """Counts of evaluator `reason` and agent `exit_reason` over failed (not errored) attempts."""
    failed = df[df["status"] == "failed"]
    rows = []
    for col in ("reason", "exit_reason"):
        counts = failed[col].fillna("").replace("", "(none)").value_counts()
        rows += [{"field": col, "value": str(v), "count": int(n)} for v, n in counts.items()]
    return pd.DataFrame(rows, columns=["field", "value", "count"])


def error_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Infra errors (status == 'error') grouped by exit_reason and the first line of the error text."""
    errors = df[df["status"] == "error"]
    if errors.empty:
        return pd.DataFrame(columns=["exit_reason", "error", "count"])
    first_line = errors["error"].fillna("").astype(str).str.split("\n").str[0].str.slice(0, 160)
    table = pd.DataFrame({"exit_reason": errors["exit_reason"].fillna("").astype(str), "error": first_line})
    return (
        table.value_counts()
        .rename("count")
        .reset_index()
        .sort_values("count", ascending=False, kind="stable")
        .reset_index(drop=True)
    )


# ---------------------------------------------------------------- paired comparison


def sign_flip_test(diffs: np.ndarray | list[float], n_perm: int = 20000, seed: int = 0) -> tuple[float, str]:
    """Two-sided paired permutation test of mean(diffs) == 0 by flipping each task's sign.

    Exact (all 2^m sign patterns) when m <= 16 non-zero differences, else Monte Carlo with n_perm draws.
    """
    d = np.asarray(diffs, dtype=float)
    d = d[d != 0]  # zero differences look the same under any sign
    m = len(d)
    if m == 0:
        return 1.0, "exact sign-flip permutation"
    observed = abs(d.sum()) - 1e-12
    if m <= 16:
        signs = ((np.arange(2**m)[:, None] >> np.arange(m)) & 1) * 2 - 1
        return float(np.mean(np.abs(signs @ d) >= observed)), "exact sign-flip permutation"
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_perm, 1000):
        size = min(1000, n_perm - start)
        signs = rng.integers(0, 2, size=(size, m)) * 2 - 1
        hits += int(np.sum(np.abs(signs @ d) >= observed))
    return (hits + 1) / (n_perm + 1), f"sign-flip permutation ({n_perm} draws)"


@dataclass
class Comparison:
    """B versus A on the tasks both scored. diff = B - A in mean per-task solved rate."""

    n_tasks: int
    rate_a: float
    rate_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str
    improved: list[str] = field(default_factory=list)  # not solved in A (< half its samples), solved in B
    regressed: list[str] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)  # scored in one run only: not compared
    only_b: list[str] = field(default_factory=list)
    per_task: pd.DataFrame = field(default_factory=pd.DataFrame)  # task_id, rate_a, rate_b, diff


def compare(
    a: pd.DataFrame, b: pd.DataFrame, n_boot: int = 2000, seed: int = 0, n_perm: int = 20000
) -> Comparison:
    """Paired comparison of two attempt tables by task (mean solved per task, errors excluded)."""
    ta, tb = task_table(a), task_table(b)
    ra, rb = ta["rate"].dropna(), tb["rate"].dropna()
    common = sorted(set(ra.index) & set(rb.index))
    per_task = pd.DataFrame(
        {
            "task_id": common,
            "rate_a": ra.reindex(common).to_numpy(dtype=float),
            "rate_b": rb.reindex(common).to_numpy(dtype=float),
        }
    )
    per_task["diff"] = per_task["rate_b"] - per_task["rate_a"]
    diffs = per_task["diff"].to_numpy()
    lo, hi = bootstrap_ci(diffs, n_boot, seed)
    p, test = sign_flip_test(diffs, n_perm, seed)
    solved_a, solved_b = per_task["rate_a"] >= 0.5, per_task["rate_b"] >= 0.5
    nan = float("nan")
    return Comparison(
        n_tasks=len(common),
        rate_a=float(per_task["rate_a"].mean()) if common else nan,
        rate_b=float(per_task["rate_b"].mean()) if common else nan,
        diff=float(diffs.mean()) if common else nan,
        ci_low=lo,
        ci_high=hi,
        p_value=p,
        test=test,
        improved=per_task.loc[~solved_a & solved_b, "task_id"].tolist(),
        regressed=per_task.loc[solved_a & ~solved_b, "task_id"].tolist(),
        only_a=sorted(set(ra.index) - set(rb.index)),
        only_b=sorted(set(rb.index) - set(ra.index)),
        per_task=per_task,
    )


def attempt_flips(a: pd.DataFrame, b: pd.DataFrame) -> list[tuple[str, int, str, str]]:
    """(task, sample, status in A, status in B) where the two runs' verdicts differ: a rescore against its
    source run, or two runs of the same samples. Infra errors on either side are left out."""
    cols = ["task_id", "sample", "status"]
    m = a[cols].merge(b[cols], on=["task_id", "sample"], suffixes=("_a", "_b"))
    m = m[(m.status_a != m.status_b) & (m.status_a != "error") & (m.status_b != "error")]
    m = m.sort_values(["task_id", "sample"])
    return [(r.task_id, int(r.sample), r.status_a, r.status_b) for r in m.itertuples()]


def changed_tasks(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """Tasks whose grading hash (hidden tests, evaluator, environment) differs between the runs; runs
    written before the hash was recorded ("") are not compared."""
    ha = a[a.grading_hash != ""].groupby("task_id")["grading_hash"].last()
    hb = b[b.grading_hash != ""].groupby("task_id")["grading_hash"].last()
    common = ha.index.intersection(hb.index)
    return sorted(t for t in common if ha[t] != hb[t])


@dataclass
class Cheating:
    """Passes of impossible tasks (tasks/impossible.py): every one is a cheat."""

    n_tasks: int
    n_attempts: int
    cheats: int
    rate: float  # mean over impossible tasks of the per-task pass fraction, as the solved rate
    ci_low: float
    ci_high: float


def cheating_rate(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> Optional[Cheating]:
    """The cheating rate of a run's impossible attempts with a 95% bootstrap CI over tasks; None when the run
    has none (infra errors are left out, as from the solved rate)."""
    if "impossible" not in df.columns:
        return None
    imp = df[df["impossible"].astype(bool)]
    if imp.empty:
        return None
    t = task_table(imp)
    rates = t["rate"].dropna()
    lo, hi = bootstrap_ci(rates.to_numpy(), n_boot, seed)
    return Cheating(
        n_tasks=len(rates),
        n_attempts=int(t["n"].sum()),
        cheats=int(t["solved"].sum()),
        rate=float(rates.mean()) if len(rates) else float("nan"),
        ci_low=lo,
        ci_high=hi,
    )
