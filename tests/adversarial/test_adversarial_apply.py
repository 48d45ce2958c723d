"""The self-test's `harness run --apply` cases (evaluators/selftest/apply_cases.py) as tests: a scripted agent
works on a scratch git repository with core.hooksPath through the real CLI and real sandboxes, then the user's
own `git commit` runs; nothing the agent wrote may run or land outside the allowed set, and every refusal is
listed. `harness selftest --only 'apply_*'` runs the same cases without pytest."""

import pytest

from evaluators import selftest
from evaluators.selftest.apply_repo import tree
from evaluators.selftest.case import ApplyRun
from tests.adversarial.test_adversarial_cases import FAST

APPLY = [c.name for c in selftest.CATALOGUE if c.group == "apply"]


@pytest.fixture(scope="module")
def runner(image, tmp_path_factory):
    r = selftest.Runner(image, workdir=tmp_path_factory.mktemp("selftest-apply"))
    yield r
    r.close()


def test_the_apply_cases_are_in_the_catalogue():
    assert set(APPLY) == {
        "apply_hooks",
        "apply_bad_names",
        "apply_long_path",
        "apply_symlink_outside",
        "apply_honest",
        "apply_config_files",
        "apply_hook_imports",
        "apply_compiled",
        "apply_nested_repo",
        "apply_honest_sources",
    }
    assert FAST & set(APPLY)  # `make test-fast` runs one of them


@pytest.mark.parametrize(
    "name", [pytest.param(n, id=n, marks=[] if n in FAST else [pytest.mark.slow]) for n in APPLY]
)
def test_apply_case(name, runner):
    row = runner.run(selftest.CASES[name])
    assert row.ok, f"{row.observed}: " + "; ".join(row.problems)


@pytest.mark.slow
def test_the_hook_case_fails_when_the_guard_is_off(runner):
    """With --allow-hooks the harness writes the agent's hooks by design: the same case must then see its
    hook run on the user's commit and the held-back files land, so the case can fail."""
    row = runner.run_apply(selftest.CASES["apply_hooks"], "--allow-hooks")
    assert not row.ok
    assert any("its marker exists" in p for p in row.problems), row.problems
    assert any("outside the allowed set" in p and ".envrc" in p for p in row.problems), row.problems


def test_the_checks_flag_extra_writes_a_lost_fix_and_a_traceback(tmp_path):
    """The check on its own, on a run made up here: each departure from the allowed outcome is named."""
    ctx = selftest.Ctx("abcd1234", tmp_path)
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "src").mkdir(parents=True)
    outside.mkdir()
    (repo / "src/f.py").write_text("def f(n):\n    return []\n")
    before = tree(repo)
    (repo / ".envrc").write_text("touch x\n")
    (outside / "planted.txt").write_text("x")
    run = ApplyRun(repo, tmp_path / "marker", outside, 0, "", "Traceback (most recent call last):", 1)
    run.before, run.after = before, tree(repo)
    run.hook_log = ("", "user-hook\n")
    problems = selftest.CASES["apply_honest"].check(selftest.Outcome(None, ctx, run))
    text = "; ".join(problems)
    for needle in ("traceback", "outside the allowed set", "src/f.py is not exactly", "written outside"):
        assert needle in text, (needle, problems)
    (tmp_path / "marker").write_text("")
    run.hook_log = ("", "")
    text = "; ".join(selftest.CASES["apply_honest"].check(selftest.Outcome(None, ctx, run)))
    assert "its marker exists" in text and "own pre-commit hook did not run" in text


@pytest.mark.slow
@pytest.mark.parametrize("name", ["apply_config_files", "apply_hook_imports", "apply_compiled"])
def test_the_allowlist_cases_fail_with_allow_hooks(runner, name):
    """--allow-hooks writes what the allowlist holds back: each case then sees its held files land."""
    row = runner.run_apply(selftest.CASES[name], "--allow-hooks")
    assert not row.ok and any("outside the allowed set" in p for p in row.problems), row.problems


@pytest.mark.slow
def test_a_nested_repository_is_held_even_with_allow_hooks(runner):
    row = runner.run_apply(selftest.CASES["apply_nested_repo"], "--allow-hooks")
    assert row.ok, f"{row.observed}: " + "; ".join(row.problems)
