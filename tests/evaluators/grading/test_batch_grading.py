"""Batch grading (evaluators/grading/grade.GradingStations) through run_eval: attempts of one image take
turns in shared grading containers, each as its own user, and every verdict is what it would be alone."""

import asyncio
import json

import pytest

from evaluators.grading.grade import FIRST_BATCH_UID, GradingStations
from evaluators.run.config import EvalConfig
from evaluators.run.runner import run_eval
from evaluators.selftest.fixtures import CORRECT, SUBMIT, WRONG, add_task, bash, write
from results.store import RunReader


@pytest.mark.slow
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
    from evaluators.run.attempt import expected_containers
    from tests.helpers import make_task

    class Stations:  # what expected_containers reads of GradingStations
        def __init__(self, batch):
            self.batch = batch

    tasks = [make_task() for _ in range(20)]
    assert expected_containers(tasks, None, 8) == 40
    assert expected_containers(tasks, Stations(8), 8) == 20 + 4  # 4 grade at once; ceil(20/8) = 3
    assert expected_containers(tasks, Stations(2), 8) == 20 + 10
    assert expected_containers(tasks[:3], Stations(8), 8) == 3 + 3


def test_expect_attempts_tells_the_pool_each_images_share():
    """What an image's attempts take, per image: the pool warms nothing of an image no attempt asks for."""
    from evaluators.run.attempt import expect_attempts
    from tests.helpers import make_task

    told = []

    class Pool:
        def expect(self, acquires, per_image=None):
            told.append((acquires, per_image))

    a, b = make_task(), make_task()
    expect_attempts(Pool(), [(a, "img-a"), (a, "img-a"), (b, "img-b")])
    assert told == [(6, {"img-a": 4, "img-b": 2})]  # an agent and a grading container each


class _Station:
    """A grading container as GradingStations sees it: every command succeeds at once, but the wipe between
    turns waits for `gate` and ends with `wipe_code`."""

    def __init__(self, wipe_code: int = 0):
        self.dead, self.calls, self.wipe_code = False, [], wipe_code
        self.gate = asyncio.Event()
        self.gate.set()

    async def exec(self, argv, timeout, **kw):
        from agent.sandbox import ExecResult
        from evaluators.grading.grade import _WIPE

        self.calls.append(argv)
        code = 0
        if argv[:3] == ["sh", "-c", _WIPE]:
            await self.gate.wait()
            code = self.wipe_code
        return ExecResult(exit_code=code, stdout="", stderr="", duration=0.0)

    def wipes(self) -> int:
        from evaluators.grading.grade import _WIPE

        return sum(c[:3] == ["sh", "-c", _WIPE] for c in self.calls)


class _Pool:
    def __init__(self, **kw):
        self.made, self.released, self.kw = [], [], kw

    def add_reclaimer(self, take_idle):
        pass

    async def acquire(self, image, limits, task="pool"):
        self.made.append(_Station(**self.kw))
        return self.made[-1]

    async def release(self, sb):
        self.released.append(sb)


async def _turn(stations):
    """One attempt's turn, ended at once; a turn that hangs fails the test instead."""
    from agent.sandbox import SandboxSpec

    async def turn():
        async with stations.turn("img", SandboxSpec(), "t") as got:
            return got

    return await asyncio.wait_for(turn(), 5)


def test_a_turns_wipe_runs_after_its_verdict_and_the_next_turn_waits_for_it():
    async def main():
        pool = _Pool()
        stations = GradingStations(pool, batch=3, max_containers=1)
        first, uid = await _turn(stations)
        await stations.close()  # its wipe is done
        first.gate.clear()  # the next wipe hangs until set
        assert (await _turn(stations)) == (first, uid + 1)  # ended: the verdict does not wait for the wipe
        await asyncio.sleep(0.05)
        assert first.wipes() == 2  # which is still running
        nxt = asyncio.ensure_future(_turn(stations))
        await asyncio.sleep(0.05)
        assert not nxt.done()  # the only container is not another attempt's before it is wiped
        first.gate.set()
        assert (await nxt) == (first, uid + 2)  # the batch's last turn: released, never wiped
        await stations.close()
        assert first.wipes() == 2 and pool.released == [first] and len(pool.made) == 1

    asyncio.run(main())


def test_a_container_whose_wipe_fails_grades_no_other_attempt():
    async def main():
        pool = _Pool(wipe_code=3)  # "left behind: ..." (exit 3)
        stations = GradingStations(pool, batch=8, max_containers=1)
        first, uid = await _turn(stations)
        await stations.close()  # waits for the wipe
        assert pool.released == [first]
        second, uid2 = await _turn(stations)
        assert second is not first and uid2 == uid  # a fresh container, its first user again
        await stations.close()

    asyncio.run(main())


