"""`--sandbox k8s` in layers: golden manifests; the backend against a fake API server whose pods are
Docker containers started from the rendered pod spec (so the command server runs in the exact image
and configuration a pod would); and, behind the `k8s` marker, a real cluster when KUBECONFIG is set."""

import asyncio
import json
import os
import socket
from datetime import datetime, timezone

import pytest

from agent.sandbox import SERVER_SOURCE, SandboxSpec
from agent.sandbox.backends.k8s.api import K8sApi
from agent.sandbox.backends.k8s.manifests import (
    LAUNCHER,
    SERVER_PORT,
    render_claim,
    render_template,
    render_warm_pool,
)
from agent.sandbox.backends.k8s.pool import K8sSandboxPool
from agent.sandbox.backends.k8s.sandbox import EXEC_SERVER
from evaluators.run.attempt import run_attempt
from evaluators.run.policies import loop_policy
from results.errors import UserError
from tests.conftest import ROOT, run
from tests.helpers import SUBMIT, WRITE_CORRECT, make_task
from tests.k8s_fake import FakeCluster

LABELS = {"harness.run": "r1", "harness.pool": "p1"}


def _sources_named(obj):
    """The two embedded sources are checked apart (others edit sandbox_server.py); the rest is literal."""
    for e in obj["spec"]["podTemplate"]["spec"]["containers"][0]["env"]:
        if e["name"] == "HARNESS_LAUNCHER":
            assert e["value"] == LAUNCHER
            e["value"] = "<HARNESS_LAUNCHER>"
        if e["name"] == "HARNESS_SERVER":
            assert e["value"] == SERVER_SOURCE
            e["value"] = "<HARNESS_SERVER>"
    return obj


def test_rendered_manifests_match_the_goldens():
    golden = json.loads((ROOT / "tests/golden/k8s_manifests.json").read_text())
    image = "registry.example/harness/base:abc"
    assert (
        _sources_named(render_template("harness-t1", "evals", image, SandboxSpec(), "TOKEN", LABELS))
        == golden["template"]
    )
    assert (
        _sources_named(
            render_template(
                "harness-t2",
                "evals",
                image,
                SandboxSpec(network=True, cpus=2, memory_mb=2048),
                "TOKEN",
                LABELS,
                runtime_class="gvisor",
            )
        )
        == golden["template_internet_gvisor"]
    )
    assert render_warm_pool("harness-t1", "evals", "harness-t1", 3, LABELS) == golden["warm_pool"]
    when = datetime(2026, 12, 1, 3, 0, 0, tzinfo=timezone.utc)
    assert render_claim("harness-t1-0a1b2c3d", "evals", "harness-t1", when, LABELS) == golden["claim"]


def test_the_hardening_is_in_the_pod_spec():
    """Independent of the golden file: the properties the Docker sandbox has, named one by one."""
    tpl = render_template("t", "ns", "img", SandboxSpec(memory_mb=512, cpus=0.5), "TOKEN", LABELS)
    spec = tpl["spec"]["podTemplate"]["spec"]
    c = spec["containers"][0]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {
        "drop": ["ALL"],
        "add": ["SETUID", "SETGID", "KILL", "DAC_OVERRIDE"],
    }  # as on Docker
    assert c["resources"]["limits"]["memory"] == "512Mi" and c["resources"]["limits"]["cpu"] == "500m"
    assert spec["automountServiceAccountToken"] is False and "runtimeClassName" not in spec
    assert tpl["spec"]["networkPolicy"]["egress"] == []  # deny all egress
    assert all(v["emptyDir"]["medium"] == "Memory" and v["emptyDir"]["sizeLimit"] for v in spec["volumes"])
    open_net = render_template(
        "t", "ns", "img", SandboxSpec(network=True), "T", LABELS, runtime_class="kata-qemu"
    )
    assert open_net["spec"]["networkPolicy"]["egress"] == [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]
    assert open_net["spec"]["podTemplate"]["spec"]["runtimeClassName"] == "kata-qemu"


def test_kubeconfig_errors_name_the_file_and_the_fix(tmp_path):
    with pytest.raises(UserError, match="no kubeconfig at .*set KUBECONFIG"):
        K8sApi.from_kubeconfig(str(tmp_path / "missing"))
    bad = tmp_path / "config"
    bad.write_text(
        json.dumps(
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "x", "user": "u"}}],
                "clusters": [],
                "users": [],
            }
        )
    )
    with pytest.raises(UserError, match=f"{bad}: cluster 'x' of the current context is not defined"):
        K8sApi.from_kubeconfig(str(bad))


@pytest.fixture
def fake_cluster(image):
    c = FakeCluster(namespace="evals")
    yield c
    c.stop()


def _pool(fake, tmp_path, **kw):
    api = K8sApi.from_kubeconfig(fake.kubeconfig(tmp_path / "kubeconfig"))
    return K8sSandboxPool(run_id="r-k8s", warm=0, max_containers=4, api=api, **kw)


