"""Batch grading (evaluators/grading/grade.GradingStations) through run_eval: attempts of one image take
turns in shared grading containers, each as its own user, and every verdict is what it would be alone."""

import asyncio
import json

from evaluators.grading.grade import FIRST_BATCH_UID, GradingStations
from evaluators.run.config import EvalConfig
from evaluators.run.runner import run_eval
from evaluators.selftest.fixtures import CORRECT, SUBMIT, WRONG, add_task, bash, write
from results.store import RunReader


def test_batch_graded_verdicts_are_each_attempts_own(image, tmp_path, monkeypatch):
    uids: list[int] = []
    turn = GradingStations.turn

    def spy(self, *a, **kw):  # the users the attempts were graded as
        cm = turn(self, *a, **kw)
        enter = cm.__aenter__

        async def entered():
            sb, uid = await enter()
            uids.append(uid)
            return sb, uid

        cm.__aenter__ = entered
        return cm

    monkeypatch.setattr(GradingStations, "turn", spy)
    tasks = [add_task(f"add-{i}") for i in range(6)]
    scripts = {
        t.id: [bash(write("solution.py", CORRECT if i % 2 else WRONG)), SUBMIT] for i, t in enumerate(tasks)
    }
    script = tmp_path / "s.json"
    script.write_text(json.dumps(scripts))
    shared = GradingStations.shared_turns
    out = asyncio.run(
        run_eval(
            EvalConfig(model=f"replay:{script}", out=tmp_path / "run", concurrency=4, batch_grading=3),
            tasks,
            progress=False,
        )
    )
    recs = {a.task_id: a for a in RunReader(out).iter_attempts()}
    for i, t in enumerate(tasks):
        r = recs[t.id]
        assert (r.solved, r.reason) == ((True, "pass") if i % 2 else (False, "fail")), (
            t.id,
            r.reason,
            r.detail,
        )
    assert GradingStations.shared_turns > shared  # some attempts shared a grading container
    assert len(uids) == 6 and min(uids) >= FIRST_BATCH_UID  # never the container's own user, never root


def test_expected_containers_counts_one_grading_container_per_batch_or_per_grader_at_once():
    """The pool warms no more than the attempts will take: an agent container each, and the shared grading
    containers (one per `batch` attempts, but no fewer than grade at once); without batch grading two each."""
    from evaluators.run.runner import expected_containers
    from tests.helpers import make_task

    class Stations:  # what expected_containers reads of GradingStations
        def __init__(self, batch):
            self.batch = batch

    tasks = [make_task() for _ in range(20)]
    assert expected_containers(tasks, None, 8) == 40
    assert expected_containers(tasks, Stations(8), 8) == 20 + 4  # 4 grade at once; ceil(20/8) = 3
    assert expected_containers(tasks, Stations(2), 8) == 20 + 10
    assert expected_containers(tasks[:3], Stations(8), 8) == 3 + 3
