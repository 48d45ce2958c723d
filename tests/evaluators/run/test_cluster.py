"""`harness eval --cluster`: attempts spread over a real local Ray cluster (head + workers, loopback only).

The cluster lives in a network namespace (tests/ray_cluster.py); the driver, `harness eval --cluster`,
runs inside it too (nsenter), as it would on a node of a real cluster. Every node shares this
machine's Docker engine.
"""

import contextlib
import fnmatch
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from evaluators.run.config import EvalConfig
from evaluators.run.runner import run_eval
from results.errors import UserError
from tasks.loader import load_suite
from tests.conftest import ROOT, run
from tests.helpers import SUBMIT
from tests.ray_cluster import LocalCluster, available

why_not = available()
needs_cluster = pytest.mark.skipif(bool(why_not), reason=why_not or "")


@pytest.fixture(scope="module")
def ray_cluster(image):
    """A head and one worker node, started once for this module's tests (Ray takes seconds to start) and
    stopped after them: idle, its processes take ~6% of a core, for the rest of a 25-minute run."""
    if why_not:
        pytest.skip(why_not)
    c = LocalCluster(cpus_per_node=1).start(workers=1)
    yield c
    c.stop()


def script_for(tasks, tmp_path, pause: float = 0.0):
    """A replay script: the oracle's command for odd-numbered tasks (solved), a wrong file for the others
    (failed), so equal results mean equal outcomes of both kinds."""
    wait = f"sleep {pause}; " if pause else ""
    s = {}
    for i, t in enumerate(tasks):
        cmd = (
            t.solution_files["solve.sh"].decode().strip().splitlines()[-1]
            if i % 2 == 0
            else "echo no > wrong.txt"
        )
        s[t.id] = [f"```bash\n{wait}{cmd}\n```", SUBMIT]
    path = tmp_path / "script.json"
    path.write_text(json.dumps(s))
    return path