def test_a_claimed_sandbox_runs_commands_hardened_and_is_deleted_after(fake_cluster, image, tmp_path):
    async def go():
        async with _pool(fake_cluster, tmp_path) as pool:
            assert pool.api.namespace == "evals" and pool.api.http.headers["Authorization"] == "Bearer t0ken"
            async with pool.sandbox(image, SandboxSpec()) as sb:
                assert (await sb.exec("id -u")).stdout.strip() == "10001"
                assert (
                    await sb.exec("env | grep -cE '^HARNESS_(TOKEN|SERVER|LAUNCHER|PORT)=' || true")
                ).stdout.split() == ["0"]  # the launcher's environment is gone
                assert (await sb.exec("touch /grader/x")).exit_code != 0  # root-owned, not writable
                assert (await sb.exec("ls /grader")).exit_code != 0  # nor readable
                assert (await sb.exec("touch /etc/x")).exit_code != 0  # read-only root
                await sb.put_files({"a.txt": b"hello"})
                await sb.mark_baseline()
                await sb.exec("echo changed > a.txt; echo new > b.txt")
                ch = await sb.changes()
                assert ch.files == {"a.txt": b"changed\n", "b.txt": b"new\n"}
                r = await sb.exec("sleep 30", timeout=1)
                assert r.timed_out
                assert (await sb.exec("echo still here")).stdout == "still here\n"
                claim = sb.id
                pod = fake_cluster.get("sandboxclaims", claim)["status"]["sandbox"]["name"]
                assert (
                    fake_cluster.get("sandboxclaims", claim)["spec"]["lifecycle"]["shutdownPolicy"]
                    == "Delete"
                )
                # a second client cannot take the server over: the launcher took one connection and
                # stopped listening
                ip = fake_cluster.get("sandboxclaims", claim)["status"]["sandbox"]["podIPs"][0]
                with pytest.raises(OSError):
                    socket.create_connection((ip, SERVER_PORT), timeout=2).close()
            for _ in range(200):  # release deletes the claim (and so the pod) in the background
                if fake_cluster.get("sandboxclaims", claim) is None and pod not in fake_cluster.pods():
                    break
                await asyncio.sleep(0.05)
            assert fake_cluster.get("sandboxclaims", claim) is None and pod not in fake_cluster.pods()
        kinds = {p for m, p, _ in fake_cluster.log if m == "POST"}
        assert kinds == {"sandboxtemplates", "sandboxwarmpools", "sandboxclaims"}
        assert not [k for k in fake_cluster.objects if k[0] != "pods"]  # close() deleted everything it made

    run(go())


@pytest.mark.slow
def test_an_attempt_runs_and_is_graded_on_k8s_sandboxes(fake_cluster, image, tmp_path):
    """run_attempt (the single-node coroutine) with the k8s pool: the agent's sandbox and a fresh grading
    one."""
    from agent.config import LoopConfig
    from agent.models.replay import ReplayModel

    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [WRITE_CORRECT, SUBMIT]}))

    async def go():
        async with _pool(fake_cluster, tmp_path) as pool:
            model = ReplayModel.from_file(str(script))
            policy = loop_policy(model, LoopConfig(), asyncio.Semaphore(1), 0)
            return await run_attempt(make_task(), policy, pool, image, run_id="r-k8s", model_name="replay")

    rec = run(go())
    assert rec.solved and rec.reason == "pass", rec.detail
    claims = [n for m, p, n in fake_cluster.log if m == "POST" and p == "sandboxclaims"]
    assert len(claims) == 2  # one for the agent, a fresh one for grading


def test_the_exec_stream_fallback_runs_the_same_server(fake_cluster, image, tmp_path):
    """When pod IPs are not reachable: one persistent exec stream per sandbox (here `docker exec -i` into the
    fake pod, as `kubectl exec -i` would into a real one)."""

    def argv(ns, pod):
        return ["docker", "exec", "-i", pod, "python3", "-u", "-I", "-c", EXEC_SERVER]

    async def go():
        async with _pool(fake_cluster, tmp_path, connect="exec", exec_argv=argv) as pool:
            async with pool.sandbox(image, SandboxSpec()) as sb:
                assert sb.host.helper is not None  # the exec stream, not a TCP connection
                assert (await sb.exec("id -u; echo $HARNESS_TOKEN")).stdout.split() == ["10001"]
                await sb.put_files({"x.txt": b"data"})
                assert await sb.get_files(["x.txt"]) == {"x.txt": b"data"}

    run(go())


