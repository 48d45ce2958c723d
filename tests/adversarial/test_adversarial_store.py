"""The store cases' checks (evaluators/selftest/store_cases.py) on a run folder written by the real store,
as the case's eval writes it (no Docker): they pass on today's readers and fail on a reader that is not
bounded. The cases themselves, with a real eval, run in test_adversarial_cases.py (slow)."""

from __future__ import annotations

import pytest

from evaluators import selftest
from results.manifest import Manifest
from results.run_writer import RunStore
from results.synthetic import make_attempt


def run_like_the_case(ctx: selftest.Ctx, case: str) -> None:
    """The case's attempt (a wrong answer) and the one after it (the right one), with kept changes."""
    with RunStore.create(ctx.workdir / f"st-{ctx.nonce}-{case}", Manifest(model="replay:x")) as store:
        for task, answer in ((case, "wrong"), (f"{case}-next", ctx.answer)):
            a = make_attempt(store.run_id, task, solved=answer == ctx.answer)
            a.changes = store.keep_changes({}, {"answer.txt": f"{answer}\n".encode()})
            store.append(a)


@pytest.mark.parametrize(
    "name",
    [pytest.param("store_swapped_objects", marks=pytest.mark.slow), "hostile_run_files"],  # 12 CLI runs
)
def test_the_store_checks_pass_on_a_real_run_folder(tmp_path, name):
    ctx = selftest.Ctx("abcd1234", tmp_path)
    run_like_the_case(ctx, name)
    assert selftest.CASES[name].check(selftest.Outcome(None, ctx)) == []


def test_the_hostile_files_check_fails_on_an_unbounded_reader(tmp_path, monkeypatch):
    import agent.models.replay as replay

    ctx = selftest.Ctx("abcd1234", tmp_path)
    run_like_the_case(ctx, "hostile_run_files")
    monkeypatch.setattr(replay, "bounded_json_text", lambda raw, *a: raw.decode("utf-8"))
    problems = selftest.CASES["hostile_run_files"].check(selftest.Outcome(None, ctx))
    assert any("deep nesting: RecursionError" in p for p in problems), problems