def cluster_eval(cluster, script, out, *extra, background=False):
    argv = cluster.wrap(
        [
            sys.executable,
            str(ROOT / "harness.py"),
            "eval",
            "--model",
            f"replay:{script}",
            "--tasks",
            "builtin",
            "--glob",
            GLOB,
            "--cluster",
            cluster.address,
            "--out",
            str(out),
            *extra,
        ]
    )
    if background:
        return subprocess.Popen(
            argv, cwd=ROOT, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run(argv, cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=600)


def records(out):
    return [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]


def outcome(r):
    """What must not depend on where an attempt ran (times, keys and nodes may)."""
    return {
        k: r[k]
        for k in (
            "task_id",
            "sample",
            "status",
            "reward",
            "solved",
            "reason",
            "exit_reason",
            "n_steps",
            "patch_files",
            "image",
            "prompt_tokens",
            "completion_tokens",
            "messages",
        )
    } | {
        "tests": [(t["id"], t["outcome"]) for t in r["tests"]],
        "steps": [(s["raw_output"], s["observation"], s["exit_code"]) for s in r["steps"]],
    }


GLOB = "create-file-0*"  # 9 of the family's 20: enough to spread over the nodes; half the attempts


def create_file_tasks():
    return [t for t in load_suite("builtin") if fnmatch.fnmatch(t.id, GLOB)]


@needs_cluster
@pytest.mark.slow  # starts a real two-node Ray cluster (tens of seconds here)
def test_eval_spreads_attempts_over_both_nodes_and_equals_one_machine(ray_cluster, tmp_path):
    tasks = create_file_tasks()
    script = script_for(tasks, tmp_path)
    p = cluster_eval(ray_cluster, script, tmp_path / "cluster", "--samples", "2", "--concurrency", "4")
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"run folder: {tmp_path / 'cluster'}" in p.stdout
    assert (
        "solved" in p.stdout and f"{2 * len(tasks)}/{2 * len(tasks)}" in p.stderr
    )  # summary and progress bar
    on_cluster = records(tmp_path / "cluster")
    assert len({r["node"] for r in on_cluster}) == 2, Counter(r["node"] for r in on_cluster)
    assert all(r["node"] for r in on_cluster)

    run(
        run_eval(
            EvalConfig(
                model=f"replay:{script}", samples=2, concurrency=4, out=tmp_path / "single", suite="builtin"
            ),
            tasks,
            progress=False,
        )
    )
    single = records(tmp_path / "single")
    assert all(r["node"] == "" for r in single)
    key = lambda r: (r["task_id"], r["sample"])  # noqa: E731
    assert [outcome(r) for r in sorted(on_cluster, key=key)] == [outcome(r) for r in sorted(single, key=key)]
    solved = Counter(r["solved"] for r in on_cluster)
    assert solved[True] == 2 * len(tasks[::2]) and solved[False] == 2 * len(tasks[1::2])  # as scripted


@needs_cluster
@pytest.mark.slow  # starts a real two-node Ray cluster (tens of seconds here)
def test_a_node_lost_mid_run_loses_and_duplicates_nothing(ray_cluster, tmp_path):
    tasks = create_file_tasks()
    extra = ray_cluster.add_worker()  # three nodes; this one dies mid-run
    script = script_for(tasks, tmp_path, pause=1.0)
    out = tmp_path / "run"
    samples = 3  # 27 attempts over 6 lanes: the killed node still has work in flight when it dies
    total = samples * len(tasks)
    p = cluster_eval(
        ray_cluster, script, out, "--samples", str(samples), "--concurrency", "6", background=True
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p.poll() is None:
            done = records(out) if (out / "attempts.jsonl").exists() else []
            if len({r["node"] for r in done}) == 3:  # every node has finished one: all are busy
                break
            time.sleep(0.2)
        assert p.poll() is None, p.communicate()[1][-3000:]
        ray_cluster.kill_node(extra)
        stdout, stderr = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, stderr[-3000:]
    assert "cluster: lost node" in stderr  # the killed node had attempts in flight; they ran again elsewhere
    recs = records(out)
    keys = [(r["task_id"], r["sample"]) for r in recs]
    assert len(keys) == len(set(keys)) == total  # nothing lost, nothing twice
    assert not [r for r in recs if r["status"] == "error"]
    assert Counter(r["solved"] for r in recs)[True] == samples * len(tasks[::2])  # the scripted outcome
    assert len({r["node"] for r in recs}) == 3


def test_cluster_address_and_missing_ray_are_one_line_errors(monkeypatch):
    from evaluators.run import cluster

    with pytest.raises(UserError, match="ray://HOST:PORT"):
        cluster.check_address("http://head:6379")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(UserError, match=r"pip install 'harness\[cluster\]'"):
        cluster.import_ray()


def test_a_node_label_outside_ray_starts_no_ray():
    """NodeWorker's label, asked in a process not connected to Ray, is "local": it used to start a local Ray
    instance (a head on the host's network) that lived until the process ended."""
    code = (
        "import ray; from evaluators.run.cluster import node_label; print(node_label(), ray.is_initialized())"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[-2:] == [f"{socket.gethostname()}/local", "False"], p.stdout


def test_cli_says_what_to_install_without_ray(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None; sys.argv = ['harness', 'eval', '--model', 'replay:x.json', "
        "'--cluster', 'auto']; import harness; sys.exit(harness.main())"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    errors = [line for line in p.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "pip install 'harness[cluster]'" in errors[0], p.stderr


@pytest.mark.slow
def test_a_node_without_an_image_gets_it_by_docker_load(image):
    """The driver ships `docker save` of what a node lacks; the node's `docker load` yields the same id."""
    import io
    import secrets
    import tarfile

    from agent.sandbox.backends.docker.client import docker_client
    from agent.sandbox.backends.docker.images import base_tag
    from evaluators.run.cluster import NodeWorker, _save_image

    client = docker_client()
    dockerfile = f"FROM {base_tag()}\nLABEL harness.test={secrets.token_hex(8)}\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    buf.seek(0)
    tag = f"harness/test-load:{secrets.token_hex(4)}"
    img, _ = client.images.build(fileobj=buf, custom_context=True, rm=True, tag=tag)
    node = NodeWorker({})
    try:
        blob = _save_image(img.id)
        client.images.remove(img.id, force=True)
        assert node.missing_images([img.id, image]) == [img.id]
        node.load_images(blob, [img.id])
        assert node.missing_images([img.id, image]) == []
        assert client.images.get(img.id).labels["harness.test"] == img.labels["harness.test"]
        assert client.images.get(tag).id == img.id  # the tag came along: lookups by tag work on the node
    finally:
        with contextlib.suppress(Exception):
            client.images.remove(img.id, force=True)


@needs_cluster
@pytest.mark.slow
def test_bench_cluster_smoke():
    """bench/cluster.py --smoke: its own local cluster, the three paths, the driver's ceiling (no timing
    asserted)."""
    p = subprocess.run(
        [sys.executable, "bench/cluster.py", "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [
        line.split() for line in p.stdout.splitlines() if line.startswith(("single machine", "ray --cluster"))
    ]
    assert [r[0] for r in rows] == ["single", "ray", "single", "ray"]
    assert [r[2] for r in rows] == ["1", "1", "1", "2"]  # nodes the attempts landed on
    assert "records/s" in p.stdout and "driver ceiling" in p.stdout


def random_adapter(folder):
    """A PEFT LoRA adapter with random weights on both sides: it changes the model's greedy replies."""
    import torch
    from peft import LoraConfig, get_peft_model

    from agent.models import local_loading

    base, _ = local_loading.load_hf("smollm2-135m")
    torch.manual_seed(0)
    lora = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    lora.save_pretrained(str(folder))
    return folder


def token_ids(out):
    """{task id: [(prompt ids, reply ids) of each step]}"""
    recs = records(out)
    assert not [r["error"] for r in recs if r["status"] == "error"]
    return {r["task_id"]: [(s["prompt_ids"], s["completion_ids"]) for s in r["steps"]] for r in recs}


@needs_cluster
@pytest.mark.model
@pytest.mark.slow
def test_the_served_model_has_the_adapter_and_nodes_record_one_machines_token_ids(ray_cluster, tmp_path):
    """A local model is served once, by the driver, and the nodes call it: what `harness train --cluster`
    samples with (the base model plus the round's adapter). The records from the nodes carry the exact token
    ids a single-machine run records."""
    from agent.loop import LoopConfig
    from agent.models.local import LocalModel

    adapter = random_adapter(tmp_path / "adapter")
    argv = ray_cluster.wrap(
        [
            sys.executable,
            str(ROOT / "harness.py"),
            "eval",
            "--model",
            "local:smollm2-135m",
            "--adapter",
            str(adapter),
            "--tasks",
            "builtin",
            "--glob",
            "create-file-01",
            "--max-steps",
            "2",
            "--max-reply-tokens",
            "48",
            "--cluster",
            ray_cluster.address,
            "--out",
            str(tmp_path / "cluster"),
        ]
    )
    p = subprocess.run(argv, cwd=ROOT, env=ray_cluster.env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    on_cluster = token_ids(tmp_path / "cluster")["create-file-01"]
    [rec] = records(tmp_path / "cluster")
    assert rec["node"] and rec["model"] == "local:smollm2-135m"  # ran on a node; the model served once

    tasks = [t for t in create_file_tasks() if t.id == "create-file-01"]
    run(
        run_eval(
            EvalConfig(
                model="local:smollm2-135m",
                out=tmp_path / "single",
                model_options={"adapter": str(adapter)},
                suite="builtin",
                loop=LoopConfig(max_steps=2, max_reply_tokens=48),
            ),
            tasks,
            progress=False,
        )
    )
    single = token_ids(tmp_path / "single")["create-file-01"]
    assert all(prompt and reply for prompt, reply in on_cluster)
    assert on_cluster == single  # same prompts, same generated tokens, step by step

    base = LocalModel("smollm2-135m")  # the base alone answers the first prompt otherwise: the adapter was on
    try:
        [reply] = base.submit(on_cluster[0][0], max_tokens=48, stop_after_block=True).future.result()
    finally:
        base.close()
    assert reply.completion_ids != on_cluster[0][1]


@pytest.mark.slow
def test_train_cli_says_what_to_install_without_ray(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None; sys.argv = ['harness', 'train', '--preset', 'rft-smollm2', "
        f"'--out', {str(tmp_path / 'run')!r}, '--cluster', 'auto']; import harness; sys.exit(harness.main())"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    errors = [line for line in p.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "pip install 'harness[cluster]'" in errors[0], p.stderr
    assert not (tmp_path / "run").exists()  # said before anything was written


@needs_cluster
@pytest.mark.model
@pytest.mark.slow
def test_train_runs_a_round_on_the_cluster(ray_cluster, tmp_path):
    """`harness train --cluster`: every eval's attempts run on the nodes with token-exact records; round 1
    trains on them and evaluates its adapter there. Kept small and reproducible: the create-file family
    (1 train, 1 heldout task), one step of 16 tokens, t=0.05 (the base's near-greedy reply solves it)."""
    out = tmp_path / "run"
    argv = ray_cluster.wrap(
        [
            sys.executable,
            str(ROOT / "harness.py"),
            "train",
            "--preset",
            "rft-smollm2",
            "--tasks",
            str(ROOT / "tasks" / "builtin" / "families" / "create-file"),
            "--rounds",
            "1",
            "--samples",
            "2",
            "--eval-samples",
            "1",
            "--limit",
            "1",
            "--temperature",
            "0.05",
            "--max-steps",
            "1",
            "--max-reply-tokens",
            "16",
            "--concurrency",
            "2",
            "--epochs",
            "1",
            "--cluster",
            ray_cluster.address,
            "--out",
            str(out),
        ]
    )
    p = subprocess.run(argv, cwd=ROOT, env=ray_cluster.env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    for r in range(2):
        runs = json.loads((out / f"round_{r}" / "eval.done.json").read_text())["runs"]
        # impossible-sample: the round's cheat probes (--cheat-probes), on the cluster too
        assert set(runs) == {
            "heldout-greedy",
            "heldout-sample",
            "train-greedy",
            "train-sample",
            "impossible-sample",
        }
        recs = {name: records(Path(run_dir)) for name, run_dir in runs.items()}
        assert all(r["node"] for rs in recs.values() for r in rs)  # every attempt ran on the cluster
        assert all(
            s["prompt_ids"] and s["completion_ids"] for rs in recs.values() for r in rs for s in r["steps"]
        )
        manifest = json.loads((Path(runs["train-sample"]) / "manifest.json").read_text())
        adapter = {"adapter": str(out / "round_1" / "adapter")} if r else {}
        assert manifest["config"]["model_options"] == adapter  # round 1 samples with its adapter
        if r == 0:
            solved = {a["task_id"] for a in recs["train-sample"] if a["solved"]}
            assert solved == {"create-file-01"}, "the base model no longer solves create-file-01 here"
    data = json.loads((out / "round_1" / "data.done.json").read_text())
    assert data["tasks"] == ["create-file-01"] and data["examples"] >= 1  # trained on the nodes' token ids
    assert (out / "round_1" / "adapter" / "adapter_model.safetensors").is_file()
    assert {row["round"] for row in map(json.loads, (out / "rounds.jsonl").read_text().splitlines())} == {
        0,
        1,
    }


@pytest.mark.slow  # a real Harbor attempt in Docker (no Ray needed: what crosses the wire is checked)
def test_what_a_node_ships_back_is_what_one_machine_keeps(image, tmp_path):
    """A node's record crosses as JSON, which leaves out the kept files' bytes; the kept changes' objects
    are written by the driver only. What attempt_to_ship returns (pickled, as Ray sends it) and received()
    stores gives the same `changes`, diff and verifier files as a run on one machine."""
    import pickle

    from agent.sandbox.backends.docker.pool import DockerPool
    from evaluators.run.attempt import attempt_with_retries
    from evaluators.run.cluster import attempt_to_ship, received
    from evaluators.run.policies import oracle_policy
    from evaluators.run.task_images import build_images
    from results.manifest import Manifest
    from results.run_writer import RunStore
    from results.schema import Attempt
    from results.store import kept_diff, load_attempts
    from tests.evaluators.grading.test_harbor_runtime import harbor_task

    task = harbor_task(
        tmp_path,
        'schema_version = "1.1"\n[verifier]\nisolation = "fresh"\n',
        name="ships",
        solve_sh="#!/bin/bash\necho 42 > /app/answer.txt\n",
        test_sh="#!/bin/bash\necho checked\necho '{\"ok\": 1}' > /logs/verifier/ctrf.json\n"
        '[ "$(cat /app/answer.txt)" = 42 ] && echo 1 > /logs/verifier/reward.txt\n',
    )
    kw = dict(run_id="ship-test", model_name="t")
    single, cluster = tmp_path / "single" / "ship-test", tmp_path / "cluster" / "ship-test"  # run id: folder

    async def go():
        images = await build_images([task], log=lambda m: None)
        async with DockerPool(run_id="ship-test", warm=0) as pool:
            raw = await attempt_to_ship(task, lambda: oracle_policy, pool, images[task.id], node="n1", **kw)
            with RunStore.create(single, Manifest(model="t")) as store:
                one = await attempt_with_retries(
                    task,
                    lambda: oracle_policy,
                    pool,
                    images[task.id],
                    keep=lambda t, ch: store.keep_changes(
                        t.workspace_files, ch.files, ch.deleted, ch.executable
                    ),
                    **kw,
                )
                store.append(one)
        return raw

    raw = pickle.loads(pickle.dumps(run(go())))
    assert raw["files"] and not Attempt.model_validate(raw["record"]).file_data()  # JSON alone loses them
    with RunStore.create(cluster, Manifest(model="t")) as store:
        store.append(received(raw, store.put_object))
    [rec] = load_attempts(cluster)
    [one] = load_attempts(single)
    assert rec.solved and rec.node == "n1"
    assert rec.changes == one.changes and "answer.txt" in rec.changes.files
    assert "+42" in kept_diff(cluster, rec)
    files = {f.name: f for f in rec.files}
    assert [(f.name, f.sha256) for f in rec.files] == [(f.name, f.sha256) for f in one.files]
    assert (cluster / files["verifier/ctrf.json"].path).read_text() == '{"ok": 1}\n'
    assert b"checked" in (cluster / files["verifier/test-stdout.txt"].path).read_bytes()