def test_prune_deletes_what_a_dead_harness_left(fake_cluster, image, tmp_path):
    """A harness killed mid-run leaves its warm pool (pods kept running) and template: `sandbox prune
    --sandbox k8s` (the backend's prune)."""
    import subprocess
    import sys

    env = {**os.environ, "KUBECONFIG": fake_cluster.kubeconfig(tmp_path / "kubeconfig")}
    labels = {"harness.run": "r-dead", "harness.pool": "deadbeef"}
    fake_cluster.create(
        "sandboxtemplates", render_template("harness-dead", "evals", image, SandboxSpec(), "T", labels)
    )
    fake_cluster.create(
        "sandboxwarmpools", render_warm_pool("harness-dead", "evals", "harness-dead", 2, labels)
    )
    other = render_warm_pool("someone-else", "evals", "harness-dead", 1, {"app": "other"})
    fake_cluster.create("sandboxwarmpools", other)
    p = subprocess.run(
        [sys.executable, "harness.py", "sandbox", "prune", "--sandbox", "k8s"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert set(fake_cluster.objects) == {("sandboxwarmpools", "someone-else")}  # only what is not ours stays


@pytest.mark.k8s
@pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"),
    reason="needs a cluster with agent-sandbox: set KUBECONFIG "
    "and HARNESS_K8S_IMAGE (the base image in a registry the cluster pulls from)",
)
def test_real_cluster_runs_and_grades_an_attempt(tmp_path):
    from evaluators.run.config import EvalConfig
    from evaluators.run.runner import run_eval

    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [WRITE_CORRECT, SUBMIT]}))
    out = tmp_path / "run"
    run(
        run_eval(
            EvalConfig(
                model=f"replay:{script}",
                out=out,
                sandbox="k8s",
                sandbox_options={"image": os.environ["HARNESS_K8S_IMAGE"]},
            ),
            [make_task()],
            progress=False,
        )
    )
    rec = json.loads((out / "attempts.jsonl").read_text())
    assert rec["solved"], rec["detail"]


@pytest.mark.slow
def test_cli_eval_with_k8s_sandboxes(fake_cluster, image, tmp_path):
    """`harness eval --sandbox k8s` end to end: KUBECONFIG names the (fake) cluster; records and summary as
    on Docker."""
    import subprocess
    import sys

    from tasks.loader import load_suite

    task = next(t for t in load_suite("builtin") if t.id == "create-file-01")
    cmd = task.solution_files["solve.sh"].decode().strip().splitlines()[-1]
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps({"create-file-01": [f"```bash\n{cmd}\n```", SUBMIT], "*": ["```bash\nls\n```", SUBMIT]})
    )
    env = {**os.environ, "KUBECONFIG": fake_cluster.kubeconfig(tmp_path / "kubeconfig")}
    out = tmp_path / "run"
    p = subprocess.run(
        [
            sys.executable,
            "harness.py",
            "eval",
            "--model",
            f"replay:{script}",
            "--tasks",
            "builtin",
            "--glob",
            "create-file-0[12]",
            "--sandbox",
            "k8s",
            "--k8s-image",
            image,
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    recs = {r["task_id"]: r for r in map(json.loads, (out / "attempts.jsonl").read_text().splitlines())}
    assert recs["create-file-01"]["solved"] and not recs["create-file-02"]["solved"]
    assert recs["create-file-02"]["reason"] != "infra_error" and recs["create-file-01"]["image"] == image
    assert "solved" in p.stdout
    assert not fake_cluster.pods() and not fake_cluster.objects  # nothing left behind


def test_cli_k8s_without_an_image_is_a_one_line_error(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [SUBMIT]}))
    p = subprocess.run(
        [sys.executable, "harness.py", "eval", "--model", f"replay:{script}", "--sandbox", "k8s"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "HARNESS_K8S_IMAGE": ""},
    )
    assert p.returncode == 2
    assert "--k8s-image" in p.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("harbor", [True, False])
def test_cli_k8s_refuses_tasks_with_their_own_image(tmp_path, harbor):
    """Whether a task has an image of its own is its kind's answer (OwnImage.own_image), asked by the runner:
    the k8s backend runs the base image only."""
    import shutil
    import subprocess
    import sys

    if harbor:
        tasks, why = ROOT / "tests/fixtures/terminal-bench", "a Harbor image"
    else:
        tasks, why = tmp_path / "suite", "environment/Dockerfile"
        shutil.copytree(ROOT / "tasks/builtin/coding/fizzbuzz", tasks / "fizzbuzz")
        (tasks / "fizzbuzz/environment").mkdir(exist_ok=True)
        (tasks / "fizzbuzz/environment/Dockerfile").write_text("FROM harness/base:latest\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [SUBMIT]}))
    p = subprocess.run(
        [sys.executable, "harness.py", "eval", "--model", f"replay:{script}", "--tasks", str(tasks)]
        + ["--sandbox", "k8s", "--k8s-image", "registry.invalid/harness:1", "--out", str(tmp_path / "run")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert f"has its own image ({why}): it needs a sandbox backend with own_images" in last
    assert "--sandbox k8s has none: leave such tasks out (--glob) or use --sandbox docker" in last
    assert not (tmp_path / "run").exists()
