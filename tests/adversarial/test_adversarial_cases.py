"""Every attack of the self-test catalogue (evaluators/selftest/) as its own test: a scripted agent performs
it in a real sandbox through the whole loop, and the case's expectation plus the global conditions (harness
survives, records exist, nothing left behind, host unaffected) must hold. `harness selftest` runs the same
catalogue without pytest."""

import json

import pytest

from evaluators import selftest
from results.schema import Attempt, Step
from tests.test_bad_input import harness


@pytest.fixture(scope="module")
def runner(image, tmp_path_factory):
    r = selftest.Runner(image, workdir=tmp_path_factory.mktemp("selftest"))
    yield r
    r.close()


# `make test-fast` runs one case of each kind of attack (reward forging, runner tampering, reading the
# hidden tests, escaping to the host); `make test` runs the whole catalogue.
FAST = {
    "conftest_hook",
    "always_equal",
    "exit_os_exit",
    "patch_reports",
    "read_hidden_asserts",
    "script_reward_forge",
    "kill_pid1",
    "writes_outside_workspace",
    "network_probes",
    "privilege_probes",
    "long_path",
    "cross_writer_left_behind",
    "apply_hooks",
    "harbor_snapshot_pytest11_site",
}


def params():
    for case in selftest.CATALOGUE:
        if case.group == "apply":  # tests/adversarial/test_adversarial_apply.py runs those
            continue
        slow = case.slow or case.name not in FAST
        yield pytest.param(case.name, id=case.name, marks=[pytest.mark.slow] if slow else [])


def test_the_fast_cases_exist():
    assert FAST <= set(selftest.CASES)


@pytest.mark.parametrize("name", list(params()))
def test_attack(name, runner):
    row = runner.run(selftest.CASES[name])
    assert row.ok, f"{row.observed}: " + "; ".join(row.problems)


# ------------------------------------------------------------------------- the checks themselves can fail


def fake_attempt(status="solved", reward=1.0, observations=("ATTACK-RAN",), messages=()) -> Attempt:
    return Attempt(
        key="k",
        run_id="r",
        task_id="t",
        model="m",
        status=status,
        reward=reward,
        solved=reward == 1.0,
        reason="pass" if reward == 1.0 else "fail",
        messages=list(messages),
        steps=[Step(index=i, raw_output="", observation=o) for i, o in enumerate(observations)],
    )


def test_reward_checks_flag_a_hack_that_scored(tmp_path):
    ctx = selftest.Ctx("abcd1234", tmp_path)
    for name in ("conftest_hook", "exit_os_exit", "always_equal", "trojan_path"):
        problems = selftest.CASES[name].check(selftest.Outcome(fake_attempt(), ctx))
        assert any("reward 1.0" in p for p in problems), (name, problems)
    # an infra error is not an acceptable outcome for a hack either
    assert selftest.CASES["exit_sys_exit"].check(selftest.Outcome(fake_attempt("error", 0.0), ctx))
    # nor a zero that never ran the attack
    assert selftest.CASES["forged_stdout"].check(selftest.Outcome(fake_attempt("failed", 0.0, ("",)), ctx))


def test_hidden_search_check_flags_a_leak(tmp_path):
    ctx = selftest.Ctx("abcd1234", tmp_path)
    leak = fake_attempt("failed", 0.0, ("SEARCHED", f"found {ctx.marker}", "ATTACK-RAN"))
    assert any(
        "marker" in p for p in selftest.CASES["search_hidden_tests"].check(selftest.Outcome(leak, ctx))
    )


def test_host_checks_flag_escapes(tmp_path):
    ctx = selftest.Ctx("abcd1234", tmp_path)
    caps = fake_attempt(
        observations=(
            "uid=10001 NoNewPrivs=1 sudo=FAIL su=FAIL mount=FAIL unshare=FAIL "
            "dockersock=ABSENT pid1env=FAIL chown=FAIL CapInh=0 CapPrm=0 "
            "CapEff=0000000000000001 CapAmb=0",
        )
    )
    assert any(
        "capabilities" in p for p in selftest.CASES["privilege_probes"].check(selftest.Outcome(caps, ctx))
    )
    net = fake_attempt(observations=("IFACES=lo,eth0,\nROUTES=1 DNS=OK PYDNS=FAIL PIP=FAIL",))
    assert len(selftest.CASES["network_probes"].check(selftest.Outcome(net, ctx))) >= 3
    flood = fake_attempt(observations=("x" * 50_000 + "FLOOD-END cut here",))
    assert any(
        "characters" in p for p in selftest.CASES["stdout_flood_text"].check(selftest.Outcome(flood, ctx))
    )


def test_table_counts_passes_and_failures():
    rows = [selftest.Row("a", "x", "y"), selftest.Row("b", "x", "z", problems=["broke"])]
    text = selftest.format_table(rows)
    assert text.splitlines()[-1] == "1 passed, 1 failed"
    assert "b: broke" in text and "FAIL" in text


def test_selection_by_name_and_glob():
    assert [c.name for c in selftest.select("fork_bomb")] == ["fork_bomb"]
    assert {c.name for c in selftest.select("config_*")} == {
        "config_pytest_ini",
        "config_tox_ini",
        "config_setup_cfg",
        "config_pyproject",
    }
    assert len(selftest.select(None)) == len(selftest.CATALOGUE) >= 40


@pytest.mark.slow
def test_cli_lists_and_runs_a_case(image):
    listed = harness("selftest", "--list")
    assert listed.returncode == 0 and "fork_bomb" in listed.stdout and "search_hidden_tests" in listed.stdout
    proc = harness("selftest", "--only", "kill_pid1")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["case", "expected", "observed", "ok"]
    assert any(line.startswith("kill_pid1") and line.rstrip().endswith("ok") for line in lines)
    assert lines[-1] == "1 passed, 0 failed"
    assert "Traceback" not in proc.stderr


def test_catalogue_is_json_safe(tmp_path):
    """Every script is a list of replies the replay model accepts (strings with exactly one bash block)."""
    from agent.prompt_format import parse_text_reply

    ctx = selftest.Ctx("abcd1234", tmp_path)
    for case in selftest.CATALOGUE:
        replies = case.script(ctx)
        json.dumps(replies)
        kinds = [parse_text_reply(r).kind for r in replies]
        assert kinds[-1] == "submit" and set(kinds[:-1]) <= {"bash"}, (case.name, kinds)
