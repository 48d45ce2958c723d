"""What `fresh` keeps, as Harbor's separate verifier does: a symlink the agent made in the working folder (the
answer itself, kept through the run folder and `harness rescore`), and the changes that matter in a workspace
past the listing cap (a dependency folder of 25,000 files beside the answer), in Harbor's fresh mode and in
our own kinds.

Real Docker; the Harbor images are our base image with a few files."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agent.sandbox.backends.docker.pool import DockerPool
from agent.sandbox.changes import MAX_LISTED
from evaluators.rescore import rescore_run
from evaluators.run.attempt import run_attempt
from evaluators.run.policies import oracle_policy
from tests.conftest import run
from tests.evaluators.grading.test_harbor_runtime import attempt, eval_replay, harbor_task
from tests.helpers import CORRECT, make_task

FRESH = 'schema_version = "1.1"\n[verifier]\nisolation = "fresh"\n'
RELEASES = (
    "FROM harness/base:latest\nWORKDIR /app\n"
    "RUN mkdir -p releases/v1 releases/v2 && echo 1 > releases/v1/VERSION && echo 2 > releases/v2/VERSION"
    " && ln -s releases/v1 current\n"
)
# Solved only by the link `current -> releases/v2`, its text exactly (an absolute path to v2 is wrong).
REPOINTED = (
    '#!/bin/bash\nif [ "$(readlink /app/current)" = releases/v2 ] && [ "$(cat /app/current/VERSION)" = 2 ]; '
    "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)
# 25,000 one-byte files in a dependency folder: all smaller than the answer, a starting file kept as one
DEPENDENCIES = (
    "python3 -c \"import os\nfor i in range(25000):\n    d = f'node_modules/m{i % 100}'\n"
    "    os.makedirs(d, exist_ok=True)\n    open(f'{d}/f{i}.js', 'w').write('x')\""
)


def records(run_dir) -> dict[str, dict]:
    lines = (run_dir / "attempts.jsonl").read_text().splitlines()
    return {r["task_id"]: r for r in map(json.loads, lines)}


@pytest.mark.slow
def test_a_link_that_is_the_answer_is_kept_in_fresh_mode_and_through_rescore(image, tmp_path):
    tasks = [
        harbor_task(tmp_path / "tasks", FRESH, name=n, dockerfile=RELEASES, test_sh=REPOINTED)
        for n in ("right", "wrong")
    ]
    scripts = {"right": ["ln -sfn releases/v2 current"], "wrong": ["ln -sfn /app/releases/v2 current"]}
    out, recs = eval_replay(tmp_path, scripts, tasks)
    right, wrong = recs["right"], recs["wrong"]
    assert (right["status"], right["reward"]) == ("solved", 1.0), (right["detail"], right["verifier_output"])
    assert (wrong["status"], wrong["reward"]) == ("failed", 0.0), wrong["detail"]
    assert right["changes"]["links"] == {"current": "releases/v2"} and "symlink" not in right["detail"]
    assert wrong["changes"]["links"] == {"current": "/app/releases/v2"}  # its text, never resolved
    again = run(rescore_run(out, tmp_path / "again", suite=str(tmp_path / "tasks"), log=lambda m: None))
    recs2 = records(again)
    assert (recs2["right"]["status"], recs2["right"]["reward"]) == ("solved", 1.0), recs2["right"]["detail"]
    assert (recs2["wrong"]["status"], recs2["wrong"]["reward"]) == ("failed", 0.0)


@pytest.mark.slow
def test_harbor_fresh_past_the_listing_cap_keeps_the_answer_and_says_what_it_left_out(image, tmp_path):
    task = harbor_task(
        tmp_path,
        FRESH,
        name="deps",
        dockerfile="FROM harness/base:latest\nWORKDIR /app\nRUN echo 'answer=?' > answer.txt\n",
        test_sh="#!/bin/bash\ngrep -qx answer=42 /app/answer.txt && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n",
        solve_sh=f"#!/bin/bash\ncd /app\n{DEPENDENCIES}\necho answer=42 > answer.txt\n",
    )
    rec = attempt(task)
    assert (rec.status, rec.reward) == ("solved", 1.0), (rec.error, rec.detail)
    left = 25000 - MAX_LISTED
    assert f"not captured: {left} new entries past the listing cap of {MAX_LISTED} are left out" in rec.detail


@pytest.mark.slow
def test_our_own_kind_past_the_listing_cap_keeps_the_answer_and_says_what_it_left_out(image):
    solve = f"#!/bin/bash\ncd /workspace\n{DEPENDENCIES}\nprintf %s '{CORRECT.decode()}' > solution.py\n"
    task = dataclasses.replace(make_task(), solution_files={"solve.sh": solve.encode()})

    async def go():
        async with DockerPool(run_id="cap-test", warm=0) as pool:
            return await run_attempt(task, oracle_policy, pool, image, run_id="cap-test", model_name="t")

    rec = run(go())
    assert (rec.status, rec.reward) == ("solved", 1.0), (rec.error, rec.detail)
    left = 25000 - MAX_LISTED
    assert f"not captured: {left} new entries past the listing cap of {MAX_LISTED} are left out" in rec.detail