def test_the_graders_files_go_in_while_the_workspace_is_rebuilt_and_either_failure_releases_it():
    """grading_sandbox's `prepare` runs beside the workspace rebuild: its result is kept, its error raised,
    and the container is released whichever of the two fails (nothing left running)."""
    from agent.sandbox import Changes, FilesNotWritten
    from evaluators.grading.grade import grading_sandbox
    from results.errors import InfraError
    from tests.helpers import FakePool, FakeSandbox, make_task

    order = []

    class Refusing(FakeSandbox):
        async def put_files(self, files, dest="/workspace", user="agent", executable=()):
            order.append(("rebuild", "start"))
            await asyncio.sleep(0.05)
            order.append(("rebuild", "end"))
            if self.refuse:
                raise FilesNotWritten("no")
            return []

    async def prepare(sb):
        order.append(("grader", "start"))
        await asyncio.sleep(0.01)
        if sb.prepare_fails:
            raise InfraError("grader's folders")
        return 7

    async def attempt(refuse: bool, prepare_fails: bool):
        pool = FakePool()

        async def acquire(image, limits=None, task="pool"):
            sb = Refusing()
            sb.refuse, sb.prepare_fails = refuse, prepare_fails
            pool.sandboxes.append(sb)
            return sb

        pool.acquire = acquire
        order.clear()
        grading = grading_sandbox(make_task(), Changes(), pool, "img", prepare=prepare)
        try:
            async with grading:
                return grading.prepared, order[:], pool.sandboxes[0].dead
        finally:
            assert pool.sandboxes[0].dead  # released either way
            assert len(asyncio.all_tasks()) == 1  # no prepare left running

    prepared, seen, dead = asyncio.run(attempt(False, False))
    assert prepared == 7 and not dead
    assert seen.index(("grader", "start")) < seen.index(("rebuild", "end"))  # side by side
    with pytest.raises(InfraError):
        asyncio.run(attempt(False, True))
    with pytest.raises(FilesNotWritten):
        asyncio.run(attempt(True, False))


def test_the_wipe_removes_everything_an_attempt_left_where_it_could_write(image):
    """The real wipe between turns (grade._WIPE) in a real container: the attempt's files in the sticky /tmp
    and /dev/shm, hidden and oddly named ones, a folder of its own it made unreadable, links, and what root
    wrote for it in /grader are all gone, and the wipe says the container is clean (exit 0)."""
    from agent.sandbox.backends.docker.pool import DockerPool
    from evaluators.grading.grade import _WIPE, FIRST_BATCH_UID

    uid = FIRST_BATCH_UID + 3
    as_u = f"setpriv --reuid={uid} --regid={uid} --clear-groups --"
    mess = (
        "cd /tmp && mkdir -p a/b/c && echo x > a/b/c/f && echo y > .hidden && touch '..odd' 'new\nline' "
        "&& ln -s /etc/passwd link && mkdir locked && touch locked/in && chmod 000 locked "
        "&& mkdir s && touch s/f && chmod 1777 s && echo z > /dev/shm/seg && echo w > /workspace/out.txt"
    )

    async def main():
        async with DockerPool(warm=0) as pool:
            async with pool.sandbox(image) as sb:
                await sb.exec(["chmod", "0777", "/workspace"], 10, cwd="/")
                made = await sb.exec(["sh", "-c", f'{as_u} sh -c "$1"', "_", mess], 10, user="root", cwd="/")
                await sb.exec(
                    ["sh", "-c", "mkdir -p /grader/x/tests && echo t > /grader/x/tests/t.py"],
                    10,
                    user="root",
                    cwd="/",
                )
                wipe = await sb.exec(["sh", "-c", _WIPE, "_", str(uid)], 60, user="root", cwd="/")
                left = await sb.exec(
                    ["sh", "-c", "ls -A /tmp /dev/shm /workspace /grader"], 10, user="root", cwd="/"
                )
                return made, wipe, left

    made, wipe, left = asyncio.run(main())
    assert made.exit_code == 0, made.stderr
    assert (wipe.exit_code, wipe.stderr) == (0, "")
    assert [line for line in left.stdout.splitlines() if line and not line.endswith(":")] == []


def test_each_turn_of_a_preloaded_proxy_runs_its_candidate_as_its_own_user(image, tmp_path):
    """The candidate proxy's module is imported once per grading container, by its command server, from the
    first turn's folder (wiped before the second turn): every later turn still starts its candidate (from
    the source kept in memory) and as that turn's user, read when the turn's conftest installs the proxy."""
    import dataclasses

    from evaluators.selftest.fixtures import small_task

    hidden = (
        "import os\nimport solution\n\n\ndef test_the_candidate_runs_as_this_turns_user():\n"
        "    assert solution.uid() == int(os.environ['HARNESS_CANDIDATE_UID']) != 10001\n"
    )
    base = small_task(
        "uid", "Write uid().", 30.0, verifier_timeout_sec=60, test_files={"test_uid.py": hidden.encode()}
    )
    tasks = [dataclasses.replace(base, id=f"uid-{i}") for i in range(3)]
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            {"*": [bash(write("solution.py", "import os\n\ndef uid():\n    return os.getuid()\n")), SUBMIT]}
        )
    )
    shared = GradingStations.shared_turns
    out = asyncio.run(
        run_eval(
            EvalConfig(model=f"replay:{script}", out=tmp_path / "run", concurrency=1, batch_grading=3),
            tasks,
            progress=False,
        )
    )
    recs = list(RunReader(out).iter_attempts())
    assert [(r.solved, r.reason) for r in recs] == [(True, "pass")] * 3, [r.detail for r in recs]
    assert GradingStations.shared_turns >= shared + 2  # the three took turns in one container
